"""``tuner.objective`` without fits: the stuck-training stop, the secret-draw checks, the audit bound, the search."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from optuna.storages import InMemoryStorage

import scorers
import swagppm
from swagppm.evaluate.probes import RecordLosses
from swagppm.train.engine import EpochInfo
from tests.tuner.helpers import result, tight
from tuner import StudyConfig
from tuner.audit import audit_losses
from tuner.objective import FitCrashed, Objective, StuckDetector, secret_draw_checks
from tuner.outcome import DrawChecks


def _epoch(accuracy: float, majority: float = 0.5, epoch: int = 1) -> EpochInfo:
    return EpochInfo(stage="stage2 fine-tune", epoch=epoch, epochs=10, mean_loss=1.0, train_accuracy=accuracy,
                     majority_rate=majority)


def _losses(members: np.ndarray, non_members: np.ndarray, member_classes: np.ndarray | None = None,
            non_member_classes: np.ndarray | None = None) -> RecordLosses:
    return RecordLosses(
        members=members, non_members=non_members,
        member_classes=np.zeros(len(members), int) if member_classes is None else member_classes,
        non_member_classes=np.zeros(len(non_members), int) if non_member_classes is None else non_member_classes)


# --- StuckDetector -------------------------------------------------------------------------------------


def test_training_stuck_for_the_set_number_of_epochs_stops_with_one_reason() -> None:
    detector = StuckDetector(3)
    assert [detector(_epoch(0.5, epoch=e)) for e in (1, 2)] == [None, None]
    assert detector(_epoch(0.49, epoch=3)) == "training stuck at the majority-class rate (0.500) for 3 epochs in a row"
    assert detector(_epoch(0.5, epoch=4)) == "training stuck at the majority-class rate (0.500) for 4 epochs in a row"


def test_one_epoch_above_the_majority_rate_starts_the_count_again() -> None:
    detector = StuckDetector(2)
    calls = [detector(_epoch(accuracy)) for accuracy in (0.5, 0.8, 0.5, 0.9, 0.5)]
    assert calls == [None] * 5
    assert detector(_epoch(0.5)) is not None


def test_the_tolerance_band_includes_its_edge() -> None:
    assert StuckDetector(1, tolerance=0.25)(_epoch(0.75, majority=0.5)) is not None  # 0.5 + 0.25 exactly
    assert StuckDetector(1, tolerance=0.25)(_epoch(0.7500001, majority=0.5)) is None
    assert StuckDetector(1)(_epoch(0.51, majority=0.5)) is not None  # the default tolerance is 0.01
    assert StuckDetector(1)(_epoch(0.52, majority=0.5)) is None


def test_the_reason_shows_the_majority_rate_to_three_decimals() -> None:
    reason = StuckDetector(1)(_epoch(0.2, majority=1 / 3))
    assert reason == "training stuck at the majority-class rate (0.333) for 1 epoch in a row"


# --- FitCrashed ----------------------------------------------------------------------------------------


def test_a_crashed_fit_is_not_a_configuration_or_data_error() -> None:
    """The command line answers ConfigError and DataError (both ValueError) with a refusal; a crash is not one."""
    assert issubclass(FitCrashed, RuntimeError) and not issubclass(FitCrashed, ValueError)


# --- the audit's bound, as a trial's secret-draw check reads it (tuner.audit.audit_losses) -----------------


def audit_bound(losses: RecordLosses) -> float:
    return float(audit_losses(losses).epsilon_lower_bound)


def test_the_audit_bound_is_the_family_wise_audit_s_lower_bound() -> None:
    losses = _losses(np.full(400, 0.01), np.random.default_rng(0).uniform(1, 3, 400))
    bound = audit_bound(losses)
    assert type(bound) is float
    assert bound == scorers.privacy_audit(losses.members, losses.non_members, member_classes=losses.member_classes,
                                          non_member_classes=losses.non_member_classes).epsilon_lower_bound
    assert bound > 2


def test_the_audit_bound_of_indistinguishable_losses_is_zero() -> None:
    same = np.random.default_rng(1).uniform(1, 3, 400)
    assert audit_bound(_losses(same, same.copy())) == 0.0


def test_the_audit_bound_uses_the_classes_of_the_records() -> None:
    rng = np.random.default_rng(2)
    classes = np.repeat(np.arange(4), 100)
    members = classes + rng.uniform(0, 0.4, 400)
    non_members = classes + 0.5 + rng.uniform(0, 0.4, 400)  # lower than members of the next class
    with_classes = audit_bound(_losses(members, non_members, classes, classes.copy()))
    assert with_classes > audit_bound(_losses(members, non_members)) + 1


# --- secret_draw_checks ----------------------------------------------------------------------------------


def test_a_study_neither_accounted_nor_audited_draws_nothing(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file())
    assert not config.study.accounted and not config.targets.require_audit
    fit = swagppm.Fit(result=result(tight()), posterior=None, weights=torch.zeros(4))
    timings = dict(fit.result.timings)
    assert secret_draw_checks(None, fit, config) == DrawChecks()  # type: ignore[arg-type]  # no session is needed
    assert fit.result.timings == timings  # no draw, no timing


def test_an_objective_makes_its_artifact_folder_and_closes_without_a_session(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file())
    assert not config.artifact_dir.exists()
    objective = Objective(config, storage=InMemoryStorage())
    assert config.artifact_dir.is_dir() and objective.lines == {}
    objective.close()
    objective.close()  # closing twice, before any fit, is harmless
