"""Optuna studies over SWAG-PPM's (c, fine-tuning epochs), and the ``swagppm-tune`` command.

A study file (``StudyConfig.from_toml``) names the search ranges, the targets
(ε and F1 within a fraction of the non-private baseline, a well-fit max-delta
series) and the fit's settings. ``run_study`` proposes configurations with an
Optuna sampler (``tpe`` by default, ``gp``, ``nsga2``, ``random`` or the guide's
``flowchart``), runs a SWAG-PPM fit per trial, and records constraints, scores,
the diagnosis and figures (``TrialRecord``); ``best_feasible`` reads the choice
back. Names load on first use, so the command line starts without the training
stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner._config import SearchSpace, StartPoint, StudyConfig, StudySettings, Targets
    from tuner._export import Chosen, export_trial, read_export, write_export
    from tuner._outcome import Outcome, judge
    from tuner._record import CONSTRAINT_KEYS, TrialRecord, constraint_attrs, named_constraints
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
        open_storage,
        open_study,
        pareto_front,
        record_outcome,
        run_study,
    )
    from tuner._tuning import private_selection, with_selection_cost
    from tuner._workers import run_workers

_LAZY = {
    "tuner._config": ("SearchSpace", "StartPoint", "StudyConfig", "StudySettings", "Targets"),
    "tuner._export": ("Chosen", "export_trial", "read_export", "write_export"),
    "tuner._outcome": ("Outcome", "judge"),
    "tuner._record": ("CONSTRAINT_KEYS", "TrialRecord", "constraint_attrs", "named_constraints"),
    "tuner._report": ("report_html", "write_report"),
    "tuner._samplers": ("FlowchartSampler", "make_sampler"),
    "tuner._storage": ("make_storage", "masked_url"),
    "tuner._study": ("FitCrashed", "Objective", "RunSummary", "best_feasible", "closest_trial", "is_feasible",
                     "open_storage", "open_study", "pareto_front", "record_outcome", "run_study"),
    "tuner._workers": ("run_workers",),
    "tuner._tuning": ("private_selection", "with_selection_cost"),
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
