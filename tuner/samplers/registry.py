"""Samplers by name: ``[study] sampler`` names one, ``register_sampler`` adds one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tuner.samplers.base import SamplerFactory, SamplerTraits

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler

    from tuner.search import SearchSpace


@dataclass(frozen=True, kw_only=True)
class RegisteredSampler:
    """A sampler's factory and its traits."""

    factory: SamplerFactory
    traits: SamplerTraits


SAMPLERS: dict[str, RegisteredSampler] = {}


def register_sampler(name: str, *,
                     traits: SamplerTraits | None = None) -> Callable[[SamplerFactory], SamplerFactory]:
    """Register ``factory`` under ``name`` (a decorator); a name is registered once."""
    def register(factory: SamplerFactory) -> SamplerFactory:
        if name in SAMPLERS:
            raise ValueError(f"a sampler named {name!r} is already registered")
        SAMPLERS[name] = RegisteredSampler(factory=factory, traits=traits or SamplerTraits())
        return factory

    return register


def sampler_traits(name: str) -> SamplerTraits:
    """The traits of the sampler ``name`` (a ``KeyError`` for an unknown name; the study file names it first)."""
    return SAMPLERS[name].traits


def make_sampler(name: str, *, seed: int, search: SearchSpace, n_startup_trials: int = 2) -> BaseSampler:
    """The sampler ``name`` of a study, seeded; constraints come from ``trial.set_constraint``.

    Model-based samplers start modelling after ``n_startup_trials`` finished trials
    (enqueued start points count); the default, 2, covers the guide's start point and
    the probe (``SearchSpace.start_points``).
    """
    if name not in SAMPLERS:
        raise ValueError(f"unknown sampler {name!r}")
    return SAMPLERS[name].factory(seed=seed, search=search, n_startup_trials=n_startup_trials)
