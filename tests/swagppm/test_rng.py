"""Random streams: the release's secret noise is fresh and standard normal; seeded noise reproduces."""

from __future__ import annotations

import torch

from swagppm.train import rng


def test_secret_noise_is_standard_normal_and_fresh() -> None:
    noise = rng.secret_noise()
    first, second = noise.normal(200_000), rng.secret_noise().normal(200_000)
    assert noise.secret and first.dtype == torch.float32 and not torch.equal(first, second)
    assert not torch.equal(first, noise.normal(200_000))  # one source, never repeating itself
    assert abs(float(first.mean())) < 0.01 and abs(float(first.std()) - 1.0) < 0.01
    assert noise.normal(3, dtype=torch.float64).dtype == torch.float64
    assert {noise.index(5) for _ in range(200)} == set(range(5))


def test_seeded_noise_reproduces_from_its_generator_and_so_does_the_global_state_it_seeds() -> None:
    def draws(seed: int) -> tuple[torch.Tensor, int, torch.Tensor]:
        noise = rng.SeededNoise(torch.Generator().manual_seed(seed))
        with noise.global_rng(torch.device("cpu")):
            inside = torch.randn(4)
        return noise.normal(6), noise.index(1000), inside

    outside = torch.random.get_rng_state()
    first, again, other = draws(1), draws(1), draws(2)
    assert not rng.SeededNoise(torch.Generator()).secret
    assert all(torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b for a, b in zip(first, again))
    assert not torch.equal(first[0], other[0]) and not torch.equal(first[2], other[2])
    assert torch.equal(torch.random.get_rng_state(), outside)  # the caller's global state is untouched


def test_secret_noise_seeds_the_global_state_afresh_each_time() -> None:
    noise = rng.secret_noise()
    with noise.global_rng(torch.device("cpu")):
        first = torch.randn(8)
    with noise.global_rng(torch.device("cpu")):
        second = torch.randn(8)
    assert not torch.equal(first, second)
