"""A trial's parameters: checked once, with the messages a fit has always given."""

from __future__ import annotations

import dataclasses
import math

import pytest

from swagppm import ConfigError, TrialParams


@pytest.mark.parametrize(("values", "error", "message"), [
    ({"c": 0.0, "ft_epochs": 1}, ValueError, "c must be positive and finite, got 0.0"),
    ({"c": -1.0, "ft_epochs": 1}, ValueError, "c must be positive and finite, got -1.0"),
    ({"c": math.inf, "ft_epochs": 1}, ValueError, "c must be positive and finite, got inf"),
    ({"c": math.nan, "ft_epochs": 1}, ValueError, "c must be positive and finite, got nan"),
    ({"c": 1.0, "ft_epochs": 0}, ValueError, "ft_epochs must be at least 1, got 0"),
    ({"c": 1.0, "ft_epochs": 1, "g": math.nan}, ValueError, "g must be finite, got nan"),
    ({"c": 1.0, "ft_epochs": 1, "seed": -1}, ConfigError, r"seed = -1: must be an integer in \[0, 2\*\*32\)"),
    ({"c": 1.0, "ft_epochs": 1, "seed": 2**32}, ConfigError, "seed = 4294967296"),
])
def test_bad_parameters_are_refused(values: dict[str, float], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        TrialParams(**values)  # type: ignore[arg-type]


def test_defaults_keyword_only_and_frozen() -> None:
    params = TrialParams(c=0.7, ft_epochs=10)
    assert params == TrialParams(c=0.7, ft_epochs=10, g=0.0, seed=None)
    assert TrialParams(c=1.0, ft_epochs=1, g=-0.2, seed=2**32 - 1).g == -0.2
    with pytest.raises(dataclasses.FrozenInstanceError):
        params.c = 0.5  # type: ignore[misc]
    with pytest.raises(TypeError):
        TrialParams(0.7, 10)  # type: ignore[misc]
