"""Progress of long steps: a tqdm bar on a terminal, else one line per stage with elapsed time and an estimate.

Every long loop (epochs, draws) reports through ``tracker`` or ``steps``. Whether
anything is shown follows the ``progress`` argument the library's functions take:
True shows it, False hides it, None (the default) follows ``configure`` (the
command line's ``--quiet``) and otherwise shows it when stderr is a terminal. How
it is shown is a registered ``Reporter`` kind: ``"bars"`` on a terminal,
``"lines"`` elsewhere (a log file, a pipe, a notebook's captured stderr). Only
counts and times are shown, never a record's value.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Protocol, TypeVar

from tqdm.auto import tqdm

T = TypeVar("T")

# Lines of one stage come at most every LINE_INTERVAL seconds, or every LINE_SHARE of its elapsed time when that is
# longer (an hour-long stage prints a few dozen lines, not hundreds); its last line always comes.
LINE_INTERVAL = 10.0
LINE_SHARE = 0.05


class Reporter(Protocol):
    """One stage's progress: ``advance`` after each unit of work, ``close`` when the stage ends (early or not)."""

    def advance(self, done: int) -> None: ...

    def close(self) -> None: ...


class _Off:
    def __init__(self, *, label: str, total: int) -> None:
        pass

    def advance(self, done: int) -> None:
        pass

    def close(self) -> None:
        pass


class _Bar:
    """A tqdm bar on stderr that disappears when its stage ends."""

    def __init__(self, *, label: str, total: int) -> None:
        self._bar = tqdm(total=total, desc=label, leave=False, file=sys.stderr)

    def advance(self, done: int) -> None:
        self._bar.update(done - self._bar.n)

    def close(self) -> None:
        self._bar.close()


class _Lines:
    """``label done/total (41 s elapsed, about 20 s left)`` on stderr, spaced as ``LINE_INTERVAL`` and
    ``LINE_SHARE`` say, and always the stage's last one (``done``, or ``stopped early`` when it ends short)."""

    def __init__(self, *, label: str, total: int) -> None:
        self.label, self.total = label, total
        self.start = self.last = time.perf_counter()
        self.done = 0
        self.shown = -1

    def advance(self, done: int) -> None:
        self.done = done
        now = time.perf_counter()
        if done >= self.total or now - self.last >= max(LINE_INTERVAL, LINE_SHARE * (now - self.start)):
            self._show(now)

    def close(self) -> None:
        if self.done != self.shown or self.done < self.total:  # a stage that ends short says so, even just after a line
            self._show(time.perf_counter(), stopped=True)

    def _show(self, now: float, *, stopped: bool = False) -> None:
        self.last, self.shown = now, self.done
        elapsed = now - self.start
        if self.done >= self.total:
            timing = f"{duration(elapsed)}, done"
        elif stopped:
            timing = f"{duration(elapsed)}, stopped early"
        else:
            left = elapsed / max(self.done, 1) * (self.total - self.done)
            timing = f"{duration(elapsed)} elapsed, about {duration(left)} left"
        print(f"{self.label} {self.done}/{self.total} ({timing})", file=sys.stderr, flush=True)


# How each kind of progress is shown: each builds the reporter of one stage from its label and unit count.
REPORTERS: dict[str, Callable[..., Reporter]] = {"bars": _Bar, "lines": _Lines, "off": _Off}
_configured: bool | None = None


def register_reporter(kind: str, make: Callable[..., Reporter]) -> None:
    """Show the ``kind`` ("bars" or "lines") another way, e.g. as a notebook widget; ``make(label=...,
    total=...)`` builds one stage's reporter. A hidden stage ("off") builds none in ``steps``."""
    REPORTERS[kind] = make


def configure(enabled: bool | None) -> None:
    """What ``progress=None`` means in this process: shown (True), hidden (False), or on a terminal only (None)."""
    global _configured
    _configured = enabled


def mode(progress: bool | None) -> str:
    """The reporter kind for a ``progress`` argument: "off", "bars" (stderr is a terminal) or "lines"."""
    enabled = progress if progress is not None else _configured
    on_terminal = sys.stderr.isatty()
    if not (on_terminal if enabled is None else enabled):
        return "off"
    return "bars" if on_terminal else "lines"


def tracker(label: str, *, total: int, progress: bool | None, lines_only: bool = False) -> Reporter:
    """The reporter of one stage of ``total`` units; ``lines_only``: nothing on a terminal (a bar shows it)."""
    kind = mode(progress)
    return REPORTERS["off" if lines_only and kind == "bars" else kind](label=label, total=total)


def steps(items: Iterable[T], *, label: str, total: int, progress: bool | None,
          bars_only: bool = False) -> Iterable[T]:
    """``items``, reporting each one done; ``bars_only``: no lines (an enclosing stage prints them). With nothing
    to show, ``items`` themselves: the per-batch and per-draw loops pay nothing for a hidden stage."""
    kind = mode(progress)
    if kind == "off" or (bars_only and kind == "lines"):
        return items
    return _reported(items, REPORTERS[kind](label=label, total=total))


def _reported(items: Iterable[T], reporter: Reporter) -> Iterator[T]:
    done = 0
    try:
        for item in items:
            yield item
            done += 1
            reporter.advance(done)
    except GeneratorExit:  # the caller stopped after this item (a break): it counts as done
        reporter.advance(done + 1)
        raise
    finally:
        reporter.close()


def duration(seconds: float) -> str:
    """``0.4 s``, ``41 s``, ``3 min 05 s``, ``1 h 02 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
