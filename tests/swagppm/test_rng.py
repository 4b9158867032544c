"""Random streams: the release's secret noise is fresh and standard normal."""

from __future__ import annotations

import torch

from swagppm.train import rng


def test_secret_noise_is_standard_normal_and_fresh() -> None:
    first, second = rng.secret_normal(200_000), rng.secret_normal(200_000)
    assert first.dtype == torch.float32 and not torch.equal(first, second)
    assert abs(float(first.mean())) < 0.01 and abs(float(first.std()) - 1.0) < 0.01
    assert rng.secret_normal(3, dtype=torch.float64).dtype == torch.float64
