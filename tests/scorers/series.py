"""Synthetic max-delta series shared by the scorer tests."""

from __future__ import annotations

import numpy as np

from scorers import DEFAULT_SPIKE_Z
from scorers._scores import MAD_TO_SD

NORMAL_IQR_PER_SD = 1.3490  # IQR of a normal distribution in SDs

# The practical guide's case study (METHOD.md): the eight (c, epochs) fitted and each verdict.
CASE_STUDY = [
    ((1.0, 7), "underfit"),
    ((1.0, 10), "overfit"),
    ((0.85, 7), "underfit"),
    ((0.85, 10), "underfit"),
    ((0.85, 13), "overfit"),
    ((0.7, 7), "underfit"),
    ((0.7, 10), "underfit"),
    ((0.7, 13), "feasible"),
]


def gaussian_bulk(seed: int, relative_spread: float, n: int = 500, mean: float = 10.0) -> np.ndarray:
    """n Gaussian draws whose IQR/median is about ``relative_spread``."""
    sd = relative_spread * mean / NORMAL_IQR_PER_SD
    return np.random.default_rng(seed).normal(mean, sd, n)


def with_spikes(bulk: np.ndarray, k: int) -> np.ndarray:
    """``bulk`` followed by k spikes at DEFAULT_SPIKE_Z + 3 robust SDs (and a little above)."""
    median = float(np.median(bulk))
    robust_sd = MAD_TO_SD * float(np.median(np.abs(bulk - median)))
    spikes = median + (DEFAULT_SPIKE_Z + 3.0) * robust_sd * (1.0 + 0.05 * np.arange(k))
    return np.concatenate([bulk, spikes])
