"""Helpers shared by the swagppm tests: a small fast configuration, an error that must name a path, and a
Hugging Face dataset repository in a local, offline hub cache."""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd
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


def local_hub_dataset(cache: Path, repo: str, snapshots: dict[str, dict[str, bytes]], refs: dict[str, str]) -> Path:
    """A dataset repository in a Hugging Face hub cache, laid out as ``snapshot_download`` leaves it.

    Each file's content is a blob named by its hash; ``snapshots/<commit>/<file>`` links
    to it; ``refs/<branch or tag>`` holds the commit it points at.
    """
    storage = cache / f"datasets--{repo.replace('/', '--')}"
    for commit, files in snapshots.items():
        for name, content in files.items():
            blob = storage / "blobs" / hashlib.sha256(content).hexdigest()
            blob.parent.mkdir(parents=True, exist_ok=True)
            blob.write_bytes(content)
            link = storage / "snapshots" / commit / name
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(os.path.relpath(blob, link.parent))
    for ref, commit in refs.items():
        (storage / "refs").mkdir(parents=True, exist_ok=True)
        (storage / "refs" / ref).write_text(commit)
    return storage


def offline_hub(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point huggingface_hub at ``cache`` and take it offline (as HF_HUB_OFFLINE=1 does at import)."""
    import datasets
    import huggingface_hub

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)


def parquet_bytes(rows: list[dict[str, object]]) -> bytes:
    """A Parquet file of ``rows``, as bytes."""
    buffer = io.BytesIO()
    pd.DataFrame(rows).to_parquet(buffer, index=False)
    return buffer.getvalue()
