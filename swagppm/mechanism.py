"""The privacy arithmetic of SWAG-PPM, as pure functions on tensors.

Kept apart from the training engine so that every formula has golden-number
tests: risk normalisation, weights, the weighted loss, ε and the reweighting
variant (METHOD.md steps 3, 4, 5, 7 and "Reweighting variant").
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F


def normalise_risk(risk: torch.Tensor, *, public_range: tuple[float, ...] | None = None) -> torch.Tensor:
    """f = (r − min r) / (max r − min r) in [0, 1]; all-equal risks give f = 0.

    With ``public_range = (lo, hi)`` the constants are public instead: f = clip((r −
    lo) / (hi − lo), 0, 1), so each record's f depends on its own risk alone (the
    private minimum and maximum are two records' risks). An infinite risk (a record
    some draw gives probability 0) is the riskiest possible: f = 1, and the finite
    risks are normalised among themselves. NaN risks are refused (a stage 1 that
    produced them is a failed fit).
    """
    if torch.isnan(risk).any():
        raise ValueError("risk contains NaN")
    if public_range is not None:
        floor, ceiling = public_range
        return ((risk - floor) / (ceiling - floor)).clamp(0.0, 1.0)
    infinite = torch.isinf(risk) & (risk > 0)
    finite = risk[~infinite]
    if finite.numel() == 0:
        return torch.ones_like(risk)
    low, high = finite.min(), finite.max()
    span = high - low
    f = torch.zeros_like(risk) if span <= 0 else (risk - low) / span
    return torch.where(infinite, torch.ones_like(risk), f)


def privacy_weights(normalised_risk: torch.Tensor, *, c: float, g: float = 0.0) -> torch.Tensor:
    """w = clip(c · (1 − f) + g, 0, 1): riskier records get lower weights."""
    if c <= 0:
        raise ValueError(f"c must be positive, got {c}")
    return (c * (1.0 - normalised_risk) + g).clamp(0.0, 1.0)


def weighted_nll(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, *,
                 bound: float | None = None) -> torch.Tensor:
    """The batch loss mean_i(w_i · min(NLL_i, B)), deliberately not divided by Σw (that would cancel c); B is the
    public ``nll_bound`` of a bounded likelihood (None: unbounded)."""
    nll = F.cross_entropy(logits.float(), labels, reduction="none")
    if bound is not None:
        nll = nll.clamp(max=bound)
    return (weights * nll).mean()


def weighted_delta(nll: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """w_i · NLL_i, with records of weight 0 contributing exactly 0 (also when their NLL is infinite)."""
    return torch.where(weights > 0, weights * nll, torch.zeros_like(nll))


def epsilon_from_series(max_delta: torch.Tensor) -> float:
    """ε = 2 · max over draws of the max delta: an order statistic of the draws (it grows with their number), an
    estimate, never a bound."""
    return 2.0 * float(max_delta.max())


def series_failure(max_delta: list[float]) -> str | None:
    """Why a max-delta series cannot give an ε (a non-finite draw: NaN or unbounded), or None when it can."""
    bad = next((d for d, value in enumerate(max_delta) if not math.isfinite(value)), None)
    if bad is None:
        return None
    return (f"privacy draw {bad + 1} gave a non-finite max delta ({max_delta[bad]}): epsilon is unbounded; "
            "the fit is catastrophic")


def reweight(weights: torch.Tensor, record_max: torch.Tensor, *, k: float) -> torch.Tensor:
    """w'_i = min(1, k · w_i · Δ / Δ_i), where Δ_i = max over draws of w_i·NLL_i and Δ = max_i Δ_i.

    Records with Δ_i = 0 keep w_i.
    """
    if not 0.0 < k <= 1.0:
        raise ValueError(f"reweight k must be in (0, 1], got {k}")
    bound = record_max.max()
    safe = torch.where(record_max > 0, record_max, torch.ones_like(record_max))
    raised = torch.clamp(k * weights * bound / safe, max=1.0)
    return torch.where(record_max > 0, raised, weights)
