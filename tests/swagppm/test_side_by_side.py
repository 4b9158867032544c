"""Trials side by side in one process: each fit gives what it gives alone."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

import swagppm
from swagppm import ConfigError
from swagppm.side_by_side import fit_side_by_side, replica, trials_that_fit
from swagppm.stage1 import compute_or_load
from swagppm.stage2 import fit
from tests.tuner.helpers import merged, write_study
from tuner import StudyConfig
from tuner.record import TrialRecord
from tuner.study import open_storage, run_study

pytestmark = pytest.mark.fits


def test_fits_side_by_side_give_the_results_of_each_fit_alone(config: swagppm.SWAGPPMConfig) -> None:
    trials = [swagppm.TrialParams(c=0.8, ft_epochs=2), swagppm.TrialParams(c=0.5, ft_epochs=1, seed=3)]
    seen: list[int] = []
    with swagppm.Resources(config) as resources:
        stage1 = compute_or_load(resources)
        alone = [fit(resources, stage1, params).result for params in trials]
        twin = replica(resources)
        assert twin.train is resources.train and twin.data is resources.data
        assert twin.bundle.model is not resources.bundle.model and twin.net.model is twin.bundle.model
        assert trials_that_fit(resources) == 1  # a CPU runs one at a time by default
        together = fit_side_by_side(resources, stage1, trials,
                                    on_draws=[None, lambda draws, epsilon: seen.append(draws) is not None])
    for one, other in zip(alone, together, strict=True):
        assert other.result.max_delta == one.max_delta and other.result.epsilon == one.epsilon
        assert other.result.f1_macro == one.f1_macro and other.result.history == one.history
    assert seen == list(range(1, config.draws_privacy + 1))
    with pytest.raises(ValueError, match="1 on_draws callbacks for 2 trials"):
        fit_side_by_side(resources, stage1, trials, on_draws=[None])


def test_a_study_with_concurrent_trials_gives_each_trial_its_epsilon_alone(tmp_path: Path) -> None:
    """``[study] concurrent_trials = 2``: the start point and the probe run at once in one worker, each on its own
    lane, and each trial's ε and F1 are those of its fit alone. A third trial may start before the second ends
    (Optuna's threads overshoot ``n_trials`` by up to N - 1)."""
    study = merged(study={"concurrent_trials": 2, "storage": "journal:side.log"},  # SQLite is refused for threads
                   search={"ft_epochs_min": 3, "ft_epochs_max": 4, "restart_epochs": 4,
                           "start": [{"c": 1.0, "ft_epochs": 3}]},
                   targets={"stop_above_best": False, "require_well_fit": False})
    config = StudyConfig.from_toml(write_study(tmp_path / "side.toml", study))
    summary = run_study(config, n_trials=2, echo=lambda line: None)
    assert 2 <= summary.finished_now <= 3
    trials = optuna.load_study(study_name="small", storage=open_storage(config)).trials
    with swagppm.Session(config.fit) as session:
        for trial in trials:
            record = TrialRecord.of(trial)
            alone = session.fit(config.search.params_of(trial.params)).result
            assert record is not None and record.epsilon == alone.epsilon
            assert record.f1_macro_median == pytest.approx(alone.f1_macro_median, abs=0)


def test_concurrent_trials_on_a_sqlite_study_are_refused_before_any_fit(tmp_path: Path) -> None:
    config = StudyConfig.from_toml(write_study(tmp_path / "side.toml", merged(study={"concurrent_trials": 2})))
    with pytest.raises(ConfigError, match="concurrent_trials = 2 needs a journal file or a server storage"):
        run_study(config, n_trials=1, echo=lambda line: None)
    assert not (tmp_path / "cache").exists()
