"""An executor runs a study's trials somewhere (this process, local worker processes, ...) and says how it ended."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from tuner.config import StudyConfig
    from tuner.study import RunSummary


class Executor(Protocol):
    """Runs the study of ``config`` until ``n_trials`` finished trials, the ``timeout`` or a stop rule.

    ``n_trials`` and ``timeout`` default to ``[study]``'s. Progress goes to ``echo``,
    one line at a time; ``KeyboardInterrupt`` propagates once every trial this
    executor started is marked failed.
    """

    def run(self, config: StudyConfig, *, n_trials: int | None, timeout: float | None,
            echo: Callable[[str], None]) -> RunSummary:
        """Run the trials; how the run ended."""
