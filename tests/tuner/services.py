"""What the tests on the local servers share: their URLs, small studies in them, CLI subprocesses read line by line.

A test that needs a server asks for its fixture (``postgres``, ``mariadb``,
``redis`` in ``tests/tuner/conftest.py``), which skips it with the reason when the
server is not running.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tests import PATIENCE
from tests.tuner.helpers import merged, write_study
from tuner import StudyConfig, open_study

REPO = Path(__file__).resolve().parents[2]
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def unreachable(host: str, port: int) -> str | None:
    """Why ``host:port`` takes no connection, or None when it does."""
    try:
        socket.create_connection((host, port), timeout=2).close()
        return None
    except OSError as error:
        return f"{host}:{port} not reachable ({error})"


def distributed_study(folder: Path, cache: Path, storage: str, **changes: Any) -> Path:
    """The small study with a unique name in ``storage``, fast heartbeats, short retries."""
    study = {"name": f"t-{uuid.uuid4().hex[:10]}", "storage": storage, "heartbeat_interval": 1, "grace_period": 2,
             "reconnect_attempts": 2, "reconnect_wait": 0.5, **changes.pop("study", {})}
    swag = {**merged()["swagppm"], "cache_dir": str(cache), **changes.pop("swagppm", {})}
    return write_study(folder / "study.toml", merged(study=study, swagppm=swag, **changes))


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def stored(path: Path) -> optuna.Study:
    return open_study(StudyConfig.from_toml(path), create=False)


def delete_studies(paths: list[Path]) -> None:
    """Delete the studies of these study files from their storages (best effort: names are unique anyway)."""
    for path in paths:
        try:
            optuna.delete_study(study_name=StudyConfig.from_toml(path).study.name, storage=stored(path)._storage)
        except Exception:  # noqa: BLE001 - a study never created, or a server gone
            pass


class CliProcess:
    """``swagppm-tune ARGS`` as a real subprocess whose output is read line by line as it comes."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tuner.cli", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, marker: str, *, timeout: float = PATIENCE) -> str:
        """Wait for a line holding ``marker``; it fails with the whole output if the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if marker in line:
                return line
        raise AssertionError(f"no line with {marker!r} (exit status {self.process.poll()}):\n{self.output}")

    def finish(self, *, timeout: float = PATIENCE) -> int:
        """Wait for the process to exit and for all of its output; its exit status."""
        code = self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.lines.append(line)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def wait_for(study: optuna.Study, ready: Callable[[list[FrozenTrial]], list[FrozenTrial]], *, alive: CliProcess,
             timeout: float = PATIENCE) -> list[FrozenTrial]:
    """Poll the study (one storage, opened once) until ``ready`` of its trials is not empty; it fails with the
    process's output if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ready(study.get_trials(deepcopy=False))
        if found:
            return found
        if alive.process.poll() is not None:
            break
        time.sleep(0.3)
    alive.finish(timeout=60)
    raise AssertionError(f"the awaited trials never came (exit status {alive.process.poll()}):\n{alive.output}")


def running_with_worker(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The running trials whose worker process has said who it is (``worker`` = host:pid)."""
    return [t for t in trials if t.state == TrialState.RUNNING and "worker" in t.user_attrs]
