"""The guide's flowchart as an Optuna sampler, replayed on the case study's eight verdicts; samplers by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import optuna
import pytest
from optuna.storages import BaseStorage
from optuna.trial import Trial

from swagppm import SWAGPPMResult
from tests.scorers.series import CASE_STUDY, gaussian_bulk, with_spikes
from tuner import SearchSpace, StudyConfig, make_sampler, open_study
from tuner.objective import Objective, record
from tuner.outcome import judge
from tuner.samplers import FlowchartSampler
from tuner.samplers.tpe import nearest_unused, repeats
from tuner.study import open_storage

pytestmark = pytest.mark.slow  # no fit, no service, but seconds a test

# The guide's verdicts as diagnosis labels ("feasible" is a well-fit series meeting every target).
GUIDE = [(point, "well_fit" if verdict == "feasible" else verdict) for point, verdict in CASE_STUDY]


def series(verdict: str, seed: int) -> list[float]:
    """A max-delta series that the scorers read as ``verdict`` (ε = 2·max stays below 10 when well fit)."""
    if verdict == "underfit":
        return list(gaussian_bulk(seed, 0.27, mean=3.0))
    tight = gaussian_bulk(seed, 0.013, mean=3.0)
    return list(with_spikes(tight, 3) if verdict == "overfit" else tight)


def scripted_objective(config: StudyConfig, verdicts: list[str], storage: BaseStorage) -> Callable[[Trial], float]:
    """Returns the next scripted verdict as if it were a fit, recorded exactly as a real trial is."""
    objective = Objective(config, storage=storage)

    def run(trial: Trial) -> float:
        params = config.search.suggest(trial)
        c, epochs, g = params.c, params.ft_epochs, params.g
        values = series(verdicts[trial.number], trial.number)
        rng = np.random.default_rng(trial.number)
        result = SWAGPPMResult(c=c, g=g, ft_epochs=epochs, seed=0, epsilon=2 * max(values), max_delta=values,
                               f1_macro=list(0.80 + 0.005 * rng.standard_normal(30)),
                               f1_weighted=list(0.85 + 0.005 * rng.standard_normal(30)),
                               baseline_f1_macro=0.82, baseline_f1_weighted=0.87, majority_rate=0.3)
        outcome = judge(result, targets=config.targets, search=config.search)
        assert outcome.label == verdicts[trial.number]
        record(trial, outcome, objective.artifacts, config, storage=storage)
        return outcome.objective_values("epsilon")  # type: ignore[return-value]

    return run


def flowchart_study(study_file: Callable[..., Path], **search: object) -> StudyConfig:
    return StudyConfig.from_toml(study_file(
        study={"sampler": "flowchart", "n_trials": 20},
        search={"c_min": 0.1, "c_max": 1.5, "ft_epochs_min": 1, "ft_epochs_max": 16, "restart_epochs": 7,
                "start": [{"c": 1.0, "ft_epochs": 7}], **search},
        targets={"epsilon_cap": 10.0, "max_f1_degradation": 0.1, "max_bulk_spread": 0.05}))


def replay(config: StudyConfig, verdicts: list[str]) -> optuna.Study:
    """Optimise with the flowchart until it has no move left (as ``run_study`` does)."""
    storage = open_storage(config)
    study = open_study(config, storage=storage)
    sampler = study.sampler
    assert isinstance(sampler, FlowchartSampler)

    def stop_when_done(study: optuna.Study, _: object) -> None:
        if sampler.wants_to_stop(study):
            study.stop()

    study.optimize(scripted_objective(config, verdicts, storage), n_trials=len(verdicts) + 2,
                   callbacks=[stop_when_done])
    return study


def test_flowchart_proposes_the_guides_eight_fits(study_file: Callable[..., Path]) -> None:
    study = replay(flowchart_study(study_file), [verdict for _, verdict in GUIDE])
    proposed = [(t.params["c"], t.params["ft_epochs"]) for t in study.trials]
    assert proposed == [point for point, _ in GUIDE]
    last = study.trials[-1]
    assert last.user_attrs["feasible"] and last.user_attrs["next_action"] == "stop"
    assert study.sampler.wants_to_stop(study)  # type: ignore[attr-defined]
    assert [t.user_attrs["next_action"] for t in study.trials] == [
        "add_epochs", "lower_c", "add_epochs", "add_epochs", "lower_c", "add_epochs", "add_epochs", "stop"]


def test_flowchart_steps_are_configurable_and_clipped_to_the_ranges(study_file: Callable[..., Path]) -> None:
    config = flowchart_study(study_file, epochs_step=5, c_step=0.25, ft_epochs_max=14)
    study = replay(config, ["underfit", "overfit", "underfit", "underfit", "underfit"])
    assert [(t.params["c"], t.params["ft_epochs"]) for t in study.trials] == [
        (1.0, 7), (1.0, 12), (0.75, 7), (0.75, 12), (0.75, 14)]  # 19 epochs clipped to 14, then stuck


def test_flowchart_stops_when_the_targets_must_be_revisited(study_file: Callable[..., Path]) -> None:
    config = flowchart_study(study_file, c_step=0.6)
    study = replay(config, ["overfit", "overfit", "overfit"])
    assert [t.params["c"] for t in study.trials] == [1.0, 0.4]  # 0.4 - 0.6 <= 0: revisit the targets
    assert study.trials[-1].user_attrs["next_action"] == "revisit_targets"


@pytest.mark.parametrize("name", ["tpe", "gp", "nsga2", "random", "flowchart"])
def test_every_sampler_by_name_is_seeded(name: str, study_file: Callable[..., Path]) -> None:
    search = StudyConfig.from_toml(study_file()).search

    def points(seed: int) -> list[tuple[float, int]]:
        study = optuna.create_study(sampler=make_sampler(name, seed=seed, search=search))
        study.optimize(lambda t: t.suggest_float("c", 0.3, 1.2) + t.suggest_int("ft_epochs", 4, 8), n_trials=6)
        return [(t.params["c"], t.params["ft_epochs"]) for t in study.trials]

    assert points(1) == points(1)


def test_flowchart_stops_when_its_move_leaves_the_ranges(study_file: Callable[..., Path]) -> None:
    config = flowchart_study(study_file, c_min=0.8)
    study = replay(config, ["overfit", "overfit", "overfit"])
    assert [t.params["c"] for t in study.trials] == [1.0, 0.85, 0.8]  # 0.65 is clipped to 0.8 once, then stuck
    sampler = study.sampler
    assert isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study)
    assert "leaves the search ranges (c in [0.8, 1.5]" in sampler.end_reason(study)


def test_a_repeat_is_the_same_fit_at_the_guides_resolution() -> None:
    search = SearchSpace(c_step=0.15, epochs_step=3)
    seen = {"c": 0.7, "ft_epochs": 16}
    assert repeats({"c": 0.64, "ft_epochs": 15}, seen, search)  # within 0.075 and 1.5
    assert not repeats({"c": 0.62, "ft_epochs": 16}, seen, search)  # 0.08 away in c
    assert not repeats({"c": 0.7, "ft_epochs": 14}, seen, search)  # 2 epochs away
    assert not repeats({"c": 0.7, "ft_epochs": 16, "g": 0.1}, seen, search)  # g searched, not in the seen fit
    assert repeats({"c": 0.7, "ft_epochs": 16, "g": 0.05}, {**seen, "g": 0.0}, search)


def test_the_default_sampler_never_repeats_a_fit_where_plain_tpe_does() -> None:
    search = SearchSpace(c_min=0.1, c_max=1.5, ft_epochs_min=1, ft_epochs_max=16)

    def proposals(sampler: optuna.samplers.BaseSampler) -> list[dict[str, float]]:
        study = optuna.create_study(sampler=sampler)
        for point in search.start_points():
            study.enqueue_trial({"c": point.c, "ft_epochs": point.ft_epochs})
        study.optimize(lambda t: (t.suggest_float("c", 0.1, 1.5) - 0.5) ** 2
                       + (t.suggest_int("ft_epochs", 1, 16) - 8) ** 2 / 100, n_trials=14)
        return [t.params for t in study.trials]

    def repeated(points: list[dict[str, float]]) -> int:
        return sum(repeats(b, a, search) for i, a in enumerate(points) for b in points[i + 1:])

    plain = optuna.samplers.TPESampler(seed=3, multivariate=True, n_startup_trials=2)
    assert repeated(proposals(plain)) > 0
    assert repeated(proposals(make_sampler("tpe", seed=3, search=search))) == 0


def test_the_default_sampler_runs_every_grid_point_before_it_repeats_one() -> None:
    """Issue 41: with many trials on a small range TPE kept a repeat after its redraws (one point 52 times in 409);
    now the nearest unused point of the guide's grid is proposed, so the 9 points of this range are each run once."""
    search = SearchSpace(c_min=0.1, c_max=0.4, c_step=0.15, ft_epochs_min=1, ft_epochs_max=3, epochs_step=1,
                         restart_epochs=1, start=(), probe=False)
    study = optuna.create_study(sampler=make_sampler("tpe", seed=0, search=search))
    study.optimize(lambda t: (search.suggest(t).c - 0.25) ** 2, n_trials=9)
    points = [t.params for t in study.trials]
    assert not any(repeats(b, a, search) for i, a in enumerate(points) for b in points[i + 1:])
    assert nearest_unused({"c": 0.3, "ft_epochs": 2}, points, search) == {"c": 0.3, "ft_epochs": 2}  # all run
