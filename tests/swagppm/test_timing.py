"""StageTimer: seconds per named stage, added up over repeats, recorded even when a stage raises."""

from __future__ import annotations

import pytest
import torch

from swagppm.train.timing import StageTimer


def test_a_new_timer_keeps_its_device_and_has_no_stages() -> None:
    timer = StageTimer(torch.device("cpu"))
    assert timer.device == torch.device("cpu") and timer.seconds == {}


def test_a_timed_stage_is_recorded_under_its_name_as_non_negative_seconds() -> None:
    timer = StageTimer(torch.device("cpu"))
    with timer("stage1"):
        pass
    assert list(timer.seconds) == ["stage1"]
    assert type(timer.seconds["stage1"]) is float and timer.seconds["stage1"] >= 0.0


def test_stages_are_recorded_in_the_order_they_end() -> None:
    timer = StageTimer(torch.device("cpu"))
    for stage in ("finetune", "swag", "privacy", "utility"):
        with timer(stage):
            pass
    assert list(timer.seconds) == ["finetune", "swag", "privacy", "utility"]


def test_a_stage_timed_again_adds_to_its_earlier_seconds() -> None:
    timer = StageTimer(torch.device("cpu"))
    timer.seconds["swag"] = 100.0  # an earlier epoch's total
    with timer("swag"):
        pass
    with timer("swag"):
        pass
    assert list(timer.seconds) == ["swag"] and timer.seconds["swag"] >= 100.0


def test_timing_a_stage_leaves_the_other_stages_alone() -> None:
    timer = StageTimer(torch.device("cpu"))
    timer.seconds.update(finetune=3.0, privacy_confirmed_per_draw=0.5)
    with timer("utility"):
        pass
    assert list(timer.seconds) == ["finetune", "privacy_confirmed_per_draw", "utility"]
    assert timer.seconds["finetune"] == 3.0 and timer.seconds["privacy_confirmed_per_draw"] == 0.5


def test_a_stage_that_raises_is_still_timed_and_the_error_goes_on() -> None:
    timer = StageTimer(torch.device("cpu"))
    with pytest.raises(RuntimeError, match="^diverged$"), timer("privacy"):
        raise RuntimeError("diverged")
    assert list(timer.seconds) == ["privacy"] and timer.seconds["privacy"] >= 0.0


def test_nested_stages_are_both_recorded() -> None:
    timer = StageTimer(torch.device("cpu"))
    with timer("stage2"), timer("utility"):
        pass
    assert set(timer.seconds) == {"stage2", "utility"} and min(timer.seconds.values()) >= 0.0
