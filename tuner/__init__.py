"""Optuna studies over SWAG-PPM's (c, fine-tuning epochs), and the ``swagppm-tune`` command.

A study file (``StudyConfig.from_toml``) names the search ranges, the targets
(ε and F1 within a fraction of the non-private baseline, a well-fit max-delta
series) and the fit's settings. ``run_study`` proposes configurations with an
Optuna sampler (``tuner.samplers``: ``tpe`` by default, ``gp``, ``nsga2``,
``random`` or the guide's ``flowchart``), runs a SWAG-PPM fit per trial, and
records constraints, scores, the diagnosis and figures (``TrialRecord``);
``best_feasible`` reads the choice back, ``choose`` and ``read_export`` give it (or an exported one) with its
verified claim, and ``release_chosen`` releases it through the one gate (ledger entry, sealed claim, audit: the
command line's own). ``tuner.executors`` runs the trials in
this process or in local worker processes; ``tuner.cli`` is the command. Names
load on first use, so the command line starts without the training stack.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tuner.config import StudyConfig, Targets
    from tuner.export import Chosen, choose, read_export
    from tuner.queries import best_feasible, closest_trial, pareto_front
    from tuner.release import Released, ReleaseRequest, release_chosen
    from tuner.report import write_report
    from tuner.samplers import make_sampler
    from tuner.search import SearchSpace, StartPoint
    from tuner.study import RunSummary, open_study, run_study

# What a library user calls; everything else is in its module (tuner.objective, tuner.record, tuner.storage, ...).
_LAZY = {
    "tuner.config": ("StudyConfig", "Targets"),
    "tuner.export": ("Chosen", "choose", "read_export"),
    "tuner.queries": ("best_feasible", "closest_trial", "pareto_front"),
    "tuner.release": ("ReleaseRequest", "Released", "release_chosen"),
    "tuner.report": ("write_report",),
    "tuner.samplers": ("make_sampler",),
    "tuner.search": ("SearchSpace", "StartPoint"),
    "tuner.study": ("RunSummary", "open_study", "run_study"),
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
