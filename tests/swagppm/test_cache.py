"""The private cache: owner-only, atomic, shared safely by several processes."""

from __future__ import annotations

import multiprocessing
import re
import stat
from pathlib import Path

import pytest
import torch

from swagppm import ConfigError, TrialParams
from swagppm import cache as cache_module
from swagppm.cache import HUB_FOLDER, MARKER, SUBFOLDER, PrivateCache, cache_contents, cache_key, clear_cache
from tests.swagppm.helpers import a_process_using, local_hub_dataset, read_only, small_config


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

    result = swagppm.run_fit(small_config(Path(cache_dir)), TrialParams(c=1.0, ft_epochs=1))
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


def _damage(path: Path, old: bytes, new: bytes) -> None:
    """Change one run of bytes inside an entry's tensor data, where ``torch.load`` never looks (as a bad sector or a
    copy from a failing disk would)."""
    data = path.read_bytes()
    assert data.count(old) == 1
    path.write_bytes(data.replace(old, new))


def test_an_entry_whose_bytes_were_damaged_is_named_and_recomputed_never_used(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path / "cache")
    risk = torch.arange(64, dtype=torch.float64) / 7
    cache.get_or_compute("features", "k" * 40, lambda: {"risk": risk, "note": "x"}, validate=lambda p: True)
    path = cache.path("features", "k" * 40)
    _damage(path, risk[10:12].numpy().tobytes(), (risk[10:12] + 1e-9).numpy().tobytes())
    assert torch.load(path, weights_only=True)["risk"][10] != risk[10]  # it loads: only the checksum can tell
    with pytest.warns(UserWarning, match=f"private cache entry {path} is corrupt \\(its checksum does not match its "
                                         "contents: the file was damaged\\); recomputing it"):
        payload, hit = cache.get_or_compute("features", "k" * 40, lambda: {"risk": risk, "note": "x"},
                                            validate=lambda p: True)
    assert not hit and torch.equal(payload["risk"], risk)
    again, hit = cache.get_or_compute("features", "k" * 40, lambda: {"risk": risk + 1}, validate=lambda p: True)
    assert hit and torch.equal(again["risk"], risk)  # the rebuilt entry is whole again


def test_the_checksum_covers_every_tensor_and_every_value_in_a_fixed_order() -> None:
    from swagppm.cache import payload_checksum

    base = {"a": torch.zeros(3), "b": [1, 2.5, "x"], "c": {"d": torch.ones(2, dtype=torch.int64)}}
    assert payload_checksum(base) == payload_checksum(dict(reversed(base.items())))
    changed = [{**base, "a": torch.tensor([0.0, 0.0, 1e-30])}, {**base, "a": torch.zeros(3, dtype=torch.float64)},
               {**base, "a": torch.zeros(1, 3)}, {**base, "b": [1, 2.5, "y"]}, {**base, "b": [1, 2.5000001, "x"]},
               {**base, "c": {"d": torch.tensor([1, 2])}}, {**base, "e": None}]
    assert len({payload_checksum(p) for p in [base, *changed]}) == len(changed) + 1


@pytest.mark.slow  # a second process
def test_a_cache_another_process_is_using_is_refused_whole_and_cleaned_once_it_ends(tmp_path: Path) -> None:
    with a_process_using(tmp_path / "cache"):
        before = sorted(p.name for p in (tmp_path / "cache").iterdir())
        with pytest.raises(ConfigError) as info:
            clear_cache(tmp_path / "cache")
        assert str(info.value) == (f"the private cache {tmp_path / 'cache'} is in use by a running fit, study or "
                                   "worker; nothing was deleted: clean it once that process has ended")
        assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == before
    assert clear_cache(tmp_path / "cache") == (tmp_path / "cache", 2) and not (tmp_path / "cache").exists()


def test_a_held_cache_is_refused_until_released_and_a_cleaned_one_is_made_again(tmp_path: Path) -> None:
    held = PrivateCache(tmp_path / "cache", hold=True)
    with pytest.raises(ConfigError, match="is in use"):
        clear_cache(tmp_path / "cache")
    held.release()
    held.release()  # twice: nothing
    assert clear_cache(tmp_path / "cache") == (tmp_path / "cache", 0) and not (tmp_path / "cache").exists()
    again = PrivateCache(tmp_path / "cache", hold=True)
    assert (again.directory / MARKER).is_file()
    again.release()


def test_a_cache_that_cannot_be_deleted_is_one_line_and_nothing_goes(tmp_path: Path) -> None:
    cache = PrivateCache(tmp_path / "cache")
    cache.get_or_compute("stage1", "d" * 40, lambda: {"risk": torch.zeros(2)}, validate=lambda p: True)
    before = sorted(p.name for p in cache.directory.iterdir())
    with read_only(cache.directory), pytest.raises(ConfigError) as info:
        clear_cache(tmp_path / "cache")
    assert re.fullmatch(rf"the private cache {re.escape(str(cache.directory))} cannot be cleaned: \S+ cannot be "
                        r"deleted \((Permission denied|Operation not permitted)\); nothing was deleted",
                        str(info.value))
    assert sorted(p.name for p in cache.directory.iterdir()) == before


@pytest.mark.fits
def test_a_damaged_stage1_entry_is_recomputed_and_the_fit_gives_the_same_epsilon(tmp_path: Path) -> None:
    """Damaged risks, read as they are, would move ε with no word; detected, stage 1 is computed again and ε is the
    undamaged fit's, bit for bit."""
    import swagppm

    config = small_config(tmp_path / "cache", stage1_epochs=2, swag_epochs=2, draws_risk=3, draws_privacy=4,
                          draws_utility=2)
    first = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1))
    [entry] = (tmp_path / "cache").glob("stage1-*.pt")
    risk = torch.load(entry, weights_only=True)["risk"]
    data = entry.read_bytes()
    chunk = risk[5:9].numpy().tobytes()
    assert data.count(chunk) == 1
    entry.write_bytes(data.replace(chunk, (risk[5:9] * 1.5).numpy().tobytes()))
    with pytest.warns(UserWarning, match=f"private cache entry {entry} is corrupt \\(its checksum does not match"):
        second = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1))
    assert not second.stage1_cache_hit and second.epsilon == first.epsilon


def test_clear_cache_removes_the_hub_datasets_a_study_downloaded(tmp_path: Path) -> None:
    """A Hub dataset a study read went to the private cache's ``hub`` folder (its records): ``clean`` takes it."""
    folder = PrivateCache(tmp_path / "cache").directory
    local_hub_dataset(folder / HUB_FOLDER, "owner/injuries", {"c" * 40: {"data/train.parquet": b"records",
                                                                        "README.md": b"card"}},
                      refs={"main": "c" * 40})
    contents = cache_contents(tmp_path / "cache")
    assert sorted(path.parent.name for path in contents.files) == ["blobs", "blobs", "refs"]  # files, not links
    assert clear_cache(tmp_path / "cache") == (folder, 3)
    assert not folder.exists()
