"""The practical guide's flowchart as a sampler: the human procedure, one fit after the other."""

from __future__ import annotations

from typing import Any

from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from tuner.record import TrialRecord
from tuner.samplers.base import SamplerTraits
from tuner.samplers.registry import register_sampler
from tuner.search import SearchSpace

MOVES = ("add_epochs", "lower_c")  # the flowchart's actions that lead to another fit


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
    a move that clipping turns into the same fit again, ``wants_to_stop`` is True (its
    ``StopRule``) and the run stops; a sampler asked anyway (a concurrent worker) falls
    back to random sampling.
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


@register_sampler("flowchart", traits=SamplerTraits(proposes_start=True, reads_whole_series=True,
                                                     single_objective=True))
def flowchart_sampler(*, seed: int, search: SearchSpace, n_startup_trials: int) -> BaseSampler:
    """``FlowchartSampler``: its start is the first start point, and it stops by itself (``StopRule``)."""
    return FlowchartSampler(search=search, seed=seed)
