"""The ``study_file`` fixture: small study files that run in seconds on a CPU (``tests.tuner.helpers``); a module's
shared private ``cache``; the local servers (``postgres``, ``mariadb``, ``redis``), each skipping its test with the
reason when it is not running; the stand-in Slurm (``slurm``)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.tuner.helpers import (
    KILL_WAIT,
    MARIADB_URL,
    PG_URL,
    REDIS_URL,
    SLURM_COMMANDS,
    SLURM_STANDIN,
    delete_studies,
    merged,
    slurm_job_alive,
    slurm_jobs,
    unreachable,
    write_study,
)


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private cache shared by a module's tests (stage 1 computed once for them)."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def needs_submitit() -> None:
    """Skips the test without submitit (the ``cluster`` extra)."""
    pytest.importorskip("submitit")


@pytest.fixture
def study_file(tmp_path: Path) -> Callable[..., Path]:
    """``study_file(**changes)`` writes ``SMALL_STUDY`` with changes to ``tmp_path/<name>.toml``."""
    def write(name: str = "small", **changes: Mapping[str, Any]) -> Path:
        return write_study(tmp_path / f"{name}.toml", merged(**changes))
    return write


def _server(name: str, port: int, url: str) -> str:
    reason = unreachable("127.0.0.1", port)
    if reason:
        pytest.skip(f"{name} is not running: {reason}")
    return url


@pytest.fixture(scope="module")
def postgres() -> str:
    """The local PostgreSQL's URL (trust authentication, database ``test``)."""
    return _server("PostgreSQL", 5432, PG_URL)


@pytest.fixture(scope="module")
def mariadb() -> str:
    """The local MariaDB's URL (root without a password, database ``test``)."""
    return _server("MariaDB", 3306, MARIADB_URL)


@pytest.fixture(scope="module")
def redis() -> str:
    """The local Redis's URL (database 0)."""
    return _server("Redis", 6379, REDIS_URL)


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    """Study files whose studies are deleted from their storage after the test."""
    paths: list[Path] = []
    yield paths
    delete_studies(paths)


@pytest.fixture
def slurm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-in Slurm on PATH, for the test and every process it starts (``KILL_WAIT``: its KillWait); its state
    folder. Jobs still pending or running after the test are cancelled, and their processes waited for."""
    commands = tmp_path / "slurm-bin"
    commands.mkdir()
    for name in SLURM_COMMANDS:
        (commands / name).write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                                     f'{shlex.quote(str(SLURM_STANDIN))} {name} "$@"\n')
        (commands / name).chmod(0o755)
    state = tmp_path / "slurm-state"
    state.mkdir()
    monkeypatch.setenv("PATH", f"{commands}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_STANDIN_STATE", str(state))
    monkeypatch.setenv("SLURM_STANDIN_KILL_WAIT", str(KILL_WAIT))
    yield state
    for job in slurm_jobs(state):
        if job["state"] in ("PENDING", "RUNNING"):
            subprocess.run([commands / "scancel", job["id"]], check=False)
    deadline = time.monotonic() + KILL_WAIT + 30
    while any(slurm_job_alive(job) for job in slurm_jobs(state)) and time.monotonic() < deadline:
        time.sleep(0.5)
