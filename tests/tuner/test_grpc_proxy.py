"""Many machines' local example: ``swagppm-tune proxy`` (Optuna's gRPC storage proxy) in front of the real
PostgreSQL, the study created through it, and two workers joining through it, each a real process."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import PATIENCE
from tests.tuner.helpers import FINISHED, REPO, CliProcess, distributed_study, run_cli, stored
from tuner.record import HEARTBEAT
from tuner.storage import STORAGE_ENV

pytestmark = pytest.mark.services


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_listening(port: int, proxy: CliProcess) -> None:
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline and proxy.process.poll() is None:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    proxy.finish(timeout=60)
    raise AssertionError(f"the proxy never listened on {port}:\n{proxy.output}")


def test_two_workers_share_a_study_through_the_grpc_proxy(postgres: str, tmp_path: Path,
                                                          cleanup: list[Path]) -> None:
    pytest.importorskip("grpc")
    path = distributed_study(tmp_path, tmp_path / "cache", postgres, study={"n_trials": 3, "grace_period": 30})
    cleanup.append(path)
    port = free_port()
    proxy = CliProcess("proxy", str(path), "--port", str(port), env={STORAGE_ENV: postgres})
    try:
        line = proxy.until(f"gRPC storage proxy on 127.0.0.1:{port} in front of postgresql+psycopg://postgres@127.0.0.1")
        wait_listening(port, proxy)
        url = re.search(r"SWAGPPM_TUNE_STORAGE='(grpc://\S+)'", line)[1]  # type: ignore[index]  # with its token
        through = {STORAGE_ENV: url}
        made = run_cli("create", str(path), env=through)
        assert made.returncode == 0 and "2 waiting" in made.stdout, made.stdout + made.stderr
        workers = [subprocess.Popen([sys.executable, "-m", "tuner.cli", "worker", str(path), "--name", f"w{index}"],
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                    env={**os.environ, **through}) for index in range(2)]
        outputs = [worker.communicate(timeout=PATIENCE)[0] for worker in workers]
        assert [worker.returncode for worker in workers] == [0, 0], outputs
        assert all(f"grpc://127.0.0.1:{port}" in out for out in outputs)
    finally:
        proxy.process.send_signal(signal.SIGTERM)
        assert proxy.finish(timeout=PATIENCE) == 130, proxy.output
    study = stored(path)  # read back from PostgreSQL itself, not through the proxy
    trials = study.get_trials()
    assert all(t.state in FINISHED for t in trials) and len(trials) >= 3
    points = [(t.params["c"], t.params["ft_epochs"]) for t in trials]
    assert points.count((1.0, 6)) == 1 and len(set(points)) == len(points)
    assert all(HEARTBEAT in t.user_attrs for t in trials)  # behind a proxy the workers keep the tool's heartbeat
    assert len({t.user_attrs["worker"] for t in trials}) == 2
