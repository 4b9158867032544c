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

The study's *claim* (``swagppm.claim.StudyClaim``: the cap ε*, the mode, whether the
data are public, δ and the record bound, the accounting, the pseudo posterior's
settings and the declared data set) is built by ``study_claim`` and sealed with the
owner key (``tuner.keys``) when the study is created (``seal_claim``); every open
checks the seal and compares the claim with the study file (``verify_claim``): a claim
edited in the database, or a cap edited in the file after results were seen, is
refused, and a rejudged study may rank at another cap but releases claim the one
fixed at creation.

The mapping's ``PUBLIC_KEYS`` may be published; the statement names neither K nor trial
counts nor any measured ε. Every other key (trials run by state, K, the largest trial
ε) is for the owner-only report.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import optuna

from swagppm import ConfigError
from swagppm.claim import (
    ACCOUNTED,
    PUBLIC_PROXY,
    UNACCOUNTED,
    Accounting,
    ClaimRefused,
    Mode,
    SealedClaim,
    StudyClaim,
    VerifiedClaim,
)
from swagppm.statement import (
    OUTSIDE_THE_TOTAL,
    PUBLIC_PROXY_STATEMENT,
    PUBLIC_TUNING_KEYS,
    AccountedTotal,
    accounted_statement,
    unaccounted_statement,
)
from tuner.accounting import (
    GeometricStopping,
    TrialCountDistribution,
    accounting_versions,
    composed_epsilon,
    selection_epsilon,
    tuning_epsilon,
)
from tuner.config import StudyConfig
from tuner.keys import OwnerKey, owner_key
from tuner.queries import FINISHED
from tuner.record import TrialRecord
from tuner.storage import masked_url

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection

__all__ = ["ACCOUNTED", "PUBLIC_PROXY", "UNACCOUNTED"]  # the modes, re-exported from their home (swagppm.claim)

PUBLIC_KEYS = PUBLIC_TUNING_KEYS  # what a public card may carry of the mapping (one home: swagppm.statement)
CLAIM = "claim"  # study attribute, set at creation: the sealed claim (swagppm.claim.SealedClaim.to_dict)
LEDGER = "ledger"  # study attribute: the privacy ledger the study was entered in ({"file", "ledger": its id})
ACCOUNTED_TRIALS = "accounted_trials"  # study attribute: the K drawn for an accounted study (owner only)
NUM_TRAIN = "num_train"  # study attribute: training records (owner only; never a δ)


def mode_of(config: StudyConfig) -> Mode:
    """The tuning mode a study file asks for."""
    return PUBLIC_PROXY if config.fit.data.public else ACCOUNTED if config.study.accounted else UNACCOUNTED


def default_delta(max_records: int) -> float:
    """The largest δ = 10^(−3k), k ≥ 2, not above 1/N² for a declared public bound N on the training records:
    below the chance of naming any one record, and a function of the public bound only, never of the data."""
    exponent = 6
    while 10.0**-exponent * max_records**2 > 1.0:
        exponent += 3
    return 10.0**-exponent


def study_claim(config: StudyConfig, *, study_id: str | None = None) -> StudyClaim:
    """The claim a study file makes, the one constructor of ``StudyClaim`` from a study: the cap ε*, the mode, whether
    the data are public, δ (from ``accounting_delta`` or the public bound ``max_records``; None when neither is
    declared), the accounted trial count's distribution, the pseudo posterior's settings and the declared data set;
    ``study_id`` names the study in that data set's ledger."""
    settings, mode, fit, search = config.study, mode_of(config), config.fit, config.search
    delta = settings.accounting_delta or (default_delta(settings.max_records) if settings.max_records else None)
    low, high = search.prior_scale_min, search.prior_scale_max
    scale = (low, high) if low is not None and high is not None else fit.prior_scale
    accounting = (Accounting(trials_shape=settings.trials_shape, trials_mean=settings.trials_mean)
                  if mode == ACCOUNTED else None)
    assert settings.data_set is not None  # resolved by StudyConfig.from_toml
    return StudyClaim(epsilon_cap=config.targets.epsilon_cap, mode=mode, data_public=fit.data.public,
                      delta=delta, max_records=settings.max_records, accounting=accounting, posterior=fit.posterior,
                      prior_scale=scale, nll_bound=fit.nll_bound, public_risks=fit.public_risks,
                      data_set=settings.data_set, study_id=study_id)


def seal_claim(study: optuna.Study, claim: StudyClaim, key: OwnerKey) -> None:
    """Fix a new study's claim, sealed under the owner key, and, when accounted, its K, drawn from fresh OS entropy."""
    study.set_user_attr(CLAIM, SealedClaim.of(claim, key.secret).to_dict())
    if claim.accounting is not None:
        distribution = TrialCountDistribution(shape=claim.accounting.trials_shape, mean=claim.accounting.trials_mean)
        study.set_user_attr(ACCOUNTED_TRIALS, distribution.sample(np.random.default_rng(secrets.randbits(128))))


def sealed_of(study: optuna.Study) -> SealedClaim:
    """The sealed claim the study was created with, read (not verified); a study made before claims were sealed is
    refused in one line."""
    stored = study.user_attrs.get(CLAIM)
    try:
        return SealedClaim.from_dict(stored)
    except ConfigError:
        raise ConfigError(f"the study {study.study_name!r} was created by an older swagppm-tune, which did not seal "
                          "its claim (cap, mode, public flag, posterior, data set) at creation; run it again under a "
                          "new [study] name") from None


def claim_of(study: optuna.Study) -> VerifiedClaim:
    """The claim the study was created with, its seal checked under the owner key: an edit in the study database, a
    missing key or another key is refused in one line."""
    sealed = sealed_of(study)
    what = f"the study {study.study_name!r}"
    key = owner_key(sealed=sealed.key, what=what)
    try:
        return sealed.verify(key.secret)
    except ClaimRefused:
        raise ConfigError(f"the claim of {what} does not match its seal: its cap, mode, public flag, posterior or data "
                          "set was edited in the study database after the study was created, so nothing it states "
                          "can be released; restore the database from a backup, or run a new study") from None


def is_accounted(study: optuna.Study) -> bool:
    """Whether the study was created accounted (its stored claim, never the study file; verified when it was
    opened)."""
    return sealed_of(study).claim.mode == ACCOUNTED


def sealed_studies(storage: optuna.storages.BaseStorage) -> Iterator[tuple[str, str]]:
    """(what, key id) of every study in ``storage`` with a sealed claim: what a new owner key must not orphan."""
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        sealed = summary.user_attrs.get(CLAIM)
        key = sealed.get("key") if isinstance(sealed, dict) else None
        if isinstance(key, str):
            yield f"the study {summary.study_name!r} in its storage", key


def verify_claim(study: optuna.Study, config: StudyConfig) -> VerifiedClaim:
    """The study's verified claim; refuse a study file whose claim differs from the one the study was created with.

    A rejudged study (``ranked_at``) ranks at its own cap; its releases still claim the creation's.
    """
    verified = claim_of(study)
    stored, wanted = _compared(verified.claim), _compared(study_claim(config))
    changed = [key for key in wanted if stored.get(key) != wanted[key]]
    if changed:
        raise ConfigError(
            f"{config.path}: the study {config.study.name!r} in {masked_url(config.storage_url)} was created with "
            f"{_shown(stored, changed)}, but the file now says {_shown(wanted, changed)}; the cap, the mode, "
            "whether the data are public, the accounting, the pseudo posterior (posterior, prior, bound, public "
            "risks) and the data set are fixed when a study is created (a cap chosen after results were seen is not "
            "one declared before any fit): restore the file or use a new [study] name")
    return verified


def _compared(claim: StudyClaim) -> dict[str, Any]:
    """A claim's terms as a study file gives them: its ranking cap as the cap, no study id."""
    terms = claim.to_dict() | {"epsilon_cap": claim.ranking_cap}
    terms.pop("study_id")
    terms.pop("ranked_at")
    return terms


_WHERE = {"epsilon_cap": "[targets] epsilon_cap", "mode": "mode", "data_public": "[data] public", "delta": "delta",
          "max_records": "[study] max_records", "accounting": "accounting", "posterior": "[swagppm] posterior",
          "prior_scale": "the prior's scale ([swagppm] prior_scale or [search] prior_scale_min/max)",
          "nll_bound": "[swagppm] nll_bound", "public_risks": "public risks ([data] risk_source, [swagppm] risk_range)",
          "data_set": "[study] data_set"}


def _shown(claim: Mapping[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{_WHERE[key]} = {_value(claim.get(key))}" for key in keys)


def _value(value: object) -> str:
    if isinstance(value, Mapping):
        return "(" + ", ".join(f"{key} = {item}" for key, item in value.items()) + ")"
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)


def claim_for_fit(config: StudyConfig, key: OwnerKey) -> VerifiedClaim:
    """The claim of a configuration released from a study file that was never run (``fit --release``): the file's,
    declared before this fit, sealed now under the owner key."""
    return SealedClaim.of(study_claim(config), key.secret).verify(key.secret)


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
    """The tuning mode, its statement and total, and the owner-only counts (aggregates only), from the study's
    verified claim."""
    trials = study.get_trials(deepcopy=False)
    records = [r for t in trials if (r := TrialRecord.of(t)) is not None]
    states = {state.name.lower(): sum(t.state == state for t in trials) for state in
              (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED, optuna.trial.TrialState.FAIL,
               optuna.trial.TrialState.RUNNING, optuna.trial.TrialState.WAITING)}
    claim = claim_of(study).claim
    cost: dict[str, Any] = {
        "mode": claim.mode, "trials_run": len(trials), "by_state": states,
        "max_trial_epsilon": max((r.epsilon_or_inf for r in records), default=None),
        "max_trial_epsilon_is_lower_bound": any(r.epsilon_is_lower_bound for r in records),
        "sampler": config.study.sampler, "accounted": claim.mode == ACCOUNTED, "total_epsilon": None,
        "delta": claim.delta, "epsilon_cap": claim.epsilon_cap, "outside_the_total": None}
    if claim.mode == PUBLIC_PROXY:
        cost |= {"total_epsilon": 0.0, "statement": PUBLIC_PROXY_STATEMENT}
    elif claim.mode == UNACCOUNTED:
        cost["statement"] = unaccounted_statement(config.study.sampler)
    else:
        cost |= _accounted(study, claim)
    return cost


def _accounted(study: optuna.Study, claim: StudyClaim) -> dict[str, Any]:
    """An accounted study's figures: ε* per trial, the library's total for tuning and one released draw."""
    delta, cap, terms = claim.delta, claim.epsilon_cap, claim.accounting
    assert delta is not None and terms is not None  # an accounted claim has both (StudySettings checks it)
    distribution = TrialCountDistribution(shape=terms.trials_shape, mean=terms.trials_mean)
    tuning = tuning_epsilon(epsilon_per_trial=cap, distribution=distribution, delta=delta)
    total = composed_epsilon(epsilon_per_run=cap, trials=distribution, release=None, delta=delta)
    return {"planned_trials": study.user_attrs.get(ACCOUNTED_TRIALS), "trials_shape": distribution.shape,
            "trials_mean": distribution.mean, "tuning_epsilon": tuning, "total_epsilon": total,
            "outside_the_total": list(OUTSIDE_THE_TOTAL),
            "statement": accounted_statement(cap, accounted_total(total, delta))}


def accounted_total(epsilon: float, delta: float, *, scope: str = "tuning and the release of one draw",
                    uncovered: bool = False) -> AccountedTotal:
    """A total composed by this installation's dp-accounting, as a card states it."""
    return AccountedTotal(epsilon=epsilon, delta=delta, scope=scope, uncovered=uncovered,
                          accountant=f"dp-accounting {accounting_versions()['dp-accounting']}, one RDP accountant")


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
