"""Tests of ``scorers._scores``: max-delta scores and utility scores.

Thresholds are written in terms of ``DEFAULT_SPIKE_Z`` and ``DiagnosisThresholds()``
(they may be re-calibrated), except in the golden tests, which pass ``spike_z``
explicitly so that the hand-computed numbers do not depend on the default.
"""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import scorers
from scorers import (
    DEFAULT_SPIKE_Z,
    DiagnosisThresholds,
    majority_weighted_f1,
    score_max_delta,
    score_utility,
    spike_mask,
)
from scorers._scores import MIN_DRAWS
from tests import PATIENCE
from tests.scorers.series import gaussian_bulk, with_spikes

REPO = Path(__file__).resolve().parents[2]
SPREAD_THRESHOLD = DiagnosisThresholds().max_bulk_spread

# A small hand-built series: a bulk of 8 values and one far value.
HAND = [4.0, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 30.0]
HAND_Z = 5.0  # passed explicitly: the golden numbers must not move with DEFAULT_SPIKE_Z

RELATIVE = ("spread", "bulk_spread", "spike_count", "max_robust_z", "max_over_median", "spike_fraction")
ABSOLUTE = ("median", "epsilon", "robust_sd", "spike_threshold")


def iqr_over_median(values: np.ndarray) -> float:
    q75, q25 = np.percentile(values, [75, 25])
    return float((q75 - q25) / np.median(values))


# --------------------------------------------------------------------------- golden numbers


def test_golden_hand_series_computed_with_numpy() -> None:
    x = np.array(HAND)
    s = score_max_delta(HAND, spike_z=HAND_Z)
    median = np.median(x)
    robust_sd = 1.4826 * np.median(np.abs(x - median))
    bulk = x[x <= median + HAND_Z * robust_sd]
    assert len(bulk) == len(x) - 1  # the 30.0 alone is a spike
    assert s.num_draws == 9
    assert s.num_nonfinite == 0
    assert s.finite
    assert s.median == pytest.approx(median)
    assert s.spread == pytest.approx(iqr_over_median(x))
    assert s.bulk_spread == pytest.approx(iqr_over_median(bulk))
    assert s.robust_sd == pytest.approx(robust_sd)
    assert s.spike_z == HAND_Z
    assert s.spike_threshold == pytest.approx(median + HAND_Z * robust_sd)
    assert s.max_robust_z == pytest.approx((x.max() - median) / robust_sd)
    assert s.max_over_median == pytest.approx(x.max() / median)
    assert s.epsilon == pytest.approx(2 * x.max())
    assert s.spike_count == 1
    assert s.spike_fraction == pytest.approx(1 / 9)
    assert s.epsilon_cap is None and s.epsilon_margin is None


def test_golden_hand_series_literal_numbers() -> None:
    s = score_max_delta(HAND, spike_z=HAND_Z)
    assert s.median == 6.5
    assert s.epsilon == 60.0
    assert s.robust_sd == pytest.approx(1.4826)  # MAD is exactly 1.0
    assert s.spread == pytest.approx(2.0 / 6.5)  # q25 = 5.5, q75 = 7.5
    assert s.bulk_spread == pytest.approx(0.28)  # (7.125 − 5.375) / 6.25
    assert s.spike_threshold == pytest.approx(6.5 + 5 * 1.4826)
    assert s.max_robust_z == pytest.approx(23.5 / 1.4826)
    assert s.max_over_median == pytest.approx(30.0 / 6.5)


def test_spike_z_argument_moves_the_threshold() -> None:
    s = score_max_delta(HAND, spike_z=20.0)  # 30.0 is only ~15.9 robust SDs above the median
    assert s.spike_count == 0
    assert s.bulk_spread == pytest.approx(s.spread)
    assert s.max_robust_z == pytest.approx(23.5 / 1.4826)


def test_default_spike_z_is_used() -> None:
    assert score_max_delta(HAND).spike_z == DEFAULT_SPIKE_Z


def test_list_and_array_inputs_agree() -> None:
    assert score_max_delta(HAND) == score_max_delta(np.array(HAND)) == score_max_delta(tuple(HAND))


# --------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("seed", [0, 1])
def test_shuffling_does_not_change_scores(seed: int) -> None:
    series = with_spikes(gaussian_bulk(seed, 0.5 * SPREAD_THRESHOLD, n=200), 3)
    reference = score_max_delta(series, epsilon_cap=25.0)
    rng = np.random.default_rng(100 + seed)
    for _ in range(50):
        assert score_max_delta(rng.permutation(series), epsilon_cap=25.0) == reference


def test_shuffling_hand_series() -> None:
    reference = score_max_delta(HAND, spike_z=HAND_Z)
    rng = np.random.default_rng(7)
    for _ in range(50):
        assert score_max_delta(rng.permutation(HAND), spike_z=HAND_Z) == reference


@pytest.mark.parametrize("factor", [1e-3, 0.37, 2.0, 13.5, 1e4])
def test_positive_scaling_keeps_relative_scores(factor: float) -> None:
    series = with_spikes(gaussian_bulk(3, 0.5 * SPREAD_THRESHOLD, n=300), 4)
    a = score_max_delta(series)
    b = score_max_delta(series * factor)
    assert a.spike_count == b.spike_count == 4
    for name in RELATIVE:
        assert getattr(b, name) == pytest.approx(getattr(a, name), rel=1e-9), name
    for name in ABSOLUTE:
        assert getattr(b, name) == pytest.approx(factor * getattr(a, name), rel=1e-9), name
    assert b.num_draws == a.num_draws and b.num_nonfinite == a.num_nonfinite


def test_scaling_the_hand_series() -> None:
    a = score_max_delta(HAND, spike_z=HAND_Z)
    b = score_max_delta([3 * v for v in HAND], spike_z=HAND_Z)
    for name in RELATIVE:
        assert getattr(b, name) == pytest.approx(getattr(a, name)), name
    assert b.median == pytest.approx(19.5)
    assert b.epsilon == pytest.approx(180.0)
    assert b.robust_sd == pytest.approx(3 * 1.4826)


# --------------------------------------------------------------------------- planted spikes


@pytest.mark.parametrize("k", [1, 3, 10])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_planted_spikes_are_all_found(k: int, seed: int) -> None:
    bulk = gaussian_bulk(seed, 0.5 * SPREAD_THRESHOLD)
    series = with_spikes(bulk, k)
    s = score_max_delta(series)
    assert s.spike_count == k
    assert s.spike_fraction == pytest.approx(k / len(series))
    assert s.max_robust_z > DEFAULT_SPIKE_Z
    # the bulk spread ignores the spikes; the whole-series spread does not
    assert s.bulk_spread == pytest.approx(iqr_over_median(bulk), rel=1e-9)
    mask = spike_mask(series, s)
    assert mask.dtype == bool and mask.shape == series.shape
    assert mask.sum() == k
    assert mask[len(bulk):].all() and not mask[: len(bulk)].any()


def test_spike_mask_follows_shuffled_positions() -> None:
    series = with_spikes(gaussian_bulk(4, 0.5 * SPREAD_THRESHOLD), 3)
    is_spike = np.zeros(len(series), dtype=bool)
    is_spike[-3:] = True
    order = np.random.default_rng(5).permutation(len(series))
    shuffled = series[order]
    s = score_max_delta(shuffled)
    np.testing.assert_array_equal(spike_mask(shuffled, s), is_spike[order])


def test_pure_gaussian_has_no_spikes() -> None:
    """Statistical check of the false-positive rate (design target < 1% of series)."""
    for seed in range(50):
        s = score_max_delta(gaussian_bulk(1000 + seed, 0.5 * SPREAD_THRESHOLD))
        assert s.spike_count == 0, f"seed {1000 + seed}: max robust z {s.max_robust_z:.2f}"
        assert s.bulk_spread == s.spread


def test_wide_bulk_has_large_bulk_spread() -> None:
    for seed in range(5):
        s = score_max_delta(gaussian_bulk(seed, 2.0 * SPREAD_THRESHOLD))
        assert s.bulk_spread > SPREAD_THRESHOLD
        assert s.bulk_spread == pytest.approx(2.0 * SPREAD_THRESHOLD, rel=0.25)


def test_narrow_bulk_has_small_bulk_spread() -> None:
    for seed in range(5):
        s = score_max_delta(gaussian_bulk(seed, 0.5 * SPREAD_THRESHOLD))
        assert s.bulk_spread < SPREAD_THRESHOLD
        assert s.bulk_spread == pytest.approx(0.5 * SPREAD_THRESHOLD, rel=0.25)


def test_wide_bulk_with_spikes_keeps_its_spread() -> None:
    bulk = gaussian_bulk(8, 2.0 * SPREAD_THRESHOLD)
    s = score_max_delta(with_spikes(bulk, 3))
    assert s.spike_count == 3
    assert s.bulk_spread == pytest.approx(iqr_over_median(bulk), rel=1e-9)
    assert s.bulk_spread > SPREAD_THRESHOLD


# --------------------------------------------------------------------------- degenerate inputs


def test_empty_series() -> None:
    s = score_max_delta([], epsilon_cap=10.0)
    assert s.num_draws == 0
    assert s.num_nonfinite == 0
    assert not s.finite  # nothing to judge
    assert math.isnan(s.epsilon)
    assert math.isnan(s.epsilon_margin)
    for name in ("median", "spread", "bulk_spread", "robust_sd", "spike_threshold", "max_robust_z",
                 "max_over_median"):
        assert math.isnan(getattr(s, name)), name
    assert s.spike_count == 0
    assert s.spike_fraction == 0.0
    assert spike_mask([], s).shape == (0,)


@pytest.mark.parametrize("n", range(1, MIN_DRAWS))
def test_series_shorter_than_min_draws(n: int) -> None:
    series = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 50.0][-n:]
    s = score_max_delta(series, epsilon_cap=10.0)
    assert s.num_draws == n
    assert s.finite
    assert math.isnan(s.spread)
    assert math.isnan(s.bulk_spread)
    assert s.spike_count == 0
    assert s.spike_fraction == 0.0
    assert s.epsilon == pytest.approx(2 * max(series))
    assert math.isfinite(s.epsilon)
    assert s.epsilon_margin == pytest.approx(2 * max(series) - 10.0)
    assert s.median == pytest.approx(float(np.median(series)))
    assert not spike_mask(series, s).any()


def test_min_draws_is_enough() -> None:
    series = [1.0, 1.1, 0.9, 1.05, 0.95, 1.02, 0.98, 1.01][:MIN_DRAWS]
    s = score_max_delta(series + [1.0] * (MIN_DRAWS - len(series)))
    assert math.isfinite(s.spread) and math.isfinite(s.bulk_spread)


@pytest.mark.parametrize("value", [0.5, 3.0, 100.0])
def test_constant_series(value: float) -> None:
    s = score_max_delta([value] * 50)
    assert s.spread == 0.0
    assert s.bulk_spread == 0.0
    assert s.robust_sd == 0.0
    assert s.spike_count == 0
    assert s.max_robust_z == 0.0
    assert s.max_over_median == pytest.approx(1.0)
    assert s.epsilon == 2 * value
    assert not spike_mask([value] * 50, s).any()


def test_constant_bulk_with_one_higher_value() -> None:
    """MAD is 0 when over half the draws are equal: the scale falls back to the mean absolute deviation."""
    series = [2.0] * 40 + [2.5]
    s = score_max_delta(series)
    assert s.robust_sd == pytest.approx(1.2533 * 0.5 / 41)
    assert s.max_robust_z == pytest.approx(41 / 1.2533)
    assert s.spike_threshold == pytest.approx(2.0 + DEFAULT_SPIKE_Z * s.robust_sd)
    assert s.spike_count == 1
    assert s.bulk_spread == 0.0
    assert s.spread == 0.0
    assert s.max_over_median == pytest.approx(1.25)
    assert s.epsilon == 5.0
    np.testing.assert_array_equal(spike_mask(series, s), [False] * 40 + [True])


def test_quantised_series_is_not_all_spikes() -> None:
    s = score_max_delta([1.0] * 6 + [1.001, 1.002, 1.003])
    assert s.spike_count == 0 and s.max_robust_z == pytest.approx(0.003 / (1.2533 * 0.006 / 9))


def test_nan_inside_the_series() -> None:
    series = list(gaussian_bulk(0, 0.5 * SPREAD_THRESHOLD, n=50))
    series[10] = math.nan
    s = score_max_delta(series, epsilon_cap=30.0)
    assert s.num_nonfinite == 1
    assert not s.finite
    assert math.isnan(s.epsilon)
    assert math.isnan(s.epsilon_margin)
    finite = np.array(series)[np.isfinite(series)]
    assert s.median == pytest.approx(float(np.median(finite)))  # the rest is still scored
    assert math.isfinite(s.bulk_spread)
    assert not spike_mask(series, s)[10]


def test_positive_inf_inside_the_series() -> None:
    series = list(gaussian_bulk(1, 0.5 * SPREAD_THRESHOLD, n=50)) + [math.inf]
    s = score_max_delta(series, epsilon_cap=30.0)
    assert s.num_nonfinite == 1
    assert not s.finite
    assert s.epsilon == math.inf
    assert s.epsilon_margin == math.inf
    assert not spike_mask(series, s)[-1]


def test_nan_and_inf_together() -> None:
    s = score_max_delta([1.0] * 20 + [math.inf, math.nan, -math.inf])
    assert s.num_nonfinite == 3
    assert not s.finite
    assert math.isnan(s.epsilon)  # NaN wins over inf


def test_negative_inf_counts_as_nonfinite() -> None:
    s = score_max_delta([1.0] * 20 + [-math.inf])
    assert s.num_nonfinite == 1
    assert not s.finite


def test_all_nonfinite() -> None:
    s = score_max_delta([math.nan] * 10)
    assert s.num_draws == 10 and s.num_nonfinite == 10
    assert not s.finite
    assert math.isnan(s.epsilon) and math.isnan(s.median)
    assert s.spike_count == 0


def test_all_zero_series() -> None:
    s = score_max_delta([0.0] * 20)
    assert s.median == 0.0
    assert s.spread == 0.0 and s.bulk_spread == 0.0
    assert s.spike_count == 0
    assert s.max_robust_z == 0.0
    assert s.epsilon == 0.0


def test_zero_median_with_upper_values() -> None:
    series = [0.0] * 8 + [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    s = score_max_delta(series)
    assert s.median == 0.0
    assert s.spread == math.inf  # IQR > 0 over a zero median
    assert s.max_over_median == math.inf
    assert s.robust_sd == pytest.approx(1.2533 * 21 / 14)  # mean absolute deviation fallback
    assert s.max_robust_z == pytest.approx(6 / s.robust_sd)
    assert s.spike_count == 0
    assert s.bulk_spread == math.inf
    assert not spike_mask(series, s).any()


@pytest.mark.parametrize(("target", "sign"), [(100.0, -1), (60.0, 0), (50.0, 1)])
def test_epsilon_target_margin_sign(target: float, sign: int) -> None:
    s = score_max_delta(HAND, epsilon_cap=target)  # ε = 60
    assert s.epsilon_cap == target
    assert s.epsilon_margin == pytest.approx(60.0 - target)
    assert np.sign(s.epsilon_margin) == sign


def test_spike_mask_agrees_with_spike_count_when_few_values_are_finite() -> None:
    series = [1.0] * 6 + [2.0, math.nan]  # 8 draws, 7 finite: fewer than MIN_DRAWS finite values
    s = score_max_delta(series)
    assert s.spike_count == 0
    assert spike_mask(series, s).sum() == s.spike_count


# --------------------------------------------------------------------------- utility


MACRO = [0.70, 0.72, 0.74, 0.76, 0.78, 0.80, 0.60, 0.82, 0.84, 0.86, 0.88]
WEIGHTED = [0.80, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88, 0.89, 0.90]


def test_utility_median_statistic() -> None:
    u = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90)
    assert u.statistic == "median"
    assert u.num_draws == 11
    assert u.macro == pytest.approx(np.median(MACRO)) and u.macro == pytest.approx(0.78)
    assert u.weighted == pytest.approx(0.85)
    assert u.threshold_macro == pytest.approx(0.9 * 0.85)
    assert u.threshold_weighted == pytest.approx(0.9 * 0.90)
    assert u.margin_macro == pytest.approx(0.78 - 0.765)
    assert u.margin_weighted == pytest.approx(0.85 - 0.81)
    assert u.meets_target
    assert not u.collapsed
    assert u.majority_weighted_f1 is None
    assert u.baseline_macro == 0.85 and u.baseline_weighted == 0.90 and u.max_degradation == 0.10


def test_utility_q10_statistic() -> None:
    u = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90, statistic="q10")
    assert u.statistic == "q10"
    assert u.macro == pytest.approx(np.quantile(MACRO, 0.1))
    assert u.macro == pytest.approx(0.70)  # sorted: 0.60, 0.70, ... ; the 10th percentile is the 2nd value
    assert u.weighted == pytest.approx(0.81)
    assert u.margin_macro == pytest.approx(0.70 - 0.765)
    assert not u.meets_target  # macro misses, weighted meets
    assert u.margin_weighted == pytest.approx(0.0, abs=1e-12)


def test_q10_is_more_demanding_than_median() -> None:
    med = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90)
    q10 = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90, statistic="q10")
    assert q10.macro < med.macro and q10.weighted < med.weighted


@pytest.mark.parametrize("d", [0.0, 0.05, 0.2, 0.5])
def test_utility_threshold_follows_max_degradation(d: float) -> None:
    u = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90, max_degradation=d)
    assert u.threshold_macro == pytest.approx((1 - d) * 0.85)
    assert u.threshold_weighted == pytest.approx((1 - d) * 0.90)
    assert u.margin_macro == pytest.approx(0.78 - (1 - d) * 0.85)
    assert u.margin_weighted == pytest.approx(0.85 - (1 - d) * 0.90)
    assert u.meets_target == (u.margin_macro >= 0 and u.margin_weighted >= 0)


def test_meets_target_needs_both() -> None:
    only_macro = score_utility([0.9] * 5, [0.5] * 5, baseline_macro=0.9, baseline_weighted=0.9, majority_rate=None,
                               collapse_fraction=0.1)
    assert only_macro.margin_macro >= 0 > only_macro.margin_weighted
    assert not only_macro.meets_target
    only_weighted = score_utility([0.5] * 5, [0.9] * 5, baseline_macro=0.9, baseline_weighted=0.9)
    assert not only_weighted.meets_target
    both = score_utility([0.9] * 5, [0.9] * 5, baseline_macro=0.9, baseline_weighted=0.9)
    assert both.meets_target


def test_utility_iqr_stability() -> None:
    u = score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90)
    assert u.macro_iqr == pytest.approx(np.subtract(*np.percentile(MACRO, [75, 25])))
    assert u.weighted_iqr == pytest.approx(0.05)  # 0.875 − 0.825
    steady = score_utility([0.8] * 11, [0.85] * 11, baseline_macro=0.85, baseline_weighted=0.90)
    assert steady.macro_iqr == 0.0 and steady.weighted_iqr == 0.0


@pytest.mark.parametrize(("p", "expected"), [(0.5, 1 / 3), (0.6, 0.45), (0.8, 0.7111111111111111), (1.0, 1.0)])
def test_majority_weighted_f1_golden(p: float, expected: float) -> None:
    assert majority_weighted_f1(p) == pytest.approx(expected)
    assert majority_weighted_f1(p) == pytest.approx(p * 2 * p / (1 + p))


def test_majority_weighted_f1_matches_sklearn_definition() -> None:
    """Always predicting the majority class: F1 of that class is 2p/(1+p), the others 0, weighted by support."""
    p = 0.7
    precision, recall = p, 1.0
    f1_majority = 2 * precision * recall / (precision + recall)
    assert majority_weighted_f1(p) == pytest.approx(p * f1_majority)


def test_collapse_at_the_majority_class_level() -> None:
    p = 0.6
    level = majority_weighted_f1(p)  # 0.45
    at_level = score_utility([0.3] * 5, [level] * 5, baseline_macro=0.8, baseline_weighted=0.8, majority_rate=p)
    assert at_level.majority_weighted_f1 == pytest.approx(0.45)
    assert at_level.collapsed  # no better than the majority class
    above = score_utility([0.3] * 5, [level + 0.01] * 5, baseline_macro=0.8, baseline_weighted=0.8,
                          majority_rate=p)
    assert not above.collapsed  # above the majority level and above half of the baseline (0.4)


def test_collapse_below_collapse_fraction_of_baseline() -> None:
    u = score_utility([0.3] * 5, [0.39] * 5, baseline_macro=0.8, baseline_weighted=0.8)
    assert u.collapsed  # 0.39 ≤ 0.5 · 0.8
    u = score_utility([0.3] * 5, [0.41] * 5, baseline_macro=0.8, baseline_weighted=0.8)
    assert not u.collapsed
    u = score_utility([0.3] * 5, [0.41] * 5, baseline_macro=0.8, baseline_weighted=0.8, collapse_fraction=0.6)
    assert u.collapsed  # 0.41 ≤ 0.6 · 0.8


def test_collapse_uses_the_higher_of_the_two_floors() -> None:
    # majority level 0.45 is below 0.5 · 0.96 = 0.48: the baseline fraction decides
    u = score_utility([0.3] * 5, [0.47] * 5, baseline_macro=0.9, baseline_weighted=0.96, majority_rate=0.6)
    assert u.collapsed
    # majority level 0.9·1.8/1.9 ≈ 0.853 is above 0.5 · baseline: the majority level decides
    u = score_utility([0.3] * 5, [0.85] * 5, baseline_macro=0.9, baseline_weighted=0.96, majority_rate=0.9)
    assert u.collapsed
    u = score_utility([0.3] * 5, [0.86] * 5, baseline_macro=0.9, baseline_weighted=0.96, majority_rate=0.9)
    assert not u.collapsed


def test_utility_without_draws() -> None:
    u = score_utility([], [], baseline_macro=0.8, baseline_weighted=0.85)
    assert u.num_draws == 0
    assert math.isnan(u.macro) and math.isnan(u.weighted)
    assert math.isnan(u.margin_macro) and math.isnan(u.margin_weighted)
    assert math.isnan(u.macro_iqr) and math.isnan(u.weighted_iqr)
    assert u.collapsed
    assert not u.meets_target


def test_utility_with_a_nan_draw_is_nan_and_collapsed() -> None:
    u = score_utility([0.8, math.nan, 0.8], [0.85, 0.85, math.nan], baseline_macro=0.8, baseline_weighted=0.85)
    assert math.isnan(u.macro) and math.isnan(u.weighted)
    assert u.collapsed


def test_utility_mismatched_lengths() -> None:
    with pytest.raises(ValueError, match="macro-F1"):
        score_utility([0.8, 0.8], [0.8], baseline_macro=0.8, baseline_weighted=0.8)


@pytest.mark.parametrize("statistic", ["mean", "q90", "", "Median"])
def test_utility_bad_statistic(statistic: str) -> None:
    with pytest.raises(ValueError, match="statistic"):
        score_utility([0.8], [0.8], baseline_macro=0.8, baseline_weighted=0.8, statistic=statistic)  # type: ignore[arg-type]


@pytest.mark.parametrize("d", [-0.1, 1.0, 1.5, math.nan])
def test_utility_bad_max_degradation(d: float) -> None:
    with pytest.raises(ValueError, match="max_degradation"):
        score_utility([0.8], [0.8], baseline_macro=0.8, baseline_weighted=0.8, max_degradation=d)


# --------------------------------------------------------------------------- no torch


def test_public_names() -> None:
    for name in scorers.__all__:
        assert hasattr(scorers, name), name


def test_importing_scorers_does_not_import_torch() -> None:
    modules = ["scorers"]
    if importlib.util.find_spec("scorers.plots") is not None:
        modules.append("scorers.plots")
    code = f"import sys; import {', '.join(modules)}; assert 'torch' not in sys.modules, 'torch was imported'"
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=PATIENCE)
    assert result.returncode == 0, result.stderr
