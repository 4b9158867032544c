"""Optuna samplers by name, and the practical guide's flowchart as a sampler of its own."""

from __future__ import annotations

from typing import Any

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tuner.config import SamplerName, SearchSpace
from tuner.record import TrialRecord

MOVES = ("add_epochs", "lower_c")  # the flowchart's actions that lead to another fit
REDRAWS = 16  # how many times the default sampler redraws a proposal that repeats a fit (then it keeps the last)
EI_CANDIDATES = 64  # the default TPE's expected-improvement candidates per proposal (Optuna's default: 24)


def make_sampler(name: SamplerName, *, seed: int, search: SearchSpace, n_startup_trials: int = 2) -> BaseSampler:
    """The sampler ``name`` of a study, seeded; constraints come from ``trial.set_constraint``.

    TPE is multivariate (c and epochs interact) and never repeats a fit
    (``DistinctTPESampler``); GP models the constraints too. Both start modelling
    after ``n_startup_trials`` finished trials (enqueued start points count). The
    default, 2 (by default the guide's start point and the probe,
    ``SearchSpace.start_points``), won on the table replay
    (``benchmarks/bench_samplers.py``): on the MiniLM head table at ε ≤ 0.82, TPE's
    median fits to the first feasible configuration was 5 with 4.
    """
    if name == "tpe":
        return DistinctTPESampler(search=search, seed=seed, n_startup_trials=n_startup_trials)
    if name == "gp":
        return optuna.samplers.GPSampler(seed=seed, n_startup_trials=n_startup_trials)
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, n_startup_trials))
    if name == "random":
        return RandomSampler(seed=seed)
    if name == "flowchart":
        return FlowchartSampler(search=search, seed=seed)
    raise ValueError(f"unknown sampler {name!r}")


def repeats(point: dict[str, Any], seen: dict[str, Any], search: SearchSpace) -> bool:
    """Whether ``point`` is the fit ``seen`` at the guide's resolution: c (and g) within ``c_step``/2 and epochs
    within ``epochs_step``/2 of it."""
    close = {"c": search.c_step / 2, "g": search.c_step / 2, "ft_epochs": search.epochs_step / 2}
    return all(name in seen and abs(value - seen[name]) < close[name] for name, value in point.items() if name in close)


class DistinctTPESampler(optuna.samplers.TPESampler):
    """Multivariate TPE that does not propose a fit the study has already run, or is running.

    A fit costs minutes to hours, and one within half a guide step of another
    (``repeats``) says little that one did not: the fits are deterministic, and
    neighbouring cells of the real tables differ little. Plain TPE proposes such
    repeats often while its model is young (on the last-2-layers table its third
    proposal, after the start point and the probe, fell on the probe's cell in 38 of
    100 seeds). A repeating proposal is redrawn, up to ``REDRAWS`` times; then it is
    kept (a range so small that every point repeats one). On the table replays the
    median fits to the first feasible configuration fell from 5 to 3 on two
    well-fit targets and from 4 to 3 on a third, and rose on none
    (``benchmarks/sampler_variants.py``; README, Performance).

    It weighs ``EI_CANDIDATES`` candidates per proposal, not Optuna's 24: the
    proposal is then nearer the estimators' best point and varies less with the seed,
    which, once repeats are redrawn, removed the long tails of the replays (90th
    percentile of the fits to the first feasible configuration from 5–26 to 3 on five
    targets, over two sets of 100 seeds) without moving a median beyond its noise.
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
                break
            point = super().sample_relative(study, trial, search_space)
        return point


def last_verdict(study: Study) -> tuple[FrozenTrial, TrialRecord] | None:
    """The most recent finished trial carrying a recommendation (complete or pruned), with its record."""
    trials = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
    judged = [(t, record) for t in trials if (record := TrialRecord.of(t)) is not None]
    return max(judged, key=lambda pair: pair[0].number) if judged else None


class FlowchartSampler(BaseSampler):
    """The guide's human procedure as a sampler.

    Starts at the first start point (the guide's (1.0, 7)); afterwards proposes the
    recommendation stored on the most recent finished trial: underfit → +``epochs_step``
    epochs; overfit, or a good fit above the ε target → c − ``c_step`` at
    ``restart_epochs``. Proposals are clipped to the search ranges. When the last
    recommendation is not a move (feasible, utility out of reach, a collapse), or
    a move that clipping turns into the same fit again, ``wants_to_stop`` is True and
    the study runner stops; a sampler asked anyway (a concurrent worker) falls back to
    random sampling.
    """

    def __init__(self, *, search: SearchSpace, seed: int | None = None) -> None:
        self._search = search
        self._fallback = RandomSampler(seed=seed)

    def reseed_rng(self) -> None:
        self._fallback.reseed_rng()

    def next_point(self, study: Study) -> dict[str, Any] | None:
        """The next (c, ft_epochs) of the procedure, or None when it has no move left."""
        verdict = last_verdict(study)
        if verdict is None:
            start = self._search.start[0] if self._search.start else None
            c, epochs = (start.c, start.ft_epochs) if start else (1.0, self._search.restart_epochs)
        elif verdict[1].next_action in MOVES:
            move = verdict[1]
            assert move.next_c is not None and move.next_ft_epochs is not None  # judged from the trial's (c, epochs)
            c, epochs = move.next_c, move.next_ft_epochs
        else:
            return None
        search = self._search
        c = min(max(float(c), search.c_min), search.c_max)
        epochs = min(max(int(epochs), search.ft_epochs_min), search.ft_epochs_max)
        if verdict is not None and (c, epochs) == (verdict[0].params.get("c"), verdict[0].params.get("ft_epochs")):
            return None  # the move leaves the search ranges: the procedure is stuck
        return {"c": c, "ft_epochs": epochs}

    def end_reason(self, study: Study) -> str:
        """Why the procedure has no next fit (the last trial's verdict and, if stuck, the ranges)."""
        verdict = last_verdict(study)
        assert verdict is not None
        trial, record = verdict
        reason = f"the flowchart stops after trial {trial.number}: {record.recommendation}"
        if record.next_action in MOVES:
            reason += (f", which leaves the search ranges (c in [{self._search.c_min:g}, {self._search.c_max:g}], "
                       f"epochs in [{self._search.ft_epochs_min}, {self._search.ft_epochs_max}])")
        return reason

    def wants_to_stop(self, study: Study) -> bool:
        return last_verdict(study) is not None and self.next_point(study) is None

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        search = self._search
        return {
            "c": FloatDistribution(search.c_min, search.c_max, log=search.c_log),
            "ft_epochs": IntDistribution(search.ft_epochs_min, search.ft_epochs_max),
        }

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        point = self.next_point(study)
        return {} if point is None else {k: v for k, v in point.items() if k in search_space}

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self._fallback.sample_independent(study, trial, param_name, param_distribution)
