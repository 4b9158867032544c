"""Scores of one SWAG-PPM fit: the max-delta series and the F1 values per draw.

What a practitioner reads off the max-delta plot (METHOD.md, "Reading the
max-delta series"), as numbers:

- the *bulk spread*: the interquartile range of the draws that are not spikes,
  relative to their median. A wide, wandering band means underfit.
- *spikes*: draws far above the bulk, measured in robust standard deviations
  (1.4826 · MAD of the series around its median). A tight band with a few
  isolated spikes means overfit.

Both are statistics of the series' distribution, so they ignore the order of the
draws (the draws are independent), and the relative ones are unchanged when the
whole series is multiplied by a positive constant.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Statistic = Literal["median", "q10"]

MAD_TO_SD = 1.4826  # MAD of a normal distribution times this is its standard deviation
MEAN_AD_TO_SD = 1.2533  # likewise for the mean absolute deviation (the fallback when MAD = 0)
MIN_DRAWS = 8  # below this, spread and spikes are not estimated (reported as NaN)
DEFAULT_SPIKE_Z = 5.5  # calibrated by benchmarks/scorers/calibrate_scorers.py (docs/results/scorer-calibration.md)


@dataclass(frozen=True, kw_only=True)
class MaxDeltaScores:
    """Scores of a max-delta series m_1..m_D (one value per posterior draw).

    Attributes:
        num_draws: length of the series.
        num_nonfinite: NaN or ±inf values; any makes the fit catastrophic.
        epsilon: 2 · max of the series (inf/NaN when a value is not finite).
        epsilon_cap: the target ε, if given; ``epsilon_margin`` = ε − target (≤ 0 is met).
        median: median of the finite values.
        spread: IQR / median of all finite values.
        bulk_spread: IQR / median of the series without its spikes: the underfit signal.
        robust_sd: 1.4826 · MAD around the median (the unit of ``max_robust_z``);
            1.2533 · the mean absolute deviation when over half the draws are equal.
        spike_threshold: values above ``median + spike_z · robust_sd`` are spikes.
        spike_count, spike_fraction: how many finite draws are spikes: the overfit signal.
        max_robust_z: (max − median) / robust_sd; 0 for a constant series.
        max_over_median: max / median.

    Series shorter than ``MIN_DRAWS`` give NaN spreads and no spikes; a constant
    series has zero spread, no spikes and ``max_robust_z`` 0.
    """

    num_draws: int
    num_nonfinite: int
    epsilon: float
    epsilon_cap: float | None
    epsilon_margin: float | None
    median: float
    spread: float
    bulk_spread: float
    robust_sd: float
    spike_z: float
    spike_threshold: float
    spike_count: int
    spike_fraction: float
    max_robust_z: float
    max_over_median: float

    @property
    def finite(self) -> bool:
        return self.num_nonfinite == 0 and self.num_draws > 0


def _iqr_over_median(values: np.ndarray) -> float:
    if len(values) < MIN_DRAWS:
        return math.nan
    median = float(np.median(values))
    q75, q25 = np.percentile(values, [75, 25])
    if median <= 0:
        return 0.0 if q75 == q25 else math.inf
    return float((q75 - q25) / median)


def score_max_delta(
    series: Sequence[float] | np.ndarray, *, epsilon_cap: float | None = None, spike_z: float = DEFAULT_SPIKE_Z
) -> MaxDeltaScores:
    """Score a max-delta series; ``spike_z`` is the spike threshold in robust SDs."""
    if epsilon_cap is not None and not epsilon_cap > 0:
        raise ValueError(f"epsilon_cap must be positive, got {epsilon_cap}")
    if not spike_z > 0:
        raise ValueError(f"spike_z must be positive, got {spike_z}")
    values = np.asarray(series, dtype=float).ravel()
    finite = values[np.isfinite(values)]
    nonfinite = int(len(values) - len(finite))
    if np.isnan(values).any() or len(finite) == 0 and not np.isposinf(values).any():
        epsilon = math.nan
    elif np.isposinf(values).any():
        epsilon = math.inf
    else:
        epsilon = 2.0 * float(finite.max())
    margin = None if epsilon_cap is None else epsilon - epsilon_cap
    if len(finite) == 0:
        nan = math.nan
        return MaxDeltaScores(num_draws=len(values), num_nonfinite=nonfinite, epsilon=epsilon,
                              epsilon_cap=epsilon_cap, epsilon_margin=margin, median=nan, spread=nan,
                              bulk_spread=nan, robust_sd=nan, spike_z=spike_z, spike_threshold=nan, spike_count=0,
                              spike_fraction=0.0, max_robust_z=nan, max_over_median=nan)
    median = float(np.median(finite))
    deviations = np.abs(finite - median)
    robust_sd = MAD_TO_SD * float(np.median(deviations))
    if robust_sd == 0:  # over half the draws equal: fall back to the mean absolute deviation
        robust_sd = MEAN_AD_TO_SD * float(deviations.mean())
    top = float(finite.max())
    if robust_sd > 0:
        max_z = (top - median) / robust_sd
        threshold = median + spike_z * robust_sd
    else:  # a constant series
        max_z, threshold = 0.0, median
    spikes = finite > threshold if len(finite) >= MIN_DRAWS else np.zeros(len(finite), dtype=bool)
    count = int(spikes.sum())
    return MaxDeltaScores(
        num_draws=len(values), num_nonfinite=nonfinite, epsilon=epsilon, epsilon_cap=epsilon_cap,
        epsilon_margin=margin, median=median, spread=_iqr_over_median(finite),
        bulk_spread=_iqr_over_median(finite[~spikes]), robust_sd=robust_sd, spike_z=spike_z,
        spike_threshold=threshold, spike_count=count, spike_fraction=count / len(finite),
        max_robust_z=max_z, max_over_median=top / median if median > 0 else (1.0 if top == median else math.inf),
    )


def spike_mask(series: Sequence[float] | np.ndarray, scores: MaxDeltaScores) -> np.ndarray:
    """Which draws of ``series`` are spikes under ``scores`` (for plots)."""
    values = np.asarray(series, dtype=float)
    if scores.num_draws - scores.num_nonfinite < MIN_DRAWS:
        return np.zeros(len(values), dtype=bool)
    return np.isfinite(values) & (values > scores.spike_threshold)


@dataclass(frozen=True, kw_only=True)
class UtilityScores:
    """Utility of the posterior draws against the non-private baseline.

    ``macro`` and ``weighted`` are the chosen ``statistic`` (median or 10th
    percentile) of the per-draw F1 values; each must reach
    ``(1 − max_degradation) · baseline`` (``margin_*`` = value − threshold, ≥ 0 is
    met). ``*_iqr`` measure stability across draws. ``collapsed`` is set when the
    weighted F1 is no better than predicting the majority class (when its rate is
    known) or below ``collapse_fraction`` of the baseline.
    """

    statistic: Statistic
    num_draws: int
    macro: float
    weighted: float
    baseline_macro: float
    baseline_weighted: float
    max_degradation: float
    threshold_macro: float
    threshold_weighted: float
    margin_macro: float
    margin_weighted: float
    macro_iqr: float
    weighted_iqr: float
    majority_weighted_f1: float | None
    collapsed: bool

    @property
    def meets_target(self) -> bool:
        return self.margin_macro >= 0 and self.margin_weighted >= 0


def majority_weighted_f1(majority_rate: float) -> float:
    """Weighted F1 of always predicting the majority class (share p): p · 2p/(1+p)."""
    p = majority_rate
    return p * 2 * p / (1 + p)


def score_utility(
    f1_macro: Sequence[float],
    f1_weighted: Sequence[float],
    *,
    baseline_macro: float,
    baseline_weighted: float,
    max_degradation: float = 0.10,
    statistic: Statistic = "median",
    majority_rate: float | None = None,
    collapse_fraction: float = 0.5,
) -> UtilityScores:
    """Score F1 per draw against ``(1 − max_degradation) · baseline``; no draws give NaN and a collapse."""
    if statistic not in ("median", "q10"):
        raise ValueError(f"statistic must be 'median' or 'q10', got {statistic!r}")
    if not 0.0 <= max_degradation < 1.0:
        raise ValueError(f"max_degradation must be in [0, 1), got {max_degradation}")
    macro_values = np.asarray(f1_macro, dtype=float)
    weighted_values = np.asarray(f1_weighted, dtype=float)
    if len(macro_values) != len(weighted_values):
        raise ValueError(f"{len(macro_values)} macro-F1 values but {len(weighted_values)} weighted-F1 values")

    def stat(values: np.ndarray) -> float:
        if len(values) == 0 or not np.isfinite(values).all():
            return math.nan
        return float(np.median(values) if statistic == "median" else np.quantile(values, 0.1))

    def iqr(values: np.ndarray) -> float:
        return float(np.subtract(*np.percentile(values, [75, 25]))) if len(values) else math.nan

    macro, weighted = stat(macro_values), stat(weighted_values)
    threshold_macro = (1 - max_degradation) * baseline_macro
    threshold_weighted = (1 - max_degradation) * baseline_weighted
    floor = collapse_fraction * baseline_weighted
    majority = None if majority_rate is None else majority_weighted_f1(majority_rate)
    if majority is not None:
        floor = max(floor, majority)
    collapsed = not math.isfinite(weighted) or weighted <= floor
    return UtilityScores(
        statistic=statistic, num_draws=len(macro_values), macro=macro, weighted=weighted,
        baseline_macro=baseline_macro, baseline_weighted=baseline_weighted, max_degradation=max_degradation,
        threshold_macro=threshold_macro, threshold_weighted=threshold_weighted,
        margin_macro=macro - threshold_macro, margin_weighted=weighted - threshold_weighted,
        macro_iqr=iqr(macro_values), weighted_iqr=iqr(weighted_values),
        majority_weighted_f1=majority, collapsed=collapsed,
    )
