"""The audit that decides: every membership-inference test of a stated ε inside one family-wise confidence.

``privacy_audit`` runs the attacks of ``scorers._audit`` (loss threshold, and
class-calibrated when classes are given) and, for each, three tests of "the
training mechanism is ε-DP" (δ = 0 throughout, stated in every result):

- ``"threshold"``: at every threshold, TPR ≤ e^ε · FPR and TNR ≤ e^ε · FNR, with
  one-sided Clopper–Pearson bounds on the rates.
- ``"auc"``: the attack's ROC AUC is at most e^ε / (1 + e^ε) (and at least
  1 / (1 + e^ε)). Why: the ROC curve of any test against an ε-DP mechanism lies in
  the region TPR ≤ e^ε · FPR, 1 − FPR ≤ e^ε · (1 − TPR). Its upper edge is the
  line y = e^ε · x up to the corner (1 / (1 + e^ε), e^ε / (1 + e^ε)), where it
  meets y = 1 − e^{−ε} · (1 − x). Above that edge lies the quadrilateral (0, 0),
  corner, (1, 1), (0, 1), of area 1 / (1 + e^ε) (shoelace formula), so the area
  under the edge is e^ε / (1 + e^ε). With δ both constraints gain + δ: the edge
  runs from (0, δ) to (1 − δ, 1) through the corner ((1 − δ) / (1 + e^ε),
  (1 − δ) · e^ε / (1 + e^ε) + δ), and the same computation gives
  1 − (1 − δ)² / (1 + e^ε) (``max_auc``). Every AUC bound converts to an ε
  bound, ε ≥ logit(AUC_low) (and ≥ logit(1 − AUC_high)). The interval is the
  distribution-free one of ``auc_interval_distribution_free`` (Hoeffding's
  averaging of U-statistics and the binomial's convex order), not DeLong's:
  DeLong's normal approximation has zero width at complete separation (2 records
  a side, perfectly separated, "refute" every ε) and is too narrow at small n and
  extreme AUC, exactly where a refutation is at stake. The price is width: it
  spends the largest variance a [0, 1] kernel can have on min(members,
  non-members) records, where DeLong spends the estimated variances of the
  placements on each side.
- ``"one_run"``: the one-run test of Steinke, Nasr & Jagielski (``scorers._one_run``)
  on the guesses "member" for the lowest and "non-member" for the highest scores,
  at each guess fraction of ``ONE_RUN_FRACTIONS`` (fixed in advance, never chosen
  by looking at which guesses are right).

One family, Bonferroni: the error budget 1 − ``confidence`` is split equally
between the attacks, then equally between the three tests of an attack; inside a
test, equally between its one-sided bounds: 2 per distinct score (threshold
test), the two ends of the AUC interval, one per guess fraction (one-run test).
So with probability ≥ ``confidence`` every ε lower bound and every AUC interval
reported holds together, and no refutation is false. The TPRs at fixed FPRs are
descriptive (each interval at ``confidence`` on its own) and refute nothing.

Assumptions. The threshold and AUC tests treat the members' scores and the
non-members' scores as independent draws from two distributions (records
exchangeable within each side); the class-calibrated score subtracts a median
estimated from the same records, which couples them slightly. The one-run test
assumes instead that each record's membership was an independent coin, member
with probability members / records: true of a random split into training and
test records (of a fixed-size split approximately, see ``scorers._one_run``),
and not of a split by time, source or class. A refuting result then refutes the
stated ε for this model on these records.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scorers._audit import (
    _attack_scores,
    _auc,
    _confidence,
    _Envelope,
    _envelope,
    _levels,
    _Sweep,
    _sweep,
    _threshold_alpha,
    _tpr_at_fpr,
    auc_interval_distribution_free,
)
from scorers._one_run import ONE_RUN_FRACTIONS, one_run_epsilon, one_run_guesses

THRESHOLD = "threshold"
AUC = "auc"
ONE_RUN = "one_run"
TESTS = (THRESHOLD, AUC, ONE_RUN)
DELTA_ASSUMED = 0.0


def max_auc(epsilon: float, delta: float = 0.0) -> float:
    """The largest ROC AUC any membership attack can have against an (ε, δ)-DP mechanism: 1 − (1 − δ)² / (1 + e^ε).

    At δ = 0 it is e^ε / (1 + e^ε); the derivation is in the module docstring. Written with e^−ε so that any ε
    (a cap above about 709 overflows e^ε) gives a number.
    """
    return 1.0 - (1.0 - delta) ** 2 * _one_over_one_plus_exp(epsilon)


def _one_over_one_plus_exp(epsilon: float) -> float:
    """1 / (1 + e^ε) without overflow: e^−ε / (1 + e^−ε) for ε > 0."""
    if epsilon > 0.0:
        small = math.exp(-epsilon)
        return small / (1.0 + small)
    return 1.0 / (1.0 + math.exp(epsilon))


def _logit(p: float) -> float:
    return -math.inf if p <= 0.0 else math.inf if p >= 1.0 else math.log(p / (1.0 - p))


def _auc_delta(interval: tuple[float, float], epsilon: float) -> float:
    """The smallest δ with the AUC interval inside [1 − max_auc(ε, δ), max_auc(ε, δ)], 0 if it already is."""
    low, high = interval
    inverse = _one_over_one_plus_exp(epsilon)  # 1 / (1 + e^ε); 0 once ε is beyond a float's range
    if inverse == 0.0:
        return 0.0  # every AUC is allowed
    return max(0.0, 1.0 - math.sqrt((1.0 - low) / inverse), 1.0 - math.sqrt(high / inverse))


@dataclass(frozen=True, kw_only=True)
class AttackAudit:
    """One attack inside the family: aggregates only, none of them per record.

    Attributes:
        attack: ``"loss_threshold"`` or ``"class_calibrated"``.
        auc: ROC AUC of "member if lower score", ties counting one half.
        auc_interval: distribution-free interval, its ends inside the family.
        epsilon_lower_bounds: the family-wise ε lower bound (δ = 0) of each test,
            ``"threshold"``, ``"auc"`` and ``"one_run"``; 0 where a test shows nothing.
        tpr_at_fpr: for each FPR level, ``(tpr, low, high)``, Clopper–Pearson at
            ``confidence`` on its own (descriptive, outside the family).
        false_positives_allowed: for each FPR level, ⌊level · non_members⌋; where it
            is 0 the TPR is at FPR 0 ("TPR at 0 of n non-members").
    """

    attack: str
    auc: float
    auc_interval: tuple[float, float]
    epsilon_lower_bounds: dict[str, float]
    tpr_at_fpr: dict[float, tuple[float, float, float]]
    false_positives_allowed: dict[float, int]

    @property
    def epsilon_lower_bound(self) -> float:
        return max(self.epsilon_lower_bounds.values())

    def to_dict(self) -> dict[str, Any]:
        return {"auc": self.auc, "auc_interval": list(self.auc_interval),
                "epsilon_lower_bounds": dict(self.epsilon_lower_bounds),
                "tpr_at_fpr": {f"{level:g}": list(values) for level, values in self.tpr_at_fpr.items()},
                "false_positives_allowed": {f"{level:g}": allowed
                                            for level, allowed in self.false_positives_allowed.items()}}


@dataclass(frozen=True, kw_only=True)
class Refutation:
    """Why the audit refutes a stated ε.

    Attributes:
        epsilon: the stated ε.
        test, attack: the refuting test with the largest ε lower bound, and its attack.
        epsilon_lower_bound: that test's family-wise ε lower bound (δ = 0), above ``epsilon``.
        auc, auc_interval: that attack's AUC and its family-wise interval.
        auc_allowed: the AUC range an ε-DP release allows at ``epsilon``,
            (1 − max_auc(ε), max_auc(ε)).
        reconciling_delta: the smallest δ for which (``epsilon``, δ)-DP agrees with
            every threshold bound and every AUC interval; None when only the one-run
            test refutes (its δ term exists for fair coins only).
        refuted_by: every refuting ``"test/attack"``.
        confidence: the family's confidence.
    """

    epsilon: float
    test: str
    attack: str
    epsilon_lower_bound: float
    auc: float
    auc_interval: tuple[float, float]
    auc_allowed: tuple[float, float]
    reconciling_delta: float | None
    refuted_by: tuple[str, ...]
    confidence: float


@dataclass(frozen=True, kw_only=True)
class PrivacyAudit:
    """A family-wise membership-inference audit of one model (see the module docstring).

    Attributes:
        confidence: the family's confidence: every bound below holds together with
            at least this probability.
        members, non_members: the counts.
        attacks: one ``AttackAudit`` per attack.

    ``delta`` (0) is the δ every bound assumes; ``epsilon_lower_bounds`` each
    test's ε lower bound and ``epsilon_lower_bound`` the largest; ``refutation`` and
    ``sentence`` judge a stated ε; ``to_dict`` gives the aggregates, nothing per
    record.
    """

    confidence: float
    members: int
    non_members: int
    attacks: tuple[AttackAudit, ...]
    _envelope: _Envelope = field(repr=False)  # the threshold tests' binding rate bounds, for the reconciling δ

    @property
    def delta(self) -> float:
        return DELTA_ASSUMED

    @property
    def epsilon_lower_bounds(self) -> dict[str, float]:
        """Each test's family-wise ε lower bound (δ = 0), the largest over the attacks."""
        return {test: max(attack.epsilon_lower_bounds[test] for attack in self.attacks) for test in TESTS}

    @property
    def epsilon_lower_bound(self) -> float:
        return max(self.epsilon_lower_bounds.values())

    @property
    def ceiling(self) -> float:
        """The largest ε lower bound this audit could show for any model at its counts and family
        (``audit_ceiling``): above it a stated ε is untestable, and "not refuted" says nothing."""
        return audit_ceiling(self.members, self.non_members, attacks=len(self.attacks), confidence=self.confidence)

    def testable(self, epsilon: float) -> bool:
        """Whether this audit could refute ``epsilon`` at all (it is below the ceiling)."""
        return epsilon < self.ceiling

    def refutation(self, epsilon: float) -> Refutation | None:
        """Why ``epsilon`` is refuted, or None when no test in the family refutes it.

        Raises ValueError on a negative or NaN ``epsilon``.
        """
        if not epsilon >= 0.0:
            raise ValueError(f"epsilon must be >= 0, got {epsilon}")
        refuting = [(bound, test, attack) for attack in self.attacks
                    for test, bound in attack.epsilon_lower_bounds.items() if bound > epsilon]
        if not refuting:
            return None
        bound, test, strongest = max(refuting, key=lambda item: item[0])
        delta = max([self._envelope.delta(epsilon), *(_auc_delta(a.auc_interval, epsilon) for a in self.attacks)])
        return Refutation(
            epsilon=epsilon, test=test, attack=strongest.attack, epsilon_lower_bound=bound, auc=strongest.auc,
            auc_interval=strongest.auc_interval, auc_allowed=(1.0 - max_auc(epsilon), max_auc(epsilon)),
            reconciling_delta=delta if delta > 0.0 else None,
            refuted_by=tuple(f"{test}/{attack.attack}" for _, test, attack in refuting), confidence=self.confidence)

    def sentence(self, epsilon: float) -> str:
        """One sentence for users: whether the audit refutes ``epsilon``, and on what evidence."""
        level = f"{self.confidence * 100:g}% family-wise"
        refutation = self.refutation(epsilon)
        if refutation is None:
            strongest = max(self.attacks, key=lambda attack: abs(attack.auc - 0.5))
            low, high = strongest.auc_interval
            allowed = max_auc(epsilon)
            where = (f"an interval that reaches the {1 - allowed:.3f}-{allowed:.3f} an epsilon-DP release allows."
                     if allowed < 0.9995 else
                     f"and at this epsilon an epsilon-DP release may have almost any AUC (up to {allowed:.6f}), "
                     "so no AUC can refute it.")
            return (f"No test refutes the stated epsilon = {epsilon:.3g} ({level}, delta = 0): the largest epsilon "
                    f"lower bound is {self.epsilon_lower_bound:.3g}, and the strongest attack's AUC is "
                    f"{strongest.auc:.3f} ({low:.3f}-{high:.3f}), {where}")
        name = _attack_name(refutation.attack)
        if refutation.test == AUC:
            low, high = refutation.auc_interval
            allowed_low, allowed_high = refutation.auc_allowed
            limit = f"at most {allowed_high:.3f}" if low > allowed_high else f"at least {allowed_low:.3f}"
            evidence = (f"The {name} attack's AUC is {refutation.auc:.3f} ({level} interval {low:.3f}-{high:.3f}); "
                        f"an epsilon-DP release allows {limit} at epsilon = {epsilon:.3g}")
        else:
            how = (f"The {name} attack shows" if refutation.test == THRESHOLD else
                   f"The one-run test (Steinke, Nasr & Jagielski 2023) on the {name} attack's guesses shows")
            evidence = (f"{how} epsilon >= {refutation.epsilon_lower_bound:.3g} ({level}, delta = 0), above the "
                        f"stated epsilon = {epsilon:.3g}")
        delta = refutation.reconciling_delta
        reconcile = "" if delta is None else f"; reconciling them would need delta >= {delta:.2g}"
        return f"{evidence}, so the audit refutes the stated epsilon{reconcile}."

    def to_dict(self) -> dict[str, Any]:
        """The aggregates as plain JSON types: no threshold, score or other per-record value."""
        return {"confidence": self.confidence, "delta": self.delta, "members": self.members,
                "non_members": self.non_members, "epsilon_lower_bound": self.epsilon_lower_bound,
                "epsilon_lower_bounds": self.epsilon_lower_bounds,
                "attacks": {attack.attack: attack.to_dict() for attack in self.attacks}}


@functools.lru_cache(maxsize=64)
def audit_ceiling(members: int, non_members: int, *, attacks: int = 2, confidence: float = 0.95) -> float:
    """The largest ε lower bound the family-wise audit can show at these counts: that of an attack that separates
    members from non-members perfectly (a wholly non-private model), every test at its share of the error budget.

    A function of the counts and the family only; no data. At 150/150 it is about 3.9, at 746/747 about 5.5: a
    stated ε above it cannot be refuted by any model, so not refuting it is no evidence.
    """
    if members < 1 or non_members < 1:
        raise ValueError("the ceiling needs at least one member and one non-member")
    family = _Family(1.0 - _confidence(confidence), attacks)
    perfect, _ = _attack_audit("perfect", np.zeros(members), np.ones(non_members), family, _levels((0.01,)),
                               _confidence(confidence))
    return max(perfect.epsilon_lower_bounds.values())


def _attack_name(attack: str) -> str:
    return attack.replace("_", "-")


@dataclass(frozen=True)
class _Family:
    """The Bonferroni split of the error budget ``alpha`` (see the module docstring)."""

    alpha: float
    attacks: int

    @property
    def per_test(self) -> float:
        return self.alpha / (self.attacks * len(TESTS))

    def threshold(self, sweep: _Sweep) -> float:
        return _threshold_alpha(sweep, self.per_test)

    @property
    def auc_end(self) -> float:
        return self.per_test / 2

    @property
    def one_run_guess(self) -> float:
        return self.per_test / len(ONE_RUN_FRACTIONS)


def _one_run_bound(sweep: _Sweep, alpha: float) -> float:
    prior = sweep.members / (sweep.members + sweep.non_members)
    bounds = []
    for fraction in ONE_RUN_FRACTIONS:
        member_guesses, non_member_guesses, correct = one_run_guesses(sweep, fraction)
        bounds.append(one_run_epsilon(member_guesses=member_guesses, non_member_guesses=non_member_guesses,
                                      correct=correct, prior=prior, alpha=alpha))
    return max(bounds)


def _attack_audit(name: str, member_scores: np.ndarray, non_member_scores: np.ndarray, family: _Family,
                  levels: Sequence[float], confidence: float) -> tuple[AttackAudit, _Envelope]:
    sweep = _sweep(member_scores, non_member_scores)
    auc = _auc(sweep)
    interval = auc_interval_distribution_free(auc, sweep.members, sweep.non_members, family.auc_end)
    envelope = _envelope(sweep, family.threshold(sweep))
    bounds = {THRESHOLD: envelope.epsilon(),
              AUC: max(0.0, _logit(interval[0]), _logit(1.0 - interval[1])),
              ONE_RUN: _one_run_bound(sweep, family.one_run_guess)}
    rates, allowed = _tpr_at_fpr(sweep, levels, confidence)
    audit = AttackAudit(attack=name, auc=auc, auc_interval=interval, epsilon_lower_bounds=bounds, tpr_at_fpr=rates,
                        false_positives_allowed=allowed)
    return audit, envelope


def privacy_audit(
    member_losses: Sequence[float] | np.ndarray,
    non_member_losses: Sequence[float] | np.ndarray,
    member_classes: Sequence[object] | np.ndarray | None = None,
    non_member_classes: Sequence[object] | np.ndarray | None = None,
    *,
    confidence: float = 0.95,
    fpr_levels: Sequence[float] = (0.001, 0.01),
) -> PrivacyAudit:
    """The family-wise audit of one model from its per-record losses: aggregates only (see the module docstring).

    Members are the training records, non-members held-out records of the same
    random split; classes (both or neither) add the class-calibrated attack.

    Raises ValueError as ``scorers.membership_audit`` does.
    """
    attacks = _attack_scores(member_losses, non_member_losses, member_classes, non_member_classes)
    confidence = _confidence(confidence)
    levels = _levels(fpr_levels)
    family = _Family(1.0 - confidence, len(attacks))
    audits, envelopes = zip(*(_attack_audit(name, member_scores, non_member_scores, family, levels, confidence)
                              for name, member_scores, non_member_scores in attacks))
    return PrivacyAudit(confidence=confidence, members=len(attacks[0][1]), non_members=len(attacks[0][2]),
                        attacks=tuple(audits), _envelope=_Envelope.union(envelopes))
