"""What choosing a configuration cost, in one mapping, and the study's claim, fixed when it is created.

Three modes (METHOD.md, "Privacy of the whole procedure"), in ``tuning_cost``'s "mode":

* ``public-proxy``: the study's records are declared public (``[data] public = true``);
  the chosen configuration is fitted once on the private data, so tuning costs it nothing.
* ``accounted``: random search from secret randomness over a hidden number of trials K
  drawn once from a truncated negative binomial, every trial capped at ε* (binding) and
  scored by one secret draw on public evaluation data; the total ε of tuning and the
  release is composed by dp-accounting (``tuner.accounting``) at δ from a declared public
  bound on the number of records (``default_delta``), never from the private count.
* ``unaccounted``: anything else (adaptive samplers on private scores): no total.

The study's *claim* (``CLAIM``: the cap ε*, the mode, whether the data are public, δ,
and the pseudo posterior: the posterior, the prior's scale or its searched range, the
NLL bound, whether the risks are public) is stored when the study is created and
compared with the study file on every later command (``verify_claim``): a cap edited
after results were seen is refused, and a rejudged study may rank at another cap but
releases claim the one fixed at creation.

The mapping's ``PUBLIC_KEYS`` may be published; the statement names neither K nor trial
counts nor any measured ε. Every other key (trials run by state, K, the largest trial
ε) is for the owner-only report.
"""

from __future__ import annotations

import dataclasses
import json
import math
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from swagppm import ConfigError
from swagppm.statement import PUBLIC_TUNING_KEYS
from tuner.accounting import (
    GeometricStopping,
    TrialCountDistribution,
    accounting_versions,
    composed_epsilon,
    selection_epsilon,
    tuning_epsilon,
)
from tuner.config import StudyConfig
from tuner.queries import FINISHED
from tuner.record import TrialRecord
from tuner.storage import masked_url

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection

PUBLIC_PROXY, ACCOUNTED, UNACCOUNTED = "public-proxy", "accounted", "unaccounted"
PUBLIC_KEYS = PUBLIC_TUNING_KEYS  # what a public card may carry of the mapping (one home: swagppm.statement)
CLAIM = "claim"  # study attribute, set at creation: the cap, the mode, the public flag, δ and the accounting terms
ACCOUNTED_TRIALS = "accounted_trials"  # study attribute: the K drawn for an accounted study (owner only)
NUM_TRAIN = "num_train"  # study attribute: training records (owner only; never a δ)
CONDITIONAL = ("conditional on each trial's local epsilon being a valid bound; the number of trials is part of the "
               "accounted randomness and is not published")
# What an accounted study reads of the private data outside the accounted draws, for the card.
OUTSIDE_THE_TOTAL = (
    "the feasibility test compares each trial's measured epsilon, a function of the private data, with epsilon* "
    "without noise",
    "a fit whose training collapsed to the majority class is pruned, judged on the private training data without "
    "noise",
)


def mode_of(config: StudyConfig) -> str:
    """The tuning mode a study file asks for."""
    return PUBLIC_PROXY if config.fit.data.public else ACCOUNTED if config.study.accounted else UNACCOUNTED


def default_delta(max_records: int) -> float:
    """The largest δ = 10^(−3k), k ≥ 2, not above 1/N² for a declared public bound N on the training records:
    below the chance of naming any one record, and a function of the public bound only, never of the data."""
    exponent = 6
    while 10.0**-exponent * max_records**2 > 1.0:
        exponent += 3
    return 10.0**-exponent


def study_claim(config: StudyConfig) -> dict[str, Any]:
    """What a study file says its releases may claim: the cap ε*, the mode, whether the data are public, δ (from
    ``accounting_delta`` or the public bound ``max_records``; None when neither is declared) and, when accounted,
    the hidden trial count's distribution."""
    settings, mode, fit = config.study, mode_of(config), config.fit
    delta = settings.accounting_delta or (default_delta(settings.max_records) if settings.max_records else None)
    search = config.search
    scale = [search.prior_scale_min, search.prior_scale_max] if search.searches_prior_scale else fit.prior_scale
    claim = {"epsilon_cap": config.targets.epsilon_cap, "mode": mode, "data_public": fit.data.public,
             "delta": delta, "max_records": settings.max_records,
             "accounting": {"trials_shape": settings.trials_shape, "trials_mean": settings.trials_mean}
             if mode == ACCOUNTED else None,
             "posterior": fit.posterior, "prior_scale": None if scale == math.inf else scale,
             "nll_bound": fit.nll_bound, "public_risks": fit.public_risks}
    return json.loads(json.dumps(claim))  # as the storage gives it back


def store_claim(study: optuna.Study, claim: Mapping[str, Any]) -> None:
    """Fix a new study's claim and, when accounted, its K, drawn from fresh OS entropy."""
    study.set_user_attr(CLAIM, dict(claim))
    accounting = claim.get("accounting")
    if accounting is not None:
        distribution = TrialCountDistribution(shape=accounting["trials_shape"], mean=accounting["trials_mean"])
        study.set_user_attr(ACCOUNTED_TRIALS, distribution.sample(np.random.default_rng(secrets.randbits(128))))


def claim_of(study: optuna.Study) -> dict[str, Any]:
    """The claim the study was created with; a study made before claims were stored is refused in one line."""
    claim = study.user_attrs.get(CLAIM)
    if claim is None:
        raise ConfigError(f"the study {study.study_name!r} was created by an older swagppm-tune that did not fix its "
                          "cap, mode and public flag at creation; run it again under a new [study] name")
    return dict(claim)


def verify_claim(study: optuna.Study, config: StudyConfig) -> None:
    """Refuse a study file whose cap, mode, public flag or accounting differ from what the study was created with.

    A rejudged study (``ranked_at``) ranks at its own cap; its releases still claim the creation's.
    """
    stored, wanted = claim_of(study), study_claim(config)
    stored_view = {**stored, "epsilon_cap": stored.get("ranked_at", stored["epsilon_cap"])}
    if "posterior" not in stored:
        raise ConfigError(f"the study {study.study_name!r} was created by an older swagppm-tune, before its claim "
                          "fixed the posterior, the prior and the likelihood's bound; run it again under a new "
                          "[study] name")
    stored_view.pop("ranked_at", None)
    changed = [key for key in wanted if stored_view.get(key) != wanted[key]]
    if changed:
        raise ConfigError(
            f"{config.path}: the study {config.study.name!r} in {masked_url(config.storage_url)} was created with "
            f"{_shown(stored_view, changed)}, but the file now says {_shown(wanted, changed)}; the cap, the mode, "
            "whether the data are public, the accounting and the pseudo posterior (posterior, prior, bound, public "
            "risks) are fixed when a study is created (a cap chosen after results were seen is not one declared "
            "before any fit): restore the file or use a new [study] name")


_WHERE = {"epsilon_cap": "[targets] epsilon_cap", "mode": "mode", "data_public": "[data] public", "delta": "delta",
          "max_records": "[study] max_records", "accounting": "accounting", "posterior": "[swagppm] posterior",
          "prior_scale": "the prior's scale ([swagppm] prior_scale or [search] prior_scale_min/max)",
          "nll_bound": "[swagppm] nll_bound", "public_risks": "public risks ([data] risk_source, [swagppm] risk_range)"}


def _shown(claim: Mapping[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{_WHERE[key]} = {_value(claim.get(key))}" for key in keys)


def _value(value: object) -> str:
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{key} = {item}" for key, item in value.items()) + ")"
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def is_accounted(study: optuna.Study) -> bool:
    """Whether the study was created accounted (its stored claim, never the study file)."""
    return study.user_attrs.get(CLAIM, {}).get("mode") == ACCOUNTED


def check_all_trials(study: optuna.Study, what: str) -> None:
    """An accounted study releases only once exactly its K trials finished: its total holds for all of them."""
    if not is_accounted(study):
        return
    planned = int(study.user_attrs[ACCOUNTED_TRIALS])
    trials = study.get_trials(deepcopy=False)
    finished = sum(t.state in FINISHED for t in trials)
    open_ = sum(t.state in (optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING) for t in trials)
    if finished != planned or open_:
        raise ConfigError(
            f"nothing {what}: the accounted study {study.study_name!r} has {finished} finished trial(s) of the "
            f"{planned} it drew{f' and {open_} running or waiting' if open_ else ''}; its total holds only for a study "
            "that ran exactly all of them: run it to the end (`swagppm-tune run`), or, if it ran past them, it is "
            "not releasable as accounted")


def tuning_cost(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The tuning mode, its public statement and total, and the owner-only counts (aggregates only)."""
    trials = study.get_trials(deepcopy=False)
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    states = {state.name.lower(): sum(t.state == state for t in trials) for state in
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL,
               optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)}
    claim = claim_of(study)
    mode = claim["mode"]
    cost: dict[str, Any] = {
        "mode": mode, "trials_run": len(trials), "by_state": states,
        "max_trial_epsilon": max((r.epsilon_or_inf for r in records), default=None),
        "max_trial_epsilon_is_lower_bound": any(r.epsilon_is_lower_bound for r in records),
        "sampler": config.study.sampler, "accounted": mode == ACCOUNTED, "total_epsilon": None,
        "delta": claim["delta"], "epsilon_cap": claim["epsilon_cap"], "outside_the_total": None}
    if mode == PUBLIC_PROXY:
        cost |= {"total_epsilon": 0.0, "statement": "public-proxy: tuned on data declared public, tuning cost 0; "
                                                    "the chosen configuration is fitted once on the private data"}
    elif mode == UNACCOUNTED:
        cost["statement"] = (f"unaccounted: the {config.study.sampler} sampler chose among configurations by their "
                             "epsilon and F1 on the private data; what that choice reveals is not counted in any "
                             "total epsilon")
    else:
        cost |= _accounted(study, claim)
    return cost


def _accounted(study: optuna.Study, claim: Mapping[str, Any]) -> dict[str, Any]:
    """An accounted study's figures: ε* per trial, the library's total for tuning and one released draw."""
    delta, cap = claim["delta"], claim["epsilon_cap"]
    terms = claim["accounting"]
    distribution = TrialCountDistribution(shape=terms["trials_shape"], mean=terms["trials_mean"])
    tuning = tuning_epsilon(epsilon_per_trial=cap, distribution=distribution, delta=delta)
    total = composed_epsilon(epsilon_per_run=cap, trials=distribution, release=None, delta=delta)
    return {"planned_trials": study.user_attrs.get(ACCOUNTED_TRIALS), "trials_shape": distribution.shape,
            "trials_mean": distribution.mean, "tuning_epsilon": tuning, "total_epsilon": total,
            "outside_the_total": list(OUTSIDE_THE_TOTAL), "statement": accounted_statement(cap, total, delta)}


def accounted_statement(cap: float, total: float, delta: float, *, scope: str = "tuning and the release of one "
                        "draw") -> str:
    """The public sentence of an accounted total (no K, no count, no measured ε)."""
    return (f"accounted: random search from secret randomness over a random, hidden number of trials, each capped "
            f"at epsilon* = {cap:g} (binding) and scored by one secret draw on public evaluation data; {scope} cost "
            f"epsilon {total:.4g} at delta {delta:.3g} in total (dp-accounting "
            f"{accounting_versions()['dp-accounting']}, one RDP accountant), " + CONDITIONAL)


def tuning_line(cost: dict[str, Any]) -> str:
    """One line for the owner's terminal."""
    largest = cost["max_trial_epsilon"]
    shown = "-" if largest is None else f"{largest:.4g}"
    text = f"tuning: {cost['trials_run']} trials run, largest trial epsilon {shown}"
    if cost["mode"] == PUBLIC_PROXY:
        return text + "; public-proxy (data declared public): tuning cost 0"
    if cost["mode"] == ACCOUNTED:
        return text + (f"; accounted total epsilon {cost['total_epsilon']:.4g} (delta {cost['delta']:.3g}) for "
                       "tuning and the release, conditional on each trial's local epsilon")
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
