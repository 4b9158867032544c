"""The default sampler: multivariate TPE that never proposes a fit the study has already run."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from tuner.samplers.registry import register_sampler
from tuner.search import SearchSpace

REDRAWS = 16  # how many times the default sampler redraws a proposal that repeats a fit (then: ``nearest_unused``)
EI_CANDIDATES = 64  # the default TPE's expected-improvement candidates per proposal (Optuna's default: 24)


def repeats(point: dict[str, Any], seen: dict[str, Any], search: SearchSpace) -> bool:
    """Whether ``point`` is the fit ``seen`` at the guide's resolution: c (and g) within ``c_step``/2 and epochs
    within ``epochs_step``/2 of it."""
    close = {"c": search.c_step / 2, "g": search.c_step / 2, "ft_epochs": search.epochs_step / 2}
    return all(name in seen and abs(value - seen[name]) < close[name] for name, value in point.items() if name in close)


class DistinctTPESampler(optuna.samplers.TPESampler):
    """Multivariate TPE (c and epochs interact) that does not propose a fit the study has already run, or is running.

    A fit costs minutes to hours, and one within half a guide step of another
    (``repeats``) says little that one did not: the fits are deterministic, and
    neighbouring cells differ little. Plain TPE proposes such repeats often while its
    model is young. A repeating proposal is redrawn, up to ``REDRAWS`` times; then the
    nearest point of the guide's grid that repeats no fit is proposed instead, so no
    fit repeats until every grid point of the ranges has been run.

    It weighs ``EI_CANDIDATES`` candidates per proposal, more than Optuna's default:
    the proposal is then nearer the estimators' best point and varies less with the
    seed. ``benchmarks/tuning/sampler_variants.py`` replays both choices.
    """

    def __init__(
        self,
        *,
        search: SearchSpace,
        seed: int | None = None,
        n_startup_trials: int = 2,
        n_ei_candidates: int = EI_CANDIDATES,
    ) -> None:
        super().__init__(seed=seed, multivariate=True, n_startup_trials=n_startup_trials,
                         n_ei_candidates=n_ei_candidates)
        self._search = search

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        seen = [t.params for t in study.get_trials(deepcopy=False) if t.number != trial.number and t.params]
        point = super().sample_relative(study, trial, search_space)
        for _ in range(REDRAWS):
            if not point or not any(repeats(point, params, self._search) for params in seen):
                return point
            point = super().sample_relative(study, trial, search_space)
        return nearest_unused(point, seen, self._search) if point else point


def nearest_unused(point: dict[str, Any], seen: list[dict[str, Any]], search: SearchSpace) -> dict[str, Any]:
    """The point of the guide's grid (c every ``c_step`` from ``c_min``, epochs every ``epochs_step`` from
    ``ft_epochs_min``) nearest ``point`` that repeats no fit in ``seen``; ``point`` itself once every grid point
    has been run (the study has then seen the whole range at the guide's resolution)."""
    steps = int((search.c_max - search.c_min) / search.c_step + 1e-9)
    grid = [{**point, "c": round(search.c_min + k * search.c_step, 12), "ft_epochs": epochs}
            for k in range(steps + 1)
            for epochs in range(search.ft_epochs_min, search.ft_epochs_max + 1, search.epochs_step)]
    unused = [candidate for candidate in grid if not any(repeats(candidate, params, search) for params in seen)]
    if not unused:
        return point
    span = {"c": search.c_max - search.c_min, "ft_epochs": max(search.ft_epochs_max - search.ft_epochs_min, 1)}
    return min(unused, key=lambda candidate: sum(((candidate[name] - point[name]) / span[name]) ** 2
                                                 for name in span))


@register_sampler("tpe")
def tpe_sampler(*, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler:
    """``DistinctTPESampler``, the default."""
    return DistinctTPESampler(search=search, seed=seed, n_startup_trials=n_startup_trials)
