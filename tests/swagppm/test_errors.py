"""swagppm's errors: TrainingFailure's message and fields, the base classes callers catch, and a torch-free module."""

from __future__ import annotations

import ast
import inspect
import itertools

import pytest

import swagppm
from swagppm import errors

ERRORS = (errors.ConfigError, errors.DataError, errors.TrainingFailure, errors.ReleaseRefused)


def test_a_training_failure_says_stage_epoch_and_reason_and_keeps_them() -> None:
    failure = errors.TrainingFailure("stage2", 3, "non-finite training loss (nan)")
    assert str(failure) == "stage2, epoch 3: non-finite training loss (nan)"
    assert failure.args == ("stage2, epoch 3: non-finite training loss (nan)",)
    assert (failure.stage, failure.epoch, failure.reason) == ("stage2", 3, "non-finite training loss (nan)")


def test_a_training_failure_is_caught_as_a_runtime_error_with_its_message() -> None:
    with pytest.raises(RuntimeError, match=r"^DP-SGD, epoch 0: stopped by the callback$") as info:
        raise errors.TrainingFailure("DP-SGD", 0, "stopped by the callback")
    assert isinstance(info.value, errors.TrainingFailure) and info.value.epoch == 0


def test_bad_settings_and_bad_data_are_value_errors_and_failed_fits_and_refusals_runtime_errors() -> None:
    assert issubclass(errors.ConfigError, ValueError) and issubclass(errors.DataError, ValueError)
    assert issubclass(errors.TrainingFailure, RuntimeError) and issubclass(errors.ReleaseRefused, RuntimeError)
    assert not issubclass(errors.TrainingFailure, ValueError) and not issubclass(errors.ReleaseRefused, ValueError)


def test_no_error_is_a_kind_of_another() -> None:
    """A caller telling them apart by class (the command line's exit statuses) never confuses two."""
    for one, other in itertools.permutations(ERRORS, 2):
        assert not issubclass(one, other), (one, other)


def test_the_simple_errors_keep_their_message_as_given() -> None:
    for kind in (errors.ConfigError, errors.DataError, errors.ReleaseRefused):
        error = kind("swagppm.device = 'tpu': not a device")
        assert str(error) == "swagppm.device = 'tpu': not a device" and error.args == (str(error),)


def test_the_package_exports_the_same_classes() -> None:
    """``except swagppm.ConfigError`` catches what ``swagppm.errors`` raises."""
    for kind in ERRORS:
        assert getattr(swagppm, kind.__name__) is kind and kind.__name__ in swagppm.__all__


def test_the_errors_module_imports_nothing_so_a_command_line_can_catch_them_without_torch() -> None:
    tree = ast.parse(inspect.getsource(errors))
    imports = [ast.unparse(node) for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]
    assert imports == ["from __future__ import annotations"]
