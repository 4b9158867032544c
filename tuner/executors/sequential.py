"""This process runs the study's trials one after the other."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tuner.config import StudyConfig
from tuner.executors.registry import register_executor
from tuner.study import RunSummary, run_study
from tuner.tracking import tracking_callbacks


@register_executor("sequential")
@dataclass(frozen=True, kw_only=True)
class SequentialExecutor:
    """``tuner.study.run_study`` in this process, with the study file's trackers; ``progress_fit``: each fit's
    progress (None: as configured, see ``swagppm.progress``)."""

    progress_fit: bool | None = None

    def run(self, config: StudyConfig, *, n_trials: int | None, timeout: float | None,
            echo: Callable[[str], None]) -> RunSummary:
        summary = run_study(config, n_trials=n_trials, timeout=timeout, progress_fit=self.progress_fit, echo=echo,
                            callbacks=tracking_callbacks(config, echo=echo))
        echo(f"stopped: {summary.stopped_because} ({summary.finished_now} new finished trials)")
        return summary
