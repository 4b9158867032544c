"""What a run will cost, said before its trials run: the trials to go times a trial's seconds on this machine.

A trial's seconds are the median of the study's finished trials on this device and thread count (their recorded
``total``); a study without one estimates them from stage 1's measured steps on this data and machine
(``from_stage1``), and says the measured figure again after its first trial. A stop rule or a worker elsewhere may
end the run sooner: the line is an upper bound for one process.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping

import optuna

from swagppm import SWAGPPMConfig
from tuner.queries import FINISHED
from tuner.record import TrialRecord
from tuner.search import SearchSpace


def trial_seconds(study: optuna.Study, *, device: str, threads: int | None) -> float | None:
    """The median seconds of the study's finished trials run on ``device`` with ``threads`` (None: none ran here)."""
    seconds = [record.timings["total"] for trial in study.get_trials(deepcopy=False, states=FINISHED)
               if (record := TrialRecord.of(trial)) is not None and record.device == device
               and (device != "cpu" or record.threads == threads) and record.timings.get("total")]
    return statistics.median(seconds) if seconds else None


def from_stage1(timings: Mapping[str, float], *, fit: SWAGPPMConfig, search: SearchSpace, num_train: int,
                num_test: int) -> tuple[float, str] | None:
    """A trial's seconds estimated from stage 1's steps (None without their times): an epoch of its fine-tune times
    the middle of the epoch range, its posterior fit, and a draw over the training records (a risk draw) times the
    privacy draws, plus the utility draws on the smaller test split; and the basis, in words."""
    if not {"finetune", "risk"} <= set(timings) or num_train < 1:
        return None
    epochs = (search.ft_epochs_min + search.ft_epochs_max) / 2
    posterior = sum(seconds for step, seconds in timings.items() if step not in ("finetune", "risk"))
    draw = timings["risk"] / fit.draws_risk
    seconds = (timings["finetune"] / fit.stage1_epochs * epochs + posterior
               + draw * (fit.draws_privacy + fit.draws_utility * num_test / num_train))
    return seconds, (f"estimated from stage 1's steps on this machine: {num_train} training records, {epochs:g} "
                     f"epochs on average, {fit.draws_privacy} privacy draws")


def cost_line(*, trials_left: int, seconds: float, basis: str) -> str:
    """The one line a run prints: ``trials_left`` trials of about ``seconds`` each, and their total."""
    total = trials_left * seconds
    shown = f"{total / 3600:.1f} h" if total >= 5400 else f"{total / 60:.0f} min" if total >= 90 else f"{total:.0f} s"
    return (f"cost: {trials_left} trial(s) to go, about {seconds:.0f} s each ({basis}): about {shown} in this process "
            "at most (a stop rule may end it sooner)")
