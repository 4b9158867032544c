"""The private cache: owner-only, atomic, shared safely by several processes."""

from __future__ import annotations

import multiprocessing
import stat
from pathlib import Path

import pytest
import torch

from swagppm import ConfigError
from swagppm import cache as cache_module
from swagppm.cache import MARKER, SUBFOLDER, PrivateCache, cache_key, clear_cache
from tests.swagppm.helpers import small_config


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


def _open_in_child(cache_dir: str) -> str:
    return str(PrivateCache(cache_dir).directory)


@pytest.mark.fits  # subprocesses
def test_processes_starting_together_share_one_marked_cache_folder(tmp_path: Path) -> None:
    for round_ in range(5):
        requested = tmp_path / str(round_) / "cache"
        with multiprocessing.get_context("fork").Pool(6) as pool:
            opened = pool.map(_open_in_child, [str(requested)] * 6)
        assert set(opened) == {str(requested)}
        assert (requested / MARKER).is_file()
        assert [p.name for p in requested.parent.iterdir()] == ["cache"]  # no staging folder left behind


def test_a_folder_published_right_after_the_marker_check_is_used_not_nested(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interleaving that the race above hits a few times in a hundred, made certain: another process publishes
    the marked folder just after this one found no marked folder, and before it decides where to create one."""
    requested = tmp_path / "cache"
    real = cache_module.own_cache_dir

    def then_another_process_publishes(directory: Path) -> Path | None:
        found = real(directory)
        if not requested.exists():
            cache_module._publish_marked(requested)
        return found

    monkeypatch.setattr(cache_module, "own_cache_dir", then_another_process_publishes)
    assert PrivateCache(requested).directory == requested
    assert not (requested / SUBFOLDER).exists()


def _fit_in_child(cache_dir: str) -> tuple[bool, float]:
    import swagppm

    result = swagppm.run_fit(small_config(Path(cache_dir)), c=1.0, ft_epochs=1)
    return result.stage1_cache_hit, result.epsilon


@pytest.mark.fits
def test_two_processes_share_one_stage1(tmp_path: Path) -> None:
    """Started together, one process computes stage 1 under the lock, the other waits and reuses it."""
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        outcomes = pool.map(_fit_in_child, [str(tmp_path / "cache")] * 2)
    assert sorted(hit for hit, _ in outcomes) == [False, True]
    assert outcomes[0][1] == outcomes[1][1]
    assert len(list((tmp_path / "cache").glob("stage1-*.pt"))) == 1


def test_an_existing_folder_gets_a_subfolder_of_the_tools_own(tmp_path: Path) -> None:
    """A shared folder named as cache_dir is neither chmodded nor taken over."""
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    (shared / "theirs.txt").write_text("not ours")
    cache = PrivateCache(shared)
    assert cache.directory == shared / SUBFOLDER and (cache.directory / MARKER).is_file()
    assert stat.S_IMODE(shared.stat().st_mode) == 0o755
    assert stat.S_IMODE(cache.directory.stat().st_mode) == 0o700
    assert PrivateCache(shared).directory == cache.directory  # found again, not nested deeper


def test_clear_cache_removes_only_what_the_tool_wrote(tmp_path: Path) -> None:
    shared = tmp_path / "study"
    shared.mkdir()
    (shared / "study.toml").write_text("[study]\n")
    cache = PrivateCache(shared)
    cache.get_or_compute("stage1", "a" * 40, lambda: {"risk": torch.zeros(2)}, validate=lambda p: True)
    (cache.directory / "user-notes.txt").write_text("mine")
    folder, removed = clear_cache(shared)
    assert folder == cache.directory and removed == 2  # the entry and its lock
    assert (shared / "study.toml").exists() and (cache.directory / "user-notes.txt").exists()
    assert not list(cache.directory.glob("*.pt")) and not (cache.directory / MARKER).exists()


def test_clear_cache_refuses_a_folder_it_did_not_create(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("x")
    with pytest.raises(ConfigError, match="not a private cache created by swagppm.*nothing was deleted"):
        clear_cache(tmp_path)
    assert (tmp_path / "data.csv").exists()
    assert clear_cache(tmp_path / "missing") == (None, 0)


def test_temporary_files_of_a_killed_writer_are_removed(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path / "cache")
    key = "b" * 40
    orphan = cache.directory / f".stage1-{key}-x1y2.tmp"
    orphan.write_bytes(b"half a file")
    cache.get_or_compute("stage1", key, lambda: {"risk": torch.zeros(2)}, validate=lambda p: True)
    assert not orphan.exists() and cache.path("stage1", key).exists()


def test_an_impossible_cache_folder_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match="cannot create the private cache folder"):
        PrivateCache(tmp_path / "file" / "cache")
