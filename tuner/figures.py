"""A trial's figures (max-delta series, F1 violins) and a study's (search grid, ε–F1 trade-off), from aggregates."""

from __future__ import annotations

from typing import Any

import optuna

import scorers.plots
from tuner.config import StudyConfig
from tuner.dashboard import feasibility_table
from tuner.queries import FINISHED, is_feasible
from tuner.record import BASELINE_F1_MACRO, TrialRecord


def trial_figures(record: TrialRecord, config: StudyConfig) -> list[Any]:
    """The max-delta figure and, when the utility draws ran, the F1 violins of one trial."""
    targets = config.targets
    figures = [scorers.plots.max_delta_figure(
        record.max_delta_series, epsilon_target=targets.epsilon, epsilon_is_lower_bound=record.epsilon_is_lower_bound,
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


def fits_for_figures(study: optuna.Study) -> list[dict[str, Any]]:
    """One mapping per finished trial, as ``scorers.plots`` grid and trade-off figures take them."""
    return [{"number": t.number, "c": t.params.get("c"), "ft_epochs": t.params.get("ft_epochs"),
             "epsilon": r.epsilon, "f1_macro": r.f1_macro_median, "label": r.diagnosis, "feasible": is_feasible(t)}
            for t in study.get_trials(deepcopy=False, states=FINISHED) if (r := TrialRecord.of(t)) is not None]


def study_figures(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The search grid, the ε–F1 trade-off and the feasibility table of every finished trial."""
    fits = fits_for_figures(study)
    prep = study.user_attrs.get(BASELINE_F1_MACRO)
    threshold = None if prep is None else (1 - config.targets.max_f1_degradation) * prep
    return {
        "search-grid": scorers.plots.search_grid_figure(fits, epsilon_target=config.targets.epsilon),
        "tradeoff": scorers.plots.tradeoff_figure(fits, epsilon_target=config.targets.epsilon,
                                                  f1_macro_threshold=threshold),
        "feasibility": feasibility_table(study),
    }
