"""A trial's figures (max-delta series, F1 violins) and a study's (search grid, ε–F1 trade-off), from aggregates."""

from __future__ import annotations

from typing import Any

import optuna

import scorers.plots
from tuner.config import StudyConfig
from tuner.dashboard import feasibility_table
from tuner.queries import FINISHED, describe_violations, is_feasible
from tuner.record import BASELINE_F1_MACRO, TrialRecord


def trial_figures(record: TrialRecord, config: StudyConfig) -> list[Any]:
    """The max-delta figure and, when the utility draws ran, the F1 violins of one trial."""
    targets = config.targets
    figures = [scorers.plots.max_delta_figure(
        record.max_delta_series, epsilon_cap=targets.epsilon_cap, epsilon_is_lower_bound=record.epsilon_is_lower_bound,
        title=record.diagnosis.replace("_", " "))]
    if record.f1_macro_draws:
        figures.append(scorers.plots.f1_violin_figure(
            record.f1_macro_draws, record.f1_weighted_draws, baseline_macro=record.baseline_f1_macro,
            baseline_weighted=record.baseline_f1_weighted, max_degradation=targets.max_f1_degradation))
    return figures


def figures_html(record: TrialRecord, config: StudyConfig, *, title: str) -> str:
    """A trial's max-delta plot and F1 violins as one HTML page (plotly.js embedded once: it opens offline)."""
    parts = [figure.to_html(full_html=False, include_plotlyjs=index == 0)
             for index, figure in enumerate(trial_figures(record, config))]
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>" \
           f"<h1>{title}</h1>{''.join(parts)}</body></html>"


def study_figures_html(study: optuna.Study, config: StudyConfig) -> str:
    """A study's search grid, ε–F1 trade-off and feasibility table as one HTML page that opens offline."""
    parts = [figure.to_html(full_html=False, include_plotlyjs=index == 0)
             for index, figure in enumerate(study_figures(study, config).values())]
    title = f"study {study.study_name}: search grid, trade-off, feasibility (owner-side)"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>" \
           f"<h1>{title}</h1>{''.join(parts)}</body></html>"


def fits_for_figures(study: optuna.Study, *, statistic: str = "median") -> list[dict[str, Any]]:
    """One mapping per finished trial, as ``scorers.plots`` grid and trade-off figures take them: its macro-F1 is the
    ``statistic`` the targets judge (median or q10), and an infeasible trial says what it missed, as judged (the
    stored constraints: an audit that refuted ε included), so that no figure tells another story than the verdict."""
    fits = []
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is None:
            continue
        feasible = is_feasible(trial)
        macro = record.f1_macro_median if statistic == "median" else record.f1_macro_q10
        fits.append({"number": trial.number, "c": trial.params.get("c"), "ft_epochs": trial.params.get("ft_epochs"),
                     "epsilon": record.epsilon, "f1_macro": macro, "label": record.diagnosis, "feasible": feasible,
                     "missed": None if feasible else _missed(trial, record)})
    return fits


def _missed(trial: optuna.trial.FrozenTrial, record: TrialRecord) -> str | None:
    """What an infeasible trial missed (``epsilon +0.200``), and the audit's bound when it judged ε."""
    missed = describe_violations(trial) or None
    if missed is not None and record.audit_epsilon_bound is not None:
        missed += f" (the membership audit's epsilon lower bound: {record.audit_epsilon_bound:.3g})"
    return missed


def study_figures(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The search grid, the ε–F1 trade-off and the feasibility table of every finished trial."""
    statistic = config.targets.statistic
    fits = fits_for_figures(study, statistic=statistic)
    prep = study.user_attrs.get(BASELINE_F1_MACRO)
    threshold = None if prep is None else (1 - config.targets.max_f1_degradation) * prep
    return {
        "search-grid": scorers.plots.search_grid_figure(fits, epsilon_cap=config.targets.epsilon_cap),
        "tradeoff": scorers.plots.tradeoff_figure(fits, epsilon_cap=config.targets.epsilon_cap,
                                                  f1_macro_threshold=threshold, statistic=statistic),
        "feasibility": feasibility_table(study),
    }
