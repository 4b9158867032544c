"""What choosing a configuration cost, in one mapping: the tuning mode, its public statement, and owner-only details.

Three modes (METHOD.md, "Privacy of the whole procedure"), in ``tuning_cost``'s "mode":

* ``public-proxy``: the study's records are declared public (``[data] public = true``);
  the chosen configuration is fitted once on the private data, so tuning costs it nothing.
* ``accounted``: random search over a hidden number of trials K drawn once from a
  truncated negative binomial, every trial capped at ε* (binding) and scored by one secret
  draw on public evaluation data; the total ε of tuning and the release is composed by
  dp-accounting (``tuner.accounting.composed_epsilon``) at δ (by default a power of ten
  at most 1/n², ``default_delta``). Whether a study is accounted, and on which terms, is
  stored when it is created (``ACCOUNTING``) and never read back from an edited study file.
* ``unaccounted``: anything else (adaptive samplers on private scores): no total.

The mapping's "mode", "total_epsilon", "delta" and "statement" may be published; the
statement names neither K nor trial counts nor any measured ε. Every other key (trials
run by state, K, the largest trial ε) is for the owner-only report.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from swagppm import ConfigError
from tuner.accounting import (
    GeometricStopping,
    TrialCountDistribution,
    accounting_versions,
    composed_epsilon,
    selection_epsilon,
    tuning_epsilon,
)
from tuner.config import StudyConfig
from tuner.record import TrialRecord
from tuner.storage import masked_url

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection

PUBLIC_PROXY, ACCOUNTED, UNACCOUNTED = "public-proxy", "accounted", "unaccounted"
PUBLIC_KEYS = ("mode", "total_epsilon", "delta", "statement")  # what a public card may carry of the mapping
ACCOUNTING = "accounting"  # study attribute, set at creation: the accounting terms, or None (not accounted)
ACCOUNTED_TRIALS = "accounted_trials"  # study attribute: the K drawn for an accounted study (owner only)
NUM_TRAIN = "num_train"  # study attribute: training records (the default δ's bound, 1/n²)
CONDITIONAL = ("conditional on each trial's local epsilon being a valid bound; the number of trials is part of the "
               "accounted randomness and is not published")


def accounting_terms(config: StudyConfig) -> dict[str, Any] | None:
    """What an accounted study's total depends on, as its study file says (None: not accounted)."""
    settings = config.study
    if not settings.accounted:
        return None
    terms = {"epsilon_target": config.targets.epsilon, "trials_shape": settings.trials_shape,
             "trials_mean": settings.trials_mean, "delta": settings.accounting_delta}
    return json.loads(json.dumps(terms))  # as the storage gives it back


def store_accounting(study: optuna.Study, config: StudyConfig) -> None:
    """Fix a new study's accounting: its terms and, when accounted, K drawn from fresh OS entropy."""
    terms = accounting_terms(config)
    study.set_user_attr(ACCOUNTING, terms)
    if terms is not None:
        study.set_user_attr(ACCOUNTED_TRIALS, draw_trial_count(config))


def check_accounting(study: optuna.Study, config: StudyConfig) -> None:
    """Refuse a study file whose accounting differs from what the study was created with."""
    stored, wanted = study.user_attrs.get(ACCOUNTING), accounting_terms(config)
    if stored != wanted:
        raise ConfigError(f"{config.path} [study]: the study {config.study.name!r} in {masked_url(config.storage_url)} "
                          f"was created {_terms(stored)}, but the file now says {_terms(wanted)}; accounting is fixed "
                          "when a study is created: restore the file or use a new [study] name")


def _terms(terms: Mapping[str, Any] | None) -> str:
    if terms is None:
        return "unaccounted"
    return "accounted (" + ", ".join(f"{key} = {value}" for key, value in terms.items()) + ")"


def is_accounted(study: optuna.Study) -> bool:
    """Whether the study was created accounted (its stored terms, never the study file)."""
    return study.user_attrs.get(ACCOUNTING) is not None


def trial_distribution(config: StudyConfig) -> TrialCountDistribution:
    return TrialCountDistribution(shape=config.study.trials_shape, mean=config.study.trials_mean)


def draw_trial_count(config: StudyConfig) -> int:
    """K for an accounted study, from fresh OS entropy (once per study; stored in the study)."""
    return trial_distribution(config).sample(np.random.default_rng(secrets.randbits(128)))


def default_delta(num_train: int) -> float:
    """The largest δ = 10^(−3k), k ≥ 2, not above 1/n² for n training records: below the chance of naming any one
    record, and coarse, so that a published δ (and the total computed at it) tells n only to within a factor of about
    30 (1e-6 up to 1,000 records, 1e-9 up to 31,622, 1e-12 up to a million), never n itself."""
    exponent = 6
    while 10.0**-exponent * num_train**2 > 1.0:
        exponent += 3
    return 10.0**-exponent


def tuning_cost(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The tuning mode, its public statement and total, and the owner-only counts (aggregates only)."""
    trials = study.get_trials(deepcopy=False)
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    states = {state.name.lower(): sum(t.state == state for t in trials) for state in
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL,
               optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)}
    terms = study.user_attrs.get(ACCOUNTING)
    mode = PUBLIC_PROXY if config.fit.data.public else ACCOUNTED if terms is not None else UNACCOUNTED
    cost: dict[str, Any] = {
        "mode": mode, "trials_run": len(trials), "by_state": states,
        "max_trial_epsilon": max((r.epsilon_or_inf for r in records), default=None),
        "max_trial_epsilon_is_lower_bound": any(r.epsilon_is_lower_bound for r in records),
        "sampler": config.study.sampler, "accounted": mode == ACCOUNTED, "total_epsilon": None, "delta": None}
    if mode == PUBLIC_PROXY:
        cost |= {"total_epsilon": 0.0, "statement": "public-proxy: tuned on data declared public, tuning cost 0; "
                                                    "the chosen configuration is fitted once on the private data"}
    elif mode == UNACCOUNTED:
        cost["statement"] = (f"unaccounted: the {config.study.sampler} sampler chose among configurations by their "
                             "epsilon and F1 on the private data; what that choice reveals is not counted in any "
                             "total epsilon")
    elif terms is not None:
        cost |= _accounted(study, terms)
    return cost


def _accounted(study: optuna.Study, terms: Mapping[str, Any]) -> dict[str, Any]:
    """An accounted study's figures: ε* per trial, the library's total for tuning and one released draw."""
    n = study.user_attrs.get(NUM_TRAIN)
    delta = terms["delta"] or (default_delta(n) if n else None)
    distribution = TrialCountDistribution(shape=terms["trials_shape"], mean=terms["trials_mean"])
    cap = terms["epsilon_target"]
    total = tuning = None
    if delta is not None:
        tuning = tuning_epsilon(epsilon_per_trial=cap, distribution=distribution, delta=delta)
        total = composed_epsilon(epsilon_per_run=cap, trials=distribution, release=None, delta=delta)
    shown = "not yet known (no stage 1 has run)" if total is None else f"{total:.4g} at delta {delta:.3g}"
    return {"planned_trials": study.user_attrs.get(ACCOUNTED_TRIALS), "trials_shape": distribution.shape,
            "trials_mean": distribution.mean, "epsilon_target": cap, "delta": delta, "tuning_epsilon": tuning,
            "total_epsilon": total,
            "statement": f"accounted: random search over a random, hidden number of trials, each capped at epsilon* = "
                         f"{cap:g} (binding) and scored by one secret draw on public evaluation data; tuning and "
                         f"the release of one draw cost epsilon {shown} in total (dp-accounting "
                         f"{accounting_versions()['dp-accounting']}, one RDP accountant), " + CONDITIONAL}


def tuning_line(cost: dict[str, Any]) -> str:
    """One line for the owner's terminal."""
    largest = cost["max_trial_epsilon"]
    shown = "-" if largest is None else f"{largest:.4g}"
    text = f"tuning: {cost['trials_run']} trials run, largest trial epsilon {shown}"
    if cost["mode"] == PUBLIC_PROXY:
        return text + "; public-proxy (data declared public): tuning cost 0"
    if cost["mode"] == ACCOUNTED:
        total = cost["total_epsilon"]
        return text + (f"; accounted total epsilon {total:.4g} (delta {cost['delta']:.3g}) for tuning and the "
                       "release, conditional on each trial's local epsilon" if total is not None
                       else "; accounted total not yet known")
    return text + (f"; unaccounted ({cost['sampler']} sampler): the choice among configurations by their scores on "
                   "the private data is not counted in any total epsilon, so the chosen trial's epsilon understates "
                   "the whole study's cost")


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
