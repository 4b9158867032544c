"""The ``study_file`` fixture: small study files that run in seconds on a CPU (``tests.tuner.helpers``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.tuner.helpers import merged, write_study


@pytest.fixture
def study_file(tmp_path: Path) -> Callable[..., Path]:
    """``study_file(**changes)`` writes ``SMALL_STUDY`` with changes to ``tmp_path/<name>.toml``."""
    def write(name: str = "small", **changes: Mapping[str, Any]) -> Path:
        return write_study(tmp_path / f"{name}.toml", merged(**changes))
    return write

