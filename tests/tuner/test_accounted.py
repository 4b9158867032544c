"""Accounting that holds, public-proxy tuning, the audit as a constraint, and rejudged studies every verb opens."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import RdpAccountant
from optuna.trial import TrialState, create_trial

import swagppm
from swagppm import ConfigError
from swagppm.claim import SealedClaim
from tests.tuner.helpers import result, tight, with_a_feasible_trial
from tuner import StudyConfig
from tuner.accounting import TrialCountDistribution, rdp_orders, tuning_epsilon
from tuner.cli import main
from tuner.outcome import DrawChecks, judge
from tuner.record import TrialRecord, constraint_attrs, named_constraints
from tuner.study import open_study
from tuner.tuning import ACCOUNTED_TRIALS, CLAIM, NUM_TRAIN, PUBLIC_KEYS, default_delta, tuning_cost

pytestmark = pytest.mark.fits

ACCOUNTED = {"accounted": True, "sampler": "random", "public_eval": "public.jsonl", "max_records": 1000}


def write_records(path: Path, *, size: int, seed: int) -> Path:
    """Synthetic records (four classes) as JSONL; other seeds give other texts."""
    texts, labels = swagppm.synthetic_corpus(size, num_classes=4, seed=seed)
    path.write_text("".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in zip(texts, labels)))
    return path


def hand_composed(epsilon: float, *, mean: float, shape: float, delta: float) -> float:
    """dp-accounting's total for the best of K ~ TNB(shape, mean) ε-DP runs, then one more ε-DP run."""
    run = RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2)
    accountant = RdpAccountant(rdp_orders(), NeighboringRelation.REPLACE_ONE)
    accountant.compose(RepeatAndSelectDpEvent(event=run, mean=mean, shape=shape))
    accountant.compose(run)
    return float(accountant.get_epsilon(delta))


def add_judged(study: optuna.Study, config: StudyConfig, fit: swagppm.SWAGPPMResult,
               checks: DrawChecks | None = None) -> None:
    """A made-up fit judged and stored as a finished trial (no training)."""
    outcome = judge(fit, targets=config.targets, search=config.search, accounted=config.study.accounted,
                    checks=checks or DrawChecks())
    study.add_trial(create_trial(
        state=TrialState.COMPLETE, values=[min(fit.epsilon, 1e12)],
        params={"c": fit.c, "ft_epochs": fit.ft_epochs},
        distributions={"c": optuna.distributions.FloatDistribution(config.search.c_min, config.search.c_max),
                       "ft_epochs": optuna.distributions.IntDistribution(config.search.ft_epochs_min,
                                                                        config.search.ft_epochs_max)},
        user_attrs=outcome.attributes(), system_attrs=constraint_attrs(outcome.constraints)))


def test_an_accounted_study_needs_random_search_public_eval_and_no_audit_constraint(
        study_file: Callable[..., Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"accounted = true needs study.public_eval"):
        StudyConfig.from_toml(study_file(study={"accounted": True, "sampler": "random", "max_records": 1000}))
    with pytest.raises(ConfigError, match=r"accounted = true needs study.sampler = 'random' \(got 'tpe'\)"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, "sampler": "tpe"}))
    with pytest.raises(ConfigError, match="require_audit = true cannot be used with study.accounted"):
        StudyConfig.from_toml(study_file(study=ACCOUNTED, targets={"require_audit": True}))
    config = StudyConfig.from_toml(study_file(study=ACCOUNTED))
    assert config.study.public_eval == str(tmp_path / "public.jsonl") and not config.early_stop


def test_an_accounted_study_runs_one_trial_at_a_time(study_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="concurrent_trials = 2 cannot be used with study.accounted"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, "concurrent_trials": 2}))
    with pytest.raises(ConfigError, match=r"concurrent_trials = -1: must be 0 \(as many as fit"):
        StudyConfig.from_toml(study_file(study={"concurrent_trials": -1}))
    assert StudyConfig.from_toml(study_file(study={"concurrent_trials": 0})).study.concurrent_trials == 0


def test_a_missing_public_eval_file_is_refused_before_any_fit(study_file: Callable[..., Path],
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(study_file(study=ACCOUNTED))]) == 2
    out = capsys.readouterr()
    assert "[study] public_eval" in out.err and "no such file" in out.err and len(out.err.splitlines()) == 1
    assert "stage 1" not in out.out


@pytest.mark.parametrize(("created", "edited", "says"), [
    ({}, ACCOUNTED, "was created with mode = unaccounted, delta = none, [study] max_records = none, accounting = "
                    "none, but the file now says mode = accounted, delta = 1e-06, [study] max_records = 1000, "
                    "accounting = (trials_shape = 1.0, trials_mean = 10.0)"),
    (ACCOUNTED, {"accounted": False}, "but the file now says mode = unaccounted, delta = none, [study] max_records = "
                                      "none, accounting = none"),
    (ACCOUNTED, {**ACCOUNTED, "trials_mean": 3.0}, "trials_mean = 3.0"),
])
def test_an_edited_study_file_cannot_change_the_accounting(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        created: dict[str, object], edited: dict[str, object], says: str) -> None:
    write_records(tmp_path / "public.jsonl", size=40, seed=7)
    study = open_study(StudyConfig.from_toml(study_file(study=created)))
    stored = study.user_attrs[CLAIM]
    path = study_file(study=edited)
    for verb in (["status"], ["export", "-o", str(tmp_path / "best.json")]):
        assert main([verb[0], str(path), *verb[1:]]) == 2
        err = capsys.readouterr().err
        assert says in err and "the accounting, the pseudo posterior" in err and "are fixed when a study is created" \
            in err
        assert len(err.splitlines()) == 1
    with pytest.raises(ConfigError, match="are fixed when a study is created"):
        tuning_cost(open_study(StudyConfig.from_toml(path), create=False), StudyConfig.from_toml(path))
    assert optuna.load_study(study_name="small", storage=f"sqlite:///{tmp_path / 'small.db'}").user_attrs[
        CLAIM] == stored


def test_an_accounted_study_runs_random_draws_scored_on_public_data_and_composes_one_total(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_records(tmp_path / "public.jsonl", size=80, seed=7)
    # K = 1 whatever the draw: one fit; proposals come from OS entropy, so c is kept where the tiny fit always trains
    path = study_file(study={**ACCOUNTED, "trials_mean": 1.0}, search={"c_min": 0.9, "c_max": 1.2})
    assert main(["run", str(path)]) in (0, 1)
    config = StudyConfig.from_toml(path)
    study = open_study(config, create=False)
    assert study.user_attrs[ACCOUNTED_TRIALS] == 1 and len(study.trials) == 1
    trial = study.trials[0]
    starts = {(point.c, point.ft_epochs) for point in config.search.start_points()}
    assert (trial.params["c"], trial.params["ft_epochs"]) not in starts  # no start point, no probe
    record = TrialRecord.of(trial)
    assert record is not None and record.public_score is not None and 0.0 <= record.public_score <= 1.0
    assert record.timings["public_score"] > 0
    assert set(named_constraints(trial)) - {"epsilon"} == {"f1_macro", "f1_weighted", "fit_spread", "fit_spikes"}
    assert all(value == 0.0 for key, value in named_constraints(trial).items() if key != "epsilon")
    cost = tuning_cost(study, config)
    delta = default_delta(1000)  # from the declared public bound max_records, never from the private count
    assert study.user_attrs[NUM_TRAIN] < 1000
    assert cost["mode"] == "accounted" and cost["delta"] == delta == 1e-6 and set(PUBLIC_KEYS) <= set(cost)
    expected = hand_composed(50.0, mean=1.0, shape=1.0, delta=delta)
    assert cost["total_epsilon"] == pytest.approx(expected, rel=1e-9)
    assert cost["total_epsilon"] >= cost["tuning_epsilon"] >= 50.0
    assert cost["tuning_epsilon"] == pytest.approx(tuning_epsilon(
        epsilon_per_trial=50.0, distribution=TrialCountDistribution(shape=1.0, mean=1.0), delta=delta))
    statement = cost["statement"]
    assert "hidden number of trials" in statement and f"{expected:.4g}" in statement
    assert "trials run" not in statement and "planned" not in statement and "largest" not in statement


def test_accounted_trials_rank_by_public_score_and_a_trial_above_epsilon_star_is_not_releasable(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study=ACCOUNTED)
    config = StudyConfig.from_toml(path)
    study = open_study(config)
    add_judged(study, config, result(tight(3.0), c=0.5), DrawChecks(public_score=0.6))
    add_judged(study, config, result(tight(4.0), c=0.7), DrawChecks(public_score=0.7))
    add_judged(study, config, result(tight(40.0), c=0.9), DrawChecks(public_score=0.9))  # epsilon about 80 > 50
    study.set_user_attr(ACCOUNTED_TRIALS, 3)  # all of its K trials finished: it may export
    capsys.readouterr()
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == 0
    document = json.loads((tmp_path / "best.json").read_text())
    assert document["trial"] == 1  # the best public score within epsilon*, not the lowest epsilon
    assert document["tuning"]["mode"] == "accounted"
    assert main(["export", str(path), "-o", str(tmp_path / "above.json"), "--trial", "2"]) == 2
    assert "exceeds the accounted study's binding cap epsilon* = 50" in capsys.readouterr().err


def test_public_proxy_tuning_fits_the_choice_once_on_the_private_data(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    public = write_records(tmp_path / "public.jsonl", size=240, seed=3)
    private = write_records(tmp_path / "private.jsonl", size=240, seed=5)
    path = study_file(data={"source": str(public), "public": True}, study={"n_trials": 1},
                      search={"probe": False})
    assert main(["run", str(path)]) in (0, 1)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json"), "--trial", "0"]) == 0
    document = json.loads((tmp_path / "best.json").read_text())
    tuning = document["tuning"]
    assert tuning["mode"] == "public-proxy" and tuning["total_epsilon"] == 0.0
    assert "tuning cost 0" in tuning["statement"] and document["swagppm"]["data"]["public"] is True
    capsys.readouterr()
    assert main(["fit", "--from", str(tmp_path / "best.json"), "--data", str(private),
                 "--json", str(tmp_path / "fit.json")]) == 0
    assert "differs from the export" not in capsys.readouterr().out  # the public study's epsilon is not compared
    refit = json.loads((tmp_path / "fit.json").read_text())
    assert refit["c"] == document["params"]["c"] and refit["data_hash"] != document["data_hash"]

    undeclared = {**document, "swagppm": {**document["swagppm"], "data": {**document["swagppm"]["data"],
                                                                         "public": False}},
                  "tuning": {**tuning, "mode": "unaccounted"}}
    (tmp_path / "undeclared.json").write_text(json.dumps(undeclared))  # its unsealed fields edited: nothing changes
    assert main(["fit", "--from", str(tmp_path / "undeclared.json"), "--data", str(private)]) == 0
    looked = study_file("looked", study={"name": "looked"}, data={"source": str(private)})
    with_a_feasible_trial(looked)  # a study on the private records themselves, chosen by their scores
    assert main(["export", str(looked), "-o", str(tmp_path / "looked.json")]) == 0
    capsys.readouterr()
    for verb in (["fit"], ["release", "-o", str(tmp_path / "released"), "--force"]):
        assert main([verb[0], "--from", str(tmp_path / "looked.json"), "--data", str(private), *verb[1:]]) == 2
        out = capsys.readouterr()
        assert "was chosen by a study on data not declared public" in out.err and len(out.err.splitlines()) == 1
        assert "stage 1" not in out.out
    assert not (tmp_path / "released").exists()


def test_require_audit_makes_the_audit_of_one_secret_draw_a_constraint(study_file: Callable[..., Path]) -> None:
    path = study_file(study={"n_trials": 1}, targets={"require_audit": True}, search={"probe": False})
    assert main(["run", str(path)]) in (0, 1)
    config = StudyConfig.from_toml(path)
    trial = open_study(config, create=False).trials[0]
    record = TrialRecord.of(trial)
    assert record is not None and record.audit_epsilon_bound is not None and record.audit_epsilon_bound >= 0
    assert record.timings["audit"] > 0
    assert any(reason.startswith("membership audit of one secret draw") for reason in record.reasons)
    assert named_constraints(trial)["epsilon"] >= record.audit_epsilon_bound / config.targets.epsilon_cap - 1.0


def test_an_audit_that_refutes_epsilon_star_makes_the_trial_infeasible(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(targets={"require_audit": True}))
    fit = result(tight(3.0))
    passed = judge(fit, targets=config.targets, search=config.search, checks=DrawChecks(audit_epsilon_bound=1.0))
    refuted = judge(fit, targets=config.targets, search=config.search, checks=DrawChecks(audit_epsilon_bound=60.0))
    assert passed.feasible and not refuted.feasible
    assert refuted.constraints["epsilon"] == pytest.approx(60.0 / 50.0 - 1.0)
    assert "refutes epsilon* = 50" in refuted.reasons[-1] and "does not refute" in passed.reasons[-1]


def _source_with_an_early_stop(study_file: Callable[..., Path], **changes: dict[str, object]) -> Path:
    """A study (target epsilon 10) with a feasible fit and one stopped early at epsilon >= 20."""
    path = study_file(targets={"epsilon_cap": 10.0}, **changes)
    config = StudyConfig.from_toml(path)
    study = open_study(config)
    checks = DrawChecks(public_score=0.7) if config.study.accounted else DrawChecks()
    add_judged(study, config, result(tight(3.0)), checks)
    add_judged(study, config, result([10.0] * 3, c=1.1, epsilon=20.0, epsilon_is_lower_bound=True, draws_skipped=9,
                                     f1_macro=[], f1_weighted=[]), checks)
    return path


def test_rejudge_twice_or_onto_its_source_is_refused(study_file: Callable[..., Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = _source_with_an_early_stop(study_file)
    assert main(["rejudge", str(path), "--name", "strict", "--epsilon-cap", "5"]) == 1
    capsys.readouterr()
    assert main(["rejudge", str(path), "--name", "strict", "--epsilon-cap", "5"]) == 2
    err = capsys.readouterr().err
    assert "a study of that name already exists" in err and "--study-name strict" in err
    assert main(["rejudge", str(path), "--name", "small", "--epsilon-cap", "5"]) == 2
    assert "the source study's own name" in capsys.readouterr().err
    storage = f"sqlite:///{tmp_path / 'small.db'}"
    assert len(optuna.load_study(study_name="strict", storage=storage).trials) == 2
    assert len(optuna.load_study(study_name="small", storage=storage).trials) == 2


def test_a_rejudged_study_is_opened_by_status_and_export_and_names_trials_that_need_a_refit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _source_with_an_early_stop(study_file)
    assert main(["rejudge", str(path), "--name", "loose", "--epsilon-cap", "30"]) == 0
    out = capsys.readouterr().out
    assert "trial(s) 1 need a refit to be judged" in out and "--study-name loose" in out
    assert main(["status", str(path), "--study-name", "loose"]) == 0
    out = capsys.readouterr().out
    assert "trial(s) 1 need a refit to be judged" in out and "target 30" in out
    row = next(line for line in out.splitlines() if line.startswith("   1 "))
    assert "needs refit" in row and " no " in row
    assert main(["export", str(path), "--study-name", "loose", "-o", str(tmp_path / "loose.json")]) == 0
    document = json.loads((tmp_path / "loose.json").read_text())
    assert document["study"]["name"] == "loose" and document["targets"]["epsilon_cap"] == 30.0
    assert main(["status", str(path)]) == 0  # the source is untouched, still judged against 10
    assert "need a refit" not in capsys.readouterr().out
    assert main(["status", str(path), "--study-name", "nowhere"]) == 2
    assert "--study-name nowhere: no study of that name" in capsys.readouterr().err


def test_rejudge_keeps_the_accounting_or_refuses_a_new_epsilon_star(study_file: Callable[..., Path], tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = _source_with_an_early_stop(study_file, study=ACCOUNTED)
    config = StudyConfig.from_toml(path)
    source = open_study(config, create=False)
    source.set_user_attr(NUM_TRAIN, 120)
    assert main(["rejudge", str(path), "--name", "other", "--epsilon-cap", "30"]) == 2
    assert "accounted at epsilon* = 10" in capsys.readouterr().err
    assert main(["rejudge", str(path), "--name", "kept", "--max-f1-degradation", "0.2"]) == 0
    kept = dataclasses.replace(config, study=dataclasses.replace(config.study, name="kept"))
    study = open_study(kept, create=False)
    assert SealedClaim.from_dict(study.user_attrs[CLAIM]).claim == dataclasses.replace(
        SealedClaim.from_dict(source.user_attrs[CLAIM]).claim, ranked_at=10.0)
    for key in (ACCOUNTED_TRIALS, NUM_TRAIN):
        assert study.user_attrs[key] == source.user_attrs[key]
    assert tuning_cost(study, kept)["total_epsilon"] == tuning_cost(source, config)["total_epsilon"]
    assert main(["status", str(path), "--study-name", "kept"]) == 0
    assert "accounted total epsilon" in capsys.readouterr().out
