"""A study's pause: stop every worker after its running trial, and start no trial until it is resumed.

``swagppm-tune jobs STUDY.toml --pause`` records the pause in the study's storage
(the ``paused`` study attribute: when, and by what), so that it reaches every worker
wherever it runs (``run``, ``worker``, launched jobs); ``--resume`` clears it. Every
run reads it before its first trial and after each trial (``StopWhenPaused``): a
running trial is finished and judged as usual, never failed, and no new one starts.
The attribute is not part of the study's sealed claim (``tuner.tuning``), which
covers the claim's own attribute only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone

import optuna
from optuna.trial import FrozenTrial

from tuner.config import StudyConfig

PAUSED = "paused"  # study attribute: the Pause as a dict while paused, None once resumed
BY_JOBS = "jobs --pause"


@dataclass(frozen=True, kw_only=True)
class Pause:
    """A recorded pause: since when (UTC, ISO 8601) and what paused it."""

    since: str
    by: str

    def line(self, config: StudyConfig) -> str:
        """The one line every verb says of a paused study: that it is, since when, and how to go on."""
        return (f"study {config.study.name!r} is paused (since {self.since} by {self.by}): "
                f"`swagppm-tune jobs {config.path} --resume`, then launch or run it again")


def pause_of(study: optuna.Study) -> Pause | None:
    """The study's pause, or None when it runs freely (never paused, or resumed)."""
    stored = study.user_attrs.get(PAUSED)
    return None if stored is None else Pause(**stored)


def pause_study(study: optuna.Study, *, by: str = BY_JOBS) -> tuple[Pause, bool]:
    """Pause the study now, or keep the pause it has; (the pause, whether this call made it)."""
    existing = pause_of(study)
    if existing is not None:
        return existing, False
    pause = Pause(since=datetime.now(timezone.utc).isoformat(timespec="seconds"), by=by)
    study.set_user_attr(PAUSED, asdict(pause))
    return pause, True


def resume_study(study: optuna.Study) -> Pause | None:
    """Clear the study's pause; the pause cleared, or None when it was not paused."""
    existing = pause_of(study)
    if existing is not None:
        study.set_user_attr(PAUSED, None)  # Optuna deletes no study attribute: None reads as not paused
    return existing


class StopWhenPaused:
    """Optuna's callback after every trial: stop the run once the study is paused (``pause``: the pause seen)."""

    def __init__(self) -> None:
        self.pause: Pause | None = None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.pause = pause_of(study)
        if self.pause is not None:
            study.stop()
