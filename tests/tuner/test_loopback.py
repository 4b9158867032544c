"""What the tool serves on a port is as owner-side as its files: ``dashboard`` and ``proxy`` refuse every request
without their run's token, each a real server on a free port asked by a real client (HTTP; Optuna's own gRPC
client), stopped by a real signal."""

from __future__ import annotations

import re
import signal
import socket
import stat
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from tests import PATIENCE
from tests.tuner.helpers import (
    CliProcess,
    a_folder_no_one_may_write,
    distributed_study,
    one_error_line,
    run_cli,
    running_with_worker,
    stored,
    wait_for,
    with_a_feasible_trial,
)
from tuner.access import REFUSED
from tuner.storage import PROXY_TOKEN_ENV, STORAGE_ENV

pytestmark = pytest.mark.slow  # servers in subprocesses, no fit


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def get(url: str, **headers: str) -> tuple[int, dict[str, str], str]:
    """A GET that follows no redirect: (status, headers, body)."""
    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=30) as answer:
            return answer.status, dict(answer.headers), answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, dict(refused.headers), refused.read().decode()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def served(study_file: Callable[..., Path]) -> Iterator[tuple[CliProcess, Path, int, str]]:
    """``swagppm-tune dashboard`` on a study with one judged trial: (the process, the study file, its port, the URL it
    printed)."""
    path = study_file(study={"name": "private-study-name"})
    with_a_feasible_trial(path)
    port = free_port()
    server = CliProcess("dashboard", str(path), "--port", str(port))
    line = server.until("optuna-dashboard on http://")
    url = re.search(r"(http://\S+)", line)[1]  # type: ignore[index]
    try:
        yield server, path, port, url
    finally:
        if server.process.poll() is None:
            server.process.kill()
            server.finish(timeout=PATIENCE)


def test_a_dashboard_request_without_the_token_is_refused_and_one_with_it_works(
        served: tuple[CliProcess, Path, int, str]) -> None:
    server, path, port, url = served
    base, token = url.split("/dashboard/?token=")
    assert len(token) >= 43  # 256 bits
    for page in ("/api/studies", "/dashboard/", "/api/studies/1?after=0", "/artifacts/1/1/x"):
        status, _, body = get(base + page)
        assert (status, body) == (401, REFUSED)  # before any study data
        assert get(base + page, Cookie=f"swagppm_dashboard_{port}=not-it")[0] == 401
        assert get(base + page, Authorization="Bearer not-it")[0] == 401
    status, _, body = get(f"{base}/api/studies", Authorization=f"Bearer {token}")
    assert status == 200 and "private-study-name" in body
    status, headers, _ = get(url)  # the printed URL: a cookie, and the same page without the token
    assert status == 303 and headers["Location"] == "/dashboard/"
    cookie = headers["Set-Cookie"]
    assert cookie.startswith(f"swagppm_dashboard_{port}={token};") and "HttpOnly" in cookie and "SameSite=Strict" in \
        cookie
    status, _, body = get(f"{base}/api/studies", Cookie=cookie.split(";")[0])
    assert status == 200 and "private-study-name" in body
    kept = path.with_name(f"{path.stem}.dashboard-{port}.token")
    assert kept.read_text().strip() == url and mode(kept) == 0o600  # owner-only, beside the study file
    server.process.send_signal(signal.SIGTERM)  # what `timeout`, Slurm and Kubernetes send
    assert server.finish(timeout=PATIENCE) == 130
    assert server.lines[-1].strip() == "swagppm-tune: interrupted (SIGTERM)"
    assert sum(token in line for line in server.lines) == 1  # printed once: no request line logged with it
    assert not kept.exists()  # the token went with its server


@pytest.mark.services
def test_the_proxy_refuses_a_grpc_call_without_its_token(postgres: str, tmp_path: Path,
                                                          cleanup: list[Path]) -> None:
    grpc = pytest.importorskip("grpc")
    from optuna.storages import GrpcStorageProxy

    from tuner.storage import make_storage

    path = distributed_study(tmp_path, tmp_path / "cache", postgres)
    cleanup.append(path)
    port = free_port()
    proxy = CliProcess("proxy", str(path), "--port", str(port), env={STORAGE_ENV: postgres})
    try:
        line = proxy.until(f"gRPC storage proxy on 127.0.0.1:{port}")
        url = re.search(r"SWAGPPM_TUNE_STORAGE='(grpc://\S+)'", line)[1]  # type: ignore[index]
        token = url.split("?token=")[1]
        kept = path.with_name(f"{path.stem}.proxy-{port}.token")
        assert kept.read_text().strip() == url and mode(kept) == 0o600
        with pytest.warns(optuna.exceptions.ExperimentalWarning):
            bare = GrpcStorageProxy(host="127.0.0.1", port=port)  # Optuna's own client, no token
        bare.wait_server_ready(timeout=60)
        with pytest.raises(grpc.RpcError) as refused:
            bare.get_all_studies()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        bare.close()
        assert make_storage(url).get_all_studies() is not None  # with the token it answers
        wrong = run_cli("create", str(path), env={STORAGE_ENV: f"grpc://127.0.0.1:{port}?token=not-it"})
        assert wrong.returncode == 2 and "refused this token" in one_error_line(wrong.stderr)
        missing = run_cli("create", str(path), env={STORAGE_ENV: f"grpc://127.0.0.1:{port}"})
        assert missing.returncode == 2 and "needs its token" in one_error_line(missing.stderr)
        joined = run_cli("create", str(path), env={STORAGE_ENV: f"grpc://127.0.0.1:{port}", PROXY_TOKEN_ENV: token})
        assert joined.returncode == 0 and token not in joined.stdout + joined.stderr, joined.stderr
        second = run_cli("proxy", str(path), "--port", str(port), env={STORAGE_ENV: postgres})
        assert second.returncode == 2  # a second proxy on the port would split the workers with the first
        assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in one_error_line(second.stderr)
    finally:
        proxy.process.send_signal(signal.SIGTERM)
        code = proxy.finish(timeout=PATIENCE)
    assert code == 130 and proxy.lines[-1].strip() == "swagppm-tune: interrupted (SIGTERM)", proxy.output
    assert not path.with_name(f"{path.stem}.proxy-{port}.token").exists()


def test_a_proxy_url_without_a_token_is_refused_before_any_connection(study_file: Callable[..., Path]) -> None:
    port = free_port()  # nothing listens there: the refusal comes first
    refused = run_cli("status", str(study_file()), "--storage", f"grpc://127.0.0.1:{port}", env={PROXY_TOKEN_ENV: ""})
    assert refused.returncode == 2 and "the gRPC proxy needs its token" in one_error_line(refused.stderr)


@pytest.mark.services
@pytest.mark.fits
def test_a_worker_whose_proxy_is_killed_ends_in_one_line_with_status_3_and_no_token_shown(
        postgres: str, tmp_path: Path, cleanup: list[Path]) -> None:
    """kill -9 of the proxy mid-trial: the worker tries to reconnect (reconnect_attempts), then ends with the
    storage-lost status; its lines never show the token; the next proxy on the port replaces the dead one's file."""
    pytest.importorskip("grpc")
    path = distributed_study(tmp_path, tmp_path / "cache", postgres, study={"n_trials": 3, "grace_period": 30},
                             swagppm={"draws_privacy": 400})
    cleanup.append(path)
    port = free_port()
    proxy = CliProcess("proxy", str(path), "--port", str(port), env={STORAGE_ENV: postgres})
    line = proxy.until(f"gRPC storage proxy on 127.0.0.1:{port}")
    url = re.search(r"SWAGPPM_TUNE_STORAGE='(grpc://\S+)'", line)[1]  # type: ignore[index]
    token = url.split("?token=")[1]
    assert run_cli("create", str(path), env={STORAGE_ENV: url}).returncode == 0
    worker = CliProcess("worker", str(path), env={STORAGE_ENV: url})
    wait_for(stored(path), running_with_worker, alive=worker)  # read from PostgreSQL itself: a trial runs
    proxy.process.send_signal(signal.SIGKILL)
    proxy.finish(timeout=PATIENCE)
    assert worker.finish(timeout=PATIENCE) == 3, worker.output
    said = [line for line in worker.lines if line.startswith("swagppm-tune")]
    assert len(said) == 1 and "lost the study storage grpc://127.0.0.1" in said[0] and "token=***" in said[0]
    assert token not in worker.output
    kept = path.with_name(f"{path.stem}.proxy-{port}.token")
    assert kept.read_text().strip() == url  # a killed proxy cannot remove it: stale, and useless without it
    again = CliProcess("proxy", str(path), "--port", str(port), env={STORAGE_ENV: postgres})
    try:
        again.until(f"gRPC storage proxy on 127.0.0.1:{port}")
        assert kept.read_text().strip() != url  # the new run's token replaced it
    finally:
        again.process.send_signal(signal.SIGTERM)
        assert again.finish(timeout=PATIENCE) == 130


def test_a_token_file_that_cannot_be_written_is_one_warning_and_the_server_still_runs(tmp_path: Path) -> None:
    """A study folder that cannot be written (read-only, full): the printed URL is then the token's only copy."""
    from tuner.access import token_file

    folder = a_folder_no_one_may_write(tmp_path)
    said: list[str] = []
    with token_file(folder / "study.dashboard-1.token", "http://127.0.0.1:1/dashboard/?token=t", echo=said.append):
        pass  # the server would run here
    assert len(said) == 1 and said[0].startswith("warning: the token could not be kept (")
    assert said[0].endswith("; use the URL printed above") and not (folder / "study.dashboard-1.token").exists()
