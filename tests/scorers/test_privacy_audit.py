"""Tests of ``scorers._privacy_audit``: the family-wise audit that refutes a stated ε, or does not.

Golden numbers are worked out in the comments; ``brute_delta`` re-computes the
reconciling δ over every threshold with SciPy's binomtest, and the simulations
feed scores from exactly ε-DP mechanisms with fixed seeds, so every test is
deterministic.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats

import scorers
from scorers import AttackAudit, PrivacyAudit, Refutation, max_auc, membership_audit, privacy_audit
from scorers._audit import _binomial_tail_bound, _Envelope, auc_interval_distribution_free
from scorers._one_run import ONE_RUN_FRACTIONS, one_run_epsilon, one_run_guesses

DEMO_EPSILON = 0.0097


def logit(p: float) -> float:
    return math.log(p / (1 - p))


@functools.cache  # brute_delta asks again for each ε
def one_sided_cp(k: int, n: int, alpha: float) -> tuple[float, float]:
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
    return ci.low, ci.high


def brute_delta(members: np.ndarray, non_members: np.ndarray, epsilon: float, alpha: float) -> float:
    """max over every threshold of TPR_low − e^ε FPR_high and TNR_low − e^ε FNR_high, each bound at 1 − alpha."""
    m, n, best = len(members), len(non_members), 0.0
    for t in np.unique(np.concatenate([members, non_members])):
        tp, fp = int((members <= t).sum()), int((non_members <= t).sum())
        tpr_low, fnr_high = one_sided_cp(tp, m, alpha)[0], one_sided_cp(m - tp, m, alpha)[1]
        fpr_high, tnr_low = one_sided_cp(fp, n, alpha)[1], one_sided_cp(n - fp, n, alpha)[0]
        best = max(best, tpr_low - math.exp(epsilon) * fpr_high, tnr_low - math.exp(epsilon) * fnr_high)
    return best


def split(rng: np.random.Generator, records: int, members: int) -> np.ndarray:
    """A random split of fixed size, as the project makes it: True for the training records."""
    member = np.zeros(records, dtype=bool)
    member[rng.choice(records, members, replace=False)] = True
    return member


def laplace_mechanism(rng: np.random.Generator, epsilon: float, member: np.ndarray,
                      classes: np.ndarray) -> np.ndarray:
    """Score = a public class offset + [non-member] + Laplace(1/ε): each record's score is exactly ε-DP."""
    return classes * 0.7 + (~member) + rng.laplace(0.0, 1.0 / epsilon, len(member))


def randomized_response(rng: np.random.Generator, epsilon: float, member: np.ndarray) -> np.ndarray:
    """Score 0 ("member") with probability e^ε / (1 + e^ε) for a member and 1 / (1 + e^ε) for a non-member: tight."""
    truthful = rng.random(len(member)) < math.exp(epsilon) / (1 + math.exp(epsilon))
    return np.where(truthful == member, 0.0, 1.0)


def demo_like(seed: int = 4) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """150 members and 735 non-members in 5 classes of different difficulty; members' log-loss 0.38 lower."""
    rng = np.random.default_rng(seed)
    level = np.array([0.3, 0.8, 1.4, 2.0, 2.6])
    member_classes, non_member_classes = rng.integers(0, 5, 150), rng.integers(0, 5, 735)
    members = np.exp(level[member_classes] - 0.38 + rng.normal(0.0, 0.7, 150))
    non_members = np.exp(level[non_member_classes] + rng.normal(0.0, 0.7, 735))
    return members, non_members, member_classes, non_member_classes


# --------------------------------------------------------------------------- the AUC an ε-DP release allows


def test_golden_max_auc() -> None:
    assert max_auc(0.0) == 0.5
    assert max_auc(math.log(3)) == pytest.approx(0.75)  # e^ε / (1 + e^ε) = 3/4
    assert max_auc(DEMO_EPSILON) == pytest.approx(0.5024249809861581, rel=1e-12)
    assert max_auc(1.0, 1.0) == 1.0
    assert max_auc(0.0, 0.2) == pytest.approx(1 - 0.8 ** 2 / 2)


@pytest.mark.parametrize(("epsilon", "delta"), [(0.0, 0.0), (0.5, 0.0), (2.0, 0.0), (1.0, 0.05), (0.3, 0.3)])
@pytest.mark.slow
def test_max_auc_is_the_area_of_the_dp_roc_region(epsilon: float, delta: float) -> None:
    """Integrate the region's upper edge min(1, e^ε x + δ, 1 − e^−ε (1 − δ − x)) numerically."""
    x = np.linspace(0.0, 1.0, 2_000_001)
    edge = np.minimum.reduce([np.ones_like(x), math.exp(epsilon) * x + delta,
                              1 - math.exp(-epsilon) * (1 - delta - x)])
    area = float(np.sum((edge[1:] + edge[:-1]) / 2 * np.diff(x)))
    assert max_auc(epsilon, delta) == pytest.approx(area, abs=1e-9)


def test_randomized_response_attains_the_limit() -> None:
    """The tight mechanism's ROC is the region's edge: its AUC is exactly e^ε / (1 + e^ε)."""
    p = math.exp(1.3) / (1 + math.exp(1.3))
    members, non_members = np.repeat([0.0, 1.0], [round(p * 10**6), 10**6 - round(p * 10**6)]), np.repeat(
        [0.0, 1.0], [10**6 - round(p * 10**6), round(p * 10**6)])
    assert membership_audit(members, non_members)[0].auc == pytest.approx(max_auc(1.3), abs=1e-6)


# --------------------------------------------------------------------------- the distribution-free AUC interval


def test_golden_interval_at_separation() -> None:
    # Û = 1: the hinge bound at h = (k − 1)/k is E(B − (k − 1))₊ = P(B = k) = AUC^k, so the end is alpha^(1/k):
    # the Clopper–Pearson bound for k of k
    assert auc_interval_distribution_free(1.0, 150, 735, 0.01) == pytest.approx((0.01 ** (1 / 150), 1.0), rel=1e-9)
    assert auc_interval_distribution_free(0.0, 40, 30, 0.05) == pytest.approx((0.0, 1 - 0.05 ** (1 / 30)), rel=1e-9)


@pytest.mark.parametrize(("estimate", "k", "mean"), [(0.6, 150, 0.5), (0.55, 1000, 0.52), (0.8, 30, 0.6),
                                                     (0.5, 7, 0.3), (0.993, 400, 0.97)])
def test_tail_bound_is_the_minimum_over_every_hinge(estimate: float, k: int, mean: float) -> None:
    support = np.arange(k + 1)
    pmf = stats.binom.pmf(support, k, mean)
    brute = min(1.0, min(float(np.dot(pmf, np.maximum(support - j, 0))) / (k * estimate - j)
                         for j in range(k + 1) if j < k * estimate))
    assert _binomial_tail_bound(estimate, k, mean) == pytest.approx(brute, rel=1e-9)


def test_tail_bound_lies_between_the_binomial_tail_and_e_times_it() -> None:
    """For a mean of Bernoulli kernels the bound is valid (≥ the exact tail) and within Bentkus' factor e."""
    for k, mean in ((20, 0.3), (150, 0.5), (1000, 0.8)):
        for j in range(math.ceil(k * mean) + 1, k + 1, max(1, k // 20)):
            exact = float(stats.binom.sf(j - 1, k, mean))
            assert exact <= _binomial_tail_bound(j / k, k, mean) <= math.e * exact


def test_interval_contains_delong_and_is_wider() -> None:
    rng = np.random.default_rng(6)
    members, non_members = rng.normal(0.0, 1.0, 150), rng.normal(0.5, 1.0, 735)
    delong = membership_audit(members, non_members, confidence=0.95)[0]
    low, high = auc_interval_distribution_free(delong.auc, 150, 735, 0.025)
    assert low < delong.auc_interval[0] < delong.auc < delong.auc_interval[1] < high


@pytest.mark.slow
def test_delong_refutes_falsely_at_separation_and_this_interval_does_not() -> None:
    """Why not DeLong: randomized response at ε = 4 with 40 records a side is often perfectly separated; DeLong's
    interval is then (1, 1) and 'refutes' the true ε, which the distribution-free interval never does."""
    delong_false, audit_false = 0, 0
    for seed in range(100):
        rng = np.random.default_rng([seed, 4])
        member = split(rng, 80, 40)
        scores = randomized_response(rng, 4.0, member)
        delong = membership_audit(scores[member], scores[~member], confidence=1 - 0.05 / 3)[0]  # the AUC's share
        delong_false += delong.auc_interval[0] > max_auc(4.0)
        audit_false += privacy_audit(scores[member], scores[~member]).refutation(4.0) is not None
    assert delong_false > 15  # P(separation) = p^80 ≈ 0.23
    assert audit_false == 0


# --------------------------------------------------------------------------- the family


@pytest.mark.parametrize("with_classes", [False, True])
def test_bonferroni_allocation(with_classes: bool) -> None:
    """1 − confidence split equally between attacks, then between the three tests, then inside each test."""
    members, non_members, member_classes, non_member_classes = demo_like(11)
    classes = (member_classes, non_member_classes) if with_classes else (None, None)
    audit = privacy_audit(members, non_members, *classes, confidence=0.9)
    attacks = 2 if with_classes else 1
    per_test = 0.1 / (3 * attacks)
    assert [a.attack for a in audit.attacks] == ["loss_threshold", "class_calibrated"][:attacks]
    primitive = membership_audit(members, non_members, member_classes=classes[0], non_member_classes=classes[1],
                                 confidence=1 - per_test)
    for attack, result in zip(audit.attacks, primitive):
        assert attack.auc == result.auc
        assert attack.epsilon_lower_bounds["threshold"] == pytest.approx(result.epsilon_lower_bound, rel=1e-12)
        assert attack.auc_interval == pytest.approx(  # each end at per_test / 2
            auc_interval_distribution_free(attack.auc, 150, 735, per_test / 2), rel=1e-12)
        low, high = attack.auc_interval
        assert attack.epsilon_lower_bounds["auc"] == max(0.0, logit(low), logit(1 - high))
    sweep_scores = [(members, non_members)]
    if with_classes:
        sweep_scores.append(scorers._audit._calibrated(members, non_members, member_classes, non_member_classes))
    for attack, scores in zip(audit.attacks, sweep_scores):
        sweep = scorers._audit._sweep(*scores)
        expected = max(one_run_epsilon(member_guesses=g[0], non_member_guesses=g[1], correct=g[2],
                                       prior=150 / 885, alpha=per_test / len(ONE_RUN_FRACTIONS))
                       for g in (one_run_guesses(sweep, f) for f in ONE_RUN_FRACTIONS))
        assert attack.epsilon_lower_bounds["one_run"] == pytest.approx(expected, rel=1e-12)
    assert audit.epsilon_lower_bound == max(max(a.epsilon_lower_bounds.values()) for a in audit.attacks)
    assert audit.epsilon_lower_bounds == {test: max(a.epsilon_lower_bounds[test] for a in audit.attacks)
                                          for test in ("threshold", "auc", "one_run")}


def test_descriptive_rates_are_at_the_nominal_confidence() -> None:
    members, non_members, member_classes, non_member_classes = demo_like()
    audit = privacy_audit(members, non_members, member_classes, non_member_classes)
    for attack, result in zip(audit.attacks, membership_audit(members, non_members, member_classes=member_classes,
                                                              non_member_classes=non_member_classes)):
        assert attack.tpr_at_fpr == result.tpr_at_fpr
        assert attack.false_positives_allowed == result.false_positives_allowed == {0.001: 0, 0.01: 7}


# --------------------------------------------------------------------------- refutation and the reconciling δ


def test_demo_like_case_is_refuted_by_the_auc_check() -> None:
    """AUC ≈ 0.645 with 150 members and 735 non-members far exceeds the 0.502 that ε = 0.0097 allows."""
    audit = privacy_audit(*demo_like())
    calibrated = audit.attacks[1]
    assert calibrated.auc == pytest.approx(0.645, abs=0.005)
    assert calibrated.auc_interval[0] > max_auc(DEMO_EPSILON)
    refutation = audit.refutation(DEMO_EPSILON)
    assert refutation is not None
    assert "auc/class_calibrated" in refutation.refuted_by
    assert "auc/loss_threshold" not in refutation.refuted_by  # 0.59: the loss attack alone is too weak here
    assert refutation.auc_allowed == pytest.approx((1 - max_auc(DEMO_EPSILON), max_auc(DEMO_EPSILON)))
    assert refutation.epsilon_lower_bound == audit.epsilon_lower_bound > DEMO_EPSILON
    assert refutation.reconciling_delta is not None and refutation.reconciling_delta > 0
    assert audit.refutation(audit.epsilon_lower_bound) is None
    assert audit.refutation(math.inf) is None


def test_golden_reconciling_delta_at_separation() -> None:
    """1000 members at 0.01, 1000 non-members at 5.0, one attack: each test's share is 0.05 / 3."""
    audit = privacy_audit([0.01] * 1000, [5.0] * 1000)
    # threshold 0.01: TP 1000 of 1000, FP 0; 2 distinct scores → 4 bounds at 0.05/12 each:
    # TPR_low = r, FPR_high = 1 − r with r = (0.05/12)^(1/1000); δ = r − e^ε (1 − r)
    r = (0.05 / 12) ** (1 / 1000)
    # AUC = 1: lower end L = (0.05/6)^(1/1000); δ = 1 − sqrt((1 − L)(1 + e^ε))
    low = (0.05 / 6) ** (1 / 1000)
    for epsilon in (1.0, 3.0):
        threshold_delta = r - math.exp(epsilon) * (1 - r)
        auc_delta = 1 - math.sqrt((1 - low) * (1 + math.exp(epsilon)))
        refutation = audit.refutation(epsilon)
        assert refutation is not None
        assert refutation.reconciling_delta == pytest.approx(max(threshold_delta, auc_delta), rel=1e-9)
    assert audit.refutation(1.0).reconciling_delta == pytest.approx(0.97968, abs=1e-5)  # type: ignore[union-attr]
    assert audit.attacks[0].epsilon_lower_bounds["threshold"] == pytest.approx(math.log(r / (1 - r)), rel=1e-9)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.slow
def test_reconciling_delta_agrees_with_every_threshold(seed: int) -> None:
    rng = np.random.default_rng(seed)
    members, non_members = rng.integers(0, 30, 120).astype(float), rng.integers(6, 36, 160).astype(float)
    audit = privacy_audit(members, non_members)
    alpha = 0.05 / 3 / (2 * len(np.unique(np.concatenate([members, non_members]))))
    low, high = audit.attacks[0].auc_interval
    assert audit.epsilon_lower_bound > 0.3
    for epsilon in (0.0, 0.1, audit.epsilon_lower_bound / 2):
        scale = 1 + math.exp(epsilon)
        expected = max(brute_delta(members, non_members, epsilon, alpha), 1 - math.sqrt((1 - low) * scale),
                       1 - math.sqrt(high * scale))
        refutation = audit.refutation(epsilon)
        assert refutation is not None and refutation.reconciling_delta == pytest.approx(expected, rel=1e-9)


def test_envelope_keeps_what_binds() -> None:
    """The hull gives the same ε and δ as every point, from a handful of points."""
    rng = np.random.default_rng(9)
    high = np.sort(rng.uniform(0.001, 1.0, 500))
    low = np.clip(high * rng.uniform(0.5, 3.0, 500), 0.0, 1.0)
    envelope = _Envelope.of(high, low)
    assert len(envelope.points) < 20
    assert envelope.epsilon() == pytest.approx(max(0.0, float(np.max(np.log(low / high)))))
    for epsilon in (0.0, 0.2, 0.7, 2.0):
        assert envelope.delta(epsilon) == pytest.approx(max(0.0, float(np.max(low - math.exp(epsilon) * high))))


def test_refutation_by_the_threshold_test_and_its_sentence() -> None:
    rng = np.random.default_rng(3)
    members, non_members = rng.exponential(0.05, 2000), rng.exponential(1.0, 2000)  # a strongly memorising model
    audit = privacy_audit(members, non_members)
    refutation = audit.refutation(0.95)
    assert refutation is not None and refutation.test == "threshold"
    assert refutation.epsilon_lower_bound == audit.attacks[0].epsilon_lower_bounds["threshold"] > 2
    delta = refutation.reconciling_delta
    assert delta is not None
    assert audit.sentence(0.95) == (
        f"The loss-threshold attack shows epsilon >= {refutation.epsilon_lower_bound:.3g} (95% family-wise, "
        f"delta = 0), above the stated epsilon = 0.95, so the audit refutes the stated epsilon; reconciling them "
        f"would need delta >= {delta:.2g}.")


def test_sentence_for_an_auc_refutation() -> None:
    audit = privacy_audit([0.01] * 1000, [5.0] * 1000)
    envelope = _Envelope(((1.0, 0.0),))  # no threshold evidence, so that the AUC test is the strongest
    only_auc = dataclasses.replace(audit, _envelope=envelope, attacks=(dataclasses.replace(
        audit.attacks[0], auc=0.645, auc_interval=(0.583, 0.708),
        epsilon_lower_bounds={"threshold": 0.0, "auc": logit(0.583), "one_run": 0.0}),))
    assert only_auc.sentence(DEMO_EPSILON) == (
        "The loss-threshold attack's AUC is 0.645 (95% family-wise interval 0.583-0.708); an epsilon-DP release "
        "allows at most 0.502 at epsilon = 0.0097, so the audit refutes the stated epsilon; reconciling them would "
        "need delta >= 0.085.")  # 1 − sqrt(0.417 · (1 + e^0.0097)) = 1 − sqrt(0.8381) = 0.0845
    reversed_auc = dataclasses.replace(only_auc, attacks=(dataclasses.replace(
        only_auc.attacks[0], auc=0.355, auc_interval=(0.292, 0.417),
        epsilon_lower_bounds={"threshold": 0.0, "auc": logit(1 - 0.417), "one_run": 0.0}),))
    assert "allows at least 0.498 at epsilon = 0.0097" in reversed_auc.sentence(DEMO_EPSILON)


def test_sentence_when_only_the_one_run_test_refutes() -> None:
    audit = privacy_audit([0.01] * 1000, [5.0] * 1000)
    only_one_run = dataclasses.replace(audit, _envelope=_Envelope(((1.0, 0.0),)), attacks=(dataclasses.replace(
        audit.attacks[0], auc=0.52, auc_interval=(0.45, 0.59),
        epsilon_lower_bounds={"threshold": 0.0, "auc": 0.0, "one_run": 0.4}),))
    refutation = only_one_run.refutation(0.2)
    assert refutation is not None and refutation.test == "one_run" and refutation.reconciling_delta is None
    assert only_one_run.sentence(0.2) == (
        "The one-run test (Steinke, Nasr & Jagielski 2023) on the loss-threshold attack's guesses shows "
        "epsilon >= 0.4 (95% family-wise, delta = 0), above the stated epsilon = 0.2, so the audit refutes the "
        "stated epsilon.")


def test_sentence_when_nothing_refutes() -> None:
    rng = np.random.default_rng(2)
    audit = privacy_audit(rng.gamma(2.0, size=500), rng.gamma(2.0, size=500))
    assert audit.refutation(0.5) is None
    a = audit.attacks[0]
    assert audit.sentence(0.5) == (
        f"No test refutes the stated epsilon = 0.5 (95% family-wise, delta = 0): the largest epsilon lower bound is "
        f"{audit.epsilon_lower_bound:.3g}, and the strongest attack's AUC is {a.auc:.3f} ({a.auc_interval[0]:.3f}-"
        f"{a.auc_interval[1]:.3f}), an interval that reaches the 0.378-0.622 an epsilon-DP release allows.")
    assert audit.sentence(10.0).endswith(  # e^10/(1+e^10) = 0.99995: '0.000-1.000' would read as nonsense
        "and at this epsilon an epsilon-DP release may have almost any AUC (up to 0.999955), so no AUC can refute it.")


def test_sentence_names_the_family_level() -> None:
    audit = privacy_audit([0.01] * 1000, [5.0] * 1000, confidence=0.975)
    assert "(97.5% family-wise" in audit.sentence(1.0)
    assert "(90% family-wise" in privacy_audit([0.01] * 1000, [5.0] * 1000, confidence=0.9).sentence(1.0)


@pytest.mark.parametrize("epsilon", [-0.1, math.nan])
def test_bad_stated_epsilon(epsilon: float) -> None:
    audit = privacy_audit([0.1, 0.2], [0.3, 0.4])
    with pytest.raises(ValueError, match="epsilon"):
        audit.refutation(epsilon)


# --------------------------------------------------------------------------- simulation: exactly ε-DP mechanisms


@pytest.mark.parametrize(("mechanism", "epsilon", "records", "members"), [
    ("laplace", 0.5, 400, 200), ("laplace", 2.0, 400, 100), ("randomized_response", 1.0, 400, 200),
    ("randomized_response", 3.0, 400, 100),
])
@pytest.mark.slow
def test_exactly_dp_mechanisms_are_refuted_at_most_5_percent(mechanism: str, epsilon: float, records: int,
                                                             members: int) -> None:
    """The family's ε bound (so any refutation) exceeds the true ε in at most 5% of 100 seeded runs, while
    showing real evidence (the mean bound is a good part of ε): the guarantee holds and is not vacuous."""
    false, bounds = 0, []
    for seed in range(100):
        rng = np.random.default_rng([seed, records, members, round(epsilon * 10)])
        member = split(rng, records, members)
        if mechanism == "laplace":
            classes = rng.integers(0, 3, records)
            scores = laplace_mechanism(rng, epsilon, member, classes)
            audit = privacy_audit(scores[member], scores[~member], classes[member], classes[~member])
        else:
            scores = randomized_response(rng, epsilon, member)
            audit = privacy_audit(scores[member], scores[~member])
        false += audit.refutation(epsilon) is not None
        assert (audit.refutation(epsilon) is not None) == (audit.epsilon_lower_bound > epsilon)
        bounds.append(audit.epsilon_lower_bound)
    assert false <= 5
    assert np.mean(bounds) > 0.25 * epsilon


# --------------------------------------------------------------------------- aggregates only, API


def test_to_dict_holds_aggregates_only() -> None:
    members, non_members, member_classes, non_member_classes = demo_like()
    audit = privacy_audit(members, non_members, member_classes, non_member_classes)
    data = audit.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == ["confidence", "delta", "members", "non_members", "epsilon_lower_bound",
                          "epsilon_lower_bounds", "attacks"]
    assert data["epsilon_lower_bounds"] == {test: max(a["epsilon_lower_bounds"][test] for a in data["attacks"].values())
                                            for test in ("threshold", "auc", "one_run")}
    assert (data["confidence"], data["delta"], data["members"], data["non_members"]) == (0.95, 0.0, 150, 735)
    assert list(data["attacks"]) == ["loss_threshold", "class_calibrated"]
    for attack in data["attacks"].values():
        assert list(attack) == ["auc", "auc_interval", "epsilon_lower_bounds", "tpr_at_fpr", "false_positives_allowed"]
        assert list(attack["epsilon_lower_bounds"]) == ["threshold", "auc", "one_run"]
        assert attack["false_positives_allowed"] == {"0.001": 0, "0.01": 7}
    numbers = set()

    def collect(value: object) -> None:
        if isinstance(value, dict):
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)
        else:
            numbers.add(value)

    collect(data)
    assert len(numbers) < 40  # a few dozen aggregates, however many records
    calibrated = scorers._audit._calibrated(members, non_members, member_classes, non_member_classes)
    scores = set(np.concatenate([members, non_members, *calibrated]).tolist()) - {0.0}  # 0: a class's median record
    assert not scores & numbers  # no loss, score or threshold
    assert "_envelope" not in repr(audit) and "points" not in json.dumps(data)


def test_results_are_frozen_and_delta_is_zero() -> None:
    audit = privacy_audit([0.1, 0.2, 0.3], [0.3, 0.4])
    assert audit.delta == 0.0
    with pytest.raises(dataclasses.FrozenInstanceError):
        audit.confidence = 0.5  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        audit.attacks[0].auc = 0.5  # type: ignore[misc]
    assert isinstance(audit, PrivacyAudit) and isinstance(audit.attacks[0], AttackAudit)
    assert dataclasses.is_dataclass(Refutation)


def test_order_of_records_does_not_matter() -> None:
    members, non_members, member_classes, non_member_classes = demo_like(5)
    reference = privacy_audit(members, non_members, member_classes, non_member_classes)
    rng = np.random.default_rng(0)
    pm, pn = rng.permutation(150), rng.permutation(735)
    assert privacy_audit(members[pm], non_members[pn], member_classes[pm], non_member_classes[pn]) == reference


@pytest.mark.slow
def test_fifty_thousand_records_a_side() -> None:
    rng = np.random.default_rng(41)
    n = 50_000
    member_classes, non_member_classes = rng.integers(0, 10, n), rng.integers(0, 10, n)
    members = member_classes + rng.normal(-0.1, 1.0, n)
    non_members = non_member_classes + rng.normal(0.0, 1.0, n)
    audit = privacy_audit(members, non_members, member_classes, non_member_classes)
    plain, calibrated = audit.attacks
    assert calibrated.auc == pytest.approx(stats.norm.cdf(0.1 / math.sqrt(2)), abs=0.01)
    assert calibrated.auc_interval[0] > 0.5 and calibrated.epsilon_lower_bound > 0
    assert all(math.isfinite(b) for a in audit.attacks for b in a.epsilon_lower_bounds.values())


@pytest.mark.parametrize(("args", "kwargs", "match"), [
    (([], [1.0]), {}, "member_losses is empty"),
    (([1.0, math.nan], [1.0]), {}, "1 NaN value"),
    (([1.0], [1.0], [0]), {}, "both"),
    (([1.0], [1.0], [0, 1], [0]), {}, "member_classes"),
    (([1.0], [1.0]), {"confidence": 1.0}, "confidence"),
    (([1.0], [1.0]), {"fpr_levels": (2.0,)}, "FPR levels"),
])
def test_bad_inputs(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        privacy_audit(*args, **kwargs)


def test_public_names() -> None:
    for name in ("privacy_audit", "PrivacyAudit", "AttackAudit", "Refutation", "max_auc", "one_run_p_value",
                 "auc_interval_distribution_free", "membership_audit", "AttackResult"):
        assert name in scorers.__all__


def test_importing_scorers_loads_no_scipy() -> None:
    code = "import sys, scorers; assert not [m for m in sys.modules if m.startswith('scipy')], 'scipy was imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("cap", [709.0, 710.0, 1000.0, 1e6, math.inf])
def test_a_cap_beyond_the_range_of_e_to_the_epsilon_is_judged_without_overflow(cap: float) -> None:
    """A cap above about 709 overflowed e^ε (the audit then ended in an internal error): every AUC is allowed, no δ
    is needed, and the sentence says so."""
    rng = np.random.default_rng(0)
    audit = privacy_audit(rng.exponential(1.0, 300), rng.exponential(1.3, 300))
    assert max_auc(cap) == 1.0 and audit.refutation(cap) is None
    assert audit._envelope.delta(cap) == 0.0
    assert "no AUC can refute it" in audit.sentence(cap)


def test_the_stable_forms_agree_with_the_plain_ones_in_range() -> None:
    for epsilon in (0.0, 0.5, 3.0, 30.0):
        assert max_auc(epsilon, 0.01) == pytest.approx(1.0 - 0.99**2 / (1.0 + math.exp(epsilon)), rel=1e-12)
