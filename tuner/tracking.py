"""Experiment tracking, opt-in by the study file's ``[tracking]``: each trial's aggregates in MLflow and W&B runs.

In MLflow, a parent run per study (its figures page, and what ``export`` wrote)
with a child run per trial, named after it, in an experiment named after the
study; in W&B, one run per trial in a group of that name. What a run's numbers
hold is exactly what the study database holds of the trial, and less
(``trial_summary``): its parameters, ε, the F1 medians over the utility draws and
the verdict; never a per-record value or a draw. A child run's figures picture
and the study's figures page are the dashboard's (aggregates of the private data).
A tracking store is owner-side, as the study database is: a local MLflow store
and the W&B folder are written owner-only (0700 folders, 0600 files), and W&B
uploads nothing until the owner runs ``wandb sync``. An MLflow server, or the
owner's own W&B server (``wandb_host``), is sent those aggregates only with
``[tracking] remote = true`` (``tuner.config.Tracking``), and a run says so in one
line before its first fit.

Every tracker is made and asked once before the first fit (``tracking_callbacks``),
so a bad URI or a server that is not there is refused then, in one line naming
``[tracking]``; later, a tracker that fails reports one line and the study goes on.
MLflow's HTTP requests are bounded meanwhile (``bounded_requests``: at most
``HTTP_RETRIES`` retry and ``HTTP_TIMEOUT`` seconds a request, unless the owner set
MLflow's own variables): its defaults retry a server that is not there for minutes.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import optuna
from optuna.trial import FrozenTrial

from swagppm import ConfigError
from tuner.config import StudyConfig, local_path
from tuner.record import TrialRecord
from tuner.storage import describe_error, masked_url

TrialCallback = Callable[[optuna.Study, FrozenTrial], None]

# What a run logs of a trial's record, by kind: numbers as metrics, the verdict as tags.
TRACKED_METRICS = ("epsilon", "f1_macro_median", "f1_weighted_median")
TRACKED_TAGS = ("feasible", "diagnosis", "epsilon_is_lower_bound")
WANDB_KEY = "WANDB_API_KEY"  # where W&B reads a server's key: the environment, never the study file
FILE_STORE_ENV = "MLFLOW_ALLOW_FILE_STORE"  # MLflow 3 keeps its file store in maintenance mode behind this switch
HTTP_RETRIES, HTTP_TIMEOUT = 1, 5  # MLflow's own defaults (7 retries with backoff, 120 s) stall a trial for minutes
# MLflow's variables for them (mlflow.environment_variables), set for a tracker's calls unless the owner set them
HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(HTTP_RETRIES), "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": str(HTTP_TIMEOUT)}
STUDY_TAG = "swagppm.study"  # tags the study's parent run in MLflow, so that every worker finds the same one
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own tag: a child run under its parent in the UI
TRIAL_FIGURES = "figures/trial-{number}.svg"  # a child run's figures picture
STUDY_FIGURES = "figures/study.html"  # the parent run's search grid, trade-off and feasibility table
EXPORT_FOLDER = "export"  # where the parent run keeps what `export` wrote
SENT = ("each finished trial's parameters, exact epsilon, F1 medians and verdict (private statistics of the data, "
        "owner-side)")


@dataclass(frozen=True, kw_only=True)
class TrialSummary:
    """What a tracker logs of one trial: its parameters, metrics (finite values only) and tags."""

    name: str
    params: dict[str, float | int]
    metrics: dict[str, float]
    tags: dict[str, str]


def trial_summary(study: optuna.Study, trial: FrozenTrial) -> TrialSummary:
    """The tracked part of a finished trial: its parameters, ``TRACKED_METRICS`` and ``TRACKED_TAGS`` of its
    record (none for a trial without one: a crash), its state, the study and the trial number."""
    record = TrialRecord.of(trial)
    metrics: dict[str, float] = {}
    tags = {"study": study.study_name, "trial": str(trial.number), "state": trial.state.name}
    if record is not None:
        for key in TRACKED_METRICS:
            value = getattr(record, key)
            if value is not None and math.isfinite(value):
                metrics[key] = float(value)
        tags |= {key: str(getattr(record, key)).lower() for key in TRACKED_TAGS}
    return TrialSummary(name=f"trial {trial.number}", params=dict(trial.params), metrics=metrics, tags=tags)


@contextlib.contextmanager
def owner_only() -> Iterator[None]:
    """Files and folders created in the block are the owner's only (umask 077; a service a library starts here
    keeps it too)."""
    previous = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(previous)


def private_folder(folder: Path) -> Path:
    """``folder`` created owner-only (0700) if it is new; an existing one is left as it is."""
    if not folder.exists():
        folder.mkdir(parents=True, mode=0o700)
        folder.chmod(0o700)
    return folder


@contextlib.contextmanager
def bounded_requests() -> Iterator[None]:
    """MLflow's HTTP retries and timeout bounded (``HTTP_SETTINGS``) in the block, where the owner set none of
    them; the environment is restored after (MLflow reads the variables at every request)."""
    added = {name: value for name, value in HTTP_SETTINGS.items() if name not in os.environ}
    os.environ.update(added)
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)


class MLflowTracker:
    """A parent run for the study and a child run per trial in the experiment ``experiment`` of the tracking ``uri``.

    The parent run (tagged ``STUDY_TAG``, found again by every worker) holds the
    study's figures page (``STUDY_FIGURES``), rewritten after each trial, and what
    ``export`` wrote; each child run its trial's aggregates and figures picture.
    """

    def __init__(self, *, uri: str, experiment: str, config: StudyConfig) -> None:
        from mlflow.tracking import MlflowClient

        path = local_path(uri)
        self.artifact_location: str | None = None
        if path is not None and not uri.startswith("sqlite:"):
            os.environ.setdefault(FILE_STORE_ENV, "true")
            uri = private_folder(path).resolve().as_uri()
        elif path is not None:  # MLflow would put an SQLite store's artifacts in ./mlruns, wherever the run starts
            private_folder(path.parent)
            self.artifact_location = private_folder(path.parent / f"{path.stem}-artifacts").resolve().as_uri()
        self.client = MlflowClient(tracking_uri=uri)
        self.experiment, self.config = experiment, config
        self._experiment_id: str | None = None
        self._parent_id: str | None = None

    def check(self) -> None:
        """Ask the store once (the experiment's id, created if new): a bad URI or a server that is not there
        raises here, before any fit."""
        self._experiment()

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        from mlflow.entities import Metric, Param, RunTag

        from tuner.dashboard import figures_svg
        from tuner.figures import study_figures_html

        summary = trial_summary(study, trial)
        stamp = int(time.time() * 1000)
        parent = self.parent(study.study_name)
        run = self.client.create_run(self._experiment(), run_name=summary.name, tags={PARENT_TAG: parent})
        self.client.log_batch(run.info.run_id,
                              metrics=[Metric(key, value, stamp, 0) for key, value in summary.metrics.items()],
                              params=[Param(key, str(value)) for key, value in summary.params.items()],
                              tags=[RunTag(key, value) for key, value in summary.tags.items()])
        record = TrialRecord.of(trial)
        if record is not None:
            self.client.log_text(run.info.run_id, figures_svg(record, self.config),
                                 TRIAL_FIGURES.format(number=trial.number))
        self.client.set_terminated(run.info.run_id, status="FAILED" if trial.state.name == "FAIL" else "FINISHED")
        self.client.log_text(parent, study_figures_html(study, self.config), STUDY_FIGURES)

    def log_export(self, study: str, path: Path) -> str:
        """Log the export file ``path`` to the study's parent run (``EXPORT_FOLDER``); the parent run's id."""
        parent = self.parent(study)
        self.client.log_artifact(parent, str(path), EXPORT_FOLDER)
        return parent

    def parent(self, study: str) -> str:
        """The study's parent run, made by the first worker to log; when two made one at once, the older one stays
        and the other is deleted, so every worker logs under one."""
        if self._parent_id is None:
            found = self._parents(study)
            if not found:
                made = self.client.create_run(self._experiment(), run_name=f"study {study}",
                                              tags={STUDY_TAG: study, "study": study})
                found = self._parents(study)
                if found and found[0] != made.info.run_id:
                    self.client.delete_run(made.info.run_id)
            self._parent_id = found[0]
        return self._parent_id

    def _parents(self, study: str) -> list[str]:
        """The ids of the study's parent runs, oldest first."""
        runs = self.client.search_runs([self._experiment()], filter_string=f"tags.`{STUDY_TAG}` = '{study}'")
        return [run.info.run_id for run in sorted(runs, key=lambda run: (run.info.start_time, run.info.run_id))]

    def _experiment(self) -> str:
        """The experiment's id, created by the first worker to log (another worker creating it at once wins)."""
        if self._experiment_id is None:
            from mlflow.exceptions import MlflowException

            found = self.client.get_experiment_by_name(self.experiment)
            if found is None:
                try:
                    self._experiment_id = self.client.create_experiment(
                        self.experiment, artifact_location=self.artifact_location)
                except MlflowException:
                    found = self.client.get_experiment_by_name(self.experiment)
                    if found is None:
                        raise
            if found is not None:
                self._experiment_id = found.experiment_id
        assert self._experiment_id is not None
        return self._experiment_id


def log_export(config: StudyConfig, path: Path, *, echo: Callable[[str], None] = print) -> None:
    """With MLflow tracking, the file ``export`` wrote goes to the study's parent run too; a store that fails is one
    line, and the export stands."""
    settings = config.tracking
    if settings.mlflow_uri is None:
        return
    uri, experiment = settings.mlflow_uri, settings.mlflow_experiment or config.study.name
    where = f"MLflow {masked_url(uri)}"
    try:
        with owner_only(), bounded_requests():
            parent = MLflowTracker(uri=uri, experiment=experiment, config=config).log_export(config.study.name, path)
    except ModuleNotFoundError as error:
        echo(f"tracking: the export was not logged to {where}: the {error.name!r} package is missing (pip install "
             "'swagppm-tuner[tracking]')")
    except Exception as error:  # noqa: BLE001 - the export is written; the tracker's failure is one line
        echo(f"tracking: the export was not logged to {where}: {describe_error(error, uri)}")
    else:
        echo(f"tracking: the export was logged to {where}, run {parent} (study {config.study.name!r}), "
             f"under {EXPORT_FOLDER}/")


class WandbTracker:
    """One W&B run per trial in ``project``, grouped by study, written under ``folder``: offline, or online on the
    owner's own server ``host``."""

    def __init__(self, *, project: str, folder: Path, host: str | None = None) -> None:
        import wandb

        self.wandb = wandb
        self.project, self.host = project, host
        self.folder = private_folder(folder)

    def settings(self) -> Any:
        """The runs' W&B settings: nothing but what is logged (no code, git state, system metrics or console)."""
        where: dict[str, Any] = {"mode": "offline"} if self.host is None else {"mode": "online", "base_url": self.host}
        return self.wandb.Settings(**where, silent=True, console="off", save_code=False, disable_git=True,
                                   x_disable_stats=True, x_disable_meta=True)

    def check(self) -> None:
        """Offline runs need only their folder, made above; online ones the server's key and an answer from it."""
        if self.host is None:
            return
        if not os.environ.get(WANDB_KEY):
            raise RuntimeError(f"{WANDB_KEY} is not set: put your W&B server's API key in the environment")
        try:
            urllib.request.urlopen(f"{self.host.rstrip('/')}/healthz", timeout=HTTP_TIMEOUT).close()
        except urllib.error.HTTPError:
            pass  # the server answered
        except (urllib.error.URLError, OSError) as error:
            reason = getattr(error, "reason", error)
            raise ConnectionError(f"no answer from {masked_url(self.host)} ({reason})") from None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        summary = trial_summary(study, trial)
        run = self.wandb.init(project=self.project, dir=str(self.folder), group=study.study_name,
                              name=summary.name.replace(" ", "-"), job_type="trial", config=summary.params,
                              settings=self.settings(), reinit="create_new")
        try:
            run.log(summary.metrics)
            run.summary.update(summary.tags)
        finally:
            run.finish(exit_code=1 if trial.state.name == "FAIL" else 0)


class Tracker(Protocol):
    """What a tracker is to ``Guarded``: a trial callback that can be asked once before the first fit."""

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None: ...

    def check(self) -> None: ...


def tracking_callbacks(config: StudyConfig, *, echo: Callable[[str], None] = print) -> list[TrialCallback]:
    """The study file's trackers as Optuna callbacks (none without ``[tracking]``), each made and asked now, before
    any fit (a ``ConfigError`` naming ``[tracking]`` when it cannot be), then failing in one line per trial. A
    tracker that sends anything off the machine is named in one line saying what it sends."""
    settings = config.tracking
    guarded: list[Guarded] = []
    if settings.mlflow_uri is not None:
        uri, experiment = settings.mlflow_uri, settings.mlflow_experiment or config.study.name
        guarded.append(Guarded(where=f"MLflow {masked_url(uri)}", uri=uri, echo=echo,
                               make=lambda: MLflowTracker(uri=uri, experiment=experiment, config=config)))
        if local_path(uri) is None:
            echo(f"tracking: {SENT} are sent to the MLflow server {masked_url(uri)} ([tracking] remote = true)")
    if settings.wandb_project is not None:
        assert settings.wandb_dir is not None  # resolved by StudyConfig.from_toml
        project, folder, host = settings.wandb_project, Path(settings.wandb_dir), settings.wandb_host
        where = f"W&B (offline) {folder}" if host is None else f"W&B {masked_url(host)}"
        guarded.append(Guarded(where=where, uri=host, echo=echo,
                               make=lambda: WandbTracker(project=project, folder=folder, host=host)))
        if host is not None:
            echo(f"tracking: {SENT} are sent to the W&B server {masked_url(host)} ([tracking] remote = true)")
    for tracker in guarded:
        tracker.start(config.path)
    return list(guarded)


class Guarded:
    """A tracker made and asked before the first fit (``start``), then called owner-only with bounded requests; a
    failure then is one line, and the study goes on."""

    def __init__(self, *, where: str, uri: str | None, make: Callable[[], Tracker],
                 echo: Callable[[str], None]) -> None:
        self.where, self.uri, self.make, self.echo = where, uri, make, echo
        self.tracker: Tracker | None = None

    def start(self, study_file: Path) -> None:
        """Make the tracker and ask its store once; a missing package, a bad URI or a store that does not answer is
        a ``ConfigError`` naming ``[tracking]``."""
        try:
            with owner_only(), bounded_requests():
                self.tracker = self.make()
                self.tracker.check()
        except ModuleNotFoundError as error:
            raise ConfigError(f"{study_file} [tracking]: {self.where} needs the {error.name!r} package (pip install "
                              "'swagppm-tuner[tracking]'), or remove the table") from None
        except Exception as error:  # noqa: BLE001 - whatever the tracker raised, one line before any fit
            raise ConfigError(f"{study_file} [tracking]: cannot log to {self.where}: {self._reason(error)}; fix the "
                              "URI or start the server, or remove the table") from None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        try:
            with owner_only(), bounded_requests():
                if self.tracker is None:
                    self.tracker = self.make()
                self.tracker(study, trial)
        except ModuleNotFoundError as error:
            self.echo(f"tracking: trial {trial.number} not logged to {self.where}: the {error.name!r} package is "
                      "missing (pip install 'swagppm-tuner[tracking]')")
        except Exception as error:  # noqa: BLE001 - a tracker's failure must not end the study
            self.echo(f"tracking: trial {trial.number} not logged to {self.where}: {self._reason(error)}")

    def _reason(self, error: BaseException) -> str:
        """The error's one line, every credential of the URI masked."""
        if self.uri:
            return describe_error(error, self.uri)
        return f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"
