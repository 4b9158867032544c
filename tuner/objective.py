"""One trial: suggest (c, epochs[, g]), fit, judge, and record what a study keeps about it.

A trial runs a fit in the study's ``swagppm.Session`` (stage 1 shared), judges it
with ``scorers`` and records constraints (where Optuna and optuna-dashboard read
them), the same numbers as user attributes, the diagnosis as a note and its
figures as an artifact: aggregates only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import Trial

import swagppm
from swagppm import ConfigError
from tuner.artifacts import artifact_store
from tuner.audit import audit_losses
from tuner.config import StudyConfig
from tuner.dashboard import publish_trial
from tuner.faults import CLOSED_PIPE, WORKER, Terminated, trial_heartbeat
from tuner.outcome import DrawChecks, Outcome, counted, judge
from tuner.pruning import draw_pruner, pruned_outcome
from tuner.record import FAILURE, FIGURES_ERROR, RAN_BY, store_constraints

if TYPE_CHECKING:
    from optuna.artifacts._protocol import ArtifactStore
    from optuna.storages import BaseStorage

    from swagppm.train.engine import EpochInfo
    from swagppm.train.swag import SWAGPosterior


class FitCrashed(RuntimeError):
    """A fit raised something other than a configuration or data error (out of memory, a bug, ...)."""


class StuckDetector:
    """Stops a fit whose training accuracy stays at the majority-class rate ``epochs`` epochs in a row."""

    def __init__(self, epochs: int, *, tolerance: float = 0.01) -> None:
        self.epochs, self.tolerance, self.run = epochs, tolerance, 0

    def __call__(self, info: EpochInfo) -> str | None:
        self.run = self.run + 1 if info.train_accuracy <= info.majority_rate + self.tolerance else 0
        if self.run < self.epochs:
            return None
        return (f"training stuck at the majority-class rate ({info.majority_rate:.3f}) for "
                f"{counted(self.run, 'epoch')} in a row")


class Objective:
    """One trial: suggest, fit, judge, record. Catastrophic fits are pruned after recording.

    Every trial fits in one ``swagppm.Session`` (data, model and stage 1 loaded
    once), created on first use; ``close()`` frees it. ``storage`` is the study's
    (constraints are written through it; a run replaces it after a reconnect).
    With ``[study] concurrent_trials`` (``jobs`` > 1) trials run in threads, each
    on a free lane: the session or a replica of it (its own model copy) on its own
    CUDA stream.
    """

    def __init__(self, config: StudyConfig, *, storage: BaseStorage,
                 on_outcome: Callable[[int, Outcome], None] | None = None, progress: bool | None = None,
                 echo: Callable[[str], None] = print) -> None:
        self.config = config
        self.storage = storage
        self.on_outcome = on_outcome
        self.progress = progress
        self.echo = echo
        self.artifacts = artifact_store(config)
        self._session: swagppm.Session | None = None
        self._lanes: list[swagppm.Session] | None = None  # free sessions for trials side by side
        self._lock = threading.Lock()
        self.lines: dict[int, str] = {}  # each judged trial's progress line, until the run prints it

    @property
    def session(self) -> swagppm.Session:
        if self._session is None:
            self._session = swagppm.Session(self.config.fit)
        return self._session

    @property
    def jobs(self) -> int:
        """Trials at once: ``[study] concurrent_trials``, or with 0 as many as fit in the free GPU memory."""
        from swagppm.side_by_side import trials_that_fit

        return self.config.study.concurrent_trials or trials_that_fit(self.session)

    @contextlib.contextmanager
    def lane(self) -> Iterator[swagppm.Session]:
        """The session one trial fits in: the study's own, or beside other trials a free replica on its own stream."""
        if self.config.study.concurrent_trials == 1:
            yield self.session
            return
        import torch  # here: the verbs that only read a study start without it

        from swagppm.side_by_side import replica

        with self._lock:
            if self._lanes is None:
                self._lanes = [self.session]
            lane = self._lanes.pop() if self._lanes else replica(self.session)
        stream = torch.cuda.Stream(lane.device) if lane.device.type == "cuda" else None
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                yield lane
        finally:
            if stream is not None:
                stream.synchronize()
            with self._lock:
                self._lanes.append(lane)

    def close(self) -> None:
        self._lanes = None  # replicas share the session's cache: dropped, never closed
        if self._session is not None:
            self._session.close()
            self._session = None

    def __call__(self, trial: Trial) -> float | tuple[float, float]:
        params = self.config.search.suggest(trial)
        trial.set_user_attr(RAN_BY, WORKER)
        with trial_heartbeat(trial, self.config), self.lane() as session:
            return self._fit(trial, params, session)

    def _fit(self, trial: Trial, params: swagppm.TrialParams, session: swagppm.Session) -> float | tuple[float, float]:
        config = self.config
        stop_above_epsilon = config.targets.epsilon_cap if config.early_stop else None
        pruner = draw_pruner(trial, config)
        try:
            fit = session.fit(params, stop_above_epsilon=stop_above_epsilon,
                              on_epoch=StuckDetector(config.targets.stuck_epochs), on_draws=pruner,
                              progress=self.progress)
            result = fit.result
        except (swagppm.ConfigError, swagppm.DataError):
            raise
        except KeyboardInterrupt:
            trial.set_user_attr(FAILURE, "interrupted (Ctrl-C)")
            raise
        except BrokenPipeError:  # the reader of this worker's output is gone (its parent died): a stop, not a crash
            raise Terminated(CLOSED_PIPE) from None
        except Exception as error:
            trial.set_user_attr(FAILURE, f"{type(error).__name__}: {error}")
            raise FitCrashed(f"trial {trial.number} (c={params.c:g}, epochs={params.ft_epochs}): "
                             f"{type(error).__name__}: {error}") from error
        checks = DrawChecks() if result.failure else secret_draw_checks(session, fit, config)
        outcome = judge(result, targets=config.targets, search=config.search, accounted=config.study.accounted,
                        checks=checks)
        outcome = pruned_outcome(outcome, pruner, config.search)
        record(trial, outcome, self.artifacts, config, storage=self.storage, echo=self.echo)
        self.lines[trial.number] = outcome.line()
        if self.on_outcome is not None:
            self.on_outcome(trial.number, outcome)
        if outcome.catastrophic:
            raise optuna.TrialPruned(outcome.reasons[0])
        return outcome.objective_values(config.study.objective)


def secret_draw_checks(session: swagppm.Session, fit: swagppm.Fit, config: StudyConfig) -> DrawChecks:
    """One secret draw of ``fit``: scored on ``[study] public_eval`` (accounted) or audited (``require_audit``; the
    two never meet, see ``StudyConfig``); its seconds join the fit's timings."""
    if not (config.study.accounted or config.targets.require_audit):
        return DrawChecks()
    start = time.perf_counter()
    if config.study.accounted:
        assert config.study.public_eval is not None and fit.posterior is not None  # checked by StudyConfig; no failure
        try:
            checks = DrawChecks(public_score=public_score(session, fit.posterior, config.study.public_eval))
        finally:
            fit.posterior.restore_mean(session.bundle.model)
    else:
        audit = audit_losses(session.secret_draw_losses(fit))
        checks = DrawChecks(audit_epsilon_bound=float(audit.epsilon_lower_bound))
    fit.result.timings["public_score" if config.study.accounted else "audit"] = time.perf_counter() - start
    return checks


def public_score(session: swagppm.Session, posterior: SWAGPosterior, source: str) -> float:
    """Macro-F1 on ``source`` of one secret draw, left loaded in the model (the caller restores the mean)."""
    from swagppm.releases.selection import Selection, choose_draw  # torch: only for accounted trials

    rule = Selection(source=source, threshold=0.0, rounds=1, stop_probability=1.0)
    description, _ = choose_draw(session, posterior, rule)
    if not description["accounted"]:
        raise ConfigError(f"[study] public_eval {source}: some of its records also occur in the private data, so "
                          "it is not public evaluation data; remove them or use another file")
    return float(description["released_draw_score"])


def record_outcome(trial: Trial, outcome: Outcome, *, storage: BaseStorage) -> dict[str, Any]:
    """The constraints (where Optuna and optuna-dashboard read them) and every aggregate as user attributes
    (returned)."""
    store_constraints(storage, trial, outcome.constraints)
    attrs = outcome.attributes()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return attrs


def record(trial: Trial, outcome: Outcome, artifacts: ArtifactStore, config: StudyConfig, *,
           storage: BaseStorage, echo: Callable[[str], None] = print) -> None:
    """Constraints and user attributes first, then the diagnosis note and the figures (aggregates only).

    The fit is what cost the time: a note or figures that cannot be written (an
    unwritable artifact folder, a full disk) leave a ``figures_error`` attribute and
    one line, and the trial keeps its value.
    """
    record_outcome(trial, outcome, storage=storage)
    try:
        publish_trial(trial, outcome, artifacts, config)
    except OSError as error:
        reason = f"{type(error).__name__}: {error}".splitlines()[0]
        trial.set_user_attr(FIGURES_ERROR, reason)
        echo(f"trial {trial.number:>3}  figures not written ({reason}); the fit is kept")

