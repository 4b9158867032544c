"""A study's workers as cluster jobs through ``submitit``: Slurm on a cluster, local processes for tests.

The launcher creates the study and its start points, then submits ``jobs`` jobs of
``workers_per_job`` tasks each; every task is one worker (``tuner.study.run_study``
with ``worker=``) on the shared storage: any that several processes share (SQLite is
refused), a journal file only where every job sees it. With ``gpus_per_job = 1``
and several workers per job, those workers share the job's GPU. The storage URL
travels in the environment (``STORAGE_ENV``), as for local workers: Slurm's
``sbatch`` exports the submitting environment by default, and the local executor
inherits it; it is never written into a job file. Each job is recorded owner-side
(``tuner.executors.jobs``) for ``swagppm-tune jobs`` to list and cancel.

A cancelled Slurm job's tasks get Slurm's SIGTERM (``scancel``, or the job's time
limit), then SIGKILL after the cluster's ``KillWait``: a task fails its running
trial with the reason and queues it again at once, as a ``worker`` does on SIGTERM
(submitit would only log the signal). A job that ends otherwise (killed outright,
a local job cancelled) leaves its running trial to be failed and queued again: at
once when its process was on this machine (``vanished_workers``), else by heartbeat
after the grace period. A cancelled local task (SIGINT) exits at once without
touching its trial, so that this holds however the cancel lands. SIGTERM to the
launcher is an interrupt: local jobs are cancelled with it, Slurm jobs go on. A
paused study (``tuner.pause``) gets no job, and its jobs end after their running
trials.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import optuna

from swagppm import ConfigError
from tuner.config import StudyConfig
from tuner.executors.jobs import cancel_jobs, make_private_folder, read_launches, record_launch
from tuner.executors.processes import shared_study
from tuner.executors.registry import register_executor
from tuner.faults import interrupt_on_sigterm, interruption, recover_stale_trials, vanished_workers
from tuner.pause import pause_of
from tuner.queries import best_feasible, closest_trial, finished_count
from tuner.storage import STORAGE_ENV, masked_url, traits
from tuner.study import RunSummary, paused_run, run_study
from tuner.tracking import tracking_callbacks

CLUSTERS = ("auto", "slurm", "local")
# submitit's signal before a job's time limit or a preemption, in a trial's failure: the trial is queued again
TIME_LIMIT = "SIGUSR2: the job's time limit is near, or it is preempted"
POLL_SECONDS = 2.0
CONTROLLERS_LOG = "controllers.log"  # what local jobs' controller processes print


@register_executor("submitit")
@dataclass(frozen=True, kw_only=True)
class SubmititExecutor:
    """``jobs`` submitit jobs of ``workers_per_job`` workers each on ``cluster`` (auto: Slurm when present).

    ``folder`` holds submitit's job files and logs (default: ``jobs/`` in the study's
    artifact folder); ``timeout_min`` is each job's wall-time limit; ``parameters`` are
    passed on to ``submitit`` as they are (e.g. ``slurm_partition``).
    """

    jobs: int
    workers_per_job: int = 1
    gpus_per_job: int = 0
    cluster: str = "auto"
    folder: Path | None = None
    timeout_min: int = 24 * 60
    data: str | None = None
    parameters: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.cluster not in CLUSTERS:
            raise ConfigError(f"--cluster {self.cluster!r}: must be one of {', '.join(CLUSTERS)}")
        for name in ("jobs", "workers_per_job", "timeout_min"):
            if getattr(self, name) < 1:
                raise ConfigError(f"--{name.replace('_', '-')} = {getattr(self, name)}: must be at least 1")
        if self.gpus_per_job < 0:
            raise ConfigError(f"--gpus-per-job = {self.gpus_per_job}: must be 0 or more")

    def run(self, config: StudyConfig, *, n_trials: int | None, timeout: float | None,
            echo: Callable[[str], None]) -> RunSummary:
        check_shared_storage(config)
        study = shared_study(config, workers=self.jobs * self.workers_per_job, n_trials=n_trials)
        before = finished_count(study)
        if (paused := paused_run(study, config)) is not None:  # a paused study gets no job
            return paused
        folder = self.folder or jobs_folder(config)
        jobs: list[Any] = []
        with interrupt_on_sigterm():
            try:
                cluster = self._submit(config, folder, jobs, n_trials=n_trials, timeout=timeout)
                echo(f"submitted {len(jobs)} {cluster} job(s) of {self.workers_per_job} worker(s) on study "
                     f"{config.study.name!r} in {masked_url(config.storage_url)}: "
                     f"{', '.join(str(job.job_id) for job in jobs)}")
                failed = _wait(jobs, study, config, echo)
            except KeyboardInterrupt:
                _interrupted(jobs, study, config, echo)
                raise
        pause = pause_of(study)
        ended = f"every job ended ({failed} of {len(jobs)} failed or were cancelled)"
        return RunSummary(finished_before=before, finished_now=finished_count(study) - before,
                          stopped_because=ended if pause is None else f"{ended}; {pause.line(config)}",
                          best=best_feasible(study), closest=closest_trial(study), paused=pause is not None)

    def _submit(self, config: StudyConfig, folder: Path, jobs: list[Any], *, n_trials: int | None,
                timeout: float | None) -> str:
        """Submit the jobs into ``jobs``, recording each as it goes; the cluster that runs them."""
        submitit = import_submitit()
        make_private_folder(folder)
        executor = submitit.AutoExecutor(folder=folder, cluster=None if self.cluster == "auto" else self.cluster)
        # no GPU asked for: no GPU directive at all, which a cluster without GPU resources (GRES) refuses even for 0
        gpus = {"gpus_per_node": self.gpus_per_job} if self.gpus_per_job else {}
        executor.update_parameters(name=f"swagppm-{config.study.name}", timeout_min=self.timeout_min,
                                   tasks_per_node=self.workers_per_job, **gpus, **dict(self.parameters))
        cluster = str(executor.cluster)
        values = {STORAGE_ENV: config.storage_url}  # inherited by the jobs, never written into a job file
        if cluster == "local" and "OMP_NUM_THREADS" not in os.environ:  # local jobs share the cores
            values["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (self.jobs * self.workers_per_job)))
        output = controller_output(folder) if cluster == "local" else contextlib.nullcontext()
        with environment(values), output:
            first = len(read_launches(folder, config.study.name))  # names (and sampler seeds) new to the study
            for index in range(first, first + self.jobs):
                jobs.append(_submitted(executor, config, jobs, [worker_job, str(config.path), f"job{index}",
                                                                n_trials, timeout, self.data]))
                record_launch(folder, jobs[-1:], cluster=cluster, study=config.study.name,
                              tasks=self.workers_per_job)
        return cluster


def _submitted(executor: Any, config: StudyConfig, jobs: list[Any], call: list[Any]) -> Any:
    """One job submitted; the cluster's refusal (``sbatch: error: ...``: a partition or resource it does not have) is
    one line naming the jobs submitted before it, not an internal error."""
    from submitit.core.utils import FailedJobError

    try:
        return executor.submit(*call)
    except FailedJobError as error:
        reason = (str(error).strip().splitlines() or ["no reason given"])[-1]
        raise ConfigError(f"{config.path}: the cluster refused a job ({reason}); {len(jobs)} job(s) were submitted "
                          f"before it (`swagppm-tune jobs {config.path}` lists them, `--cancel` cancels them)"
                          ) from None


def jobs_folder(config: StudyConfig) -> Path:
    """Where ``launch`` keeps a study's submitit files, logs and job records: ``jobs/`` in its artifact folder."""
    return config.artifact_dir / "jobs"


def check_shared_storage(config: StudyConfig) -> None:
    """Cluster jobs need a storage that several processes share: SQLite is refused, with what to use instead."""
    if not traits(config.storage_url).shared:
        raise ConfigError(
            f"{config.path} [study]: storage {masked_url(config.storage_url)} is SQLite, which one process at a time "
            "can use, and every cluster job is a process of its own; use a PostgreSQL or MySQL/MariaDB URL, the "
            "Redis journal (redis://HOST:6379/0), a gRPC proxy (grpc://HOST:PORT), or a journal file that every "
            "job sees (journal:FILE on a shared file system)")


def import_submitit() -> Any:
    """submitit, or a one-line error naming the extra that installs it."""
    try:
        import submitit
    except ModuleNotFoundError:
        raise ConfigError("cluster jobs need submitit: pip install 'swagppm-tuner[cluster]'") from None
    return submitit


@contextlib.contextmanager
def environment(values: Mapping[str, str]) -> Iterator[None]:
    """``values`` in this process's environment for the block (what submitted jobs inherit), then restored."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextlib.contextmanager
def controller_output(folder: Path) -> Iterator[None]:
    """Standard output and error go to ``controllers.log`` (0600) in ``folder`` for the block: a local job's
    controller process inherits them, and what it prints (its traceback when cancelled) belongs there, not among
    the launcher's lines. The tasks' own output goes to their log files beside it."""
    sys.stdout.flush()
    sys.stderr.flush()
    log = os.open(folder / CONTROLLERS_LOG, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log, 1)
        os.dup2(log, 2)
        yield
    finally:
        for descriptor, original in zip((1, 2), saved):
            os.dup2(original, descriptor)
            os.close(original)
        os.close(log)


def _wait(jobs: list[Any], study: optuna.Study, config: StudyConfig, echo: Callable[[str], None]) -> int:
    """Wait for every job, failing and requeuing the trials of dead workers meanwhile; how many jobs failed."""
    pending, failed = list(jobs), 0
    while pending:
        time.sleep(POLL_SECONDS)
        recover_stale_trials(study, config, echo=echo)
        for job in [job for job in pending if job.done()]:
            pending.remove(job)
            try:
                error = job.exception()
            except Exception as lost:  # noqa: BLE001 - a job killed outright has no outcome to read
                error = lost
            if error is not None:
                failed += 1
                first = (str(error).strip().splitlines() or [type(error).__name__])[-1]
                echo(f"[job {job.job_id}] ended without finishing: {first}")
            else:
                echo(f"[job {job.job_id}] done")
        _recover_vanished(study, config, echo)
    recover_stale_trials(study, config, echo=echo)
    return failed


def _recover_vanished(study: optuna.Study, config: StudyConfig, echo: Callable[[str], None]) -> None:
    """Fail and requeue the running trials of workers on this machine whose process is gone (a killed or
    cancelled local job), without waiting for their heartbeats to go stale."""
    gone = vanished_workers(study)
    if gone:
        recover_stale_trials(study, config, echo=echo, gone=gone)


def _interrupted(jobs: list[Any], study: optuna.Study, config: StudyConfig, echo: Callable[[str], None]) -> None:
    """Ctrl-C or SIGTERM: cancel local jobs (they would run on unseen) and requeue their trials; Slurm jobs go on."""
    submitit = import_submitit()
    local = [job for job in jobs if isinstance(job, submitit.LocalJob)]
    if local:
        cancelled = cancel_jobs(local, echo=echo)
        _recover_vanished(study, config, echo)
        echo(f"cancelled {cancelled} local job(s); their running trials were failed and queued again")
    remote = len(jobs) - len(local)
    if remote:
        echo(f"the {remote} cluster job(s) go on without the launcher: `swagppm-tune jobs {config.path}` lists "
             "them, `--cancel` cancels them")


def worker_job(study_path: str, name: str, n_trials: int | None, timeout: float | None, data: str | None) -> int:
    """One task of a cluster job: a worker on the study named in the environment; its finished trials.

    SIGINT (a cancelled local job) ends it at once, leaving its running trial to be
    failed and queued again by whoever sees it gone (``_recover_vanished``, heartbeats).
    SIGTERM (Slurm's ``scancel`` and time limit) and submitit's warning signal before
    the time limit or a preemption (``warning_signal``: submitit would fail the
    running trial as a crash) fail and queue again the running trial first, as for
    ``worker``, and end the task (``_terminated``).
    """
    import submitit

    label = f"{name}.{submitit.JobEnvironment().local_rank}"

    def echo(line: str) -> None:
        print(f"[{label}] {line}", flush=True)

    signal.signal(signal.SIGINT, lambda number, frame: _cancelled(label))
    config = StudyConfig.from_toml(study_path).with_storage(os.environ[STORAGE_ENV])
    if data is not None:
        config = config.with_data(data)
    try:
        with interrupt_on_sigterm(also={warning_signal(): TIME_LIMIT}):  # over submitit's handlers
            summary = run_study(config, n_trials=n_trials, timeout=timeout, worker=label, echo=echo,
                                callbacks=tracking_callbacks(config, echo=echo))
    except KeyboardInterrupt as interrupt:  # SIGTERM only: SIGINT ends the task in _cancelled
        _terminated(label, interrupt)
    echo(f"stopped: {summary.stopped_because}")
    return summary.finished_now


def warning_signal() -> int:
    """The signal Slurm sends a job before its time limit (or a preemption), as submitit asks for it
    (``SUBMITIT_PREEMPT_SIGNAL``, default USR2)."""
    import submitit

    return int(getattr(signal, f"SIG{submitit.JobEnvironment.USR_SIG}"))


def _cancelled(label: str) -> NoReturn:
    """A cancelled task's last line (written directly: the signal may land inside a print) and its exit."""
    os.write(1, f"[{label}] cancelled (SIGINT): stopping now; the running trial is failed and queued again once "
                "this process is seen gone\n".encode())
    os._exit(130)  # the interrupted status (tuner.cli.base.EXIT_INTERRUPTED)


def _terminated(label: str, interrupt: KeyboardInterrupt) -> NoReturn:
    """A task stopped by SIGTERM, its running trial failed and queued again by ``run_study``: its last line and its
    exit, before the cluster's SIGKILL (submitit's own handlers are not run again)."""
    print(f"[{label}] {interruption(interrupt)}: the running trial was failed and queued again; this task ends",
          flush=True)
    os._exit(130)
