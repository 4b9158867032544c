"""The private cache: owner-only, atomic, shared safely by several processes."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

import pytest
import torch

from swagppm._cache import PrivateCache, cache_key
from tests.swagppm.conftest import small_config


def test_entries_are_owner_only_and_written_atomically(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path / "private")
    calls = []

    def compute() -> dict[str, object]:
        calls.append(1)
        return {"risk": torch.arange(3.0)}

    payload, hit = cache.get_or_compute("stage1", "k", compute, validate=lambda p: "risk" in p)
    again, hit_again = cache.get_or_compute("stage1", "k", compute, validate=lambda p: "risk" in p)
    assert (hit, hit_again, len(calls)) == (False, True, 1)
    assert torch.equal(again["risk"], payload["risk"])
    assert stat.S_IMODE((tmp_path / "private").stat().st_mode) == 0o700
    assert stat.S_IMODE(cache.path("stage1", "k").stat().st_mode) == 0o600
    assert not list((tmp_path / "private").glob("*.tmp"))


def test_a_failed_computation_leaves_no_entry(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path)

    def broken() -> dict[str, object]:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        cache.get_or_compute("stage1", "k", broken, validate=lambda p: True)
    assert not cache.path("stage1", "k").exists()


def test_invalid_entry_is_recomputed_with_a_warning(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path)
    cache.get_or_compute("stage1", "k", lambda: {"risk": torch.zeros(2)}, validate=lambda p: True)
    with pytest.warns(UserWarning, match="corrupt .*unexpected contents"):
        payload, hit = cache.get_or_compute("stage1", "k", lambda: {"risk": torch.ones(3)},
                                            validate=lambda p: p["risk"].shape == (3,))
    assert not hit and torch.equal(payload["risk"], torch.ones(3))


def test_keys_depend_on_every_part() -> None:
    assert cache_key("a", {"x": 1}) == cache_key("a", {"x": 1})
    assert cache_key("a", {"x": 1}) != cache_key("a", {"x": 2}) != cache_key("b", {"x": 1})


def _fit_in_child(cache_dir: str) -> tuple[bool, float]:
    import swagppm

    result = swagppm.run_fit(small_config(Path(cache_dir)), c=1.0, ft_epochs=1)
    return result.stage1_cache_hit, result.epsilon


def test_two_processes_share_one_stage1(tmp_path: Path) -> None:
    """Started together, one process computes stage 1 under the lock, the other waits and reuses it."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_fit_in_child, [str(tmp_path / "cache")] * 2)
    assert sorted(hit for hit, _ in outcomes) == [False, True]
    assert outcomes[0][1] == outcomes[1][1]
    assert len(list((tmp_path / "cache").glob("stage1-*.pt"))) == 1
