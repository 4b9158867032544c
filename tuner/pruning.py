"""Pruning a trial as its privacy draws come in: its running ε reported, its draws stopped once they cannot matter.

ε = 2·max over the privacy draws of each draw's maximum, so the running ε after d
draws (``swagppm.stage2.fit``'s ``on_draws``) is a lower bound of the trial's ε that
only grows with d. Once it is above a bound, the trial's ε is above it whatever the
remaining draws give, and two bounds make them useless: the cap ε* (``[targets]
epsilon``: the trial is infeasible) and, when the study minimises ε, the ranking ε of
the best feasible trial so far (the trial can no longer be chosen over it: a tie is
not above, so it runs on). The stop is exact, not a heuristic: every trial that
could still become the answer runs all its draws. The best is read once, when the
trial starts; a better trial finished meanwhile by another worker only makes the
bound looser. The running ε is reported as the trial's intermediate value
(``trial.report``, step = draws done) every ``REPORT_EVERY`` draws and at a stop, in
single-objective studies (Optuna reports nothing in multi-objective ones).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import optuna

import scorers
from tuner.config import StudyConfig
from tuner.outcome import Outcome
from tuner.queries import best_feasible
from tuner.record import TrialRecord
from tuner.search import SearchSpace

REPORT_EVERY = 5  # privacy draws between two intermediate values (each is one write to the study's storage)


@dataclass(kw_only=True)
class DrawPruner:
    """The ``on_draws`` callback of one trial: stops its privacy draws once the running ε exceeds ``cap`` or
    ``best`` (either None: no such bound) and reports the running ε to ``trial`` (None: reports nothing)."""

    cap: float | None
    best: float | None = None
    trial: optuna.Trial | None = None
    every: int = REPORT_EVERY
    draws: int = 0
    epsilon: float = 0.0
    stopped_by: str | None = None  # "cap" or "best" once it stopped the draws

    def __post_init__(self) -> None:
        if self.every < 1:
            raise ValueError(f"DrawPruner reports every 1 or more draws, not {self.every}")

    @property
    def bound(self) -> float:
        """The running ε above which the draws stop (inf: never)."""
        return min(math.inf if self.cap is None else self.cap, math.inf if self.best is None else self.best)

    def __call__(self, draws: int, epsilon: float) -> bool:
        self.draws, self.epsilon = draws, epsilon
        stop = epsilon > self.bound
        if stop:
            self.stopped_by = "cap" if self.cap is not None and epsilon > self.cap else "best"
        if self.trial is not None and (stop or draws % self.every == 0):
            self.trial.report(epsilon, draws)
        return stop


def draw_pruner(trial: optuna.Trial, config: StudyConfig) -> DrawPruner:
    """The trial's pruner: the cap when the study stops draws early (``StudyConfig.early_stop``), the best feasible
    trial's ε too when it also minimises ε alone (and ``[targets] stop_above_best``), and reports in single-objective
    studies."""
    single = config.study.objective == "epsilon"
    stops = config.early_stop
    by_best = stops and single and config.targets.stop_above_best and not config.study.accounted
    best = best_epsilon(trial.study) if by_best else None
    return DrawPruner(cap=config.targets.epsilon_cap if stops else None, best=best, trial=trial if single else None)


def best_epsilon(study: optuna.Study) -> float | None:
    """The ranking ε (``TrialRecord.ranking_epsilon``) of the study's best feasible trial, None without one."""
    best = best_feasible(study)
    record = None if best is None else TrialRecord.of(best)
    return None if record is None or not math.isfinite(record.ranking_epsilon) else record.ranking_epsilon


def pruned_outcome(outcome: Outcome, pruner: DrawPruner, search: SearchSpace) -> Outcome:
    """``outcome`` with the reason and the next move of a trial stopped by the best feasible trial's ε (as it
    was judged otherwise: stopped early, F1 and fit unmeasured)."""
    result = outcome.result
    if pruner.stopped_by != "best" or not result.epsilon_is_lower_bound:
        return outcome
    drawn = len(result.max_delta)
    why = (f"privacy draws stopped after {drawn} of {drawn + result.draws_skipped}: epsilon >= {result.epsilon:.3g} "
           f"is already above the best feasible trial's {pruner.best:.3g}, so this trial cannot be chosen; fit and "
           "utility not measured")
    move = scorers.recommend_lower_c("epsilon above the best feasible trial's", c=result.c, epochs=result.ft_epochs,
                                     c_step=search.c_step, restart_epochs=search.restart_epochs)
    return dataclasses.replace(outcome, reasons=(why, *outcome.reasons[1:]), recommendation=move)
