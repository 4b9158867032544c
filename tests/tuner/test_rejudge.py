"""``tuner.rejudge`` directly: rebuilt results, new targets, rejudged trials, the new study, its name and refits."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

import scorers
from swagppm import ConfigError, SWAGPPMResult
from tests.tuner.helpers import result, tight
from tuner.config import StudyConfig, Targets
from tuner.figures import study_figures
from tuner.outcome import DrawChecks, judge
from tuner.record import (
    FAILURE,
    FIGURES_ERROR,
    NEEDS_REFIT,
    RAN_BY,
    TrialRecord,
    constraint_attrs,
    named_constraints,
)
from tuner.rejudge import (
    REJUDGED,
    check_new_name,
    named_study,
    needs_refit,
    rejudge,
    rejudged_trial,
    result_of,
    retarget,
)
from tuner.study import open_storage, open_study
from tuner.tuning import NUM_TRAIN

NO_CHECKS = DrawChecks()
DISTRIBUTIONS = {"c": FloatDistribution(0.3, 1.2), "ft_epochs": IntDistribution(4, 8)}
ACCOUNTED = {"accounted": True, "sampler": "random", "public_eval": "public.jsonl", "max_records": 1000}
SERIES = tight(3.0)
EPSILON = 2 * max(SERIES)  # the made-up fit's ε: about 6.19


@pytest.fixture
def config(study_file: Callable[..., Path], tmp_path: Path) -> StudyConfig:
    """The small study with target ε 10 in a journal file."""
    return journal_study(study_file, tmp_path)


def journal_study(study_file: Callable[..., Path], tmp_path: Path, **changes: dict[str, object]) -> StudyConfig:
    """A study file (target ε 10 unless changed) whose storage is a journal file in ``tmp_path``."""
    changes = {"targets": {"epsilon_cap": 10.0}} | changes
    return StudyConfig.from_toml(study_file(**changes)).with_storage(f"journal:{tmp_path / 's.log'}")


def judged_trial(config: StudyConfig, fit: SWAGPPMResult, checks: DrawChecks = NO_CHECKS,
                 params: dict[str, float] | None = None, **user_attrs: object) -> FrozenTrial:
    """``fit`` judged against ``config`` as a finished trial (pruned when catastrophic), as a study stores it."""
    outcome = judge(fit, targets=config.targets, search=config.search, accounted=config.study.accounted,
                    checks=checks)
    state = TrialState.PRUNED if outcome.catastrophic else TrialState.COMPLETE
    distributions = DISTRIBUTIONS | ({"g": FloatDistribution(-1.0, 1.0)} if params and "g" in params else {})
    return create_trial(state=state, values=None if outcome.catastrophic else [min(fit.epsilon, 1e12)],
                        params=params or {"c": fit.c, "ft_epochs": fit.ft_epochs}, distributions=distributions,
                        user_attrs=outcome.attributes() | user_attrs,
                        system_attrs=constraint_attrs(outcome.constraints))


def early_stop(epsilon: float = 20.0) -> SWAGPPMResult:
    """A fit whose privacy draws stopped after 3 of 12 at ε ≥ ``epsilon``."""
    return result([epsilon / 2] * 3, c=1.1, epsilon=epsilon, epsilon_is_lower_bound=True, draws_skipped=9,
                  f1_macro=[], f1_weighted=[])


def crashed() -> SWAGPPMResult:
    return result([], c=0.9, epsilon=math.inf, failure="training diverged", f1_macro=[], f1_weighted=[])


def with_targets(config: StudyConfig, **changes: object) -> StudyConfig:
    return dataclasses.replace(config, targets=retarget(config.targets, changes))


def rejudged(config: StudyConfig, fit: SWAGPPMResult, *, accounted: bool = False, checks: DrawChecks = NO_CHECKS,
             **changes: object) -> FrozenTrial:
    """``fit`` judged against ``config`` and rejudged against its targets with ``changes``."""
    trial = judged_trial(config, fit, checks)
    record = TrialRecord.of(trial)
    assert record is not None
    return rejudged_trial(trial, record, with_targets(config, **changes), accounted=accounted)


def a_source(config: StudyConfig) -> optuna.Study:
    """The study of ``config``: 0 feasible, 1 stopped early at ε ≥ 20, 2 crashed, 3 running, 4 catastrophic."""
    study = open_study(config)
    study.set_user_attr(NUM_TRAIN, 180)
    study.add_trial(judged_trial(config, result(SERIES, c=0.5, epochs=6)))
    study.add_trial(judged_trial(config, early_stop()))
    study.add_trial(create_trial(state=TrialState.FAIL, params={"c": 0.7, "ft_epochs": 5},
                                 distributions=DISTRIBUTIONS, user_attrs={FAILURE: "RuntimeError: out of memory"}))
    study.ask()
    study.add_trial(judged_trial(config, crashed()))
    return study


def names(config: StudyConfig) -> list[str]:
    return sorted(optuna.get_all_study_names(open_storage(config)))


# --- result_of ---------------------------------------------------------------------------------------------------


def test_the_rebuilt_result_judges_to_the_stored_record(config: StudyConfig) -> None:
    fit = result(SERIES, c=0.5, epochs=6, seed=7, device="cpu", threads=4, data_hash="keyed", majority_rate=0.25,
                 stage1_cache_hit=True, timings={"total": 12.5, "stage2": 3.25})
    trial = judged_trial(config, fit)
    record = TrialRecord.of(trial)
    assert record is not None
    rebuilt = result_of(trial, record, search=config.search)
    for field in ("c", "g", "ft_epochs", "seed", "epsilon", "max_delta", "f1_macro", "f1_weighted",
                  "baseline_f1_macro", "baseline_f1_weighted", "epsilon_is_lower_bound", "draws_skipped", "failure",
                  "stage1_cache_hit", "timings", "majority_rate", "data_hash", "device", "threads"):
        assert getattr(rebuilt, field) == getattr(fit, field), field
    assert judge(rebuilt, targets=config.targets, search=config.search).record() == record


def test_a_rejudged_trial_keeps_which_stage_1_and_cpu_kernels_its_fit_used(config: StudyConfig) -> None:
    trial = rejudged(config, result(SERIES, stage1_fingerprint="f00d", cpu_kernels="AVX2"), epsilon_cap=30.0)
    record = TrialRecord.of(trial)
    assert record is not None and (record.stage1_fingerprint, record.cpu_kernels) == ("f00d", "AVX2")


def test_an_early_stop_is_rebuilt_as_a_lower_bound_without_utility_draws(config: StudyConfig) -> None:
    trial = judged_trial(config, early_stop())
    record = TrialRecord.of(trial)
    assert record is not None
    rebuilt = result_of(trial, record, search=config.search)
    assert (rebuilt.epsilon, rebuilt.epsilon_is_lower_bound, rebuilt.draws_skipped) == (20.0, True, 9)
    assert (rebuilt.max_delta, rebuilt.f1_macro, rebuilt.f1_weighted) == ([10.0, 10.0, 10.0], [], [])


def test_a_fit_that_failed_is_rebuilt_with_an_infinite_epsilon_and_its_failure(config: StudyConfig) -> None:
    trial = judged_trial(config, crashed())
    record = TrialRecord.of(trial)
    assert record is not None and record.epsilon is None
    rebuilt = result_of(trial, record, search=config.search)
    assert (rebuilt.epsilon, rebuilt.failure, rebuilt.max_delta) == (math.inf, "training diverged", [])


def test_g_is_the_trials_parameter_or_the_searchs_fixed_one_when_not_searched(config: StudyConfig) -> None:
    searched = judged_trial(config, result(SERIES), params={"c": 1.0, "ft_epochs": 7, "g": -0.25})
    plain = judged_trial(config, result(SERIES))
    for trial, g in ((searched, -0.25), (plain, 0.0)):
        record = TrialRecord.of(trial)
        assert record is not None and result_of(trial, record, search=config.search).g == g


# --- retarget ----------------------------------------------------------------------------------------------------


def test_retarget_changes_only_the_targets_named() -> None:
    targets = Targets(epsilon_cap=10.0, max_f1_degradation=0.2)
    assert retarget(targets, {"epsilon_cap": 5.0, "statistic": "q10"}) == dataclasses.replace(
        targets, epsilon_cap=5.0, statistic="q10")
    assert retarget(targets, {}) == targets
    assert targets.epsilon_cap == 10.0  # the source's targets are untouched


@pytest.mark.parametrize(("changes", "message"), [
    ({"epsilon_cap": 0}, "rejudge: targets.epsilon_cap = 0: must be positive and finite"),
    ({"epsilon_cap": math.inf}, "rejudge: targets.epsilon_cap = inf: must be positive and finite"),
    ({"max_f1_degradation": 1.0}, "rejudge: targets.max_f1_degradation = 1.0: must be a fraction in [0, 1)"),
    ({"statistic": "mean"}, "rejudge: targets.statistic = 'mean': must be one of 'median', 'q10'"),
    ({"epsilonn": 5.0}, "rejudge: unknown key(s) epsilonn; known keys: epsilon_cap, max_f1_degradation, statistic, "
                        "require_well_fit, max_bulk_spread, spike_z, min_spikes, early_stop, stuck_epochs, "
                        "require_audit, stop_above_best"),
])
def test_new_targets_are_checked_like_a_study_files(changes: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        retarget(Targets(), changes)
    assert str(info.value) == message


def test_a_target_of_the_wrong_type_is_refused_by_name() -> None:
    with pytest.raises(ConfigError) as info:
        retarget(Targets(), {"require_well_fit": "yes"})
    assert str(info.value).startswith("rejudge: require_well_fit = 'yes' has the wrong type")


# --- rejudged_trial ----------------------------------------------------------------------------------------------


def test_a_stricter_epsilon_is_missed_by_the_exact_ratio_and_the_rest_is_judged_as_before(config: StudyConfig) -> None:
    source = judged_trial(config, result(SERIES, c=0.5, epochs=6))
    new = rejudged(config, result(SERIES, c=0.5, epochs=6), epsilon_cap=5.0)
    record = TrialRecord.of(new)
    assert record is not None and not record.feasible
    assert (new.state, new.values, new.params, new.distributions) == (
        TrialState.COMPLETE, [EPSILON], {"c": 0.5, "ft_epochs": 6}, DISTRIBUTIONS)
    constraints = named_constraints(new)
    assert constraints["epsilon"] == pytest.approx(EPSILON / 5.0 - 1.0)
    assert {k: v for k, v in constraints.items() if k != "epsilon"} == {
        k: v for k, v in named_constraints(source).items() if k != "epsilon"}
    assert record.constraints == constraints
    assert "epsilon 6.19 exceeds the target 5.00" in record.reasons
    assert NEEDS_REFIT not in new.user_attrs


def test_a_rejudged_trial_carries_its_record_and_nothing_else_of_the_source_trial(config: StudyConfig) -> None:
    extra = {RAN_BY: "host:12", FIGURES_ERROR: "OSError: disk full",
             "record_losses": [0.731, 0.269, 0.881]}  # a per-record list a careless caller stored on the trial
    source = judged_trial(config, result(SERIES), **extra)
    record = TrialRecord.of(source)
    assert record is not None
    new = rejudged_trial(source, record, with_targets(config, epsilon_cap=30.0), accounted=False)
    assert set(new.user_attrs) == set(record.attrs())
    assert set(new.system_attrs) == {"constraints"}


def test_a_looser_f1_target_changes_the_f1_constraints_only(config: StudyConfig) -> None:
    """The study's max_f1_degradation 0.5 puts the thresholds at 0.41 and 0.435; 0 puts them at the baselines."""
    source = named_constraints(judged_trial(config, result(SERIES)))
    new = named_constraints(rejudged(config, result(SERIES), max_f1_degradation=0.0))
    assert new["epsilon"] == source["epsilon"] and new["fit_spread"] == source["fit_spread"]
    assert new["f1_macro"] > 0 > source["f1_macro"] and new["f1_weighted"] > 0 > source["f1_weighted"]


def test_a_catastrophic_fit_stays_pruned_with_every_constraint_at_the_cap(config: StudyConfig) -> None:
    new = rejudged(config, crashed(), epsilon_cap=1000.0)
    assert (new.state, new.values) == (TrialState.PRUNED, None)
    assert named_constraints(new) == dict.fromkeys(named_constraints(new), scorers.CONSTRAINT_CAP)
    assert new.user_attrs["diagnosis"] == "catastrophic"


def test_a_pareto_study_gets_epsilon_and_the_macro_f1_statistic(config: StudyConfig) -> None:
    pareto = dataclasses.replace(config, study=dataclasses.replace(config.study, objective="pareto"))
    trial = judged_trial(config, result(SERIES))
    record = TrialRecord.of(trial)
    assert record is not None
    new = rejudged_trial(trial, record, with_targets(pareto, statistic="q10"), accounted=False)
    assert new.values == [EPSILON, record.f1_macro_q10]


@pytest.mark.parametrize(("target", "refit"), [(30.0, True), (20.0, True), (15.0, False)])
def test_an_early_stop_needs_a_refit_when_its_lower_bound_meets_the_new_target(
        config: StudyConfig, target: float, refit: bool) -> None:
    new = rejudged(config, early_stop(20.0), epsilon_cap=target)
    assert new.user_attrs.get(NEEDS_REFIT) is (True if refit else None)
    record = TrialRecord.of(new)
    assert record is not None and not record.feasible and record.diagnosis == "not_judged"
    assert named_constraints(new)["epsilon"] == pytest.approx(20.0 / target - 1.0)
    assert record.unmeasured == ("f1_macro", "f1_weighted", "fit_spread", "fit_spikes")


def test_a_fit_that_ran_every_draw_never_needs_a_refit(config: StudyConfig) -> None:
    assert NEEDS_REFIT not in rejudged(config, result(SERIES), epsilon_cap=1000.0).user_attrs


def test_an_accounted_rejudge_judges_by_epsilon_alone(config: StudyConfig) -> None:
    checks = DrawChecks(public_score=0.7)
    new = rejudged(config, result(SERIES), accounted=True, checks=checks, max_f1_degradation=0.0)
    constraints = named_constraints(new)
    assert {k: v for k, v in constraints.items() if k != "epsilon"} == dict.fromkeys(
        ("f1_macro", "f1_weighted", "fit_spread", "fit_spikes"), 0.0)
    record = TrialRecord.of(new)
    assert record is not None and record.feasible and record.public_score == 0.7
    assert record.reasons[-1].startswith("accounted study: judged by epsilon <= epsilon* alone")


def test_the_stored_audit_bound_is_judged_against_the_new_target(config: StudyConfig) -> None:
    new = rejudged(config, result(SERIES), checks=DrawChecks(audit_epsilon_bound=8.0), epsilon_cap=7.0)
    record = TrialRecord.of(new)
    assert record is not None and record.audit_epsilon_bound == 8.0 and not record.feasible
    assert named_constraints(new)["epsilon"] == pytest.approx(8.0 / 7.0 - 1.0)  # the audit refutes what ε meets
    assert "refutes epsilon* = 7" in record.reasons[-1]


# --- check_new_name ----------------------------------------------------------------------------------------------


def test_the_source_studys_own_name_is_refused(config: StudyConfig) -> None:
    with pytest.raises(ConfigError) as info:
        check_new_name(config, "small")
    assert str(info.value) == ("rejudge --name small: that is the source study's own name; its trials would be "
                               "copied into it. Give the new study another name")


def test_a_name_the_storage_holds_is_refused_with_how_to_open_it(config: StudyConfig, tmp_path: Path) -> None:
    optuna.create_study(study_name="strict", storage=open_storage(config))
    with pytest.raises(ConfigError) as info:
        check_new_name(config, "strict")
    assert str(info.value) == (f"rejudge --name strict: a study of that name already exists in "
                               f"journal:{tmp_path / 's.log'} (rejudged before?); open it with --study-name strict, "
                               "or give another name")


def test_a_free_name_passes_and_creates_nothing(config: StudyConfig) -> None:
    open_study(config)
    assert check_new_name(config, "strict") is None
    assert names(config) == ["small"]


# --- rejudge -----------------------------------------------------------------------------------------------------


def test_every_judged_finished_trial_is_copied_in_order_and_the_source_is_untouched(config: StudyConfig) -> None:
    source = a_source(config)
    before = source.get_trials()
    targets = retarget(config.targets, {"epsilon_cap": 30.0})
    study = rejudge(config, targets, name="loose")
    assert study.study_name == "loose" and names(config) == ["loose", "small"]
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.COMPLETE, TrialState.PRUNED]
    assert [t.params for t in study.trials] == [before[n].params for n in (0, 1, 4)]  # no crash, no running trial
    assert study.user_attrs[REJUDGED] == {"source": "small", "targets": dataclasses.asdict(targets)}
    assert study.user_attrs[NUM_TRAIN] == 180
    assert needs_refit(study) == [1]
    reloaded = optuna.load_study(study_name="small", storage=open_storage(config))
    assert [(t.state, t.user_attrs, t.system_attrs) for t in reloaded.trials] == [
        (t.state, t.user_attrs, t.system_attrs) for t in before]


def test_the_new_study_opens_under_its_name_with_the_targets_it_was_judged_against(config: StudyConfig) -> None:
    a_source(config)
    targets = retarget(config.targets, {"epsilon_cap": 30.0, "statistic": "q10"})
    rejudge(config, targets, name="loose")
    named = named_study(config, "loose")
    assert named.targets == targets and named.study.name == "loose"
    assert named.fit == config.fit and named.search == config.search
    assert len(open_study(named).trials) == 3  # its stored definition is the one these targets give


def test_a_rejudged_studys_trade_off_shades_what_its_new_targets_allow(config: StudyConfig) -> None:
    a_source(config).set_user_attr("baseline_f1_macro", 0.82)
    study = rejudge(config, retarget(config.targets, {"epsilon_cap": 30.0, "max_f1_degradation": 0.2}), name="loose")
    tradeoff = study_figures(study, named_study(config, "loose"))["tradeoff"]
    assert [shape.name for shape in tradeoff.layout.shapes] == ["epsilon and macro-F1 box", "epsilon target",
                                                               "macro-F1 threshold"]


@pytest.mark.parametrize("name", ["small", "taken"])
def test_a_refused_name_writes_nothing(config: StudyConfig, name: str) -> None:
    a_source(config)
    optuna.create_study(study_name="taken", storage=open_storage(config))
    with pytest.raises(ConfigError, match=f"rejudge --name {name}: "):
        rejudge(config, config.targets, name=name)
    storage = open_storage(config)
    assert names(config) == ["small", "taken"]
    assert len(optuna.load_study(study_name="small", storage=storage).trials) == 5
    assert optuna.load_study(study_name="taken", storage=storage).trials == []


def test_a_new_epsilon_for_an_accounted_study_is_refused_before_anything_is_written(
        study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = journal_study(study_file, tmp_path, study=ACCOUNTED)
    open_study(config)
    with pytest.raises(ConfigError) as info:
        rejudge(config, retarget(config.targets, {"epsilon_cap": 30.0}), name="other")
    assert str(info.value) == ("rejudge --epsilon-cap 30: the study 'small' is accounted at epsilon* = 10, and its "
                               "total holds for that cap only; rejudge it with the same cap, or run a new accounted "
                               "study")
    assert names(config) == ["small"]


def test_a_source_that_was_never_run_is_refused(config: StudyConfig) -> None:
    with pytest.raises(ConfigError, match=r"no study named 'small' in journal:.*s\.log; run `swagppm-tune run "):
        rejudge(config, config.targets, name="loose")
    assert names(config) == []


# --- named_study -------------------------------------------------------------------------------------------------


def test_a_study_that_was_not_rejudged_opens_with_the_files_targets(config: StudyConfig) -> None:
    optuna.create_study(study_name="other", storage=open_storage(config))
    named = named_study(config, "other")
    assert named == dataclasses.replace(config, study=dataclasses.replace(config.study, name="other"))


def test_an_unknown_study_name_is_refused_and_not_created(config: StudyConfig, tmp_path: Path) -> None:
    open_study(config)
    with pytest.raises(ConfigError) as info:
        named_study(config, "nowhere")
    assert str(info.value) == f"--study-name nowhere: no study of that name in journal:{tmp_path / 's.log'}"
    assert names(config) == ["small"]


def test_stored_targets_that_are_not_valid_are_refused_naming_the_study(config: StudyConfig) -> None:
    study = optuna.create_study(study_name="edited", storage=open_storage(config))
    study.set_user_attr(REJUDGED, {"source": "small", "targets": {"epsilon_cap": -1.0}})
    with pytest.raises(ConfigError) as info:
        named_study(config, "edited")
    assert str(info.value) == "study 'edited': targets.epsilon_cap = -1.0: must be positive and finite"


# --- needs_refit -------------------------------------------------------------------------------------------------


def test_needs_refit_lists_the_flagged_trials_of_any_state_in_order(config: StudyConfig) -> None:
    study = optuna.create_study(study_name="flags", storage=open_storage(config))
    for state, flag in ((TrialState.COMPLETE, True), (TrialState.COMPLETE, None), (TrialState.PRUNED, True),
                        (TrialState.COMPLETE, False)):
        study.add_trial(create_trial(state=state, value=1.0 if state == TrialState.COMPLETE else None,
                                     user_attrs={} if flag is None else {NEEDS_REFIT: flag}))
    assert needs_refit(study) == [0, 2]
    assert needs_refit(optuna.create_study()) == []
