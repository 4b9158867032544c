"""``swagppm-tune clean``: what it makes impossible is said before anything goes, it asks on a terminal or needs
``--yes`` off one, and a cache in use or one that cannot be deleted is one line with nothing lost. Real caches, real
processes, a real terminal (a pty)."""

from __future__ import annotations

import os
import pty
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from swagppm.cache import FINGERPRINT_KEY, PrivateCache
from swagppm.provenance import fingerprint_key
from tests import PATIENCE
from tests.swagppm.helpers import a_process_using, read_only
from tests.tuner.helpers import one_error_line
from tuner.cli import main

ROOT = Path(__file__).resolve().parents[2]


def a_cache(tmp_path: Path) -> Path:
    """The study's private cache (``cache`` beside the study file) with one entry and its fingerprint key."""
    cache = PrivateCache(tmp_path / "cache")
    cache.get_or_compute("stage1", "a" * 40, lambda: {"risk": torch.zeros(3)}, validate=lambda p: True)
    fingerprint_key(cache.directory)
    return cache.directory


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_off_a_terminal_clean_says_what_goes_and_needs_yes(study_file: Callable[..., Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, cache = study_file(), a_cache(tmp_path)
    before = listing(cache)
    assert main(["clean", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        f"clean deletes the private cache {cache}: 3 files",
        "  with its fingerprint key: study 'small' can then never be resumed on these records under its name (a new "
        "[study] name can); `clean --keep-key` keeps the key"]
    assert one_error_line(err) == (f"swagppm-tune: error: clean: standard input is not a terminal, so no one can "
                                   f"confirm; nothing was deleted (pass --yes to delete the private cache {cache})")
    assert listing(cache) == before
    assert main(["clean", str(path), "--yes"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"clean deletes the private cache {cache}: 3 files"  # said before it is done
    assert lines[2:] == [f"removed the private cache {cache}: 3 files",
                         "  its fingerprint key went with it: this study cannot be resumed on these records under its "
                         "name"]
    assert not cache.exists()


def test_keep_key_says_the_study_resumes_before_and_after(study_file: Callable[..., Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, cache = study_file(), a_cache(tmp_path)
    assert main(["clean", str(path), "--keep-key", "--yes"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"clean deletes the private cache {cache}: 2 files",
        f"  and keeps its fingerprint key {cache / FINGERPRINT_KEY}: the study can be resumed (stage 1 is computed "
        "again)",
        f"removed the private cache {cache}: 2 files",
        f"  kept its fingerprint key {cache / FINGERPRINT_KEY}: the study can be resumed"]
    assert listing(cache) == [".swagppm-private-cache", FINGERPRINT_KEY]


def on_a_terminal(argv: list[str], answer: str) -> tuple[int, str]:
    """``swagppm-tune ARGV`` in a child process on a real terminal (a pty), answering ``answer`` to its question:
    (exit status, everything it printed)."""
    leader, follower = pty.openpty()
    child = subprocess.Popen([sys.executable, "-m", "tuner.cli", *argv], stdin=follower, stdout=follower,
                             stderr=follower, env={**os.environ, "PYTHONPATH": str(ROOT)}, close_fds=True)
    os.close(follower)
    seen, deadline, answered = b"", time.monotonic() + PATIENCE, False
    while time.monotonic() < deadline:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        seen += chunk
        if not answered and b"[y/N]" in seen:
            os.write(leader, answer.encode() + b"\n")
            answered = True
    os.close(leader)
    return child.wait(PATIENCE), seen.decode().replace("\r\n", "\n")


@pytest.mark.slow  # a child process
@pytest.mark.parametrize("answer, deleted", [("n", False), ("", False), ("y", True)])
def test_on_a_terminal_clean_asks_after_saying_what_goes(study_file: Callable[..., Path], tmp_path: Path,
                                                         answer: str, deleted: bool) -> None:
    path, cache = study_file(), a_cache(tmp_path)
    status, printed = on_a_terminal(["clean", str(path)], answer)
    assert status == 0, printed
    asked = printed.index("delete it? [y/N]")
    assert 0 <= printed.index("can then never be resumed") < asked
    assert cache.exists() != deleted
    assert ("nothing was deleted" in printed[asked:]) != deleted


@pytest.mark.slow  # a second process
def test_clean_refuses_a_cache_a_running_process_uses_and_deletes_nothing(study_file: Callable[..., Path],
                                                                          tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path, cache = study_file(), a_cache(tmp_path)
    with a_process_using(cache):
        before = listing(cache)
        assert main(["clean", str(path), "--yes"]) == 2
        assert one_error_line(capsys.readouterr().err) == (
            f"swagppm-tune: error: the private cache {cache} is in use by a running fit, study or worker; nothing "
            "was deleted: clean it once that process has ended")
        assert listing(cache) == before and (cache / FINGERPRINT_KEY).exists()
    assert main(["clean", str(path), "--yes"]) == 0 and not cache.exists()


def test_a_cache_clean_cannot_delete_is_one_line_not_an_internal_error(study_file: Callable[..., Path],
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path, cache = study_file(), a_cache(tmp_path)
    before = listing(cache)
    with read_only(cache):
        assert main(["clean", str(path), "--yes"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"swagppm-tune: error: the private cache {cache} cannot be cleaned: ")
    assert line.endswith("; nothing was deleted") and listing(cache) == before
