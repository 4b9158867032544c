"""Empirical privacy audit by membership inference: aggregates of a model's losses.

The caller computes, in its own process, the per-record losses (NLL) of the model
on its training records (*members*) and on held-out records (*non-members*), and
optionally each record's class. ``membership_audit`` runs two attacks on them and
returns aggregates only: an AUC with its interval, TPRs at fixed FPRs with their
intervals, an empirical ε lower bound and the two counts. Nothing per record is
returned, not even a threshold (a threshold would be one record's loss).

Attacks (each a rule "member if score ≤ t", swept over every distinct score t):

- ``"loss_threshold"`` (Yeom et al., 2018): the score is the loss itself.
- ``"class_calibrated"``: the score is the loss minus a reference for the record's
  class, the median of the finite losses of that class's *non-members* (classes
  without one use the median over all non-members; 0 if no non-member loss is
  finite). The reference uses the held-out records, as an attacker with shadow
  data from the same distribution would calibrate; it removes differences in
  difficulty between classes, which otherwise hide the member/non-member gap.

Ties are grouped (a threshold never splits equal scores); an infinite loss is
simply the largest. Everything is O(n log n): one sort, then cumulative counts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

LOSS_THRESHOLD = "loss_threshold"
CLASS_CALIBRATED = "class_calibrated"


def _stats() -> ModuleType:
    """``scipy.stats``, imported on first use: it takes about 0.6 s, and the CLI's read-only verbs never audit."""
    import scipy.stats

    return scipy.stats


@dataclass(frozen=True, kw_only=True)
class AttackResult:
    """Aggregates of one membership-inference attack; none of them is per record.

    Attributes:
        attack: ``"loss_threshold"`` or ``"class_calibrated"``.
        auc: ROC AUC of "member if lower score", ties counting one half (0.5 = chance).
        auc_interval: DeLong interval at the audit's ``confidence`` (normal
            approximation, clipped to [0, 1]). Like DeLong's variance, it has zero
            width when the placements do not vary (AUC exactly 0 or 1, or all scores
            equal), and it is (0, 1) when a side has fewer than 2 records.
        tpr_at_fpr: for each FPR level, ``(tpr, low, high)``: the TPR at the largest
            threshold whose empirical FPR is ≤ the level, with a two-sided
            Clopper–Pearson interval at ``confidence``. That threshold depends on the
            non-members alone, so given them the interval is exact.
        epsilon_lower_bound: empirical ε lower bound (δ = 0), ≥ 0; see ``membership_audit``.
        members, non_members: the counts.
    """

    attack: str
    auc: float
    auc_interval: tuple[float, float]
    tpr_at_fpr: dict[float, tuple[float, float, float]]
    epsilon_lower_bound: float
    members: int
    non_members: int


def _losses(values: Sequence[float] | np.ndarray, name: str) -> np.ndarray:
    array = np.asarray(values, dtype=float)
    if array.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {array.shape}")
    if len(array) == 0:
        raise ValueError(f"{name} is empty")
    nans = int(np.isnan(array).sum())
    if nans:
        raise ValueError(f"{name} has {nans} NaN value{'s' if nans > 1 else ''}")
    return array


def _cp_lower(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided Clopper–Pearson lower bound on p from k of n, at level 1 − alpha."""
    k = np.asarray(k, dtype=float)
    bound = _stats().beta.ppf(alpha, np.maximum(k, 1.0), n - k + 1.0)
    return np.where(k > 0, bound, 0.0)


def _cp_upper(k: np.ndarray, n: int, alpha: float) -> np.ndarray:
    """One-sided Clopper–Pearson upper bound on p from k of n, at level 1 − alpha."""
    k = np.asarray(k, dtype=float)
    bound = _stats().beta.isf(alpha, k + 1.0, np.maximum(n - k, 1.0))
    return np.where(k < n, bound, 1.0)


@dataclass(frozen=True)
class _Sweep:
    """Counts at every threshold "score ≤ t", t running over the distinct scores."""

    members_at: np.ndarray  # members per distinct score, ascending
    non_members_at: np.ndarray
    true_positives: np.ndarray  # cumulative: members with score ≤ t
    false_positives: np.ndarray


def _sweep(member_scores: np.ndarray, non_member_scores: np.ndarray) -> _Sweep:
    _, inverse = np.unique(np.concatenate([member_scores, non_member_scores]), return_inverse=True)
    groups = int(inverse.max()) + 1
    m = len(member_scores)
    members_at = np.bincount(inverse[:m], minlength=groups)
    non_members_at = np.bincount(inverse[m:], minlength=groups)
    return _Sweep(members_at, non_members_at, np.cumsum(members_at), np.cumsum(non_members_at))


def _auc(sweep: _Sweep, confidence: float) -> tuple[float, tuple[float, float]]:
    """AUC (Mann–Whitney, ties ½) and its DeLong interval, from the tie groups."""
    m, n = int(sweep.true_positives[-1]), int(sweep.false_positives[-1])
    a, b = sweep.members_at.astype(float), sweep.non_members_at.astype(float)
    # DeLong placements, one value per tie group: for a member, the share of non-members
    # scoring higher (ties ½); for a non-member, the share of members scoring lower.
    member_place = (n - sweep.false_positives + 0.5 * b) / n
    non_member_place = (sweep.true_positives - 0.5 * a) / m
    auc = float(np.dot(a, member_place) / m)
    if m < 2 or n < 2:
        return auc, (0.0, 1.0)
    s10 = float(np.dot(a, (member_place - auc) ** 2) / (m - 1))
    s01 = float(np.dot(b, (non_member_place - auc) ** 2) / (n - 1))
    half = float(_stats().norm.ppf(0.5 + confidence / 2)) * math.sqrt(s10 / m + s01 / n)
    return auc, (max(0.0, auc - half), min(1.0, auc + half))


def _tpr_at_fpr(sweep: _Sweep, levels: Sequence[float], confidence: float) -> dict[float, tuple[float, float, float]]:
    m, n = int(sweep.true_positives[-1]), int(sweep.false_positives[-1])
    alpha = 1.0 - confidence
    result = {}
    for level in levels:
        # the last threshold with FP ≤ level · n (FP is non-decreasing); none: predict no member
        last = int(np.searchsorted(sweep.false_positives / n, level, side="right")) - 1
        tp = int(sweep.true_positives[last]) if last >= 0 else 0
        low = float(_cp_lower(np.array(tp), m, alpha / 2))
        high = float(_cp_upper(np.array(tp), m, alpha / 2))
        result[float(level)] = (tp / m, low, high)
    return result


def _epsilon_lower_bound(sweep: _Sweep, confidence: float) -> float:
    """max over thresholds of ln(TPR_low / FPR_high) and ln(TNR_low / FNR_high), floored at 0.

    Bonferroni over the K thresholds swept, two bounds each (TPR lower, FPR upper;
    TNR lower and FNR upper are their complements, computed directly for precision): every one-sided bound is at
    level 1 − (1 − confidence) / (2K), so all hold together with probability ≥ confidence.
    Only thresholds just before a non-member's score can attain the maximum (for a
    given FP count, more TP only helps), so only those are evaluated.
    """
    m, n = int(sweep.true_positives[-1]), int(sweep.false_positives[-1])
    thresholds = len(sweep.true_positives)
    alpha = (1.0 - confidence) / (2 * thresholds)
    corner = np.append(sweep.non_members_at[1:] > 0, True)
    tp, fp = sweep.true_positives[corner], sweep.false_positives[corner]
    with np.errstate(divide="ignore"):
        forward = np.log(_cp_lower(tp, m, alpha)) - np.log(_cp_upper(fp, n, alpha))
        backward = np.log(_cp_lower(n - fp, n, alpha)) - np.log(_cp_upper(m - tp, m, alpha))
    return max(0.0, float(np.max(forward)), float(np.max(backward)))


def _attack(name: str, member_scores: np.ndarray, non_member_scores: np.ndarray,
            fpr_levels: Sequence[float], confidence: float) -> AttackResult:
    sweep = _sweep(member_scores, non_member_scores)
    auc, interval = _auc(sweep, confidence)
    return AttackResult(
        attack=name, auc=auc, auc_interval=interval, tpr_at_fpr=_tpr_at_fpr(sweep, fpr_levels, confidence),
        epsilon_lower_bound=_epsilon_lower_bound(sweep, confidence),
        members=len(member_scores), non_members=len(non_member_scores),
    )


def _calibrated(member_losses: np.ndarray, non_member_losses: np.ndarray, member_classes: np.ndarray,
                non_member_classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Losses minus the median finite non-member loss of the record's class (see the module docstring)."""
    labels, inverse = np.unique(np.concatenate([member_classes, non_member_classes]), return_inverse=True)
    m = len(member_losses)
    member_group, non_member_group = inverse[:m], inverse[m:]
    finite = np.isfinite(non_member_losses)
    fallback = float(np.median(non_member_losses[finite])) if finite.any() else 0.0
    reference = np.full(len(labels), fallback)
    order = np.lexsort((non_member_losses[finite], non_member_group[finite]))
    groups, losses = non_member_group[finite][order], non_member_losses[finite][order]
    starts = np.searchsorted(groups, np.arange(len(labels)), side="left")
    ends = np.searchsorted(groups, np.arange(len(labels)), side="right")
    has = ends > starts
    low, high = (starts + ends - 1) // 2, (starts + ends) // 2  # the middle one or two of each sorted class
    reference[has] = 0.5 * (losses[low[has]] + losses[high[has]])
    return member_losses - reference[member_group], non_member_losses - reference[non_member_group]


def membership_audit(
    member_losses: Sequence[float] | np.ndarray,
    non_member_losses: Sequence[float] | np.ndarray,
    *,
    member_classes: Sequence[object] | np.ndarray | None = None,
    non_member_classes: Sequence[object] | np.ndarray | None = None,
    fpr_levels: Sequence[float] = (0.001, 0.01),
    confidence: float = 0.95,
) -> tuple[AttackResult, ...]:
    """Membership-inference audit of one model from its per-record losses: aggregates only.

    Returns the loss-threshold attack, then, when both class arrays are given, the
    class-calibrated attack. ``confidence`` sets the AUC interval (DeLong), the
    Clopper–Pearson intervals on the TPRs and the ε bound.

    The ε lower bound (pure ε, δ = 0) follows from TPR ≤ e^ε · FPR and TNR ≤ e^ε · FNR
    for an ε-DP training mechanism: for each threshold, ε ≥ ln(TPR_low / FPR_high) and
    ε ≥ ln(TNR_low / FNR_high) with one-sided Clopper–Pearson bounds from the counts
    (``scipy.stats.beta``). Taking the best of many thresholds makes one-sided bounds
    optimistic, so they are Bonferroni-corrected over all K distinct-score thresholds
    swept (each bound at level 1 − (1 − confidence) / (2K)): with probability ≥
    ``confidence`` the true ε of the mechanism is at least the reported value.
    Each attack's bound holds at ``confidence`` on its own; quoting the larger of the
    two needs ``confidence`` raised (e.g. 0.975 each for 95% overall). The class
    references are estimated on the same non-members that are scored, which couples
    the records slightly: for that attack the intervals and ε bound are approximate.

    Raises ValueError on empty inputs, NaN losses (naming the count), mismatched class
    arrays, a ``confidence`` outside (0, 1) or an FPR level outside [0, 1].
    """
    members = _losses(member_losses, "member_losses")
    non_members = _losses(non_member_losses, "non_member_losses")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    levels = tuple(float(level) for level in fpr_levels)
    for level in levels:
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"FPR levels must be in [0, 1], got {level}")
    if (member_classes is None) != (non_member_classes is None):
        raise ValueError("give both member_classes and non_member_classes, or neither")
    results = [_attack(LOSS_THRESHOLD, members, non_members, levels, confidence)]
    if member_classes is not None and non_member_classes is not None:
        member_labels, non_member_labels = np.asarray(member_classes), np.asarray(non_member_classes)
        pairs = ((member_labels, members, "member"), (non_member_labels, non_members, "non_member"))
        for labels, losses, name in pairs:
            if labels.shape != losses.shape:
                raise ValueError(f"{name}_classes has shape {labels.shape} but {name}_losses has {losses.shape}")
        scores = _calibrated(members, non_members, member_labels, non_member_labels)
        results.append(_attack(CLASS_CALIBRATED, *scores, levels, confidence))
    return tuple(results)
