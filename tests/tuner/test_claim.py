"""The study's claim is fixed when it is created: an edited cap or public flag is refused by every verb, a rejudged
cap ranks but never becomes the released claim, an accounted study proposes from secret randomness, refuses every
data-dependent stop and releases only once exactly its K trials finished, and δ comes from a public bound."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from swagppm import ConfigError
from tests.tuner.helpers import one_error_line, result, tight, with_a_feasible_trial
from tuner import StudyConfig
from tuner.cli import main
from tuner.outcome import DrawChecks, judge
from tuner.record import constraint_attrs
from tuner.study import check_record_bound, open_study
from tuner.tuning import ACCOUNTED_TRIALS, CLAIM, default_delta, study_claim

pytestmark = pytest.mark.slow

ACCOUNTED = {"accounted": True, "sampler": "random", "public_eval": "public.jsonl", "max_records": 1000}


def _refused_by_every_verb(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The one line each verb that reads the study's claim prints for ``path`` (all exit 2, before any fit)."""
    lines = []
    for argv in (["status", str(path)], ["export", str(path), "-o", str(tmp_path / "best.json")],
                 ["release", str(path), "-o", str(tmp_path / "released"), "--force"], ["audit", str(path)],
                 ["fit", str(path), "--release", str(tmp_path / "out"), "--force"]):
        assert main(argv) == 2, argv
        out = capsys.readouterr()
        lines.append(one_error_line(out.err))
        assert "stage 1" not in out.out and not (tmp_path / "released").exists() and not (tmp_path / "out").exists()
    return lines


@pytest.mark.parametrize(("edit", "says"), [
    ({"targets": {"epsilon_cap": 51.0}}, "was created with [targets] epsilon_cap = 50.0, but the file now says "
                                         "[targets] epsilon_cap = 51.0"),
    ({"data": {"public": True}}, "was created with mode = unaccounted, [data] public = false, but the file now says "
                                 "mode = public-proxy, [data] public = true"),
])
def test_an_edited_cap_or_public_flag_is_refused_by_every_verb_before_any_fit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: dict[str, dict[str, object]], says: str) -> None:
    with_a_feasible_trial(study_file())
    path = study_file(**edit)
    for line in _refused_by_every_verb(path, tmp_path, capsys):
        assert says in line and "fixed when a study is created" in line
        assert "a cap chosen after results were seen is not one declared before any fit" in line


def test_a_rejudged_cap_ranks_but_a_release_of_it_claims_the_cap_fixed_at_creation(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["rejudge", str(path), "--name", "looser", "--epsilon-cap", "80"]) == 0
    assert main(["export", str(path), "--study-name", "looser", "-o", str(tmp_path / "best.json")]) == 0
    document = json.loads((tmp_path / "best.json").read_text())
    assert document["targets"]["epsilon_cap"] == 80.0  # what it was ranked against
    assert document["claim"]["epsilon_cap"] == 50.0 and document["claim"]["ranked_at"] == 80.0
    capsys.readouterr()
    assert main(["status", str(path), "--study-name", "looser"]) == 0  # the rejudged study opens at its own cap


def test_an_export_whose_claim_was_edited_is_refused_before_any_fit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    best = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(best)]) == 0
    document = json.loads(best.read_text())
    document["claim"]["epsilon_cap"] = 0.011
    best.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["release", "--from", str(best), "-o", str(tmp_path / "released"), "--force"]) == 2
    out = capsys.readouterr()
    assert "the claim (cap, mode, public flag) does not match its seal" in one_error_line(out.err)
    assert "stage 1" not in out.out and not (tmp_path / "released").exists()


def _asked(study: optuna.Study, config: StudyConfig) -> dict[str, float]:
    trial = study.ask({"c": optuna.distributions.FloatDistribution(config.search.c_min, config.search.c_max),
                       "ft_epochs": optuna.distributions.IntDistribution(config.search.ft_epochs_min,
                                                                        config.search.ft_epochs_max)})
    return trial.params


def test_an_accounted_studys_proposals_differ_between_two_runs_with_the_same_seed(
        study_file: Callable[..., Path]) -> None:
    """A recorded seed would make the published c name the trial that proposed it: accounted proposals come from
    fresh OS entropy (the same seed still gives the same proposals to a study that is not accounted)."""
    accounted = StudyConfig.from_toml(study_file(study=ACCOUNTED))
    plain = StudyConfig.from_toml(study_file("plain", study={"sampler": "random"}))
    proposals = {kind: [_asked(open_study(dataclasses.replace(config, study=dataclasses.replace(
        config.study, name=f"{kind}{run}"))), config) for run in range(2)]
        for kind, config in (("accounted", accounted), ("plain", plain))}
    assert proposals["accounted"][0] != proposals["accounted"][1]
    assert proposals["plain"][0] == proposals["plain"][1]


@pytest.mark.parametrize(("key", "value"), [("stop_on_first_feasible", True), ("timeout", 60.0)])
def test_an_accounted_study_refuses_a_data_dependent_stop(study_file: Callable[..., Path], key: str,
                                                          value: object) -> None:
    with pytest.raises(ConfigError, match=rf"study.{key} = .* cannot be used with study.accounted = true"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, key: value}))


def test_an_accounted_run_refuses_a_timeout_before_any_fit(study_file: Callable[..., Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study=ACCOUNTED)
    assert main(["run", str(path), "--timeout", "30"]) == 2
    out = capsys.readouterr()
    assert "--timeout 30 cannot be used on the accounted study 'small'" in one_error_line(out.err)
    assert "stage 1" not in out.out


def test_an_accounted_study_needs_a_public_record_bound_or_a_delta(study_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="needs study.max_records = N .* or study.accounting_delta"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, "max_records": None}))
    config = StudyConfig.from_toml(study_file(study={**ACCOUNTED, "max_records": None, "accounting_delta": 1e-7}))
    assert study_claim(config)["delta"] == 1e-7


def test_delta_comes_from_the_public_bound_so_neighbouring_data_sets_state_the_same() -> None:
    """The default δ is a function of the declared bound only: 1,000 and 1,001 records state the same δ."""
    assert default_delta(1000) == 1e-6 and default_delta(1001) == 1e-9 and default_delta(10**6) == 1e-12


def test_more_records_than_the_declared_bound_are_refused(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(study={"max_records": 100}))
    study = open_study(config)
    check_record_bound(study, 100, config)
    with pytest.raises(ConfigError, match=r"max_records = 100: the data hold more training records than the declared"):
        check_record_bound(study, 101, config)


def _accounted_with(study_file: Callable[..., Path], *, finished: int, planned: int) -> Path:
    path = study_file(study=ACCOUNTED)
    config = StudyConfig.from_toml(path)
    study = open_study(config)
    study.set_user_attr(ACCOUNTED_TRIALS, planned)
    for number in range(finished):
        outcome = judge(result(tight(3.0), c=0.5 + 0.1 * number), targets=config.targets, search=config.search,
                        accounted=True, checks=DrawChecks(public_score=0.5))
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE, values=[outcome.objective_values("epsilon")],
            params={"c": 0.5 + 0.1 * number, "ft_epochs": 7},
            distributions={"c": optuna.distributions.FloatDistribution(0.3, 1.2),
                           "ft_epochs": optuna.distributions.IntDistribution(4, 8)},
            user_attrs=outcome.attributes(), system_attrs=constraint_attrs(outcome.constraints)))
    return path


@pytest.mark.parametrize(("finished", "planned", "code"), [(2, 3, 2), (3, 3, 0), (4, 3, 2)])
def test_an_accounted_study_exports_and_releases_only_once_exactly_its_k_trials_finished(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: int,
        planned: int, code: int) -> None:
    path = _accounted_with(study_file, finished=finished, planned=planned)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == code
    err = capsys.readouterr().err
    if code:
        assert f"has {finished} finished trial(s) of the {planned} it drew" in one_error_line(err)
        assert main(["release", str(path), "-o", str(tmp_path / "released"), "--force"]) == 2
        assert f"nothing released: the accounted study 'small' has {finished}" in one_error_line(
            capsys.readouterr().err)


def test_the_claim_is_stored_as_created_and_a_study_without_one_is_refused(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file())
    study = open_study(config)
    assert study.user_attrs[CLAIM] == {"epsilon_cap": 50.0, "mode": "unaccounted", "data_public": False,
                                       "delta": None, "max_records": None, "accounting": None}
    study.set_user_attr(CLAIM, None)
    with pytest.raises(ConfigError, match="was created by an older swagppm-tune that did not fix its cap"):
        open_study(config, create=False)
