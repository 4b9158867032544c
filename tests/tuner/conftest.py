"""Small study files that run in seconds on a CPU, written from plain dictionaries."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

# A tiny model on a small synthetic corpus: stage 1 in ~10 s, a trial in 1-5 s on 2 cores.
SMALL_STUDY: dict[str, dict[str, Any]] = {
    "study": {"name": "small", "n_trials": 3},
    "search": {"c_min": 0.3, "c_max": 1.2, "ft_epochs_min": 4, "ft_epochs_max": 8, "restart_epochs": 6,
               "start": [{"c": 1.0, "ft_epochs": 6}]},
    "targets": {"epsilon": 50.0, "stuck_epochs": 20, "max_f1_degradation": 0.5, "max_bulk_spread": 10.0},
    "data": {"source": "synthetic", "synthetic_size": 240, "synthetic_classes": 4},
    "model": {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1, "tiny_vocab_size": 400},
    "swagppm": {"stage1_epochs": 6, "swag_epochs": 4, "swag_rank": 4, "draws_risk": 6, "draws_privacy": 12,
                "draws_utility": 4, "device": "cpu", "cache_dir": "cache"},
}


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # strings, numbers and booleans read the same in TOML


def write_study(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> Path:
    """Write ``tables`` as a study TOML file."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def merged(**changes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``SMALL_STUDY`` with some keys of some tables changed (``None`` removes a key)."""
    tables = {name: dict(values) for name, values in SMALL_STUDY.items()}
    for table, values in changes.items():
        tables.setdefault(table, {})
        for key, value in values.items():
            if value is None:
                tables[table].pop(key, None)
            else:
                tables[table][key] = value
    return tables


@pytest.fixture
def study_file(tmp_path: Path) -> Callable[..., Path]:
    """``study_file(**changes)`` writes ``SMALL_STUDY`` with changes to ``tmp_path/<name>.toml``."""
    def write(name: str = "small", **changes: Mapping[str, Any]) -> Path:
        return write_study(tmp_path / f"{name}.toml", merged(**changes))
    return write

