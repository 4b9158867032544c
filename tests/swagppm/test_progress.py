"""The progress library: reporter kinds on and off a terminal, tracker and steps, the registry and durations."""

from __future__ import annotations

import fcntl
import os
import re
import select
import struct
import sys
import termios
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from swagppm import progress

Written = Callable[[], bytes]
TIMING = r"\d+\.\d s"  # a fast stage: under ten seconds


@pytest.fixture(autouse=True)
def unconfigured() -> Iterator[None]:
    """Each test starts from the library's default (shown on a terminal only)."""
    progress.configure(None)
    yield
    progress.configure(None)


@contextmanager
def on_a_terminal() -> Iterator[Written]:
    """stderr is a real 80x24 pseudo-terminal; what was written to it can be read back.

    A context manager, not a fixture: pytest's capture sets ``sys.stderr`` again when the test body starts.
    """
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    tty = os.fdopen(slave, "w")

    def written() -> bytes:
        tty.flush()
        chunks = []
        while select.select([master], [], [], 0)[0]:
            chunks.append(os.read(master, 65536))
        return b"".join(chunks)

    stderr, sys.stderr = sys.stderr, tty
    try:
        yield written
    finally:
        sys.stderr = stderr
        tty.close()
        os.close(master)


class Recorder:
    """A reporter that notes what it was built with and told."""

    def __init__(self, kind: str, log: list[tuple[object, ...]], *, label: str, total: int) -> None:
        self.kind, self.log = kind, log
        log.append(("built", kind, label, total))

    def advance(self, done: int) -> None:
        self.log.append(("advance", self.kind, done))

    def close(self) -> None:
        self.log.append(("close", self.kind))


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list[tuple[object, ...]]:
    """Every kind is registered as a ``Recorder`` (the registry is restored afterwards)."""
    log: list[tuple[object, ...]] = []
    for kind in ("bars", "lines", "off"):
        monkeypatch.setitem(progress.REPORTERS, kind, progress.REPORTERS[kind])
        progress.register_reporter(kind, lambda kind=kind, **stage: Recorder(kind, log, **stage))
    return log


def err_lines(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return capsys.readouterr().err.splitlines()


def test_on_a_terminal_progress_is_shown_as_bars_unless_hidden() -> None:
    with on_a_terminal():
        assert (progress.mode(None), progress.mode(True), progress.mode(False)) == ("bars", "bars", "off")
        progress.configure(False)  # --quiet
        assert (progress.mode(None), progress.mode(True)) == ("off", "bars")
        progress.configure(True)
        assert (progress.mode(None), progress.mode(False)) == ("bars", "off")


def test_off_a_terminal_configured_progress_is_shown_as_lines(capsys: pytest.CaptureFixture[str]) -> None:
    """Captured stderr is no terminal."""
    assert progress.mode(None) == "off"
    progress.configure(True)
    assert progress.mode(None) == "lines"
    progress.configure(False)
    assert progress.mode(None) == "off"


def test_a_hidden_stage_hands_back_the_items_themselves() -> None:
    items = [3, 1, 2]
    assert progress.steps(items, label="draws", total=3, progress=False) is items


def test_a_bars_only_stage_off_a_terminal_hands_back_the_items_themselves(capsys: pytest.CaptureFixture[str]) -> None:
    """Lines of an enclosing stage report it: no lines of its own (captured stderr is no terminal)."""
    items = range(4)
    assert progress.steps(items, label="batches", total=4, progress=True, bars_only=True) is items


def test_a_hidden_stage_builds_no_reporter_in_steps_but_tracker_builds_the_off_one(
        recorded: list[tuple[object, ...]]) -> None:
    assert list(progress.steps("ab", label="draws", total=2, progress=False)) == ["a", "b"]
    assert recorded == []
    reporter = progress.tracker("epochs", total=3, progress=False)
    reporter.advance(1)
    reporter.close()
    assert recorded == [("built", "off", "epochs", 3), ("advance", "off", 1), ("close", "off")]


def test_steps_on_a_terminal_reports_each_item_to_a_bar_built_with_label_and_total(
        recorded: list[tuple[object, ...]]) -> None:
    with on_a_terminal():
        items = list(progress.steps("xyz", label="stage2: SWAG 1/3", total=3, progress=None, bars_only=True))
    assert items == ["x", "y", "z"]
    assert recorded == [("built", "bars", "stage2: SWAG 1/3", 3), ("advance", "bars", 1), ("advance", "bars", 2),
                        ("advance", "bars", 3), ("close", "bars")]


def test_a_lines_only_tracker_is_off_on_a_terminal(recorded: list[tuple[object, ...]]) -> None:
    """A bar of the enclosing loop already shows it on a terminal."""
    with on_a_terminal():
        progress.tracker("stage1: fine-tune epoch", total=4, progress=True, lines_only=True).close()
    assert recorded == [("built", "off", "stage1: fine-tune epoch", 4), ("close", "off")]


def test_a_lines_only_tracker_off_a_terminal_prints_its_last_line(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = progress.tracker("stage1: fine-tune epoch", total=2, progress=True, lines_only=True)
    reporter.advance(1)
    reporter.advance(2)
    reporter.close()
    [line] = err_lines(capsys)
    assert re.fullmatch(rf"stage1: fine-tune epoch 2/2 \({TIMING}, done\)", line), line


def test_the_off_reporter_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    reporter = progress.tracker("epochs", total=2, progress=False)
    reporter.advance(1)
    reporter.advance(2)
    reporter.close()
    assert capsys.readouterr() == ("", "")


def test_a_stage_closed_before_its_first_unit_says_it_stopped_early_at_zero(
        capsys: pytest.CaptureFixture[str]) -> None:
    progress.tracker("DP-SGD: epoch", total=3, progress=True).close()
    [line] = err_lines(capsys)
    assert re.fullmatch(rf"DP-SGD: epoch 0/3 \({TIMING}, stopped early\)", line), line


def test_an_empty_stage_is_done_at_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress.steps([], label="audit", total=0, progress=True)) == []
    [line] = err_lines(capsys)
    assert re.fullmatch(rf"audit 0/0 \({TIMING}, done\)", line), line


def test_a_stage_whose_items_fail_says_how_far_it_got_and_the_error_goes_on(
        capsys: pytest.CaptureFixture[str]) -> None:
    def draws() -> Iterator[int]:
        yield 0
        yield 1
        raise RuntimeError("out of memory")

    seen = []
    with pytest.raises(RuntimeError, match="^out of memory$"):
        for draw in progress.steps(draws(), label="stage2: privacy draws", total=5, progress=True):
            seen.append(draw)
    assert seen == [0, 1]
    [line] = err_lines(capsys)
    assert re.fullmatch(rf"stage2: privacy draws 2/5 \({TIMING}, stopped early\)", line), line


def test_on_a_terminal_a_stage_is_a_bar_named_by_its_label_and_wiped_at_its_end() -> None:
    with on_a_terminal() as written:
        assert list(progress.steps(range(3), label="stage1: risk draws", total=3, progress=None)) == [0, 1, 2]
        shown = written().decode()
    assert shown.startswith("\rstage1: risk draws:   0%|") and " 0/3 [" in shown
    assert re.search(r"\r {40,}\r$", shown), repr(shown)  # leave=False: the bar is wiped, the line left blank


def test_a_stage_stopped_right_after_its_last_line_still_says_it_stopped_early(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Epochs longer than the interval each get a line; a fit stopped after its second epoch must say so."""
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)  # every unit gets its line, as slow epochs do
    monkeypatch.setattr(progress, "LINE_SHARE", 0.0)
    reporter = progress.tracker("stage1: fine-tune epoch", total=10, progress=True, lines_only=True)
    reporter.advance(1)
    reporter.advance(2)
    reporter.close()  # the epoch callback stopped the fit
    lines = err_lines(capsys)
    assert re.fullmatch(rf"stage1: fine-tune epoch 2/10 \({TIMING} elapsed, about {TIMING} left\)", lines[1])
    assert lines[-1].endswith(", stopped early)"), lines


@pytest.mark.parametrize(("seconds", "said"), [
    (0.0, "0.0 s"), (9.94, "9.9 s"), (10.0, "10 s"), (119.4, "119 s"), (120.0, "2 min 00 s"),
    (3599.4, "59 min 59 s"), (3600.0, "1 h 00 min"), (3660.0, "1 h 01 min"), (90_061.0, "25 h 01 min"),
])
def test_durations_change_unit_at_ten_seconds_two_minutes_and_an_hour(seconds: float, said: str) -> None:
    assert progress.duration(seconds) == said
