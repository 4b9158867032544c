"""Studies shared by several worker processes, against the real PostgreSQL, Redis and MariaDB on this machine.

Each test skips with the reason when its server is not running. Faults are real:
a worker killed with SIGKILL, a database that is unreachable, and one that goes
away mid-run (a TCP proxy in front of PostgreSQL is shut).
"""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState

from swagppm import ConfigError
from tests import PATIENCE
from tests.tuner.helpers import (
    FINISHED,
    PG_URL,
    REDIS_URL,
    REPO,
    distributed_study,
    run_cli,
    stored,
    unreachable,
)
from tuner import StudyConfig, open_study
from tuner.cli import main
from tuner.storage import STORAGE_ENV, make_storage

pytestmark = pytest.mark.services

def test_three_workers_share_one_study_and_one_stage_1(postgres: str, tmp_path: Path, cleanup: list[Path]) -> None:
    path = distributed_study(tmp_path, tmp_path / "fresh-cache", postgres, study={"n_trials": 4})
    cleanup.append(path)
    done = run_cli("run", str(path), "--workers", "3")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    out = done.stdout
    assert out.count("stage 1 computed") == 1 and out.count("stage 1 read from the cache") == 2  # once per study
    assert {line[:4] for line in out.splitlines() if "] trial " in line} == {"[w0]", "[w1]", "[w2]"}
    study = stored(path)
    trials = study.get_trials()
    finished = [t for t in trials if t.state in FINISHED]
    assert 4 <= len(finished) <= 4 + 2  # n_trials holds, overshooting by at most the other running trials
    assert all(t.state in FINISHED for t in trials)  # nothing lost, nothing left running
    assert len({t.number for t in trials}) == len(trials)
    points = [(t.params["c"], t.params["ft_epochs"]) for t in trials]
    assert points.count((1.0, 6)) == 1 and len(set(points)) == len(points)  # the start point once, no duplicates
    assert len({t.user_attrs["worker"] for t in trials}) >= 2
    assert "postgres@127.0.0.1:5432/test" in out


def test_a_worker_killed_mid_trial_is_failed_and_its_trial_retried(postgres: str, tmp_path: Path,
                                                                   cache: Path, cleanup: list[Path]) -> None:
    path = distributed_study(tmp_path, cache, postgres, study={"n_trials": 4}, swagppm={"draws_privacy": 200})
    cleanup.append(path)
    parent = subprocess.Popen([sys.executable, "-m", "tuner.cli", "run", str(path), "--workers", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO)
    killed = None
    deadline = time.monotonic() + PATIENCE
    while killed is None and time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            running = stored(path).get_trials(states=(TrialState.RUNNING,))
        except Exception:  # noqa: BLE001 - the study may not exist yet
            continue
        for trial in running:
            if "worker" in trial.user_attrs:
                os.kill(int(trial.user_attrs["worker"].rsplit(":", 1)[1]), signal.SIGKILL)
                killed = trial.number
                break
    assert killed is not None, "no running trial to kill"
    out, _ = parent.communicate(timeout=PATIENCE)
    assert "died (SIGKILL)" in out, out
    study = stored(path)
    trials = {t.number: t for t in study.get_trials()}
    assert trials[killed].state == TrialState.FAIL  # failed after the grace period, not left running
    retries = [t for t in trials.values() if t.system_attrs.get("failed_trial") == killed]
    assert len(retries) == 1 and retries[0].state in FINISHED  # retried once, by the surviving worker
    assert retries[0].params == trials[killed].params
    assert len([t for t in trials.values() if t.state in FINISHED]) >= 4  # the study still reached n_trials


def test_an_unreachable_database_is_a_clear_error_within_ten_seconds(tmp_path: Path, cache: Path) -> None:
    for storage, host in (("postgresql://tuner:s3cret@127.0.0.1:1/test", "127.0.0.1:1"),
                          ("postgresql://tuner:s3cret@10.255.255.1:5432/test", "10.255.255.1:5432")):
        path = distributed_study(tmp_path, cache, storage, study={"connect_timeout": 3})
        start = time.monotonic()
        with pytest.raises(ConfigError):
            make_storage(storage, connect_timeout=3)
        assert time.monotonic() - start < 60  # the connect timeout acts: the system's own TCP timeout is over 2 min
        done = run_cli("run", str(path))
        assert done.returncode == 2
        err = done.stderr
        assert f"postgresql://tuner:***@{host}/test" in err and "cannot open the study storage" in err
        assert "s3cret" not in err + done.stdout and "Traceback" not in err


def _listener_below_ephemeral_range(port: int) -> socket.socket:
    """A listening socket on ``port``, or on a free port below the kernel's ephemeral range when ``port`` is 0.

    A port the kernel also hands out as a client's source port can be taken while the proxy is down (a client
    retrying it may even connect to itself), so a proxy that comes back on the same port could not bind it.
    """
    if port:
        return socket.create_server(("127.0.0.1", port))
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for candidate in range(low - 1, 1024, -1):
        try:
            return socket.create_server(("127.0.0.1", candidate))
        except OSError:
            continue
    raise OSError("no free port below the ephemeral range")


class Proxy:
    """A TCP proxy in front of a server; ``stop`` drops every connection, as a server going away does."""

    def __init__(self, target: tuple[str, int], port: int = 0) -> None:
        self.target = target
        self.listener = _listener_below_ephemeral_range(port)
        self.port = self.listener.getsockname()[1]
        self.sockets: list[socket.socket] = []
        self.running = True
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while self.running:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.sockets += [client, upstream]
            threading.Thread(target=self._pipe, args=(client, upstream), daemon=True).start()

    def _pipe(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while self.running:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for source in ready:
                    data = source.recv(65536)
                    if not data:
                        return
                    (b if source is a else a).sendall(data)
        except OSError:
            return

    def stop(self) -> None:
        """Closing alone would leave the port listening while ``accept`` blocks on it; shutdown wakes it first."""
        self.running = False
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for s in self.sockets:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()


def worker_after_first_trial(path: Path, url: str) -> tuple[subprocess.Popen[str], list[str]]:
    """A worker joining the study at ``url``, and its output up to its first finished trial."""
    worker = subprocess.Popen([sys.executable, "-m", "tuner.cli", "worker", str(path)], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, cwd=REPO,
                              env={**os.environ, STORAGE_ENV: url, "PYTHONUNBUFFERED": "1"})
    assert worker.stdout is not None
    lines = []
    for line in worker.stdout:
        lines.append(line)
        if line.startswith("trial "):
            break
    return worker, lines


def test_a_database_that_goes_away_is_retried_then_given_up(postgres: str, tmp_path: Path, cache: Path,
                                                             cleanup: list[Path]) -> None:
    proxy = Proxy(("127.0.0.1", 5432))
    url = f"postgresql+psycopg://postgres:s3cret@127.0.0.1:{proxy.port}/test"
    path = distributed_study(tmp_path, cache, PG_URL, study={"n_trials": 6})
    cleanup.append(path)
    open_study(StudyConfig.from_toml(path))  # created directly; the worker joins through the proxy
    worker, lines = worker_after_first_trial(path, url)
    proxy.stop()
    rest, _ = worker.communicate(timeout=PATIENCE)
    out = "".join(lines) + rest
    assert worker.returncode == 3, out
    assert "reconnecting in 0.5s (attempt 1 of 2)" in out and "could not reconnect after 2 attempts" in out
    assert f"postgres:***@127.0.0.1:{proxy.port}/test" in out
    assert "s3cret" not in out and "Traceback" not in out
    study = stored(path)
    numbers = [t.number for t in study.get_trials()]
    assert len(numbers) == len(set(numbers)) and study.get_trials(states=FINISHED), out  # trial 0 is kept


def test_redis_journal_storage_with_two_workers(tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    reason = unreachable("127.0.0.1", 6379)
    if reason:
        pytest.skip(f"Redis is not running: {reason}")
    path = distributed_study(tmp_path, cache, REDIS_URL, study={"n_trials": 3})
    cleanup.append(path)
    done = run_cli("run", str(path), "--workers", "2")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    finished = stored(path).get_trials(states=FINISHED)
    assert 3 <= len(finished) <= 4
    bad = distributed_study(tmp_path, cache, "redis://127.0.0.1:1/0")
    assert main(["status", str(bad)]) == 2


def test_mariadb_through_the_same_url_path(tmp_path: Path, cache: Path, cleanup: list[Path],
                                           capsys: pytest.CaptureFixture[str]) -> None:
    reason = unreachable("127.0.0.1", 3306)
    if reason:
        pytest.skip(f"MariaDB is not running: {reason}")
    path = distributed_study(tmp_path, cache, "mysql://root@127.0.0.1:3306/test", study={"n_trials": 2})
    cleanup.append(path)
    assert main(["run", str(path)]) in (0, 1)
    assert len(stored(path).get_trials(states=FINISHED)) == 2
    assert "mysql://root@127.0.0.1:3306/test" in capsys.readouterr().out


def test_sqlite_refuses_several_workers_and_a_journal_file_takes_them(tmp_path: Path, cache: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = distributed_study(tmp_path, cache, "sqlite:///s.db")
    assert main(["run", str(path), "--workers", "2"]) == 2
    err = capsys.readouterr().err
    assert "SQLite, which one process at a time can use" in err and 'storage = "journal:study.log"' in err
    path = distributed_study(tmp_path, cache, "journal:study.log", study={"n_trials": 2})
    done = run_cli("run", str(path), "--workers", "2")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    assert (tmp_path / "study.log").exists()
    assert len(stored(path).get_trials(states=FINISHED)) >= 2


def test_a_database_that_comes_back_is_reconnected(postgres: str, tmp_path: Path, cache: Path,
                                                    cleanup: list[Path]) -> None:
    proxy = Proxy(("127.0.0.1", 5432))
    url = f"postgresql+psycopg://postgres@127.0.0.1:{proxy.port}/test"
    path = distributed_study(tmp_path, cache, PG_URL, study={"n_trials": 3, "reconnect_wait": 1.0})
    cleanup.append(path)
    open_study(StudyConfig.from_toml(path))
    worker, lines = worker_after_first_trial(path, url)
    proxy.stop()
    time.sleep(0.3)
    back = Proxy(("127.0.0.1", 5432), port=proxy.port)  # the database returns within the first wait
    try:
        rest, _ = worker.communicate(timeout=PATIENCE)
    finally:
        back.stop()
    out = "".join(lines) + rest
    assert worker.returncode == 0, out
    assert "reconnected to the study storage" in out and "Traceback" not in out
    study = stored(path)
    assert len(study.get_trials(states=FINISHED)) >= 3
    numbers = [t.number for t in study.get_trials()]
    assert len(numbers) == len(set(numbers))
