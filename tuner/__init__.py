"""Optuna studies over SWAG-PPM's (c, fine-tuning epochs), and the ``swagppm-tune`` command.

A study file (``StudyConfig.from_toml``) names the search ranges, the targets
(ε and F1 within a fraction of the non-private baseline, a well-fit max-delta
series) and the fit's settings. ``run_study`` proposes configurations with an
Optuna sampler (``tuner.samplers``: ``tpe`` by default, ``gp``, ``nsga2``,
``random`` or the guide's ``flowchart``), runs a SWAG-PPM fit per trial, and
records constraints, scores, the diagnosis and figures (``TrialRecord``);
``best_feasible`` reads the choice back. ``tuner.executors`` runs the trials in
this process or in local worker processes; ``tuner.cli`` is the command. Names
load on first use, so the command line starts without the training stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.config import StudyConfig, StudySettings, Targets
    from tuner.executors import run_workers
    from tuner.export import Chosen, export_trial, read_export, write_export
    from tuner.objective import FitCrashed, Objective, record_outcome
    from tuner.outcome import Outcome, judge
    from tuner.queries import best_feasible, closest_trial, is_feasible, pareto_front
    from tuner.record import CONSTRAINT_KEYS, TrialRecord, constraint_attrs, named_constraints
    from tuner.report import report_html, write_report
    from tuner.samplers import FlowchartSampler, make_sampler
    from tuner.search import SearchSpace, StartPoint
    from tuner.storage import make_storage, masked_url
    from tuner.study import RunSummary, open_storage, open_study, run_study
    from tuner.tuning import private_selection, with_selection_cost

_LAZY = {
    "tuner.config": ("StudyConfig", "StudySettings", "Targets"),
    "tuner.executors": ("run_workers",),
    "tuner.export": ("Chosen", "export_trial", "read_export", "write_export"),
    "tuner.objective": ("FitCrashed", "Objective", "record_outcome"),
    "tuner.outcome": ("Outcome", "judge"),
    "tuner.queries": ("best_feasible", "closest_trial", "is_feasible", "pareto_front"),
    "tuner.record": ("CONSTRAINT_KEYS", "TrialRecord", "constraint_attrs", "named_constraints"),
    "tuner.report": ("report_html", "write_report"),
    "tuner.samplers": ("FlowchartSampler", "make_sampler"),
    "tuner.search": ("SearchSpace", "StartPoint"),
    "tuner.storage": ("make_storage", "masked_url"),
    "tuner.study": ("RunSummary", "open_storage", "open_study", "run_study"),
    "tuner.tuning": ("private_selection", "with_selection_cost"),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'tuner' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
