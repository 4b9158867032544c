"""Optuna's own samplers, registered by name."""

from __future__ import annotations

import optuna
from optuna.samplers import BaseSampler, RandomSampler

from tuner.samplers.base import SamplerTraits
from tuner.samplers.registry import register_sampler
from tuner.search import SearchSpace


@register_sampler("gp")
def gp_sampler(*, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler:
    """Gaussian-process search, which models the constraints too."""
    return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)


@register_sampler("nsga2")
def nsga2_sampler(*, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler:
    """NSGA-II, for the Pareto objective; a population of at least four."""
    return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, n_startup_trials))


@register_sampler("random", traits=SamplerTraits(accountable=True))
def random_sampler(*, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler:
    """Random search: the one whose tuning cost an accounted study computes."""
    return RandomSampler(seed=seed)
