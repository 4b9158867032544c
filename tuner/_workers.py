"""Several local worker processes on one study, GPUs assigned round-robin, one combined progress view.

Each worker is ``swagppm-tune worker STUDY.toml`` in its own process; the storage
URL travels in the environment (``STORAGE_ENV``), never on a command line that
``ps`` would show. The parent creates the study and its start points first, so the
workers only join; stage 1 is computed by the first worker under the private
cache's lock and read by the others. A worker seen to exit leaves no trial
running: its trial is failed and re-enqueued at once, for the others to run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import optuna

from swagppm import ConfigError
from tuner._study import (
    enqueue_start_points,
    open_study,
    planned_trials,
    recover_stale_trials,
    study_lock,
    worker_id,
)
from tuner.config import StudyConfig
from tuner.storage import describe_error, is_connection_error, masked_url, supports_workers

STORAGE_ENV = "SWAGPPM_TUNE_STORAGE"
POLL_SECONDS = 0.5


def worker_command(study_path: Path, *, name: str, n_trials: int | None, timeout: float | None,
                   data: str | None) -> list[str]:
    command = [sys.executable, "-m", "tuner._cli", "worker", str(study_path), "--name", name]
    if n_trials is not None:
        command += ["--n-trials", str(n_trials)]
    if timeout is not None:
        command += ["--timeout", f"{timeout:.3f}"]
    if data is not None:
        command += ["--data", data]
    return command


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
    url = config.storage_url
    if workers > 1 and not supports_workers(url):
        raise ConfigError(
            f"{config.path} [study]: storage {masked_url(url)} is SQLite, which one process at a time can use; "
            f"for {workers} local workers set storage = \"journal:{config.path.stem}.log\" (a journal file beside "
            "the study) or a PostgreSQL/MySQL URL (several machines)")
    with study_lock(config):
        study = open_study(config)
        enqueue_start_points(study, config, n_trials=planned_trials(study, config, n_trials))
    echo(f"starting {workers} workers on study {config.study.name!r} in {masked_url(url)}"
         + (f", GPUs {', '.join(gpus)} round-robin" if gpus else ""))
    processes: dict[str, subprocess.Popen[str]] = {}
    readers = []
    lock = threading.Lock()
    for index in range(workers):
        name = f"w{index}"
        env = {**os.environ, STORAGE_ENV: url, "PYTHONUNBUFFERED": "1"}
        if gpus:
            env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
        elif "OMP_NUM_THREADS" not in os.environ:  # CPU workers share the cores instead of oversubscribing them
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
        process = subprocess.Popen(worker_command(config.path, name=name, n_trials=n_trials, timeout=timeout,
                                                  data=data),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        processes[name] = process
        reader = threading.Thread(target=_relay, args=(name, process, echo, lock), daemon=True)
        reader.start()
        readers.append(reader)

    def locked_echo(line: str) -> None:
        with lock:
            echo(line)

    try:
        codes = _wait(processes, study, config, locked_echo)
    except KeyboardInterrupt:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        codes = {name: process.wait() for name, process in processes.items()}
        for reader in readers:
            reader.join(timeout=5)
        raise
    for reader in readers:
        reader.join(timeout=5)
    return codes


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
