"""What choosing a configuration cost: trials run, the largest trial ε, and for accounted studies the total ε.

Every study reports how many trials ran (all states) and the largest per-trial ε.
An accounted study (``[study] accounted = true``) ran random search for a number of
trials K drawn once from a truncated negative binomial; its selected configuration
then costs ``tuner.accounting.tuning_epsilon`` at the largest trial ε, computed by
dp-accounting. That total is conditional on every trial's local ε being a valid
bound. Adaptive samplers chose trials from earlier results: unaccounted.

Private selection of the released draw (``private_selection``) is priced the same
way: ``tuner.accounting.selection_epsilon`` at the fit's ε per candidate draw.
"""

from __future__ import annotations

import dataclasses
import math
import secrets
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from tuner.accounting import (
    GeometricStopping,
    TrialCountDistribution,
    accounting_versions,
    selection_epsilon,
    tuning_epsilon,
)
from tuner.config import StudyConfig
from tuner.record import TrialRecord

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection

ACCOUNTED_TRIALS = "accounted_trials"  # study attribute: the K drawn for an accounted study
NUM_TRAIN = "num_train"  # study attribute: training records (δ = 1/n by default)
CONDITIONAL = ("conditional on each trial's local epsilon being a valid bound (the accounting treats every trial "
               "as epsilon_max-DP); the number of trials is part of the accounted randomness, so a reader who "
               "learns it exactly gets the per-trial bound times at most that number, not the accounted total")


def trial_distribution(config: StudyConfig) -> TrialCountDistribution:
    return TrialCountDistribution(shape=config.study.trials_shape, mean=config.study.trials_mean)


def draw_trial_count(config: StudyConfig) -> int:
    """K for an accounted study, from fresh OS entropy (once per study; stored in the study)."""
    return trial_distribution(config).sample(np.random.default_rng(secrets.randbits(128)))


def tuning_cost(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """Trials run by state, the largest trial ε and, for an accounted study, the total ε (aggregates only)."""
    trials = study.get_trials(deepcopy=False)
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    largest = max((r.epsilon_or_inf for r in records), default=None)
    states = {state.name.lower(): sum(t.state == state for t in trials) for state in
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL,
               optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)}
    cost: dict[str, Any] = {"trials_run": len(trials), "by_state": states, "max_trial_epsilon": largest,
                            "max_trial_epsilon_is_lower_bound": any(r.epsilon_is_lower_bound for r in records),
                            "sampler": config.study.sampler, "accounted": config.study.accounted}
    if not config.study.accounted:
        cost["statement"] = (f"unaccounted: the {config.study.sampler} sampler chose trials from earlier results on "
                             "the private data; no total epsilon is computed for the choice")
        return cost
    n = study.user_attrs.get(NUM_TRAIN)
    delta = config.study.accounting_delta or (1.0 / n if n else None)
    distribution = trial_distribution(config)
    total = None
    if largest is not None and delta is not None:
        total = math.inf if not math.isfinite(largest) else tuning_epsilon(
            epsilon_per_trial=largest, distribution=distribution, delta=delta)
    cost |= {"planned_trials": study.user_attrs.get(ACCOUNTED_TRIALS), "trials_shape": distribution.shape,
             "trials_mean": distribution.mean, "delta": delta, "total_epsilon": total,
             "statement": f"accounted with dp-accounting (random search, truncated negative binomial trial count): "
                          f"total epsilon {total if total is None else f'{total:.4g}'} at delta {delta}, "
                          + CONDITIONAL}
    return cost


def tuning_line(cost: dict[str, Any]) -> str:
    """One line for the terminal."""
    largest = cost["max_trial_epsilon"]
    shown = "-" if largest is None else f"{largest:.4g}"
    text = f"tuning: {cost['trials_run']} trials run, largest trial epsilon {shown}"
    if cost["accounted"]:
        total = cost["total_epsilon"]
        return text + (f"; accounted total epsilon {total:.4g} (delta {cost['delta']:.3g}), conditional on each "
                       "trial's local epsilon" if total is not None else "; accounted total not yet known")
    return text + (f"; unaccounted ({cost['sampler']} sampler): the choice among trials is not counted in epsilon, "
                   "so the chosen trial's epsilon understates the whole study's cost")


def private_selection(*, source: str, threshold: float, metric: str = "f1_macro",
                      stop_probability: float = 0.1) -> Selection:
    """A release's selection rule, its candidate budget K ~ Geometric(γ) drawn once from fresh OS entropy.

    ``source`` is a file of public records (or ``swagppm.config.PRIVATE_TEST``, unaccounted).
    Its cost is added once the fit's ε is known (``with_selection_cost``).
    """
    from swagppm.releases.selection import Selection  # torch: imported only when a selection is made

    rounds = GeometricStopping(stop_probability=stop_probability).sample_rounds(
        np.random.default_rng(secrets.randbits(128)))
    return Selection(source=source, threshold=threshold, metric=metric, rounds=rounds,
                     stop_probability=stop_probability)


def with_selection_cost(selection: Selection, *, epsilon_per_draw: float, delta: float) -> Selection:
    """``selection`` with what selecting and releasing cost in total, from dp-accounting (Liu & Talwar)."""
    total = selection_epsilon(epsilon_per_candidate=epsilon_per_draw, stop_probability=selection.stop_probability,
                              delta=delta)
    accountant = (f"dp-accounting {accounting_versions()['dp-accounting']}, RDP accountant, geometric stopping "
                  "(Liu & Talwar 2019)")
    return dataclasses.replace(selection, cost={"epsilon": total, "delta": delta, "epsilon_per_draw": epsilon_per_draw,
                                                "accountant": accountant})
