"""What a sampler may offer a study besides its proposals: a stop rule, and the traits a study file is checked by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler
    from optuna.study import Study

    from tuner.search import SearchSpace


@runtime_checkable
class StopRule(Protocol):
    """A sampler that can say its procedure is over (the flowchart: no move left). Optional.

    The run loop asks after every trial, and before the first, reading the study
    from the storage, so the rule holds for every process sharing the study.
    """

    def wants_to_stop(self, study: Study) -> bool:
        """Whether the procedure has no next fit."""

    def end_reason(self, study: Study) -> str:
        """Why it has none, for the run's last line (asked only once ``wants_to_stop`` is True)."""


def stop_rule_of(sampler: BaseSampler) -> StopRule | None:
    """The sampler's stop rule, or None for a sampler that runs until the study's own limits."""
    return sampler if isinstance(sampler, StopRule) else None


@dataclass(frozen=True, kw_only=True)
class SamplerTraits:
    """What a study must know about a sampler before it runs one; the defaults fit a model-based search.

    ``proposes_start``: it proposes its first point itself, so no start points are
    enqueued. ``reads_whole_series``: its moves read whole max-delta series, so the ε
    early stop is off by default and refused when asked for. ``single_objective``: it
    cannot search ``objective = "pareto"``. ``accountable``: random search, whose
    tuning cost an accounted study computes (``tuner.tuning``).
    """

    proposes_start: bool = False
    reads_whole_series: bool = False
    single_objective: bool = False
    accountable: bool = False


class SamplerFactory(Protocol):
    """Builds a study's sampler from its seed, its search space and its number of start-up trials."""

    def __call__(self, *, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler: ...
