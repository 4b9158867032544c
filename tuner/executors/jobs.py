"""The cluster jobs a study's launches submitted: recorded owner-side, found again, listed and cancelled.

``launch`` appends each job it submits to ``launched.json`` in the submitit folder
(created 0700, the file 0600: it names the study and the jobs, nothing of the data).
``swagppm-tune jobs`` reads it back and rebuilds submitit's own job handles: a
``SlurmJob`` (``sacct`` for its state, ``scancel`` to cancel it) or a ``LocalJob``
around the job's controller process, which a launcher that is gone left running on
this machine (found by its process id, checked to be that folder's controller).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from swagppm import ConfigError

LAUNCHED = "launched.json"
LOCAL_CONTROLLER = "submitit.local._local"  # the module a local job's controller process runs
CANCEL_WAIT = 30.0  # seconds a cancelled local job gets to end (its controller kills its tasks within about 1 s)
ACTIVE_SLURM = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "RESIZING", "SUSPENDED")


@dataclass(frozen=True, kw_only=True)
class LaunchedJob:
    """One submitted job: its cluster's id, which executor ran it, the study, its tasks (workers), when."""

    job_id: str
    cluster: str
    study: str
    tasks: int
    submitted: str


def make_private_folder(folder: Path) -> None:
    """Create the submitit folder owner-only (job files, logs and ``launched.json`` live there)."""
    existed = folder.exists()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    if not existed:
        folder.chmod(0o700)  # mkdir's mode is cut by the umask


def record_launch(folder: Path, jobs: Sequence[Any], *, cluster: str, study: str, tasks: int) -> list[LaunchedJob]:
    """Append submitit ``jobs`` to the folder's ``launched.json`` (written whole, 0600); the entries written."""
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entries = [LaunchedJob(job_id=str(job.job_id), cluster=cluster, study=study, tasks=tasks, submitted=now)
               for job in jobs]
    path = folder / LAUNCHED
    kept = [asdict(entry) for entry in read_launches(folder)]
    temporary = path.with_name(f".{LAUNCHED}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        json.dump(kept + [asdict(entry) for entry in entries], handle, indent=1)
    os.replace(temporary, path)
    return entries


def read_launches(folder: Path, study: str | None = None) -> list[LaunchedJob]:
    """The jobs recorded in ``folder`` (those of ``study`` when named); none when nothing was launched there."""
    path = folder / LAUNCHED
    if not path.exists():
        return []
    try:
        entries = [LaunchedJob(**entry) for entry in json.loads(path.read_text())]
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{path}: not a list of launched jobs ({type(error).__name__}); it is written by "
                          "`swagppm-tune launch`") from None
    return [entry for entry in entries if study is None or entry.study == study]


class ControllerProcess:
    """A local job's controller by process id, for a ``LocalJob`` rebuilt in another process than the launcher's:
    what submitit's handle asks of a process (``poll``, ``send_signal``)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._signalled = 0

    def poll(self) -> int | None:
        if self.returncode is None and not controller_alive(self.pid, folder=None):
            self.returncode = -self._signalled if self._signalled else 0
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            self._signalled = number
            os.kill(self.pid, number)


def controller_alive(pid: int, *, folder: Path | None) -> bool:
    """Whether ``pid`` is a running submitit controller (of ``folder`` when given), not a reused process id."""
    try:
        arguments = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        status = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    words = [word.decode(errors="replace") for word in arguments]
    return status != "Z" and LOCAL_CONTROLLER in words and (folder is None or str(folder) in words)


def job_handle(folder: Path, job: LaunchedJob) -> Any:
    """submitit's own handle of a recorded job: a ``SlurmJob``, or a ``LocalJob`` on its controller if it runs."""
    import submitit

    tasks = list(range(job.tasks))
    if job.cluster == "slurm":
        return submitit.SlurmJob(folder=folder, job_id=job.job_id, tasks=tasks)
    running = job.job_id.isdigit() and controller_alive(int(job.job_id), folder=folder)
    process = ControllerProcess(int(job.job_id)) if running else None
    return submitit.LocalJob(folder=folder, job_id=job.job_id, tasks=tasks, process=process)  # type: ignore[arg-type]


def job_state(handle: Any) -> str:
    """A job's state in words: running, done, failed, cancelled, ended without a result, or Slurm's own."""
    import submitit

    if not isinstance(handle, submitit.LocalJob):
        return str(handle.state).split()[0].lower() if handle.state else "unknown"
    state = handle.get_info()["jobState"]
    if state == "RUNNING":
        return "running"
    if state == "INTERRUPTED":
        return "cancelled"
    result = handle.paths.result_pickle
    if result.exists():
        from submitit.core.utils import pickle_load

        return "done" if pickle_load(result)[0] == "success" else "failed"
    return "ended without a result (cancelled or killed)"


def is_active(state: str) -> bool:
    return state == "running" or state.upper() in ACTIVE_SLURM


def cancel_jobs(handles: Sequence[Any], *, echo: Callable[[str], None]) -> int:
    """Cancel the active jobs through their handles and wait for the local ones to end; how many were cancelled.

    A Slurm job gets ``scancel`` (its tasks fail and queue again their trials on its SIGTERM);
    a local job's controller gets SIGINT, as submitit's ``LocalJob.cancel`` sends, and ends its tasks.
    """
    import submitit

    active = [handle for handle in handles if is_active(job_state(handle))]
    for handle in active:
        handle.cancel(check=False)
    local = [handle for handle in active if isinstance(handle, submitit.LocalJob)]
    deadline = time.monotonic() + CANCEL_WAIT
    while any(handle.get_info()["jobState"] == "RUNNING" for handle in local) and time.monotonic() < deadline:
        time.sleep(0.2)
    for handle in local:
        if handle.get_info()["jobState"] == "RUNNING":
            echo(f"[job {handle.job_id}] still runs {CANCEL_WAIT:g}s after it was cancelled; cancel it again")
    return len(active)
