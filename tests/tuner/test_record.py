"""``tuner.record`` directly: the stored trial record, its round trips, the attribute names and the constraints."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
from optuna.storages import InMemoryStorage
from optuna.storages.journal import JournalFileBackend, JournalStorage
from optuna.trial import TrialState, create_trial

from tests.tuner.helpers import result, tight
from tuner.config import Targets
from tuner.outcome import judge
from tuner.record import (
    CONSTRAINT_KEYS,
    CONSTRAINTS,
    FAILURE,
    FIGURES_ERROR,
    HEARTBEAT,
    NEEDS_REFIT,
    RAN_BY,
    RETRY_OF,
    TrialRecord,
    constraint_attrs,
    measured_violations,
    named_constraints,
    store_constraints,
)
from tuner.search import SearchSpace

TARGETS = Targets(epsilon_cap=50.0, max_f1_degradation=0.5, max_bulk_spread=10.0)
SEARCH = SearchSpace(c_min=0.3, c_max=1.2, ft_epochs_min=4, ft_epochs_max=8, restart_epochs=6)
FIVE = {"epsilon": 0.25, "f1_macro": -0.5, "f1_weighted": 0.0, "fit_spread": 1.0, "fit_spikes": -1.0}
OPTIONAL = ("threads", "cpu_kernels", "stage1_fingerprint", "majority_rate", "timings", "max_delta_series",
            "f1_macro_draws", "f1_weighted_draws", "unmeasured", "public_score", "audit_epsilon_bound")


def judged(**fields: object) -> TrialRecord:
    """The record of a made-up, well-fit fit (20 privacy draws, 30 utility draws) judged against ``TARGETS``."""
    fit = result(tight(3.0, n=20), timings={"total": 12.3456, "stage2": 1.0004}, stage1_fingerprint="f00d",
                 cpu_kernels="AVX2", threads=4, device="cpu", data_hash="keyed", **fields)
    return judge(fit, targets=TARGETS, search=SEARCH).record()


def stopped_early() -> TrialRecord:
    """The record of a fit whose privacy draws stopped at ε ≥ 20 against a target of 10."""
    fit = result([10.0] * 3, epsilon=20.0, epsilon_is_lower_bound=True, draws_skipped=9, f1_macro=[], f1_weighted=[])
    return judge(fit, targets=Targets(epsilon_cap=10.0), search=SEARCH).record()


def a_study(storage: optuna.storages.BaseStorage, name: str = "s") -> optuna.Study:
    return optuna.create_study(study_name=name, storage=storage)


# --- attribute names ---------------------------------------------------------------------------------------------


def test_the_attribute_names_stored_studies_depend_on_are_fixed() -> None:
    assert (RAN_BY, HEARTBEAT, FAILURE, FIGURES_ERROR, RETRY_OF, NEEDS_REFIT) == (
        "worker", "heartbeat", "failure", "figures_error", "retry_of", "needs_refit")
    assert CONSTRAINT_KEYS == ("epsilon", "f1_macro", "f1_weighted", "fit_spread", "fit_spikes")
    assert CONSTRAINTS == "constraints"


def test_a_record_stores_exactly_these_attributes() -> None:
    """The one place a new stored value shows up for review: nothing per record may join this list."""
    assert list(judged().attrs()) == [
        "feasible", "diagnosis", "reasons", "recommendation", "next_action", "next_c", "next_ft_epochs", "epsilon",
        "epsilon_is_lower_bound", "draws_privacy", "draws_skipped", "failure", "max_delta_median", "bulk_spread",
        "max_robust_z", "spike_count", "baseline_f1_macro", "baseline_f1_weighted", "f1_macro_median",
        "f1_macro_q10", "f1_weighted_median", "f1_weighted_q10", "stage1_cache_hit", "data_hash", "seed", "device",
        "threads", "cpu_kernels", "stage1_fingerprint", "majority_rate", "timings", "max_delta_series",
        "f1_macro_draws", "f1_weighted_draws", "unmeasured", "public_score", "audit_epsilon_bound", "posterior",
        "prior_scale", "nll_bound", "proven_epsilon", "diagnostics", "constraint_epsilon", "constraint_f1_macro",
        "constraint_f1_weighted", "constraint_fit_spread", "constraint_fit_spikes"]


def test_the_only_long_lists_of_a_record_are_per_draw() -> None:
    attrs = judged().attrs()
    lists = {key: len(value) for key, value in attrs.items() if isinstance(value, list)}
    assert lists == {"reasons": 4, "max_delta_series": 20, "f1_macro_draws": 30, "f1_weighted_draws": 30,
                     "unmeasured": 0}
    assert lists["max_delta_series"] == attrs["draws_privacy"]  # one value per privacy draw, none per record


# --- TrialRecord.attrs and from_attrs ----------------------------------------------------------------------------


def test_attrs_are_lists_and_flat_constraints_ready_for_json() -> None:
    record = judged()
    attrs = record.attrs()
    assert "constraints" not in attrs
    assert {key: value for key, value in attrs.items() if key.startswith("constraint_")} == {
        f"constraint_{key}": value for key, value in record.constraints.items()}
    assert attrs["reasons"] == list(record.reasons) and attrs["max_delta_series"] == list(record.max_delta_series)
    assert not any(isinstance(value, tuple) for value in attrs.values())
    assert attrs["timings"] == {"total": 12.346, "stage2": 1.0}  # rounded to the millisecond when judged


@pytest.mark.parametrize("make", [judged, stopped_early], ids=["judged", "stopped early"])
def test_a_record_reads_back_from_its_attrs_as_it_was(make: Callable[[], TrialRecord]) -> None:
    record = make()
    again = TrialRecord.from_attrs(record.attrs())
    assert again == record
    assert again is not None and isinstance(again.reasons, tuple) and isinstance(again.max_delta_series, tuple)


def test_a_record_reads_back_from_a_journal_file_as_it_was(tmp_path: Path) -> None:
    record = stopped_early()
    log = str(tmp_path / "s.log")
    study = a_study(JournalStorage(JournalFileBackend(log)))
    study.add_trial(create_trial(state=TrialState.PRUNED, user_attrs=record.attrs()))
    reopened = optuna.load_study(study_name="s", storage=JournalStorage(JournalFileBackend(log)))
    assert TrialRecord.of(reopened.trials[0]) == record


def test_the_stored_epsilon_constraint_of_an_early_stop_is_one_with_the_rest_unmeasured() -> None:
    record = stopped_early()
    assert (record.epsilon, record.epsilon_is_lower_bound, record.diagnosis) == (20.0, True, "not_judged")
    assert record.constraints == {"epsilon": 1.0, "f1_macro": 1.0, "f1_weighted": 1.0, "fit_spread": 1.0,
                                  "fit_spikes": 1.0}
    assert record.unmeasured == ("f1_macro", "f1_weighted", "fit_spread", "fit_spikes")
    assert (record.f1_macro_median, record.f1_weighted_q10, record.f1_macro_draws) == (None, None, ())


@pytest.mark.parametrize("attrs", [{}, {RAN_BY: "host:12", HEARTBEAT: 1.5e9},
                                   {FAILURE: "RuntimeError: out of memory", RETRY_OF: 3}])
def test_a_trial_never_judged_has_no_record(attrs: dict[str, object]) -> None:
    assert TrialRecord.from_attrs(attrs) is None
    assert TrialRecord.of(create_trial(state=TrialState.FAIL, user_attrs=attrs)) is None


def test_other_attributes_of_a_trial_are_not_read_into_its_record() -> None:
    record = judged()
    others = {RAN_BY: "host:12", HEARTBEAT: 1.5e9, FIGURES_ERROR: "OSError: disk full", RETRY_OF: 2,
              NEEDS_REFIT: True, "note": "anything"}
    assert TrialRecord.from_attrs(record.attrs() | others) == record


def test_a_record_stored_before_the_optional_fields_existed_reads_with_their_defaults() -> None:
    record = judged()
    old = {key: value for key, value in record.attrs().items() if key not in OPTIONAL}
    again = TrialRecord.from_attrs(old)
    assert again is not None
    assert (again.threads, again.cpu_kernels, again.stage1_fingerprint, again.majority_rate, again.timings) == (
        0, "", "", 0.0, {})
    assert (again.max_delta_series, again.f1_macro_draws, again.f1_weighted_draws, again.unmeasured) == ((), (), (), ())
    assert (again.public_score, again.audit_epsilon_bound) == (None, None)
    assert again.constraints == record.constraints and again.epsilon == record.epsilon


def test_a_record_without_constraint_attributes_has_none() -> None:
    attrs = {key: value for key, value in judged().attrs().items() if not key.startswith("constraint_")}
    again = TrialRecord.from_attrs(attrs)
    assert again is not None and again.constraints == {}


def test_a_record_cut_short_while_it_was_stored_reads_as_none() -> None:
    attrs = judged().attrs()
    partial = dict(list(attrs.items())[:2])  # "feasible" and "diagnosis": the worker died after the second write
    assert TrialRecord.from_attrs(partial) is None


def test_of_reads_a_trials_user_attributes() -> None:
    record = judged()
    trial = create_trial(state=TrialState.COMPLETE, value=1.0, user_attrs=record.attrs())
    assert TrialRecord.of(trial) == record


@pytest.mark.parametrize(("epsilon", "expected"), [(2.5, 2.5), (0.0, 0.0), (None, math.inf), (math.nan, math.inf),
                                                   (math.inf, math.inf), (-math.inf, math.inf)])
def test_epsilon_or_inf_is_infinite_unless_epsilon_is_a_finite_number(epsilon: float | None,
                                                                     expected: float) -> None:
    assert dataclasses.replace(judged(), epsilon=epsilon).epsilon_or_inf == expected


# --- constraints -------------------------------------------------------------------------------------------------


def test_constraint_attrs_are_one_list_of_floats_in_key_order() -> None:
    shuffled = {"fit_spikes": -1, "epsilon": 0.25, "fit_spread": 1, "f1_weighted": 0, "f1_macro": -0.5, "other": 9.0}
    stored = constraint_attrs(shuffled)
    assert stored == {"constraints": [0.25, -0.5, 0.0, 1.0, -1.0]}
    assert all(type(value) is float for value in stored["constraints"])


def test_constraint_attrs_need_every_key() -> None:
    with pytest.raises(KeyError, match="fit_spikes"):
        constraint_attrs({key: 0.0 for key in CONSTRAINT_KEYS if key != "fit_spikes"})


def test_stored_constraints_are_one_list_that_optuna_reads_by_index_and_we_read_by_name() -> None:
    storage = InMemoryStorage()
    study = a_study(storage)
    trial = study.ask()
    store_constraints(storage, trial, FIVE)
    study.tell(trial, 1.0)
    frozen = study.trials[0]
    assert frozen.system_attrs == {"constraints": [0.25, -0.5, 0.0, 1.0, -1.0]}
    assert frozen.constraints == {"0": 0.25, "1": -0.5, "2": 0.0, "3": 1.0, "4": -1.0}
    assert named_constraints(frozen) == FIVE


def test_constraints_go_to_the_trial_of_the_named_study_through_a_journal(tmp_path: Path) -> None:
    storage = JournalStorage(JournalFileBackend(str(tmp_path / "s.log")))
    first, second = a_study(storage, "first"), a_study(storage, "second")
    untouched = first.ask()
    trial = second.ask()  # trial 0 of another study: found by study name and number, not by trial id
    store_constraints(storage, trial, FIVE)
    assert second.trials[0].system_attrs == {"constraints": [0.25, -0.5, 0.0, 1.0, -1.0]}
    assert first.trials[0].system_attrs == {} and untouched.number == trial.number == 0


def test_constraints_set_one_key_at_a_time_are_read_by_their_keys() -> None:
    study = a_study(InMemoryStorage())
    trial = study.ask()
    for key in ("f1_macro", "epsilon"):
        trial.set_constraint(key, FIVE[key])
    assert named_constraints(study.trials[0]) == {"f1_macro": -0.5, "epsilon": 0.25}


def test_a_trial_without_constraints_has_no_named_constraints() -> None:
    assert named_constraints(create_trial(state=TrialState.COMPLETE, value=1.0)) == {}


def test_a_violation_is_a_measured_constraint_above_zero_in_the_order_given() -> None:
    constraints = {"fit_spread": 1.0, "epsilon": 0.25, "f1_macro": 0.0, "f1_weighted": -0.1, "fit_spikes": 2.0}
    assert list(measured_violations(constraints).items()) == [("fit_spread", 1.0), ("epsilon", 0.25),
                                                             ("fit_spikes", 2.0)]
    assert measured_violations(constraints, ("fit_spread", "fit_spikes")) == {"epsilon": 0.25}
    assert measured_violations(dict.fromkeys(CONSTRAINT_KEYS, 0.0)) == {}  # 0 is met
    assert measured_violations({}) == {}


def test_an_early_stop_misses_only_epsilon() -> None:
    record = stopped_early()
    assert measured_violations(record.constraints, record.unmeasured) == {"epsilon": 1.0}
