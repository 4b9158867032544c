"""What a run will cost, said before its trials run: the trials to go times a trial's seconds on this machine.

A trial's seconds are the median of the study's finished trials on this device and thread count (their recorded
``total``); a study without one says it after its first trial instead. A stop rule or a worker elsewhere may end the
run sooner: the line is an upper bound for one process.
"""

from __future__ import annotations

import statistics

import optuna

from tuner.queries import FINISHED
from tuner.record import TrialRecord


def trial_seconds(study: optuna.Study, *, device: str, threads: int | None) -> float | None:
    """The median seconds of the study's finished trials run on ``device`` with ``threads`` (None: none ran here)."""
    seconds = [record.timings["total"] for trial in study.get_trials(deepcopy=False, states=FINISHED)
               if (record := TrialRecord.of(trial)) is not None and record.device == device
               and (device != "cpu" or record.threads == threads) and record.timings.get("total")]
    return statistics.median(seconds) if seconds else None


def cost_line(*, trials_left: int, seconds: float, basis: str) -> str:
    """The one line a run prints: ``trials_left`` trials of about ``seconds`` each, and their total."""
    total = trials_left * seconds
    shown = f"{total / 3600:.1f} h" if total >= 5400 else f"{total / 60:.0f} min" if total >= 90 else f"{total:.0f} s"
    return (f"cost: {trials_left} trial(s) to go, about {seconds:.0f} s each ({basis}): about {shown} in this process "
            "at most (a stop rule may end it sooner)")
