"""Judge a study's finished fits against other targets, instantly: a fit does not depend on the targets.

Every judged trial's stored aggregates (the max-delta series, F1 per draw, the
baselines) are judged again with ``judge`` under the new ``[targets]`` and added,
with their parameters, to a new study in the same storage; nothing is refitted.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState, create_trial

from swagppm.config import config_from_table
from tuner.config import StudyConfig, Targets
from tuner.outcome import judge
from tuner.queries import FINISHED
from tuner.record import TrialRecord, constraint_attrs
from tuner.study import open_study

if TYPE_CHECKING:
    from swagppm import SWAGPPMResult


def result_of(trial: optuna.trial.FrozenTrial, record: TrialRecord) -> SWAGPPMResult:
    """The fit's public result rebuilt from what the study stored about it."""
    from swagppm import SWAGPPMResult

    return SWAGPPMResult(
        c=trial.params["c"], g=trial.params.get("g", 0.0), ft_epochs=trial.params["ft_epochs"], seed=record.seed,
        epsilon=record.epsilon_or_inf, max_delta=list(record.max_delta_series), f1_macro=list(record.f1_macro_draws),
        f1_weighted=list(record.f1_weighted_draws), baseline_f1_macro=record.baseline_f1_macro,
        baseline_f1_weighted=record.baseline_f1_weighted, epsilon_is_lower_bound=record.epsilon_is_lower_bound,
        draws_skipped=record.draws_skipped, failure=record.failure, stage1_cache_hit=record.stage1_cache_hit,
        timings=dict(record.timings), majority_rate=record.majority_rate, data_hash=record.data_hash,
        device=record.device, threads=record.threads)


def retarget(targets: Targets, changes: Mapping[str, Any]) -> Targets:
    """``targets`` with ``changes``, checked like a study file's ``[targets]``."""
    return config_from_table(Targets, {**dataclasses.asdict(targets), **changes}, "rejudge")


def rejudge(config: StudyConfig, targets: Targets, *, name: str) -> optuna.Study:
    """A new study ``name`` holding every judged trial of ``config``'s study, judged against ``targets``."""
    source = open_study(config, create=False)
    new = dataclasses.replace(config, targets=targets, study=dataclasses.replace(config.study, name=name))
    study = open_study(new)
    for trial in source.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is None:
            continue
        outcome = judge(result_of(trial, record), targets=targets, search=config.search)
        state = TrialState.PRUNED if outcome.catastrophic else TrialState.COMPLETE
        values = outcome.objective_values(config.study.objective) if state == TrialState.COMPLETE else None
        study.add_trial(create_trial(
            state=state, values=None if values is None else list(values) if isinstance(values, tuple) else [values],
            params=trial.params, distributions=trial.distributions, user_attrs=outcome.attributes(),
            system_attrs=constraint_attrs(outcome.constraints)))
    return study
