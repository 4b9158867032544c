"""Optuna studies over SWAG-PPM's (c, fine-tuning epochs), and the ``swagppm-tune`` command.

A study file (``StudyConfig.from_toml``) names the search ranges, the targets
(ε and F1 within a fraction of the non-private baseline, a well-fit max-delta
series) and the fit's settings. ``run_study`` proposes configurations with an
Optuna sampler (``tpe`` by default, ``gp``, ``nsga2``, ``random`` or the guide's
``flowchart``), runs ``swagppm.run_fit`` per trial, and records constraints,
scores, the diagnosis and figures; ``best_feasible`` reads the choice back.
"""

from tuner._config import SearchSpace, StartPoint, StudyConfig, StudySettings, Targets
from tuner._export import Chosen, export_trial, read_export, write_export
from tuner._outcome import CONSTRAINT_KEYS, Outcome, judge
from tuner._report import report_html, write_report
from tuner._samplers import FlowchartSampler, make_sampler
from tuner._storage import make_storage, masked_url
from tuner._study import (
    FitCrashed,
    Objective,
    RunSummary,
    best_feasible,
    closest_trial,
    is_feasible,
    open_study,
    pareto_front,
    run_study,
)

__all__ = [
    "CONSTRAINT_KEYS",
    "Chosen",
    "FitCrashed",
    "FlowchartSampler",
    "Objective",
    "Outcome",
    "RunSummary",
    "SearchSpace",
    "StartPoint",
    "StudyConfig",
    "StudySettings",
    "Targets",
    "best_feasible",
    "closest_trial",
    "export_trial",
    "is_feasible",
    "judge",
    "make_sampler",
    "make_storage",
    "masked_url",
    "open_study",
    "pareto_front",
    "read_export",
    "report_html",
    "run_study",
    "write_export",
    "write_report",
]
