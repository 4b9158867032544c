"""Golden numbers for the privacy arithmetic (METHOD.md steps 3-7 and the reweighting)."""

from __future__ import annotations

import math

import pytest
import torch

from swagppm.mechanism import (
    epsilon_from_series,
    normalise_risk,
    privacy_weights,
    reweight,
    series_failure,
    weighted_delta,
    weighted_nll,
)


def test_normalised_risk_and_weights_golden() -> None:
    f = normalise_risk(torch.tensor([1.0, 2.0, 3.0, 5.0]))
    torch.testing.assert_close(f, torch.tensor([0.0, 0.25, 0.5, 1.0]))
    torch.testing.assert_close(privacy_weights(f, c=1.0), torch.tensor([1.0, 0.75, 0.5, 0.0]))
    torch.testing.assert_close(privacy_weights(f, c=2.0), torch.tensor([1.0, 1.0, 1.0, 0.0]))  # clipped at 1
    torch.testing.assert_close(privacy_weights(f, c=0.5, g=0.1), torch.tensor([0.6, 0.475, 0.35, 0.1]))
    torch.testing.assert_close(privacy_weights(f, c=0.5, g=-0.3), torch.tensor([0.2, 0.075, 0.0, 0.0]))  # clipped at 0
    with pytest.raises(ValueError, match="c must be positive"):
        privacy_weights(f, c=0.0)


def test_all_equal_risks_give_zero_f_and_weight_c() -> None:
    f = normalise_risk(torch.full((5,), 3.2))
    assert torch.equal(f, torch.zeros(5))
    torch.testing.assert_close(privacy_weights(f, c=0.7), torch.full((5,), 0.7))


def test_weighted_loss_is_not_normalised_by_the_weight_sum() -> None:
    logits = torch.tensor([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    labels = torch.tensor([0, 0, 1])
    w = torch.tensor([1.0, 0.5, 0.25])
    nll = -torch.log_softmax(logits, dim=-1)[torch.arange(3), labels]
    torch.testing.assert_close(weighted_nll(logits, labels, w), (w * nll).sum() / 3)
    torch.testing.assert_close(weighted_nll(logits, labels, 0.4 * w), 0.4 * weighted_nll(logits, labels, w))


def test_epsilon_is_twice_the_largest_max_delta() -> None:
    assert epsilon_from_series(torch.tensor([1.5, 4.25, 3.0])) == 8.5


def test_reweighting_golden() -> None:
    w = torch.tensor([1.0, 0.5, 0.25, 0.8])
    delta_i = torch.tensor([2.0, 1.0, 0.5, 0.0])  # Δ = 2
    # w' = min(1, k·w·Δ/Δ_i); Δ_i = 0 keeps w
    torch.testing.assert_close(reweight(w, delta_i, k=0.95), torch.tensor([0.95, 0.95, 0.95, 0.8]))
    torch.testing.assert_close(reweight(w, delta_i, k=0.4), torch.tensor([0.4, 0.4, 0.4, 0.8]))


def test_zero_weight_times_an_infinite_loss_contributes_exactly_zero() -> None:
    nll = torch.tensor([math.inf, 2.0, math.inf])
    w = torch.tensor([0.0, 0.5, 1.0])
    assert weighted_delta(nll, w).tolist() == [0.0, 1.0, math.inf]


def test_an_infinite_risk_normalises_to_one_and_nan_is_refused() -> None:
    assert normalise_risk(torch.tensor([1.0, 3.0, math.inf])).tolist() == [0.0, 1.0, 1.0]
    assert normalise_risk(torch.tensor([2.0, 2.0, math.inf])).tolist() == [0.0, 0.0, 1.0]
    assert normalise_risk(torch.tensor([math.inf, math.inf])).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="NaN"):
        normalise_risk(torch.tensor([1.0, math.nan]))


def test_a_non_finite_series_is_a_failure_not_a_nan_epsilon() -> None:
    assert series_failure([0.5, 1.0]) is None
    assert "privacy draw 2 gave a non-finite max delta (nan)" in str(series_failure([0.5, math.nan, 1.0]))
    assert "epsilon is unbounded" in str(series_failure([math.inf]))
