"""Helpers shared by the swagppm tests: a small fast configuration, an error that must name a path, a
Hugging Face dataset repository in a local, offline hub cache, a read-only folder, a umask for a block, and
another process using a private cache."""

from __future__ import annotations

import contextlib
import hashlib
import io
import multiprocessing
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import swagppm
from swagppm.cache import PrivateCache
from tests import PATIENCE


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


TEST_KEY = bytes(range(32))  # the owner key of the swagppm tests' claims (tuner keeps a real one: tuner.keys)


def verified_claim(config: swagppm.SWAGPPMConfig, *, epsilon_cap: float, max_records: int | None = None,
                   data_set: str = "test-records") -> Any:
    """An unaccounted study's claim of ``config`` at the cap ``epsilon_cap``, sealed and verified as a study's is."""
    from swagppm.claim import SealedClaim, StudyClaim

    claim = StudyClaim(epsilon_cap=epsilon_cap, mode="unaccounted", data_public=config.data.public, delta=None,
                       max_records=max_records, accounting=None, posterior=config.posterior,
                       prior_scale=config.prior_scale, nll_bound=config.nll_bound, public_risks=config.public_risks,
                       data_set=data_set)
    return SealedClaim.of(claim, TEST_KEY).verify(TEST_KEY)


def release_now(session: swagppm.Session, fit: swagppm.Fit, out: Path, *, epsilon_cap: float,
                tuning: dict[str, Any] | None = None, **spec: Any) -> Path:
    """Stage one release of ``fit`` under a verified claim at ``epsilon_cap`` and commit it with no audit (the card
    says so); ``tuning`` goes to the owner report only. The gate with its ledger and audit is ``tuner.release``."""
    from swagppm.releases.writer import NO_AUDIT, ReleaseSpec, stage

    claim = verified_claim(session.config, epsilon_cap=epsilon_cap)
    with stage(session, fit, out, ReleaseSpec(claim=claim, **spec)) as staged:
        return staged.commit(audit=NO_AUDIT, tuning=tuning)


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


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """``folder`` made read-only for this process: mode 0500, or, for root (whom modes do not stop), the immutable
    attribute (skipped where neither holds)."""
    if os.geteuid() != 0:
        folder.chmod(0o500)
        try:
            yield
        finally:
            folder.chmod(0o700)
        return
    if subprocess.run(["chattr", "+i", str(folder)], capture_output=True, check=False).returncode != 0:
        pytest.skip("no way to make a folder read-only for root here (chattr +i failed)")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """The process umask set to ``mask`` for the block, then restored."""
    previous = os.umask(mask)
    try:
        yield
    finally:
        os.umask(previous)


def _use_the_cache(cache_dir: str, ready: Any, done: Any) -> None:
    """What a running fit does with the cache: hold it, then read and write an entry; until told to stop."""
    import torch

    cache = PrivateCache(cache_dir, hold=True)
    cache.get_or_compute("stage1", "c" * 40, lambda: {"risk": torch.zeros(2)}, validate=lambda p: True)
    ready.set()
    done.wait(PATIENCE)


@contextlib.contextmanager
def a_process_using(cache_dir: Path) -> Iterator[None]:
    """Another process (spawned) holding the private cache ``cache_dir`` as a running fit does, for the block."""
    context = multiprocessing.get_context("spawn")
    ready, done = context.Event(), context.Event()
    child = context.Process(target=_use_the_cache, args=(str(cache_dir), ready, done))
    child.start()
    try:
        deadline = time.monotonic() + PATIENCE
        while not ready.wait(0.1):
            assert child.is_alive() and time.monotonic() < deadline, "the other process never held the cache"
        yield
    finally:
        done.set()
        child.join(PATIENCE)

