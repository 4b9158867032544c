"""Helpers shared by the swagppm tests: a small fast configuration, and an error that must name a path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import swagppm


def small_config(cache_dir: Path, **overrides: object) -> swagppm.SWAGPPMConfig:
    """A tiny-model fit on a small synthetic corpus that runs in seconds on a CPU."""
    values: dict[str, object] = {
        "data": {"source": "synthetic", "synthetic_size": 240, "synthetic_classes": 4},
        "model": {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1, "tiny_vocab_size": 400},
        "stage1_epochs": 6,
        "swag_epochs": 4,
        "swag_rank": 4,
        "draws_risk": 6,
        "draws_privacy": 8,
        "draws_utility": 4,
        "device": "cpu",
        "cache_dir": str(cache_dir),
    }
    values.update(overrides)
    return swagppm.SWAGPPMConfig.from_dict(values)


def error_naming(error: type[Exception], path: Path, action: Callable[[], object]) -> str:
    """The message of the ``error`` that ``action()`` raises, which must name ``path``."""
    with pytest.raises(error) as info:
        action()
    message = str(info.value)
    assert str(path) in message
    return message


def release_now(session: swagppm.Session, fit: swagppm.Fit, out: Path, **spec: Any) -> Path:
    """Stage one release of ``fit`` and commit it with no audit, as ``swagppm.release`` does (the card says so)."""
    from swagppm.releases.writer import ReleaseSpec, stage

    with stage(session, fit, out, ReleaseSpec(**spec)) as staged:
        return staged.commit(audit=None)
