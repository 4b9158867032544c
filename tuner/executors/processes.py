"""Several local worker processes on one study, GPUs assigned round-robin, one combined progress view.

Each worker is ``swagppm-tune worker STUDY.toml`` in its own process; the storage
URL travels in the environment (``STORAGE_ENV``), never on a command line that
``ps`` would show. The parent creates the study and its start points first, so the
workers only join; stage 1 is computed by the first worker under the private
cache's lock and read by the others. A worker seen to exit leaves no trial
running: its trial is failed and re-enqueued at once, for the others to run. A
paused study (``tuner.pause``) gets no worker, and its workers end after their
running trials.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.storages import BaseStorage
from optuna.trial import TrialState

from swagppm import ConfigError
from tuner.config import StudyConfig
from tuner.executors.registry import register_executor
from tuner.faults import PARENT_ENV, Terminated, recover_stale_trials, worker_id
from tuner.pause import pause_of
from tuner.queries import best_feasible, closest_trial, finished_count
from tuner.storage import STORAGE_ENV, describe_error, is_connection_error, masked_url, traits
from tuner.study import (
    RunSummary,
    enqueue_start_points,
    open_storage,
    open_study,
    paused_run,
    planned_trials,
    study_exists,
    study_lock,
)

POLL_SECONDS = 0.5
REFUSED = 2  # a worker's exit status for bad input (tuner.cli.base.EXIT_BAD_INPUT)


@register_executor("processes")
@dataclass(frozen=True, kw_only=True)
class ProcessesExecutor:
    """``workers`` local processes (``run_workers``); ``gpus`` round-robin; ``data`` is each worker's ``--data``."""

    workers: int
    gpus: Sequence[str] = ()
    data: str | None = None

    def run(self, config: StudyConfig, *, n_trials: int | None, timeout: float | None,
            echo: Callable[[str], None]) -> RunSummary:
        check_shared_storage(config, workers=self.workers)
        storage = open_storage(config)
        new = not study_exists(storage, config.study.name)
        study = shared_study(config, workers=self.workers, n_trials=n_trials)
        before = finished_count(study)
        if (paused := paused_run(study, config)) is not None:  # a paused study gets no worker
            echo(f"stopped: {paused.stopped_because}")
            return paused
        codes = run_processes(study, config, workers=self.workers, gpus=self.gpus, n_trials=n_trials,
                              timeout=timeout, data=self.data, echo=echo)
        if new and set(codes.values()) == {REFUSED}:
            forget_unrun(study, storage)
        statuses = ", ".join(f"{name} {code}" for name, code in codes.items())
        return RunSummary(finished_before=before, finished_now=finished_count(study) - before,
                          stopped_because=f"every worker exited (exit statuses: {statuses})",
                          best=best_feasible(study), closest=closest_trial(study), paused=pause_of(study) is not None)


def forget_unrun(study: optuna.Study, storage: BaseStorage) -> None:
    """Every worker of a study this run created was refused before its first trial (bad data, say): the study goes,
    so that the corrected study file runs (left, it would keep the refused file's definition), and the refusal is
    one line (``ConfigError``). A study in which any trial ran is kept."""
    if any(trial.state != TrialState.WAITING for trial in study.get_trials(deepcopy=False)):
        return
    optuna.delete_study(study_name=study.study_name, storage=storage)
    raise ConfigError(f"every worker was refused before its first trial (their lines above say why); the study "
                      f"{study.study_name!r} this run created was removed, so the corrected study file runs")


def run_workers(
    config: StudyConfig,
    *,
    workers: int,
    gpus: Sequence[str] = (),
    n_trials: int | None = None,
    timeout: float | None = None,
    data: str | None = None,
    echo: Callable[[str], None] = print,
) -> dict[str, int]:
    """Start ``workers`` processes on the study and wait for them; returns each worker's exit status.

    Workers get ``CUDA_VISIBLE_DEVICES`` round-robin from ``gpus`` (several per GPU
    allowed). A worker that dies (even by SIGKILL) has its running trial failed
    and re-enqueued with its parameters as soon as it is seen gone, so the others
    run it; workers on other machines are covered by heartbeats.
    """
    study = shared_study(config, workers=workers, n_trials=n_trials)
    return run_processes(study, config, workers=workers, gpus=gpus, n_trials=n_trials, timeout=timeout, data=data,
                         echo=echo)


def check_shared_storage(config: StudyConfig, *, workers: int) -> None:
    """SQLite is refused for several workers, before anything is created."""
    url = config.storage_url
    if workers > 1 and not traits(url).shared:
        raise ConfigError(
            f"{config.path} [study]: storage {masked_url(url)} is SQLite, which one process at a time can use; "
            f"for {workers} local workers set storage = \"journal:{config.path.stem}.log\" (a journal file beside "
            "the study) or a PostgreSQL/MySQL URL (several machines)")


def shared_study(config: StudyConfig, *, workers: int, n_trials: int | None) -> optuna.Study:
    """The study, created with its start points for the workers to join; SQLite is refused for several workers."""
    check_shared_storage(config, workers=workers)
    with study_lock(config):
        study = open_study(config)
        enqueue_start_points(study, config, n_trials=planned_trials(study, config, n_trials))
    return study


def worker_command(study_path: Path, *, name: str, n_trials: int | None, timeout: float | None,
                   data: str | None) -> list[str]:
    command = [sys.executable, "-m", "tuner.cli", "worker", str(study_path), "--name", name]
    if n_trials is not None:
        command += ["--n-trials", str(n_trials)]
    if timeout is not None:
        command += ["--timeout", repr(float(timeout))]  # exact: a rounded value could fall to 0, which is refused
    if data is not None:
        command += ["--data", data]
    return command


def worker_environment(config: StudyConfig, *, index: int, workers: int, gpus: Sequence[str]) -> dict[str, str]:
    """The storage URL, unbuffered output, this process's id (the worker stops when it dies: ``stop_with_parent``),
    and the worker's GPU (round-robin) or its share of the CPU cores."""
    env = {**os.environ, STORAGE_ENV: config.storage_url, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    elif "OMP_NUM_THREADS" not in os.environ:  # CPU workers share the cores instead of oversubscribing them
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


def run_processes(study: optuna.Study, config: StudyConfig, *, workers: int, gpus: Sequence[str],
                  n_trials: int | None, timeout: float | None, data: str | None,
                  echo: Callable[[str], None]) -> dict[str, int]:
    """Start the workers on ``study``, relay their lines, and wait for every one; Ctrl-C and SIGTERM are passed on to
    them."""
    echo(f"starting {workers} workers on study {config.study.name!r} in {masked_url(config.storage_url)}"
         + (f", GPUs {', '.join(gpus)} round-robin" if gpus else ""))
    processes: dict[str, subprocess.Popen[str]] = {}
    readers = []
    lock = threading.Lock()
    for index in range(workers):
        name = f"w{index}"
        command = worker_command(config.path, name=name, n_trials=n_trials, timeout=timeout, data=data)
        processes[name] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                           env=worker_environment(config, index=index, workers=workers, gpus=gpus))
        readers.append(threading.Thread(target=_relay, args=(name, processes[name], echo, lock), daemon=True))
        readers[-1].start()

    def locked_echo(line: str) -> None:
        with lock:
            echo(line)

    try:
        codes = _wait(processes, study, config, locked_echo)
    except KeyboardInterrupt as interrupt:  # Ctrl-C or SIGTERM: passed on, each worker queues its trial again
        forwarded = signal.SIGTERM if isinstance(interrupt, Terminated) else signal.SIGINT
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(forwarded)
        for name, process in processes.items():
            process.wait()
            _recover(study, config, locked_echo, name=name, pid=process.pid)  # what a worker left running
        _join(readers)
        raise
    _join(readers)
    return codes


def _join(readers: list[threading.Thread]) -> None:
    for reader in readers:
        reader.join(timeout=5)


def _wait(processes: dict[str, subprocess.Popen[str]], study: optuna.Study, config: StudyConfig,
          echo: Callable[[str], None]) -> dict[str, int]:
    """Each worker's exit status; a worker that exits has its running trial failed and re-enqueued at once."""
    codes: dict[str, int] = {}
    while len(codes) < len(processes):
        time.sleep(POLL_SECONDS)
        for name, process in processes.items():
            if name in codes or process.poll() is None:
                continue
            codes[name] = process.returncode
            if process.returncode < 0:
                echo(f"[{name}] died ({signal.Signals(-process.returncode).name})")
            elif process.returncode not in (0, 1):
                echo(f"[{name}] exited with status {process.returncode}")
            _recover(study, config, echo, name=name, pid=process.pid)
    return codes


def _recover(study: optuna.Study, config: StudyConfig, echo: Callable[[str], None], *, name: str, pid: int) -> None:
    """Fail and re-enqueue what the exited worker left running; a storage that is away leaves it to heartbeats."""
    try:
        recover_stale_trials(study, config, echo=lambda line: echo(f"[{name}] {line}"), gone={worker_id(pid)})
    except Exception as error:
        if not is_connection_error(error):
            raise
        echo(f"[{name}] could not check its trials: lost the study storage {masked_url(config.storage_url)} "
             f"({describe_error(error, config.storage_url)})")


def _relay(name: str, process: subprocess.Popen[str], echo: Callable[[str], None], lock: threading.Lock) -> None:
    assert process.stdout is not None
    for line in process.stdout:
        with lock:
            echo(f"[{name}] {line.rstrip()}")
