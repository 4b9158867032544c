"""Judge a study's finished fits against other targets, instantly: a fit does not depend on the targets.

Every judged trial's stored aggregates (the max-delta series, F1 per draw, the
baselines, the secret draw's checks) are judged again with ``judge`` under the new
``[targets]`` and added, with their parameters, to a new study in the same storage;
nothing is refitted. The new study keeps the source's claim (the cap fixed when the
source was created, its mode and accounting, and K): a new ε target ranks and reports
(``ranked_at``), but a release of the rejudged study still claims the source's cap, never
one chosen after the results were seen, and an accounted source's ε* cannot change. It
records its targets (``REJUDGED``) so that every verb opens it with ``--study-name``
(``named_study``). A trial whose privacy draws stopped early at an ε now below the
target needs a refit to be judged (``NEEDS_REFIT``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import TrialState, create_trial

from swagppm import ConfigError
from swagppm.config import config_from_table
from tuner.config import StudyConfig, Targets
from tuner.outcome import DrawChecks, judge
from tuner.queries import FINISHED
from tuner.record import BASELINE_F1_MACRO, NEEDS_REFIT, TrialRecord, constraint_attrs
from tuner.storage import masked_url
from tuner.study import open_storage, open_study
from tuner.tuning import ACCOUNTED_TRIALS, NUM_TRAIN, claim_of, is_accounted

REJUDGED = "rejudged"  # study attribute of a rejudged study: {"source": name, "targets": its targets}

if TYPE_CHECKING:
    from swagppm import SWAGPPMResult
    from tuner.search import SearchSpace


def result_of(trial: optuna.trial.FrozenTrial, record: TrialRecord, *, search: SearchSpace) -> SWAGPPMResult:
    """The fit's public result rebuilt from what the study stored about it (g: the trial's, or ``search``'s fixed
    one)."""
    from swagppm import SWAGPPMResult

    params = search.params_of(trial.params, seed=record.seed)
    scale = record.prior_scale if record.prior_scale is not None else params.prior_scale
    return SWAGPPMResult(
        c=params.c, g=params.g, ft_epochs=params.ft_epochs, seed=record.seed, posterior=record.posterior,
        prior_scale=float("inf") if scale is None else scale, nll_bound=record.nll_bound,
        proven_epsilon=record.proven_epsilon, diagnostics=dict(record.diagnostics), epsilon=record.epsilon_or_inf,
        max_delta=list(record.max_delta_series), f1_macro=list(record.f1_macro_draws),
        f1_weighted=list(record.f1_weighted_draws), baseline_f1_macro=record.baseline_f1_macro,
        baseline_f1_weighted=record.baseline_f1_weighted, epsilon_is_lower_bound=record.epsilon_is_lower_bound,
        draws_skipped=record.draws_skipped, failure=record.failure, stage1_cache_hit=record.stage1_cache_hit,
        timings=dict(record.timings), majority_rate=record.majority_rate, data_hash=record.data_hash,
        device=record.device, threads=record.threads, cpu_kernels=record.cpu_kernels,
        stage1_fingerprint=record.stage1_fingerprint)


def retarget(targets: Targets, changes: Mapping[str, Any]) -> Targets:
    """``targets`` with ``changes``, checked like a study file's ``[targets]``."""
    return config_from_table(Targets, {**dataclasses.asdict(targets), **changes}, "rejudge")


def rejudge(config: StudyConfig, targets: Targets, *, name: str) -> optuna.Study:
    """A new study ``name`` holding every judged trial of ``config``'s study, judged against ``targets``.

    Refused (before anything is written): ``name`` taken in the storage (the source's own name included), or an
    accounted source whose ε* the new targets change.
    """
    source = open_study(config, create=False)
    check_new_name(config, name)
    accounted = is_accounted(source)
    if accounted and targets.epsilon_cap != config.targets.epsilon_cap:
        raise ConfigError(f"rejudge --epsilon-cap {targets.epsilon_cap:g}: the study {config.study.name!r} is "
                          f"accounted at epsilon* = {config.targets.epsilon_cap:g}, and its total holds for that cap "
                          "only; rejudge it with the same cap, or run a new accounted study")
    new = dataclasses.replace(config, targets=targets, study=dataclasses.replace(config.study, name=name))
    claim = dataclasses.replace(claim_of(source).claim, ranked_at=targets.epsilon_cap)
    study = open_study(new, claim=claim)
    for key in (ACCOUNTED_TRIALS, NUM_TRAIN, BASELINE_F1_MACRO):  # the baseline: the new F1 threshold's reference
        if key in source.user_attrs:
            study.set_user_attr(key, source.user_attrs[key])
    study.set_user_attr(REJUDGED, {"source": config.study.name, "targets": dataclasses.asdict(targets)})
    for trial in source.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is not None:
            study.add_trial(rejudged_trial(trial, record, new, accounted=accounted))
    return study


def rejudged_trial(trial: optuna.trial.FrozenTrial, record: TrialRecord, config: StudyConfig, *,
                   accounted: bool) -> optuna.trial.FrozenTrial:
    """``trial`` judged against ``config``'s targets, as a finished trial of the new study."""
    checks = DrawChecks(public_score=record.public_score, audit_epsilon_bound=record.audit_epsilon_bound)
    outcome = judge(result_of(trial, record, search=config.search), targets=config.targets, search=config.search,
                    accounted=accounted, checks=checks)
    state = TrialState.PRUNED if outcome.catastrophic else TrialState.COMPLETE
    values = outcome.objective_values(config.study.objective) if state == TrialState.COMPLETE else None
    refit = record.epsilon_is_lower_bound and record.epsilon_or_inf <= config.targets.epsilon_cap
    return create_trial(
        state=state, values=None if values is None else list(values) if isinstance(values, tuple) else [values],
        params=trial.params, distributions=trial.distributions,
        user_attrs=outcome.attributes() | ({NEEDS_REFIT: True} if refit else {}),
        system_attrs=constraint_attrs(outcome.constraints))


def check_new_name(config: StudyConfig, name: str) -> None:
    """Refuse a rejudged study's name that the storage already holds (rerunning would duplicate every fit)."""
    if name == config.study.name:
        raise ConfigError(f"rejudge --name {name}: that is the source study's own name; its trials would be copied "
                          "into it. Give the new study another name")
    if name in optuna.get_all_study_names(open_storage(config)):
        raise ConfigError(f"rejudge --name {name}: a study of that name already exists in "
                          f"{masked_url(config.storage_url)} (rejudged before?); open it with --study-name {name}, or "
                          "give another name")


def named_study(config: StudyConfig, name: str) -> StudyConfig:
    """``config`` opened as the study ``name`` of its storage; a rejudged one with the targets it was judged against."""
    renamed = dataclasses.replace(config, study=dataclasses.replace(config.study, name=name))
    try:
        study = optuna.load_study(study_name=name, storage=open_storage(renamed))
    except KeyError:
        raise ConfigError(f"--study-name {name}: no study of that name in {masked_url(config.storage_url)}") from None
    rejudged = study.user_attrs.get(REJUDGED)
    if rejudged is None:
        return renamed
    return dataclasses.replace(renamed, targets=config_from_table(Targets, rejudged["targets"], f"study {name!r}"))


def needs_refit(study: optuna.Study) -> list[int]:
    """The trials of a rejudged study that need a refit to be judged against its targets."""
    return [t.number for t in study.get_trials(deepcopy=False) if t.user_attrs.get(NEEDS_REFIT)]
