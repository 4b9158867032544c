"""Optuna studies of SWAG-PPM: open or resume one, run trials, and read back what they found.

A trial suggests (c, epochs[, g]), runs ``swagppm.run_fit`` (stage 1 shared),
judges the fit with ``scorers`` and records constraints (``trial.set_constraint``),
the same numbers as user attributes, the diagnosis as a note and its figures as
an artifact. Feasibility and "best" are computed here from the stored
constraints, so they read the same from every worker and every command.

A trial whose process died (SIGKILL, a lost machine) is failed and re-enqueued
with its parameters, a bounded number of times: on SQLite, which one process at a
time may run (a lock file beside the database), every running trial found when a
run starts; on a journal, one whose heartbeat (a user attribute) is older than the
grace period; on a server database, Optuna's heartbeats; and at once, any trial of
a worker process seen to exit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import math
import os
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optuna
import plotly.utils
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

import scorers.plots
import swagppm
from swagppm import ConfigError

if TYPE_CHECKING:
    from optuna.storages import BaseStorage

    from swagppm import EpochInfo
from tuner.config import StudyConfig
from tuner.outcome import Outcome, judge
from tuner.record import (
    FAILURE,
    FIGURES_ERROR,
    HEARTBEAT,
    RAN_BY,
    RETRY_OF,
    TrialRecord,
    measured_violations,
    named_constraints,
    store_constraints,
)
from tuner.samplers import FlowchartSampler, make_sampler
from tuner.storage import describe_error, is_connection_error, kind, make_storage, masked_url, storage_file
from tuner.tuning import ACCOUNTED_TRIALS, NUM_TRAIN, draw_trial_count

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
DEFINITION_ATTR = "definition"
STAGE1_FINGERPRINT = "stage1_fingerprint"  # study attribute: the stage 1 every trial of the study used
CAVEATS = (*swagppm.CAVEATS,
           "The released model is one draw from the SWAG posterior; its own F1 varies around the medians reported "
           "here.")
MAX_CONSECUTIVE_CRASHES = 3
OWN_HEARTBEATS = ("journal", "redis")  # storages without Optuna's heartbeats that several processes share


def worker_id(pid: int) -> str:
    """Which process ran a trial (the ``worker`` user attribute; no private data)."""
    return f"{socket.gethostname()}:{pid}"


WORKER = worker_id(os.getpid())


class FitCrashed(RuntimeError):
    """A fit raised something other than a configuration or data error (out of memory, a bug, ...)."""


def open_storage(config: StudyConfig) -> BaseStorage:
    """The study's storage, with the heartbeat, retry and timeout settings of ``[study]``."""
    settings = config.study
    return make_storage(config.storage_url, heartbeat_interval=settings.heartbeat_interval,
                        grace_period=settings.grace_period, max_retries=settings.max_retries,
                        connect_timeout=settings.connect_timeout)


def open_study(config: StudyConfig, *, create: bool = True, worker: str | None = None,
               storage: BaseStorage | None = None) -> optuna.Study:
    """Create the study or resume it; refuses to resume one defined by a different search, targets or fit.

    A ``worker`` (its name) seeds its sampler from the study seed and the name, so
    parallel workers do not propose the same configurations. ``storage`` (from
    ``open_storage``) is opened here when not given; a run passes its own, which
    records the trials' constraints.
    """
    storage = open_storage(config) if storage is None else storage
    directions: list[Literal["minimize", "maximize"]] = (
        ["minimize"] if config.study.objective == "epsilon" else ["minimize", "maximize"])
    seed = config.study.seed
    if worker is not None:
        seed = int.from_bytes(hashlib.sha256(f"{seed}:{worker}".encode()).digest()[:4], "little") % 2**31
    sampler = make_sampler(config.study.sampler, seed=seed, search=config.search,
                           n_startup_trials=config.study.startup_trials)
    name = config.study.name
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            raise ConfigError(f"{config.path}: no study named {name!r} in {masked_url(config.storage_url)}; "
                              f"run `swagppm-tune run {config.path}` first") from None
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, directions=directions,
                                load_if_exists=True)
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(f"{config.path} [study]: objective = {config.study.objective!r}, but the stored study "
                          f"{name!r} has {len(study.directions)} objective(s); use a new study name")
    definition = study_definition(config)
    stored = study.user_attrs.get(DEFINITION_ATTR)
    if stored is None:
        study.set_user_attr(DEFINITION_ATTR, definition)
        study.set_user_attr("caveats", list(CAVEATS))
        if config.study.accounted:
            study.set_user_attr(ACCOUNTED_TRIALS, draw_trial_count(config))
        with warnings.catch_warnings():  # set_metric_names is still marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["epsilon"] if len(directions) == 1 else ["epsilon", "f1_macro"])
    elif stored != definition:
        changed = sorted(f"[{table}] {key}" for table in definition for key in
                         set(definition[table]) | set(stored.get(table, {}))
                         if definition[table].get(key) != stored.get(table, {}).get(key))
        raise ConfigError(f"{config.path}: the study {name!r} in {masked_url(config.storage_url)} was run with a "
                          f"different definition ({', '.join(changed)} changed); its trials would not be comparable. "
                          "Restore those values or use a new [study] name")
    return study


def study_definition(config: StudyConfig) -> dict[str, dict[str, Any]]:
    """What makes trials comparable: the search ranges, the targets and every setting that changes a fit."""
    fit = config.fit.to_dict()
    for key in ("cache_dir", "device", "eval_batch_size"):
        fit.pop(key)
    fit["data"].pop("source")  # the same data may live at another path on another machine (data_hash checks it)
    search = dataclasses.asdict(config.search)
    search.pop("start")
    search.pop("probe")  # like the start points, where a study begins does not change what its trials measure
    return {"search": search, "targets": dataclasses.asdict(config.targets), "swagppm": json.loads(json.dumps(fit))}


class StuckDetector:
    """Stops a fit whose training accuracy stays at the majority-class rate ``epochs`` epochs in a row."""

    def __init__(self, epochs: int, *, tolerance: float = 0.01) -> None:
        self.epochs, self.tolerance, self.run = epochs, tolerance, 0

    def __call__(self, info: EpochInfo) -> str | None:
        self.run = self.run + 1 if info.train_accuracy <= info.majority_rate + self.tolerance else 0
        if self.run < self.epochs:
            return None
        return f"training stuck at the majority-class rate ({info.majority_rate:.3f}) for {self.run} epochs in a row"


class Objective:
    """One trial: suggest, fit, judge, record. Catastrophic fits are pruned after recording.

    Every trial fits in one ``swagppm.Session`` (data, model and stage 1 loaded
    once), created on first use; ``close()`` frees it. ``storage`` is the study's
    (constraints are written through it; a run replaces it after a reconnect).
    """

    def __init__(self, config: StudyConfig, *, storage: BaseStorage,
                 on_outcome: Callable[[int, Outcome], None] | None = None, progress: bool = False,
                 echo: Callable[[str], None] = print) -> None:
        self.config = config
        self.storage = storage
        self.on_outcome = on_outcome
        self.progress = progress
        self.echo = echo
        config.artifact_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts = FileSystemArtifactStore(config.artifact_dir)
        self._session: swagppm.Session | None = None
        self.lines: dict[int, str] = {}  # each judged trial's progress line, until the run prints it

    @property
    def session(self) -> swagppm.Session:
        if self._session is None:
            self._session = swagppm.Session(self.config.fit)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def suggest(self, trial: Trial) -> tuple[float, int, float]:
        search = self.config.search
        c = trial.suggest_float("c", search.c_min, search.c_max, log=search.c_log)
        epochs = trial.suggest_int("ft_epochs", search.ft_epochs_min, search.ft_epochs_max)
        g = trial.suggest_float("g", search.g_min, search.g_max) if search.searches_g else search.g  # type: ignore[arg-type]
        return c, epochs, g

    def __call__(self, trial: Trial) -> float | tuple[float, float]:
        c, epochs, g = self.suggest(trial)
        trial.set_user_attr(RAN_BY, WORKER)
        beats = kind(self.config.storage_url) in OWN_HEARTBEATS
        with heartbeat(trial, interval=self.config.study.heartbeat_interval) if beats else contextlib.nullcontext():
            return self._fit(trial, c, epochs, g)

    def _fit(self, trial: Trial, c: float, epochs: int, g: float) -> float | tuple[float, float]:
        config = self.config
        stop_above_epsilon = config.targets.epsilon if config.early_stop else None
        try:
            result = self.session.fit(c=c, ft_epochs=epochs, g=g, stop_above_epsilon=stop_above_epsilon,
                                      on_epoch=StuckDetector(config.targets.stuck_epochs),
                                      progress=self.progress).result
        except (swagppm.ConfigError, swagppm.DataError):
            raise
        except KeyboardInterrupt:
            trial.set_user_attr(FAILURE, "interrupted (Ctrl-C)")
            raise
        except Exception as error:
            trial.set_user_attr(FAILURE, f"{type(error).__name__}: {error}")
            raise FitCrashed(f"trial {trial.number} (c={c:g}, epochs={epochs}): "
                             f"{type(error).__name__}: {error}") from error
        outcome = judge(result, targets=config.targets, search=config.search)
        record(trial, outcome, self.artifacts, config, storage=self.storage, echo=self.echo)
        self.lines[trial.number] = outcome.line()
        if self.on_outcome is not None:
            self.on_outcome(trial.number, outcome)
        if outcome.catastrophic:
            raise optuna.TrialPruned(outcome.reasons[0])
        return outcome.objective_values(config.study.objective)



def record_outcome(trial: Trial, outcome: Outcome, *, storage: BaseStorage) -> dict[str, Any]:
    """The constraints (where Optuna and optuna-dashboard read them) and every aggregate as user attributes
    (returned)."""
    store_constraints(storage, trial, outcome.constraints)
    attrs = outcome.attributes()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return attrs


@contextlib.contextmanager
def heartbeat(trial: Trial, *, interval: float) -> Iterator[None]:
    """Stamps the trial's ``heartbeat`` attribute now and every ``interval`` seconds while the block runs.

    Journal storages have no heartbeats of their own; this one lets another
    process tell a trial whose worker died (``stale_trials``).
    """
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(interval):
            with contextlib.suppress(Exception):  # a missed beat only brings the retry closer
                trial.set_user_attr(HEARTBEAT, time.time())

    trial.set_user_attr(HEARTBEAT, time.time())
    thread = threading.Thread(target=beat, name=f"heartbeat-trial-{trial.number}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def record(trial: Trial, outcome: Outcome, artifacts: FileSystemArtifactStore, config: StudyConfig, *,
           storage: BaseStorage, echo: Callable[[str], None] = print) -> None:
    """Constraints and user attributes first, then the diagnosis note and the figures (aggregates only).

    The fit is what cost the time: a note or figures that cannot be written (an
    unwritable artifact folder, a full disk) leave a ``figures_error`` attribute and
    one line, and the trial keeps its value.
    """
    record_outcome(trial, outcome, storage=storage)
    try:
        import optuna_dashboard

        optuna_dashboard.save_note(trial, trial_note(trial.number, outcome))
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / f"trial-{trial.number}-figures.json"
            path.write_text(figures_json(outcome.record(), config))
            upload_artifact(artifact_store=artifacts, file_path=str(path), study_or_trial=trial,
                            mimetype="application/json")
    except OSError as error:
        reason = f"{type(error).__name__}: {error}".splitlines()[0]
        trial.set_user_attr(FIGURES_ERROR, reason)
        echo(f"trial {trial.number:>3}  figures not written ({reason}); the fit is kept")


def trial_note(number: int, outcome: Outcome) -> str:
    """The dashboard note: verdict, reasons and the guide's next move (markdown)."""
    lines = [f"## Trial {number}: {outcome.label.replace('_', ' ')} — "
             f"{'feasible' if outcome.feasible else 'not feasible'}", ""]
    lines += [f"- {reason}" for reason in outcome.reasons]
    lines += ["", f"**Next (the guide's flowchart):** {outcome.recommendation.sentence}"]
    return "\n".join(lines)


def figures_html(record: TrialRecord, config: StudyConfig, *, title: str) -> str:
    """A trial's max-delta plot and F1 violins as one HTML page (plotly.js embedded once: it opens offline)."""
    parts = [figure.to_html(full_html=False, include_plotlyjs=index == 0)
             for index, figure in enumerate(trial_figures(record, config))]
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>" \
           f"<h1>{title}</h1>{''.join(parts)}</body></html>"


def figures_json(record: TrialRecord, config: StudyConfig) -> str:
    """A trial's figures as plotly JSON (a few kB; no plotly.js): the artifact every trial stores."""
    return json.dumps([figure.to_plotly_json() for figure in trial_figures(record, config)],
                      cls=plotly.utils.PlotlyJSONEncoder)


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


# --- reading a study back -------------------------------------------------------------------------------------


def is_feasible(trial: FrozenTrial) -> bool:
    """A completed trial whose every constraint is met (``scorers.is_feasible``)."""
    return trial.state == TrialState.COMPLETE and scorers.is_feasible(trial.constraints)


def violation(trial: FrozenTrial) -> float:
    """The sum of violated measured constraint values (0 for a feasible trial; inf without constraints)."""
    return sum(violated(trial).values()) if trial.constraints else math.inf


def best_feasible(study: optuna.Study) -> FrozenTrial | None:
    """The most private feasible trial (lowest ε; ties: higher macro-F1, then the earlier trial)."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]
    if not feasible:
        return None
    return min(feasible, key=lambda t: (*_point(t), t.number))


def closest_trial(study: optuna.Study) -> FrozenTrial | None:
    """With no feasible trial: the finished trial with the smallest total violation of what it measured."""
    finished = [t for t in study.get_trials(deepcopy=False, states=FINISHED) if t.constraints]
    return min(finished, key=lambda t: (violation(t), t.number)) if finished else None


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible trials not dominated in (ε down, macro-F1 up)."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]

    def point(t: FrozenTrial) -> tuple[float, float]:
        epsilon, minus_f1 = _point(t)
        return epsilon, -minus_f1

    return sorted((t for t in feasible if not any(
        point(o)[0] <= point(t)[0] and point(o)[1] >= point(t)[1] and point(o) != point(t) for o in feasible)),
        key=lambda t: point(t))


def _point(trial: FrozenTrial) -> tuple[float, float]:
    """(ε, −macro-F1 median) for ordering; an unjudged or unmeasured trial sorts last."""
    record = TrialRecord.of(trial)
    if record is None:
        return math.inf, 0.0
    return record.epsilon_or_inf, -(record.f1_macro_median or 0.0)


def violated(trial: FrozenTrial) -> dict[str, float]:
    """The measured constraints a trial violates, with their values."""
    return measured_violations(named_constraints(trial), _unmeasured(trial))


def describe_violations(trial: FrozenTrial) -> str:
    """What a trial misses, for a line or a report: ``epsilon +0.200; not measured: f1_macro, f1_weighted``."""
    unmeasured = _unmeasured(trial)
    missed = measured_violations(named_constraints(trial), unmeasured)
    text = ", ".join(f"{key} {value:+.3f}" for key, value in missed.items())
    return text + (f"; not measured: {', '.join(unmeasured)}" if unmeasured else "")


def _unmeasured(trial: FrozenTrial) -> tuple[str, ...]:
    record = TrialRecord.of(trial)
    return record.unmeasured if record is not None else ()


def fits_for_figures(study: optuna.Study) -> list[dict[str, Any]]:
    """One mapping per finished trial, as ``scorers.plots`` grid and trade-off figures take them."""
    return [{"number": t.number, "c": t.params.get("c"), "ft_epochs": t.params.get("ft_epochs"),
             "epsilon": r.epsilon, "f1_macro": r.f1_macro_median, "label": r.diagnosis, "feasible": is_feasible(t)}
            for t in study.get_trials(deepcopy=False, states=FINISHED) if (r := TrialRecord.of(t)) is not None]


def stage1_runs(study: optuna.Study) -> dict[str, list[int]]:
    """The trial numbers of every stage 1 the study's finished trials used, by fingerprint (older records: none)."""
    runs: dict[str, list[int]] = {}
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is not None and record.stage1_fingerprint:
            runs.setdefault(record.stage1_fingerprint, []).append(trial.number)
    return runs


def study_figures(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The search grid and the ε–F1 trade-off of every finished trial."""
    fits = fits_for_figures(study)
    prep = study.user_attrs.get("baseline_f1_macro")
    threshold = None if prep is None else (1 - config.targets.max_f1_degradation) * prep
    return {
        "search-grid": scorers.plots.search_grid_figure(fits, epsilon_target=config.targets.epsilon),
        "tradeoff": scorers.plots.tradeoff_figure(fits, epsilon_target=config.targets.epsilon,
                                                  f1_macro_threshold=threshold),
    }


# --- running ----------------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class RunSummary:
    """How a ``run`` ended, for the command line."""

    finished_before: int
    finished_now: int
    stopped_because: str
    best: FrozenTrial | None
    closest: FrozenTrial | None


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


class StorageLost(RuntimeError):
    """The study storage went away mid-run and did not come back within the reconnect attempts."""


def planned_trials(study: optuna.Study, config: StudyConfig, n_trials: int | None = None) -> int | None:
    """Finished trials the study runs to: ``n_trials`` (a run's override) or ``[study] n_trials``; an
    accounted study exactly the K drawn when it was created."""
    if config.study.accounted:
        return int(study.user_attrs[ACCOUNTED_TRIALS])
    return config.study.n_trials if n_trials is None else n_trials


def enqueue_start_points(study: optuna.Study, config: StudyConfig, *, n_trials: int | None) -> None:
    """The study's start points and probe, once, at most ``n_trials`` of them (none left waiting after a short
    study); the flowchart starts from the first one by itself."""
    if isinstance(study.sampler, FlowchartSampler):
        return
    for point in config.search.start_points()[:n_trials]:
        params: dict[str, Any] = {"c": point.c, "ft_epochs": point.ft_epochs}
        if config.search.searches_g:
            params["g"] = config.search.g if point.g is None else point.g
        study.enqueue_trial(params, skip_if_exists=True)


@contextlib.contextmanager
def study_lock(config: StudyConfig) -> Iterator[None]:
    """On SQLite, this process's exclusive claim on the study (``<db>.lock``, released on exit); elsewhere nothing.

    SQLite takes one process at a time: a second ``run`` would run the start
    points again and overshoot ``n_trials``, so it is refused with what to use.
    """
    database = storage_file(config.storage_url) if kind(config.storage_url) == "sqlite" else None
    if database is None:
        yield
        return
    lock = database.with_name(database.name + ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{config.path} [study]: the SQLite study {database} is being run by another process (it holds "
                f"{lock}); SQLite takes one process at a time: wait for it, or for several processes set storage = "
                f"\"journal:{config.path.stem}.log\" or a PostgreSQL URL") from None
        yield


def stale_trials(study: optuna.Study, config: StudyConfig, *, gone: Collection[str] | None = None) -> list[FrozenTrial]:
    """The running trials that no live process runs any more.

    ``gone``: the ``worker`` names of processes seen to exit; their trials only.
    Otherwise by the storage: on SQLite every running trial (call it holding
    ``study_lock``, so that no other process can run one); on a journal, a trial
    whose heartbeat (or start) is older than ``grace_period``; on a server database
    none here (Optuna's heartbeats, see ``recover_stale_trials``).
    """
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if gone is not None:
        return [t for t in running if t.user_attrs.get(RAN_BY) in gone]
    storage_kind = kind(config.storage_url)
    if storage_kind == "sqlite":
        return running
    if storage_kind in OWN_HEARTBEATS:
        silent_since = time.time() - config.study.grace_period
        return [t for t in running if _last_sign_of_life(t) < silent_since]
    return []


def _last_sign_of_life(trial: FrozenTrial) -> float:
    started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
    return max(float(trial.user_attrs.get(HEARTBEAT, 0.0)), started)


def recover_stale_trials(study: optuna.Study, config: StudyConfig, *, echo: Callable[[str], None] = print,
                         gone: Collection[str] | None = None) -> None:
    """Fail the ``stale_trials`` and re-enqueue each with its parameters, at most ``[study] max_retries`` times.

    Without ``gone`` a server database also fails the trials whose heartbeat is
    older than the grace period (Optuna's ``fail_stale_trials``, which re-enqueues
    them through the storage's retry callback).
    """
    if gone is None:
        with warnings.catch_warnings():  # fail_stale_trials is still marked experimental
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    for trial in stale_trials(study, config, gone=gone):
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, UpdateFinishedTrialError):  # another process finished or failed it first
            continue
        max_retries = config.study.max_retries
        params = retry(study, trial, max_retries=max_retries)
        done = (f"not retried (max_retries = {max_retries} reached)" if params is None else
                f"re-enqueued with {', '.join(f'{k}={v:g}' for k, v in params.items()) or 'new parameters'}")
        echo(f"trial {trial.number:>3}  was left running by a process that is gone: failed; {done}")


def retry(study: optuna.Study, trial: FrozenTrial, *, max_retries: int) -> dict[str, Any] | None:
    """Re-enqueue a failed trial's parameters (so a start point is still evaluated); None past ``max_retries``.

    The retry carries ``retry_of`` (the failed trial) and Optuna's own retry
    attributes, so retries by heartbeat and by this function count together.
    """
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > max_retries:
        return None
    params = {**trial.system_attrs.get("fixed_params", {}), **trial.params}
    study.add_trial(create_trial(
        state=TrialState.WAITING, user_attrs={RETRY_OF: trial.number},
        system_attrs={"fixed_params": params, "failed_trial": history[0], "retry_history": history}))
    return params


def check_artifact_dir(config: StudyConfig) -> None:
    """The artifact folder can be created and written, checked before the first (expensive) fit, not after it."""
    folder = config.artifact_dir
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(f"{config.path} [study] artifacts {folder}: cannot be written, so no trial's figures "
                          f"could be kept ({type(error).__name__}: {error.strerror or error})") from None


@contextlib.contextmanager
def run_settings(config: StudyConfig, echo: Callable[[str], None]) -> Iterator[None]:
    """Optuna's log level and the heartbeat-error hook for the run only; both restored after it."""
    verbosity, hook = optuna.logging.get_verbosity(), threading.excepthook
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own line per trial replaces Optuna's log
    threading.excepthook = _quiet_heartbeat_errors(config, echo)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)
        threading.excepthook = hook


def run_study(
    config: StudyConfig,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    progress_fit: bool = False,
    worker: str | None = None,
    echo: Callable[[str], None] = print,
) -> RunSummary:
    """Create or resume the study and optimise until n_trials finished trials, the timeout or a stop rule.

    ``n_trials`` (default ``[study] n_trials``) counts finished trials of the whole
    study, so a resumed run only adds what is missing; the stop rules read the
    storage after every trial, so they hold for every process sharing the study.
    A ``worker`` (its name) joins an existing study without enqueuing its start
    points, with a sampler seeded for it. Trials left running by dead processes
    are failed and retried (``recover_stale_trials``) when the run starts and
    after every trial. An SQLite study is locked for the run (``study_lock``). A
    storage that goes away is reconnected with backoff; ``StorageLost`` after the
    last attempt. Ctrl-C propagates as ``KeyboardInterrupt`` after Optuna marks the
    running trial failed. Optuna's log level and ``threading.excepthook`` are
    restored on return.
    """
    with study_lock(config), run_settings(config, echo):
        return _run(config, n_trials=n_trials, timeout=timeout, progress_fit=progress_fit, worker=worker,
                    echo=echo)


def _run(config: StudyConfig, *, n_trials: int | None, timeout: float | None, progress_fit: bool,
         worker: str | None, echo: Callable[[str], None]) -> RunSummary:
    settings = config.study
    storage = open_storage(config)
    study = open_study(config, create=worker is None, worker=worker, storage=storage)
    recover_stale_trials(study, config, echo=echo)
    n_trials = planned_trials(study, config, n_trials)
    if settings.accounted and n_trials == 0:
        return RunSummary(finished_before=0, finished_now=0, best=None, closest=None,
                          stopped_because="the accounted study drew 0 trials (Poisson): nothing runs, nothing is "
                                          "released")
    timeout = settings.timeout if timeout is None else timeout
    before = finished_count(study)
    summary = RunSummary(finished_before=before, finished_now=0, stopped_because="", best=None, closest=None)

    def finish(reason: str) -> RunSummary:
        summary.finished_now = finished_count(study) - before
        summary.stopped_because = reason
        summary.best, summary.closest = best_feasible(study), closest_trial(study)
        return summary

    if settings.stop_on_first_feasible and best_feasible(study) is not None:
        return finish("a feasible trial was already found (stop_on_first_feasible)")
    if n_trials is not None and before >= n_trials:
        return finish(f"the study already has {before} finished trials (n_trials = {n_trials})")
    sampler = study.sampler
    if isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study):
        return finish(sampler.end_reason(study))

    echo(f"study {settings.name!r} in {masked_url(config.storage_url)}: {before} finished trial(s); "
         f"sampler {settings.sampler}, target epsilon <= {config.targets.epsilon:g}, F1 within "
         f"{config.targets.max_f1_degradation:.0%} of the baseline ({config.targets.statistic})")
    check_artifact_dir(config)
    objective = Objective(config, storage=storage, progress=progress_fit, echo=echo)
    try:
        reason, study = _optimize(study, objective, config, worker=worker, n_trials=n_trials, timeout=timeout,
                                  echo=echo)
    finally:
        objective.close()
    return finish(reason)


def keep_first(study: optuna.Study, key: str, value: str) -> str | None:
    """Store ``value`` under ``key`` if the study has none yet; otherwise the stored value when it differs."""
    stored = study.user_attrs.get(key)
    if stored is None:
        study.set_user_attr(key, value)
    return stored if stored is not None and stored != value else None


def check_data(study: optuna.Study, data_hash: str, config: StudyConfig) -> None:
    """Refuse records that differ from those of the study's earlier trials (before any stage 1 or fit runs)."""
    if (stored := keep_first(study, "data_hash", data_hash)) is not None:
        raise ConfigError(f"{config.path} [data]: the records differ from those of the study's earlier "
                          f"trials (data hash {data_hash[:12]} vs {stored[:12]}); use a new [study] name")


def check_stage1(study: optuna.Study, fingerprint: str, config: StudyConfig) -> None:
    """Refuse a stage 1 other than the one the study's earlier trials used: their ε and F1 would not compare."""
    if (stored := keep_first(study, STAGE1_FINGERPRINT, fingerprint)) is not None:
        raise ConfigError(f"{config.path} [swagppm]: this worker's stage 1 differs from the one the study's earlier "
                          f"trials used (fingerprint {fingerprint} vs {stored}): another CPU, thread count or library "
                          "version rounds differently, so its trials would not compare; give every worker one "
                          "cache_dir and thread count, or use a new [study] name")


def _optimize(study: optuna.Study, objective: Objective, config: StudyConfig, *, worker: str | None,
              n_trials: int | None, timeout: float | None, echo: Callable[[str], None]) -> tuple[str, optuna.Study]:
    """Stage 1 (once, under the cache lock), the start points, then trials until a stop rule holds.

    Returns why it stopped and the study (reopened if the storage was lost meanwhile).
    """
    settings, sampler = config.study, study.sampler
    check_data(study, objective.session.data.data_hash, config)
    prep = objective.session.prepare(progress=True)  # stage 1 can run for minutes: show its bars on a terminal
    check_stage1(study, prep.stage1_fingerprint, config)
    study.set_user_attr(NUM_TRAIN, prep.num_train)
    study.set_user_attr("baseline_f1_macro", prep.baseline_f1_macro)
    study.set_user_attr("baseline_f1_weighted", prep.baseline_f1_weighted)
    echo(f"data: {prep.num_train} training / {prep.num_test} test records, {prep.num_classes} classes; "
         f"non-private baseline F1 macro {prep.baseline_f1_macro:.3f}, weighted {prep.baseline_f1_weighted:.3f}; "
         f"stage 1 {'read from the cache' if prep.stage1_cache_hit else 'computed'} in "
         f"{sum(prep.timings.values()):.1f}s")
    if worker is None:
        enqueue_start_points(study, config, n_trials=n_trials)

    reason = {"text": ""}
    crashes = {"run": 0}
    lines = objective.lines

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        """Print the finished trial (once it is stored), save the study figures, apply the stop rules."""
        import optuna_dashboard  # here, not at the top: the command line's read-only verbs start without it

        if trial.number in lines:
            echo(f"trial {trial.number:>3}  {lines.pop(trial.number)}")
        recover_stale_trials(study, config, echo=echo)
        if trial.state == TrialState.FAIL:
            crashes["run"] += 1
            echo(f"trial {trial.number:>3}  FAILED: {trial.user_attrs.get(FAILURE, 'interrupted')}")
            if crashes["run"] >= MAX_CONSECUTIVE_CRASHES:
                reason["text"] = f"{crashes['run']} trials in a row crashed; see the errors above"
                study.stop()
            return
        crashes["run"] = 0
        for graph_id, figure in study_figures(study, config).items():
            optuna_dashboard.save_plotly_graph_object(study, figure, graph_object_id=graph_id)
        if settings.stop_on_first_feasible and best_feasible(study) is not None:
            reason["text"] = "a feasible trial was found (stop_on_first_feasible)"
            study.stop()
        elif isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study):
            reason["text"] = sampler.end_reason(study)
            study.stop()

    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = [after_trial]
    if n_trials is not None:
        callbacks.append(MaxTrialsCallback(n_trials, states=FINISHED))
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
        try:
            study.optimize(objective, timeout=remaining, callbacks=callbacks, catch=(FitCrashed,),
                           gc_after_trial=False)
            break
        except optuna.exceptions.UpdateFinishedTrialError as error:
            echo(f"a trial was failed by another worker while this one had lost the storage ({error}); going on")
        except Exception as error:
            if not is_connection_error(error):
                raise
            study, objective.storage = _reconnect(config, error, echo, worker)
    if not reason["text"]:
        if deadline is not None and time.monotonic() >= deadline:
            reason["text"] = f"the timeout ({timeout:g}s) was reached"
        else:
            reason["text"] = f"the study has {finished_count(study)} finished trials (n_trials = {n_trials})"
    return reason["text"], study


def _quiet_heartbeat_errors(config: StudyConfig, echo: Callable[[str], None]) -> Callable[[Any], None]:
    """A heartbeat thread that loses the storage reports one masked line instead of a traceback."""
    default = threading.__excepthook__

    def hook(args: Any) -> None:
        if args.exc_value is not None and is_connection_error(args.exc_value):
            echo(f"heartbeat lost the study storage {masked_url(config.storage_url)} "
                 f"({describe_error(args.exc_value, config.storage_url)})")
        else:
            default(args)

    return hook


def _reconnect(config: StudyConfig, error: BaseException, echo: Callable[[str], None],
               worker: str | None) -> tuple[optuna.Study, BaseStorage]:
    """Reopen the study after its storage went away: waits ``reconnect_wait`` seconds, doubling, then gives up."""
    settings, shown = config.study, masked_url(config.storage_url)
    reason = describe_error(error, config.storage_url)
    for attempt in range(1, settings.reconnect_attempts + 1):
        wait = settings.reconnect_wait * 2 ** (attempt - 1)
        echo(f"lost the study storage {shown} ({reason}); reconnecting in {wait:g}s "
             f"(attempt {attempt} of {settings.reconnect_attempts})")
        time.sleep(wait)
        try:
            storage = open_storage(config)
            study = open_study(config, create=False, worker=worker, storage=storage)
            finished_count(study)  # a real round trip
        except Exception as retry_error:  # noqa: BLE001 - every failure here is "still unreachable"
            reason = describe_error(retry_error, config.storage_url)
            continue
        echo(f"reconnected to the study storage {shown}")
        return study, storage
    raise StorageLost(f"lost the study storage {shown} and could not reconnect after "
                      f"{settings.reconnect_attempts} attempts ({reason}); finished trials are kept there. "
                      "Run the command again once the database is back")


def definition_digest(config: StudyConfig) -> str:
    """A short fingerprint of the study definition (shown in exports)."""
    return hashlib.sha256(json.dumps(study_definition(config), sort_keys=True).encode()).hexdigest()[:16]


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial for tables: number, state, params, ε, F1s, verdict, feasibility, time."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        r = TrialRecord.of(t)
        rows.append({
            "number": t.number, "state": t.state.name, "c": t.params.get("c"), "ft_epochs": t.params.get("ft_epochs"),
            "g": t.params.get("g"), "epsilon": r and r.epsilon,
            "epsilon_is_lower_bound": bool(r and r.epsilon_is_lower_bound),
            "f1_macro": r and r.f1_macro_median, "f1_weighted": r and r.f1_weighted_median,
            "f1_macro_q10": r and r.f1_macro_q10, "f1_weighted_q10": r and r.f1_weighted_q10,
            "diagnosis": r.diagnosis if r else t.user_attrs.get(FAILURE, ""), "feasible": is_feasible(t),
            "seconds": r.timings.get("total") if r else None,
        })
    return rows


def format_table(rows: Sequence[dict[str, Any]], *, statistic: str = "median") -> str:
    """The trial table as fixed-width text."""
    def num(value: Any, width: int, digits: int = 3) -> str:
        if isinstance(value, (int, float)) and math.isfinite(value):
            return f"{value:>{width}.{digits}f}"
        return " " * (width - 1) + "-"

    header = f"{'#':>4} {'state':<8} {'c':>6} {'ep':>3} {'epsilon':>9} {'F1 mac':>7} {'F1 wtd':>7} {'diagnosis':<12} " \
             f"{'feasible':<8} {'time':>7}"
    lines = [header, "-" * len(header)]
    for row in rows:
        eps = num(row["epsilon"], 8)
        eps = (">" if row["epsilon_is_lower_bound"] else " ") + eps
        macro = row["f1_macro"] if statistic == "median" else row["f1_macro_q10"]
        weighted = row["f1_weighted"] if statistic == "median" else row["f1_weighted_q10"]
        lines.append(f"{row['number']:>4} {row['state']:<8} {num(row['c'], 6)} "
                     f"{row['ft_epochs'] if row['ft_epochs'] is not None else '-':>3} {eps} {num(macro, 7)} "
                     f"{num(weighted, 7)} {str(row['diagnosis'])[:12]:<12} {'yes' if row['feasible'] else 'no':<8} "
                     f"{num(row['seconds'], 6, 1)}s")
    return "\n".join(lines)
