"""A study's workers as cluster jobs through ``submitit``: Slurm on a cluster, local processes for tests.

The launcher creates the study and its start points, then submits ``jobs`` jobs of
``workers_per_job`` tasks each; every task is one worker (``tuner.study.run_study``
with ``worker=``) on the shared storage, which must be a server database (all the
jobs write to it) whose heartbeats let any worker fail and retry a trial whose job
died. With ``gpus_per_job = 1`` and several workers per job, those workers share the
job's GPU. The storage URL travels in the environment (``STORAGE_ENV``), as for local
workers: Slurm's ``sbatch`` exports the submitting environment by default, and the
local executor inherits it; it is never written into a job file.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swagppm import ConfigError
from tuner.config import StudyConfig
from tuner.executors.processes import shared_study
from tuner.executors.registry import register_executor
from tuner.faults import recover_stale_trials
from tuner.queries import best_feasible, closest_trial, finished_count
from tuner.storage import STORAGE_ENV, kind, masked_url
from tuner.study import RunSummary, run_study

CLUSTERS = ("auto", "slurm", "local")
POLL_SECONDS = 2.0


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
        if kind(config.storage_url) not in ("postgresql", "mysql"):
            raise ConfigError(f"{config.path} [study]: cluster jobs share the study through a server database; "
                              f"storage {masked_url(config.storage_url)} is not one (use a PostgreSQL or MySQL URL)")
        study = shared_study(config, workers=self.jobs * self.workers_per_job, n_trials=n_trials)
        before = finished_count(study)
        jobs = self._submit(config, n_trials=n_trials, timeout=timeout)
        echo(f"submitted {len(jobs)} job(s) of {self.workers_per_job} worker(s) on study {config.study.name!r} in "
             f"{masked_url(config.storage_url)}: {', '.join(str(job.job_id) for job in jobs)}")
        failed = self._wait(jobs, study, config, echo)
        return RunSummary(finished_before=before, finished_now=finished_count(study) - before,
                          stopped_because=f"every job ended ({failed} of {len(jobs)} failed or were cancelled)",
                          best=best_feasible(study), closest=closest_trial(study))

    def _submit(self, config: StudyConfig, *, n_trials: int | None, timeout: float | None) -> list[Any]:
        import submitit  # optional dependency: pip install 'swagppm-tuner[cluster]'

        folder = self.folder or config.artifact_dir / "jobs"
        executor = submitit.AutoExecutor(folder=folder, cluster=None if self.cluster == "auto" else self.cluster)
        executor.update_parameters(name=f"swagppm-{config.study.name}", timeout_min=self.timeout_min,
                                   tasks_per_node=self.workers_per_job, gpus_per_node=self.gpus_per_job,
                                   **dict(self.parameters))
        saved = os.environ.get(STORAGE_ENV)
        os.environ[STORAGE_ENV] = config.storage_url  # inherited by the jobs, never written into a job file
        try:
            return [executor.submit(worker_job, str(config.path), f"job{index}", n_trials, timeout, self.data)
                    for index in range(self.jobs)]
        finally:
            if saved is None:
                os.environ.pop(STORAGE_ENV, None)
            else:
                os.environ[STORAGE_ENV] = saved

    @staticmethod
    def _wait(jobs: list[Any], study: Any, config: StudyConfig, echo: Callable[[str], None]) -> int:
        """Wait for every job, failing the trials of dead workers by heartbeat meanwhile; how many jobs failed."""
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
        recover_stale_trials(study, config, echo=echo)
        return failed


def worker_job(study_path: str, name: str, n_trials: int | None, timeout: float | None, data: str | None) -> int:
    """One task of a cluster job: a worker on the study named in the environment; its finished trials."""
    import submitit

    rank = submitit.JobEnvironment().local_rank
    config = StudyConfig.from_toml(study_path).with_storage(os.environ[STORAGE_ENV])
    if data is not None:
        config = config.with_data(data)
    summary = run_study(config, n_trials=n_trials, timeout=timeout, worker=f"{name}.{rank}",
                        echo=lambda line: print(f"[{name}.{rank}] {line}", flush=True))
    return summary.finished_now
