"""Tests of ``scorers._audit``: the membership-inference audit's aggregates.

Golden numbers are worked out by hand in the comments; the statistical tests use
fixed seeds, so every test is deterministic. ``reference_audit`` is a slow,
direct re-implementation (pairwise AUC, every threshold, SciPy's binomtest) that
the O(n log n) code is checked against.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import pytest
from scipy import stats

import scorers
from scorers import AttackResult, membership_audit
from scorers._audit import _calibrated, _cp_lower, _cp_upper, _false_positives_allowed

Z95 = 1.959963984540054  # standard normal 97.5% quantile

MEMBERS = [0.1, 0.4, 0.35, 0.8]
NON_MEMBERS = [0.9, 0.3, 0.7, 1.2]


def one_sided_cp(k: int, n: int, alpha: float) -> tuple[float, float]:
    """Lower and upper one-sided Clopper–Pearson bounds at level 1 − alpha, from SciPy's binomtest."""
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    return ci.low, ci.high


def reference_audit(members: np.ndarray, non_members: np.ndarray, *, confidence: float = 0.95,
                    bonferroni: bool = True) -> tuple[float, float, float, float]:
    """(AUC, DeLong low, DeLong high, ε bound) by brute force, for small inputs."""
    x, y = np.asarray(members, float), np.asarray(non_members, float)
    m, n = len(x), len(y)
    wins = (x[:, None] < y[None, :]) + 0.5 * (x[:, None] == y[None, :])
    auc = wins.mean()
    v10, v01 = wins.mean(axis=1), wins.mean(axis=0)
    se = math.sqrt(v10.var(ddof=1) / m + v01.var(ddof=1) / n)
    z = stats.norm.ppf(0.5 + confidence / 2)
    thresholds = np.unique(np.concatenate([x, y]))
    alpha = (1 - confidence) / (2 * len(thresholds)) if bonferroni else 1 - confidence
    best = 0.0
    for t in thresholds:
        tp, fp = int((x <= t).sum()), int((y <= t).sum())
        tpr_low, fnr_high = one_sided_cp(tp, m, alpha)[0], one_sided_cp(m - tp, m, alpha)[1]
        fpr_high, tnr_low = one_sided_cp(fp, n, alpha)[1], one_sided_cp(n - fp, n, alpha)[0]
        if tpr_low > 0:
            best = max(best, math.log(tpr_low / fpr_high))
        if tnr_low > 0:
            best = max(best, math.log(tnr_low / fnr_high))
    return auc, max(0.0, auc - z * se), min(1.0, auc + z * se), best


def vectorised_epsilon(members: np.ndarray, non_members: np.ndarray, alpha: float) -> float:
    """ε bound with every one-sided bound at level 1 − alpha (no correction), straight from the Beta quantiles."""
    x, y = np.sort(members), np.sort(non_members)
    thresholds = np.unique(np.concatenate([x, y]))
    tp = np.searchsorted(x, thresholds, side="right").astype(float)
    fp = np.searchsorted(y, thresholds, side="right").astype(float)
    m, n = len(x), len(y)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpr_low = np.where(tp > 0, stats.beta.ppf(alpha, tp, m - tp + 1), 0.0)
        fnr_high = np.where(tp > 0, stats.beta.ppf(1 - alpha, m - tp + 1, tp), 1.0)
        fpr_high = np.where(fp < n, stats.beta.ppf(1 - alpha, fp + 1, n - fp), 1.0)
        tnr_low = np.where(fp < n, stats.beta.ppf(alpha, n - fp, fp + 1), 0.0)
        eps = np.maximum(np.log(tpr_low / fpr_high), np.log(tnr_low / fnr_high))
    return max(0.0, float(np.nanmax(eps)))


def only(result: tuple[AttackResult, ...]) -> AttackResult:
    assert len(result) == 1
    return result[0]


# --------------------------------------------------------------------------- golden numbers


def test_golden_hand_example() -> None:
    r = only(membership_audit(MEMBERS, NON_MEMBERS, fpr_levels=(0.001, 0.01, 0.25, 0.5)))
    # member < non-member pairs: 0.1 beats all 4, 0.4 and 0.35 beat 0.7, 0.9, 1.2 (3 each), 0.8 beats 2: 12/16
    assert r.attack == "loss_threshold"
    assert r.auc == 0.75
    # DeLong: member placements 1, ¾, ¾, ½ (variance 1/24); non-member placements 1, ¼, ¾, 1 (variance 1/8)
    se = math.sqrt((1 / 24) / 4 + (1 / 8) / 4)  # = sqrt(1/24)
    assert r.auc_interval == pytest.approx((0.75 - Z95 * se, 1.0))
    assert r.auc_interval[0] == pytest.approx(0.349924026970)
    # sorted: 0.1 M, 0.3 N, 0.35 M, 0.4 M, 0.7 N, 0.8 M, 0.9 N, 1.2 N
    # FPR ≤ 0.1% or 1%: no false positive allowed, threshold 0.1 catches 1 member of 4
    # Clopper–Pearson 95% for 1 of 4: low = 1 − 0.975^(1/4) (closed form for k = 1), high = Beta(0.975; 2, 3)
    assert r.tpr_at_fpr[0.001] == pytest.approx((0.25, 1 - 0.975 ** 0.25, 0.8058795503167565))
    assert r.tpr_at_fpr[0.001][1] == pytest.approx(0.006309463209709871)
    assert r.tpr_at_fpr[0.01] == r.tpr_at_fpr[0.001]
    assert r.tpr_at_fpr[0.25][0] == 0.75  # one false positive (0.3): threshold 0.4
    assert r.tpr_at_fpr[0.5][0] == 1.0  # two (0.3, 0.7): threshold 0.8
    assert r.epsilon_lower_bound == 0.0  # four records a side prove nothing
    assert (r.members, r.non_members) == (4, 4)


def test_hand_example_agrees_with_reference() -> None:
    r = only(membership_audit(MEMBERS, NON_MEMBERS))
    auc, low, high, eps = reference_audit(np.array(MEMBERS), np.array(NON_MEMBERS))
    assert r.auc == pytest.approx(auc)
    assert r.auc_interval == pytest.approx((low, high))
    assert r.epsilon_lower_bound == pytest.approx(eps)


def test_tpr_intervals_are_scipy_clopper_pearson() -> None:
    r = only(membership_audit(MEMBERS, NON_MEMBERS, fpr_levels=(0.01, 0.25, 0.5)))
    for level, tp in ((0.01, 1), (0.25, 3), (0.5, 4)):
        ci = stats.binomtest(tp, 4).proportion_ci(confidence_level=0.95, method="exact")
        assert r.tpr_at_fpr[level] == pytest.approx((tp / 4, ci.low, ci.high))


def test_golden_memorised_training_set() -> None:
    """Members all at 0.01, non-members all at 5.0: perfectly separated."""
    r = only(membership_audit([0.01] * 1000, [5.0] * 1000, fpr_levels=(0.0, 0.001, 0.01)))
    assert r.auc == 1.0
    assert r.auc_interval == (1.0, 1.0)  # DeLong's variance is 0 at complete separation
    for level in (0.0, 0.001, 0.01):
        tpr, low, high = r.tpr_at_fpr[level]
        assert tpr == 1.0 and high == 1.0
        assert low == pytest.approx(0.025 ** (1 / 1000))  # Clopper–Pearson for 1000/1000: (α/2)^(1/n)
    # Two distinct losses, so K = 2 thresholds and 2K = 4 one-sided bounds: each at level 1 − 0.05/4.
    # At the threshold 0.01: TP = 1000 of 1000, FP = 0 of 1000, so
    #   TPR_low = a^(1/1000) and FPR_high = 1 − a^(1/1000), with a = 0.0125,
    #   ε = ln(a^(1/1000) / (1 − a^(1/1000))) (the TNR/FNR ratio is the same by symmetry).
    a = 0.05 / 4
    root = a ** (1 / 1000)
    assert r.epsilon_lower_bound == pytest.approx(math.log(root / (1 - root)), rel=1e-9)
    assert r.epsilon_lower_bound == pytest.approx(5.428052146219895, rel=1e-9)


def test_golden_memorised_unequal_sizes() -> None:
    r = only(membership_audit([0.01] * 500, [5.0] * 2000))
    a = 0.05 / 4
    forward = math.log(a ** (1 / 500) / (1 - a ** (1 / 2000)))  # TPR_low / FPR_high
    backward = math.log(a ** (1 / 2000) / (1 - a ** (1 / 500)))  # TNR_low / FNR_high
    assert forward > backward
    assert r.epsilon_lower_bound == pytest.approx(forward, rel=1e-9)
    assert r.epsilon_lower_bound == pytest.approx(6.1157, abs=1e-4)


def test_epsilon_bound_grows_with_evidence() -> None:
    small = only(membership_audit([0.01] * 100, [5.0] * 100)).epsilon_lower_bound
    large = only(membership_audit([0.01] * 10_000, [5.0] * 10_000)).epsilon_lower_bound
    assert 0 < small < large


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.slow
def test_agrees_with_brute_force_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    shift = [0, 1, 3, 6, 10, 20][seed]
    members = rng.integers(0, 25, 40).astype(float)  # integers: many ties
    non_members = rng.integers(shift, 25 + shift, 60).astype(float)
    r = only(membership_audit(members, non_members))
    auc, low, high, eps = reference_audit(members, non_members)
    assert r.auc == pytest.approx(auc, abs=1e-12)
    assert r.auc_interval == pytest.approx((low, high), abs=1e-12)
    assert r.epsilon_lower_bound == pytest.approx(eps, rel=1e-9, abs=1e-12)
    if shift >= 10:
        assert r.epsilon_lower_bound > 0


def test_auc_is_scipy_mann_whitney() -> None:
    rng = np.random.default_rng(3)
    members, non_members = rng.normal(0, 1, 300).round(1), rng.normal(0.3, 1, 250).round(1)
    r = only(membership_audit(members, non_members))
    u = stats.mannwhitneyu(non_members, members).statistic  # non-member above member, ties ½
    assert r.auc == pytest.approx(u / (300 * 250))


def test_one_sided_bounds_match_binomtest() -> None:
    for k, n, alpha in ((0, 10, 0.05), (3, 10, 0.01), (10, 10, 0.025), (7, 2000, 1e-6)):
        low, high = one_sided_cp(k, n, alpha)
        assert float(_cp_lower(np.array(k), n, alpha)) == pytest.approx(low, abs=1e-15, rel=1e-9)
        assert float(_cp_upper(np.array(k), n, alpha)) == pytest.approx(high, rel=1e-9)


@pytest.mark.parametrize(("level", "non_members", "allowed"), [
    (0.001, 735, 0), (0.01, 735, 7), (0.001, 1000, 1), (0.001, 999, 0), (0.0, 50, 0), (1.0, 50, 50),
    (0.29, 100, 29), (0.07, 100, 7), (0.57, 100, 57),  # 0.29 · 100 = 28.999999999999996 in floats
])
def test_false_positives_allowed_is_the_floor(level: float, non_members: int, allowed: int) -> None:
    assert _false_positives_allowed(level, non_members) == allowed


def test_tpr_at_zero_of_n_non_members() -> None:
    """At 0.1% of 735 non-members no false positive is allowed: the TPR reported is the TPR at FPR 0."""
    rng = np.random.default_rng(17)
    members, non_members = rng.normal(0.0, 1.0, 150), rng.normal(0.6, 1.0, 735)
    r = only(membership_audit(members, non_members))
    assert r.false_positives_allowed == {0.001: 0, 0.01: 7}
    assert r.tpr_at_fpr[0.001][0] == np.mean(members < non_members.min())
    seventh = np.sort(non_members)[7]  # the threshold just below the 8th non-member allows 7 false positives
    assert r.tpr_at_fpr[0.01][0] == np.mean(members < seventh)


# --------------------------------------------------------------------------- under the null


def test_identical_distributions() -> None:
    rng = np.random.default_rng(2024)
    losses = rng.gamma(2.0, 0.5, size=4000)
    r = only(membership_audit(losses[:2000], losses[2000:]))
    assert abs(r.auc - 0.5) < 0.03
    assert r.auc_interval[0] <= 0.5 <= r.auc_interval[1]
    assert r.epsilon_lower_bound < 0.2
    assert r.epsilon_lower_bound == 0.0
    for level, (tpr, low, high) in r.tpr_at_fpr.items():
        assert low <= level <= high  # TPR = FPR under the null
        assert tpr <= 3 * level + 0.005


@pytest.mark.slow
def test_null_auc_interval_coverage_and_no_false_epsilon() -> None:
    """Over 200 null audits the DeLong 95% interval covers 0.5 about 95% of the time; the ε bound stays 0."""
    covered, positive = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        r = only(membership_audit(rng.lognormal(size=200), rng.lognormal(size=200)))
        covered += r.auc_interval[0] <= 0.5 <= r.auc_interval[1]
        positive += r.epsilon_lower_bound > 0
    assert 0.90 <= covered / 200 <= 0.99
    assert positive <= 10  # at most 5% by construction; in fact none
    assert positive == 0


@pytest.mark.slow
def test_without_bonferroni_the_null_shows_privacy_loss() -> None:
    """Why the correction: the best of many one-sided 95% bounds is positive in over 5% of null audits."""
    positive, corrected = 0, 0
    for seed in range(200):
        rng = np.random.default_rng(seed)
        members, non_members = rng.lognormal(size=200), rng.lognormal(size=200)
        positive += vectorised_epsilon(members, non_members, 0.05) > 0
        corrected += only(membership_audit(members, non_members)).epsilon_lower_bound > 0
    assert positive > 10
    assert corrected == 0


# --------------------------------------------------------------------------- ties and infinities


def test_ties() -> None:
    members, non_members = [1.0, 1.0, 2.0, 3.0], [1.0, 2.0, 2.0, 4.0]
    r = only(membership_audit(members, non_members, fpr_levels=(0.2, 0.25, 0.75)))
    # pairs won: each 1.0 member ties one and beats three (3.5 each); 2.0 ties two, beats 4.0 (2); 3.0 beats 4.0 (1)
    assert r.auc == pytest.approx(10 / 16)
    assert r.tpr_at_fpr[0.2][0] == 0.0  # the tie at 1.0 cannot be split: no threshold has FPR 0 and TPR > 0
    assert r.tpr_at_fpr[0.25][0] == 0.5  # threshold 1.0: FP 1, TP 2
    assert r.tpr_at_fpr[0.75][0] == 1.0  # threshold 3.0: FP 3, TP 4
    auc, low, high, eps = reference_audit(np.array(members), np.array(non_members))
    assert r.auc_interval == pytest.approx((low, high))


def test_all_losses_equal() -> None:
    r = only(membership_audit([0.7] * 50, [0.7] * 80))
    assert r.auc == 0.5
    assert r.auc_interval == (0.5, 0.5)  # DeLong: placements do not vary
    assert r.tpr_at_fpr[0.01][0] == 0.0
    assert r.epsilon_lower_bound == 0.0


def test_infinite_loss_is_the_largest() -> None:
    r = only(membership_audit([0.1, math.inf], [math.inf, 0.5]))
    # 0.1 beats both non-members (2); inf ties inf (½) and loses to 0.5: 2.5 / 4
    assert r.auc == 0.625
    assert r == only(membership_audit([0.1, 1e300], [1e300, 0.5]))


def test_infinite_losses_among_many() -> None:
    rng = np.random.default_rng(5)
    members, non_members = rng.gamma(2.0, size=300), rng.gamma(2.2, size=300)
    members[:3], non_members[:10] = math.inf, math.inf
    r = membership_audit(members, non_members)[0]
    big = np.where(np.isinf(members), 1e308, members), np.where(np.isinf(non_members), 1e308, non_members)
    assert r == membership_audit(*big)[0]
    assert all(math.isfinite(x) for x in (r.auc, *r.auc_interval, r.epsilon_lower_bound))


def test_negative_infinity_is_the_smallest() -> None:
    r = only(membership_audit([-math.inf, 1.0], [0.5, 2.0]))
    assert r.auc == 0.75


# --------------------------------------------------------------------------- invariances


def test_order_of_records_does_not_matter() -> None:
    rng = np.random.default_rng(11)
    members, non_members = rng.gamma(2.0, size=500), rng.gamma(2.3, size=400)
    classes_m, classes_n = rng.integers(0, 3, 500), rng.integers(0, 3, 400)
    reference = membership_audit(members, non_members, member_classes=classes_m, non_member_classes=classes_n)
    for _ in range(5):
        pm, pn = rng.permutation(500), rng.permutation(400)
        assert membership_audit(members[pm], non_members[pn], member_classes=classes_m[pm],
                                non_member_classes=classes_n[pn]) == reference


def test_loss_threshold_attack_depends_only_on_the_order_of_losses() -> None:
    rng = np.random.default_rng(12)
    members, non_members = rng.gamma(2.0, size=500), rng.gamma(2.3, size=400)
    r = only(membership_audit(members, non_members))
    transformed = only(membership_audit(np.exp(members), np.exp(non_members)))
    assert r == transformed


def test_swapping_the_sides_mirrors_the_auc() -> None:
    rng = np.random.default_rng(13)
    members, non_members = rng.gamma(2.0, size=300), rng.gamma(2.3, size=200)
    r = only(membership_audit(members, non_members))
    swapped = only(membership_audit(non_members, members))
    assert swapped.auc == pytest.approx(1 - r.auc)
    assert swapped.auc_interval == pytest.approx((1 - r.auc_interval[1], 1 - r.auc_interval[0]))


def test_list_tuple_and_array_inputs_agree() -> None:
    assert membership_audit(MEMBERS, NON_MEMBERS) == membership_audit(tuple(MEMBERS), np.array(NON_MEMBERS))


def test_higher_confidence_is_more_cautious() -> None:
    rng = np.random.default_rng(14)
    members, non_members = rng.gamma(2.0, size=1000) * 0.5, rng.gamma(2.0, size=1000)
    at95 = only(membership_audit(members, non_members))
    at99 = only(membership_audit(members, non_members, confidence=0.99))
    assert at99.auc == at95.auc
    assert at99.auc_interval[0] < at95.auc_interval[0] and at99.auc_interval[1] > at95.auc_interval[1]
    assert 0 < at99.epsilon_lower_bound < at95.epsilon_lower_bound
    for level in at95.tpr_at_fpr:
        assert at99.tpr_at_fpr[level][1] < at95.tpr_at_fpr[level][1]


# --------------------------------------------------------------------------- class-calibrated attack


def test_golden_class_calibrated() -> None:
    results = membership_audit([1.0, 5.0, 4.5], [2.0, 6.0, 4.0], member_classes=["a", "b", "c"],
                               non_member_classes=["a", "b", "b"])
    assert [r.attack for r in results] == ["loss_threshold", "class_calibrated"]
    plain, calibrated = results
    # plain: 1.0 beats 2.0, 6.0, 4.0 (3); 5.0 beats 6.0 (1); 4.5 beats 6.0 (1): 5/9
    assert plain.auc == pytest.approx(5 / 9)
    # references over all records of a class: a → median(1.0, 2.0) = 1.5; b → median(5.0, 6.0, 4.0) = 5.0; c → 4.5
    # calibrated members −0.5, 0.0, 0.0; non-members 0.5, 1.0, −1.0
    # each member beats 0.5 and 1.0 and loses to −1.0 (2 each): 6/9
    assert calibrated.auc == pytest.approx(6 / 9)
    assert calibrated.auc_interval == pytest.approx(reference_audit(np.array([-0.5, 0.0, 0.0]),
                                                                    np.array([0.5, 1.0, -1.0]))[1:3])
    assert calibrated.tpr_at_fpr[0.01][0] == 0.0  # the lowest score, −1.0, is a non-member's
    assert (calibrated.members, calibrated.non_members) == (3, 3)


def test_class_reference_ignores_infinite_losses() -> None:
    results = membership_audit([1.0, 3.0], [2.0, math.inf, math.inf, 3.5, 2.5], member_classes=[0, 1],
                               non_member_classes=[0, 0, 1, 1, 1])
    calibrated = results[1]
    # references: class 0 → median(1.0, 2.0) = 1.5 (inf left out); class 1 → median(3.0, 3.5, 2.5) = 3.0
    # calibrated members −0.5, 0.0; non-members 0.5, inf, inf, 0.5, −0.5
    # −0.5 beats four, ties −0.5 (4.5); 0.0 beats four (4): 8.5 / 10
    assert calibrated.auc == pytest.approx(0.85)


def test_class_with_only_infinite_losses_keeps_them_infinite() -> None:
    results = membership_audit([1.0, 3.0, math.inf], [math.inf, 2.0, 4.0], member_classes=["x", "y", "z"],
                               non_member_classes=["z", "y", "y"])
    # references: x → 1.0, y → 3.0; z has no finite loss: its two losses stay inf
    # calibrated members 0.0, 0.0, inf; non-members inf, −1.0, 1.0
    # each 0.0 beats inf and 1.0 (2); inf ties inf (½): 4.5 / 9
    assert results[1].auc == pytest.approx(4.5 / 9)


def test_class_reference_does_not_depend_on_membership() -> None:
    """Moving a record between the sides moves it, and nothing else: every other record's score stays the same."""
    rng = np.random.default_rng(8)
    losses, classes = rng.gamma(2.0, size=60), rng.integers(0, 3, 60)
    for cut in (20, 30, 41):
        member_scores, non_member_scores = _calibrated(losses[:cut], losses[cut:], classes[:cut], classes[cut:])
        assert np.concatenate([member_scores, non_member_scores]) == pytest.approx(
            np.concatenate(_calibrated(losses[:20], losses[20:], classes[:20], classes[20:])))


def test_class_calibrated_beats_plain_attack_when_classes_differ_in_difficulty() -> None:
    """Two classes with loss levels 1 and 4; members are 0.2 lower within each class."""
    rng = np.random.default_rng(99)
    n = 2000
    member_classes, non_member_classes = rng.integers(0, 2, n), rng.integers(0, 2, n)
    level = np.array([1.0, 4.0])
    members = level[member_classes] - 0.2 + rng.normal(0, 0.3, n)
    non_members = level[non_member_classes] + rng.normal(0, 0.3, n)
    plain, calibrated = membership_audit(members, non_members, member_classes=member_classes,
                                         non_member_classes=non_member_classes)
    # within a class: Φ(0.2 / (0.3·√2)) ≈ 0.68; the plain attack adds chance-level cross-class pairs (≈ 0.59)
    assert plain.auc == pytest.approx(0.59, abs=0.02)
    assert calibrated.auc == pytest.approx(stats.norm.cdf(0.2 / (0.3 * math.sqrt(2))), abs=0.02)
    assert calibrated.auc_interval[0] > plain.auc_interval[1]
    assert calibrated.tpr_at_fpr[0.01][0] > plain.tpr_at_fpr[0.01][0]


def test_one_class_calibration_keeps_the_order() -> None:
    rng = np.random.default_rng(21)
    members, non_members = rng.gamma(2.0, size=400).round(3), rng.gamma(2.3, size=300).round(3)
    plain, calibrated = membership_audit(members, non_members, member_classes=[7] * 400,
                                         non_member_classes=[7] * 300)
    assert calibrated.auc == pytest.approx(plain.auc)
    for level, values in plain.tpr_at_fpr.items():
        assert calibrated.tpr_at_fpr[level] == pytest.approx(values)


def test_no_classes_no_calibrated_attack() -> None:
    assert [r.attack for r in membership_audit(MEMBERS, NON_MEMBERS)] == ["loss_threshold"]


# --------------------------------------------------------------------------- aggregates only


def test_result_holds_aggregates_only() -> None:
    rng = np.random.default_rng(31)
    members, non_members = rng.gamma(2.0, size=300), rng.gamma(2.2, size=300)
    classes_m, classes_n = rng.integers(0, 3, 300), rng.integers(0, 3, 300)
    losses = set(members.tolist()) | set(non_members.tolist())
    for r in membership_audit(members, non_members, member_classes=classes_m, non_member_classes=classes_n):
        assert [f.name for f in dataclasses.fields(r)] == [
            "attack", "auc", "auc_interval", "tpr_at_fpr", "false_positives_allowed", "epsilon_lower_bound",
            "members", "non_members"]
        assert r.false_positives_allowed == {0.001: 0, 0.01: 3}
        assert isinstance(r.auc, float) and isinstance(r.epsilon_lower_bound, float)
        assert isinstance(r.members, int) and isinstance(r.non_members, int)
        assert len(r.auc_interval) == 2 and all(isinstance(x, float) for x in r.auc_interval)
        assert list(r.tpr_at_fpr) == [0.001, 0.01]
        assert all(len(v) == 3 and all(isinstance(x, float) for x in v) for v in r.tpr_at_fpr.values())
        numbers = [r.auc, *r.auc_interval, r.epsilon_lower_bound, *(x for v in r.tpr_at_fpr.values() for x in v)]
        assert not losses & set(numbers)  # no loss (and so no threshold) is reported
        with pytest.raises(dataclasses.FrozenInstanceError):
            r.auc = 0.0  # type: ignore[misc]


@pytest.mark.slow
def test_fifty_thousand_records_a_side() -> None:
    rng = np.random.default_rng(41)
    n = 50_000
    member_classes, non_member_classes = rng.integers(0, 10, n), rng.integers(0, 10, n)
    members = member_classes + rng.normal(-0.1, 1.0, n)
    non_members = non_member_classes + rng.normal(0.0, 1.0, n)
    start = time.perf_counter()
    plain, calibrated = membership_audit(members, non_members, member_classes=member_classes,
                                         non_member_classes=non_member_classes)
    assert time.perf_counter() - start < 30  # O(n log n): about a second
    assert (plain.members, plain.non_members) == (n, n)
    assert calibrated.auc > plain.auc > 0.5
    assert calibrated.auc == pytest.approx(stats.norm.cdf(0.1 / math.sqrt(2)), abs=0.01)
    assert 0 < calibrated.epsilon_lower_bound < 0.5


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize("side", ["member_losses", "non_member_losses"])
def test_nan_is_an_error_naming_the_count(side: str) -> None:
    bad = [0.123456, math.nan, 0.5, math.nan]
    args = (bad, NON_MEMBERS) if side == "member_losses" else (MEMBERS, bad)
    with pytest.raises(ValueError, match=f"^{side} has 2 NaN values$"):
        membership_audit(*args)


def test_one_nan_is_singular() -> None:
    with pytest.raises(ValueError, match="^member_losses has 1 NaN value$"):
        membership_audit([math.nan, 1.0], [1.0])


@pytest.mark.parametrize(("members", "non_members", "match"), [
    ([], [1.0], "member_losses is empty"),
    ([1.0], [], "non_member_losses is empty"),
    ([[1.0, 2.0]], [1.0], "one-dimensional"),
])
def test_bad_losses(members: list, non_members: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        membership_audit(members, non_members)


def test_classes_must_come_in_pairs() -> None:
    with pytest.raises(ValueError, match="both"):
        membership_audit(MEMBERS, NON_MEMBERS, member_classes=[0, 0, 1, 1])
    with pytest.raises(ValueError, match="both"):
        membership_audit(MEMBERS, NON_MEMBERS, non_member_classes=[0, 0, 1, 1])


def test_classes_must_match_the_losses() -> None:
    with pytest.raises(ValueError, match="non_member_classes"):
        membership_audit(MEMBERS, NON_MEMBERS, member_classes=[0, 0, 1, 1], non_member_classes=[0, 1])


@pytest.mark.parametrize("confidence", [0.0, 1.0, -0.5, 95.0, math.nan])
def test_bad_confidence(confidence: float) -> None:
    with pytest.raises(ValueError, match="confidence"):
        membership_audit(MEMBERS, NON_MEMBERS, confidence=confidence)


@pytest.mark.parametrize("level", [-0.01, 1.5, math.nan])
def test_bad_fpr_level(level: float) -> None:
    with pytest.raises(ValueError, match="FPR levels"):
        membership_audit(MEMBERS, NON_MEMBERS, fpr_levels=(0.01, level))


def test_single_record_a_side_gives_the_uninformative_interval() -> None:
    r = only(membership_audit([0.1], [0.2, 0.3]))
    assert r.auc == 1.0
    assert r.auc_interval == (0.0, 1.0)


def test_public_names() -> None:
    assert "membership_audit" in scorers.__all__ and "AttackResult" in scorers.__all__
