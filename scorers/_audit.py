"""Empirical privacy audit by membership inference: the attacks and their per-attack statistics.

The caller computes, in its own process, the per-record losses (NLL) of the model
on its training records (*members*) and on held-out records (*non-members*), and
optionally each record's class. ``membership_audit`` runs two attacks on them and
returns aggregates only: an AUC with its interval, TPRs at fixed FPRs with their
intervals, an empirical ε lower bound and the two counts. Nothing per record is
returned, not even a threshold (a threshold would be one record's loss).
``scorers.privacy_audit`` puts the same attacks into one family-wise test.

Attacks (each a rule "member if score ≤ t", swept over every distinct score t; ``register_attack``
adds one to every audit):

- ``"loss_threshold"`` (Yeom et al., 2018): the score is the loss itself.
- ``"class_calibrated"``: the score is the loss minus a reference for the record's
  class, the median of the finite losses of that class's records, members and
  non-members together (infinite losses stay infinite). It removes differences in
  difficulty between classes, which otherwise hide the member/non-member gap. The
  reference uses every audited record, as the adversary of differential privacy
  (who knows every candidate record) can, and never who is a member: so members
  and non-members are scored alike, and the one-run test may use the score.

Ties are grouped (a threshold never splits equal scores); an infinite loss is
simply the largest. Everything is O(n log n): one sort, then cumulative counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType

import numpy as np

LOSS_THRESHOLD = "loss_threshold"
CLASS_CALIBRATED = "class_calibrated"


def _stats() -> ModuleType:
    """``scipy.stats``, imported on first use: it takes about 0.6 s, and the CLI's read-only verbs never audit."""
    import scipy.stats

    return scipy.stats


def _special() -> ModuleType:
    """``scipy.special``, imported on first use for the same reason; its functions skip ``scipy.stats``' overhead."""
    import scipy.special

    return scipy.special


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
            threshold with at most ``false_positives_allowed[level]`` false
            positives, with a two-sided Clopper–Pearson interval at ``confidence``.
            That threshold depends on the non-members alone, so given them the
            interval is exact.
        false_positives_allowed: for each FPR level, the false positives that level
            allows, ⌊level · non_members⌋. Where it is 0 the "TPR at 0.1% FPR" is
            the TPR at FPR 0: say "TPR at 0 of n non-members".
        epsilon_lower_bound: empirical ε lower bound (δ = 0), ≥ 0; see ``membership_audit``.
        members, non_members: the counts.
    """

    attack: str
    auc: float
    auc_interval: tuple[float, float]
    tpr_at_fpr: dict[float, tuple[float, float, float]]
    false_positives_allowed: dict[float, int]
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


def _confidence(confidence: float) -> float:
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    return float(confidence)


def _levels(fpr_levels: Sequence[float]) -> tuple[float, ...]:
    levels = tuple(float(level) for level in fpr_levels)
    for level in levels:
        if not 0.0 <= level <= 1.0:
            raise ValueError(f"FPR levels must be in [0, 1], got {level}")
    return levels


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

    @property
    def members(self) -> int:
        return int(self.true_positives[-1])

    @property
    def non_members(self) -> int:
        return int(self.false_positives[-1])


def _sweep(member_scores: np.ndarray, non_member_scores: np.ndarray) -> _Sweep:
    _, inverse = np.unique(np.concatenate([member_scores, non_member_scores]), return_inverse=True)
    groups = int(inverse.max()) + 1
    m = len(member_scores)
    members_at = np.bincount(inverse[:m], minlength=groups)
    non_members_at = np.bincount(inverse[m:], minlength=groups)
    return _Sweep(members_at, non_members_at, np.cumsum(members_at), np.cumsum(non_members_at))


def _auc(sweep: _Sweep) -> float:
    """AUC (Mann–Whitney, ties ½) from the tie groups."""
    members_below = sweep.non_members - sweep.false_positives + 0.5 * sweep.non_members_at
    return float(np.dot(sweep.members_at, members_below) / (sweep.members * sweep.non_members))


def _delong(sweep: _Sweep, auc: float, confidence: float) -> tuple[float, float]:
    """DeLong's two-sided interval for the AUC at ``confidence``, from the tie groups."""
    m, n = sweep.members, sweep.non_members
    if m < 2 or n < 2:
        return 0.0, 1.0
    a, b = sweep.members_at.astype(float), sweep.non_members_at.astype(float)
    # DeLong placements, one value per tie group: for a member, the share of non-members
    # scoring higher (ties ½); for a non-member, the share of members scoring lower.
    member_place = (n - sweep.false_positives + 0.5 * b) / n
    non_member_place = (sweep.true_positives - 0.5 * a) / m
    s10 = float(np.dot(a, (member_place - auc) ** 2) / (m - 1))
    s01 = float(np.dot(b, (non_member_place - auc) ** 2) / (n - 1))
    half = float(_stats().norm.ppf(0.5 + confidence / 2)) * math.sqrt(s10 / m + s01 / n)
    return max(0.0, auc - half), min(1.0, auc + half)


def _binomial_at_least(count: np.ndarray, trials: int, p: float) -> np.ndarray:
    """P[Binomial(trials, p) ≥ count], elementwise: 1 for count ≤ 0, 0 for count > trials."""
    count = np.asarray(count)
    inside = _special().bdtrc(np.clip(count, 1, max(trials, 1)) - 1, trials, p)
    return np.where(count <= 0, 1.0, np.where(count > trials, 0.0, inside))


def _binomial_tail_bound(estimate: float, k: int, mean: float) -> float:
    """A bound on P(Û ≥ ``estimate``) for an AUC-type U-statistic Û with k = min(m, n) and expectation ``mean``.

    Markov's inequality with the hinge (t − h)₊ for h < estimate, and the binomial
    comparison of ``auc_interval_distribution_free``: P(Û ≥ x) ≤ E(B − kh)₊ / (kx − kh)
    with B ~ Binomial(k, mean), minimised over h at the support points j / k < x
    (between two of them the ratio is monotone in h). Only the j within 10·√k of
    kx are tried (leaving a candidate out can only loosen the bound); B above
    kx + 10·√k, more than 20 standard deviations out, is left out of E(B − j)₊ =
    Σ_{i > j} P(B ≥ i) (terms below double precision next to the rest).
    """
    span = 10.0 * math.sqrt(k) + 2.0
    first = max(0, math.ceil(k * estimate - span))
    support = np.arange(first, min(k, math.floor(k * estimate + span)) + 1)
    at_least = _binomial_at_least(support, k, mean)  # P(B ≥ i)
    beyond = np.append(np.cumsum(at_least[::-1])[::-1][1:], 0.0)  # E(B − j)₊ = Σ_{i ≥ j+1} P(B ≥ i)
    below = support < k * estimate
    return float(min(1.0, np.min(beyond[below] / (k * estimate - support[below]), initial=1.0)))


def auc_interval_distribution_free(auc: float, members: int, non_members: int,
                                   alpha: float) -> tuple[float, float]:
    """Distribution-free bounds on the AUC: each end one-sided at level 1 − ``alpha``.

    The AUC estimate Û is a two-sample U-statistic with a kernel in [0, 1]
    (1 if the member scores lower, ½ on a tie). Hoeffding (1963, §5) writes it as
    an average of means of k = min(members, non_members) independent kernel
    values, so for every convex f, E f(Û) is at most E f of such a mean, which is
    at most E f(B / k) with B ~ Binomial(k, AUC) (Hoeffding 1963, Theorem 3: the
    Bernoulli is the most spread [0, 1] variable of its mean). With the hinges
    f(t) = (t − h)₊ this bounds the tail of Û by binomial quantities
    (``_binomial_tail_bound``, a Bentkus-type bound, within a factor e of the
    binomial tail itself). The lower end is the smallest AUC not rejected at
    ``alpha``; the upper end mirrors it. At complete separation it is the
    Clopper–Pearson bound alpha^(1/k). Valid at every sample size, with ties and at
    separation (where DeLong's interval has zero width); it assumes only that
    members and non-members are independent draws from their two distributions.
    """
    k = min(members, non_members)

    def lower(estimate: float) -> float:
        if estimate <= 0.0:
            return 0.0
        return _crossing(lambda mean: _binomial_tail_bound(estimate, k, mean) - alpha, 0.0, estimate)

    return lower(auc), 1.0 - lower(1.0 - auc)


def _crossing(increasing: Callable[[float], float], low: float, high: float) -> float:
    """Where ``increasing`` crosses 0 in [low, high], given increasing(low) ≤ 0 < increasing(high) (Brent, to 1e-12)."""
    from scipy.optimize import brentq

    return float(brentq(increasing, low, high, xtol=1e-12))


def _false_positives_allowed(level: float, non_members: int) -> int:
    """⌊level · non_members⌋: the most false positives with FP / non_members ≤ level (exact in floats)."""
    allowed = math.floor(level * non_members)
    while allowed + 1 <= non_members and (allowed + 1) / non_members <= level:
        allowed += 1
    while allowed > 0 and allowed / non_members > level:
        allowed -= 1
    return allowed


def _tpr_at_fpr(sweep: _Sweep, levels: Sequence[float],
                confidence: float) -> tuple[dict[float, tuple[float, float, float]], dict[float, int]]:
    m, n = sweep.members, sweep.non_members
    alpha = 1.0 - confidence
    rates, allowed = {}, {}
    for level in levels:
        allowed[level] = _false_positives_allowed(level, n)
        # the last threshold with FP ≤ allowed (FP is non-decreasing); none: predict no member
        last = int(np.searchsorted(sweep.false_positives, allowed[level], side="right")) - 1
        tp = int(sweep.true_positives[last]) if last >= 0 else 0
        low = float(_cp_lower(np.array(tp), m, alpha / 2))
        high = float(_cp_upper(np.array(tp), m, alpha / 2))
        rates[level] = (tp / m, low, high)
    return rates, allowed


@dataclass(frozen=True)
class _Envelope:
    """Confidence bounds on the rate pairs that ε-DP constrains, reduced to the ones that can bind.

    For an (ε, δ)-DP mechanism every threshold satisfies TPR ≤ e^ε · FPR + δ and
    TNR ≤ e^ε · FNR + δ. Each point is (upper bound on the right-hand rate, lower
    bound on the left-hand rate): (FPR_high, TPR_low) or (FNR_high, TNR_low), both
    directions pooled. Only the points on the upper convex hull that maximise
    low − x · high for some slope x = e^ε ≥ 1 are kept: they give the same ε and δ
    as all points, and they are a handful of aggregates of counts, not the ROC curve.
    """

    points: tuple[tuple[float, float], ...]

    @classmethod
    def of(cls, high: np.ndarray, low: np.ndarray) -> _Envelope:
        order = np.lexsort((-low, high))
        keep = low[order] > np.maximum.accumulate(np.concatenate([[-1.0], low[order]]))[:-1]  # Pareto front
        hull: list[tuple[float, float]] = []
        for point in zip(high[order][keep].tolist(), low[order][keep].tolist()):
            while len(hull) >= 2 and _under_chord(hull[-2], hull[-1], point):
                hull.pop()
            hull.append(point)
        binding = 1  # keep vertices while the edge into them has slope ≥ 1: each maximises for some e^ε ≥ 1
        while binding < len(hull) and _slope_at_least_one(hull[binding - 1], hull[binding]):
            binding += 1
        return cls(tuple(hull[:binding]))

    @classmethod
    def union(cls, envelopes: Sequence[_Envelope]) -> _Envelope:
        high, low = zip(*(point for envelope in envelopes for point in envelope.points))
        return cls.of(np.array(high), np.array(low))

    def epsilon(self) -> float:
        """The smallest ε (δ = 0) consistent with every pair: max ln(low / high), floored at 0."""
        return max([0.0, *(math.log(low / high) for high, low in self.points if low > 0.0)])

    def delta(self, epsilon: float) -> float:
        """The smallest δ for which (``epsilon``, δ) is consistent with every pair: max(low − e^ε · high), ≥ 0."""
        return max([0.0, *(low - _scaled(high, epsilon) for high, low in self.points)])


def _scaled(high: float, epsilon: float) -> float:
    """e^ε · high without overflow for any ε (inf included): capped at e^709, far above any probability."""
    return 0.0 if high == 0.0 else math.exp(min(epsilon + math.log(high), 709.0))


def _slope_at_least_one(left: tuple[float, float], right: tuple[float, float]) -> bool:
    return right[1] - left[1] >= right[0] - left[0]


def _under_chord(first: tuple[float, float], middle: tuple[float, float], last: tuple[float, float]) -> bool:
    """Whether ``middle`` lies on or under the chord from ``first`` to ``last`` (so is no upper hull vertex)."""
    return ((middle[0] - first[0]) * (last[1] - first[1]) - (middle[1] - first[1]) * (last[0] - first[0])) >= 0.0


def _envelope(sweep: _Sweep, alpha: float) -> _Envelope:
    """Clopper–Pearson bounds at every threshold that can matter, each one-sided at level 1 − alpha.

    Only thresholds just before a non-member's score can bind (for a given FP
    count, more TP only helps both directions), so only those are computed. TNR
    and FNR bounds are the complements of the FPR and TPR bounds (the same
    events), computed directly for precision.
    """
    m, n = sweep.members, sweep.non_members
    corner = np.append(sweep.non_members_at[1:] > 0, True)
    tp, fp = sweep.true_positives[corner], sweep.false_positives[corner]
    low = np.concatenate([_cp_lower(tp, m, alpha), _cp_lower(n - fp, n, alpha)])
    high = np.concatenate([_cp_upper(fp, n, alpha), _cp_upper(m - tp, m, alpha)])
    return _Envelope.of(high, low)


def _threshold_alpha(sweep: _Sweep, alpha: float) -> float:
    """Bonferroni over the thresholds: 2 one-sided bounds at each of the K distinct scores share ``alpha``."""
    return alpha / (2 * len(sweep.true_positives))


def _attack(name: str, member_scores: np.ndarray, non_member_scores: np.ndarray,
            fpr_levels: Sequence[float], confidence: float) -> AttackResult:
    sweep = _sweep(member_scores, non_member_scores)
    auc = _auc(sweep)
    rates, allowed = _tpr_at_fpr(sweep, fpr_levels, confidence)
    return AttackResult(
        attack=name, auc=auc, auc_interval=_delong(sweep, auc, confidence), tpr_at_fpr=rates,
        false_positives_allowed=allowed,
        epsilon_lower_bound=_envelope(sweep, _threshold_alpha(sweep, 1.0 - confidence)).epsilon(),
        members=len(member_scores), non_members=len(non_member_scores),
    )


@dataclass(frozen=True)
class Attack:
    """A membership-inference attack: a rule "member if score ≤ t" from each record's loss (and class).

    ``scores`` gets float arrays of member and non-member losses and, when the
    attack ``needs_classes``, their classes; it returns one score per record, in
    the same order, and must score members and non-members alike (never by who is
    a member), so that the one-run test may use the score.
    """

    name: str
    scores: Callable[..., tuple[np.ndarray, np.ndarray]]
    needs_classes: bool = False


_ATTACKS: dict[str, Attack] = {}


def register_attack(attack: Attack) -> Attack:
    """Add an attack to every audit (replacing one of the same name); ``ATTACKS`` lists them in order."""
    _ATTACKS[attack.name] = attack
    return attack


def attacks() -> tuple[Attack, ...]:
    """The registered attacks, in the order they were registered."""
    return tuple(_ATTACKS.values())


def _loss_scores(member_losses: np.ndarray, non_member_losses: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return member_losses, non_member_losses


def _calibrated(member_losses: np.ndarray, non_member_losses: np.ndarray, member_classes: np.ndarray,
                non_member_classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Losses minus the median finite loss of the record's class, over all records (see the module docstring)."""
    losses = np.concatenate([member_losses, non_member_losses])
    labels, group = np.unique(np.concatenate([member_classes, non_member_classes]), return_inverse=True)
    finite = np.isfinite(losses)
    reference = np.zeros(len(labels))  # a class without a finite loss: its infinite losses stay infinite anyway
    order = np.lexsort((losses[finite], group[finite]))
    groups, sorted_losses = group[finite][order], losses[finite][order]
    starts = np.searchsorted(groups, np.arange(len(labels)), side="left")
    ends = np.searchsorted(groups, np.arange(len(labels)), side="right")
    has = ends > starts
    low, high = (starts + ends - 1) // 2, (starts + ends) // 2  # the middle one or two of each sorted class
    reference[has] = 0.5 * (sorted_losses[low[has]] + sorted_losses[high[has]])
    scores = losses - reference[group]
    m = len(member_losses)
    return scores[:m], scores[m:]


register_attack(Attack(name=LOSS_THRESHOLD, scores=_loss_scores))
register_attack(Attack(name=CLASS_CALIBRATED, scores=_calibrated, needs_classes=True))


def _attack_scores(member_losses: Sequence[float] | np.ndarray, non_member_losses: Sequence[float] | np.ndarray,
                   member_classes: Sequence[object] | np.ndarray | None,
                   non_member_classes: Sequence[object] | np.ndarray | None,
                   ) -> list[tuple[str, np.ndarray, np.ndarray]]:
    """Each registered attack's (name, member scores, non-member scores), after checking the inputs.

    Attacks that need classes run only when both class arrays are given.
    """
    members = _losses(member_losses, "member_losses")
    non_members = _losses(non_member_losses, "non_member_losses")
    if (member_classes is None) != (non_member_classes is None):
        raise ValueError("give both member_classes and non_member_classes, or neither")
    classes: tuple[np.ndarray, ...] = ()
    if member_classes is not None and non_member_classes is not None:
        classes = (np.asarray(member_classes), np.asarray(non_member_classes))
        for labels, losses, name in zip(classes, (members, non_members), ("member", "non_member")):
            if labels.shape != losses.shape:
                raise ValueError(f"{name}_classes has shape {labels.shape} but {name}_losses has {losses.shape}")
    return [(attack.name, *attack.scores(members, non_members, *(classes if attack.needs_classes else ())))
            for attack in attacks() if classes or not attack.needs_classes]


def membership_audit(
    member_losses: Sequence[float] | np.ndarray,
    non_member_losses: Sequence[float] | np.ndarray,
    *,
    member_classes: Sequence[object] | np.ndarray | None = None,
    non_member_classes: Sequence[object] | np.ndarray | None = None,
    fpr_levels: Sequence[float] = (0.001, 0.01),
    confidence: float = 0.95,
) -> tuple[AttackResult, ...]:
    """Membership-inference audit of one model from its per-record losses, attack by attack: aggregates only.

    Returns one result per registered attack (``attacks()``): the loss-threshold
    attack, then, when both class arrays are given, the class-calibrated attack.
    ``confidence`` sets the AUC interval (DeLong), the Clopper–Pearson intervals on
    the TPRs and the ε bound, each for its attack on its own;
    ``scorers.privacy_audit`` is the family-wise test that refutes a stated ε.

    The ε lower bound (pure ε, δ = 0) follows from TPR ≤ e^ε · FPR and TNR ≤ e^ε · FNR
    for an ε-DP training mechanism: for each threshold, ε ≥ ln(TPR_low / FPR_high) and
    ε ≥ ln(TNR_low / FNR_high) with one-sided Clopper–Pearson bounds from the counts
    (``scipy.stats.beta``). Taking the best of many thresholds makes one-sided bounds
    optimistic, so they are Bonferroni-corrected over all K distinct-score thresholds
    swept (each bound at level 1 − (1 − confidence) / (2K)): with probability ≥
    ``confidence`` the true ε of the mechanism is at least the reported value.
    The bound treats the records as independent draws from the member and
    non-member loss distributions.

    Raises ValueError on empty inputs, NaN losses (naming the count), mismatched class
    arrays, a ``confidence`` outside (0, 1) or an FPR level outside [0, 1].
    """
    attacks = _attack_scores(member_losses, non_member_losses, member_classes, non_member_classes)
    confidence = _confidence(confidence)
    levels = _levels(fpr_levels)
    return tuple(_attack(name, member_scores, non_member_scores, levels, confidence)
                 for name, member_scores, non_member_scores in attacks)
