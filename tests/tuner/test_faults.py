"""Faults a study must survive: a worker killed by SIGKILL, two runs on one SQLite file, figures that cannot be written.

Processes are real (``swagppm-tune run`` and ``worker`` in subprocesses) and so are
the signals and the storages: SQLite, a journal file and, when it is running, the
PostgreSQL server on this machine (skipped with the reason otherwise).
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
import pytest
import sqlalchemy.exc
from optuna.storages import RDBStorage
from optuna.trial import TrialState

import tuner.study
from swagppm import ConfigError
from tests import PATIENCE
from tests.tuner.helpers import merged, one_error_line, write_study
from tuner import StudyConfig, open_study, run_study
from tuner.cli import main
from tuner.faults import CLOSED_PIPE, recover_stale_trials
from tuner.storage import make_storage
from tuner.study import enqueue_start_points, study_lock

pytestmark = pytest.mark.fits

REPO = Path(__file__).resolve().parents[2]
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
START = {"c": 1.0, "ft_epochs": 6}  # the small study's start point
RECOVERED = "was left running by a process that is gone: failed; re-enqueued with c=1, ft_epochs=6"


@pytest.fixture(scope="module")
def postgres() -> str:
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    except OSError as error:
        pytest.skip(f"PostgreSQL is not running: 127.0.0.1:5432 not reachable ({error})")
    return PG_URL


@pytest.fixture
def cleanup() -> Iterator[list[StudyConfig]]:
    """Studies deleted from their (server) storage after the test."""
    configs: list[StudyConfig] = []
    yield configs
    for config in configs:
        optuna.delete_study(study_name=config.study.name, storage=make_storage(config.storage_url))


def fault_study(folder: Path, cache: Path, storage: str, *, name: str = "faults", **changes: Any) -> Path:
    """The small study in ``storage`` with fast heartbeats and fits slow enough (~1 s) to be killed in."""
    study = {"name": name, "storage": storage, "heartbeat_interval": 1, "grace_period": 2,
             **changes.pop("study", {})}
    swag = {**merged()["swagppm"], "cache_dir": str(cache), "draws_privacy": 200, **changes.pop("swagppm", {})}
    return write_study(folder / f"{name}.toml", merged(study=study, swagppm=swag, **changes))


def stored(path: Path) -> optuna.Study:
    return open_study(StudyConfig.from_toml(path), create=False)


def start_until(args: list[str], marker: str) -> tuple[subprocess.Popen[str], list[str]]:
    """``swagppm-tune ARGS`` in a subprocess, and its output up to the line holding ``marker``."""
    process = subprocess.Popen([sys.executable, "-m", "tuner.cli", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, cwd=REPO,
                               env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if marker in line:
            return process, lines
    raise AssertionError(f"the process ended before {marker!r}:\n{''.join(lines)}")


def running_start_point(process: subprocess.Popen[str], path: Path, *, timeout: float = PATIENCE) -> tuple[int, int]:
    """Wait until the start point's trial is RUNNING in the storage with its process named; (trial, process id)."""
    study = stored(path)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert process.poll() is None, "the process ended before its start point ran"
        for trial in study.get_trials(states=(TrialState.RUNNING,)):
            if trial.system_attrs.get("fixed_params") == START and "worker" in trial.user_attrs:
                return trial.number, int(trial.user_attrs["worker"].rsplit(":", 1)[1])
        time.sleep(0.2)
    raise AssertionError("the start point never ran")


def kill_the_start_point(process: subprocess.Popen[str], path: Path, *, sent: int = signal.SIGKILL) -> int:
    """Send ``sent`` (SIGKILL) to the process whose trial of the start point is RUNNING; that trial's number."""
    number, pid = running_start_point(process, path)
    os.kill(pid, sent)
    return number


def assert_recovered(path: Path, killed: int, *, n_trials: int, overshoot: int = 0) -> None:
    """Nothing left running, the killed trial failed, its retry evaluated the start point, n_trials held."""
    trials = {t.number: t for t in stored(path).get_trials()}
    assert [t.number for t in trials.values() if t.state == TrialState.RUNNING] == []
    assert trials[killed].state == TrialState.FAIL
    retries = [t for t in trials.values() if t.user_attrs.get("retry_of") == killed]
    # evaluated and judged: a 1-thread worker's fit of the start point collapses on some CPUs (pruned, catastrophic)
    assert [(t.state in FINISHED, t.params, "diagnosis" in t.user_attrs) for t in retries] == [(True, START, True)]
    assert n_trials <= sum(t.state in FINISHED for t in trials.values()) <= n_trials + overshoot


def test_a_run_killed_mid_trial_on_sqlite_is_recovered_when_resumed(tmp_path: Path, cache: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = fault_study(tmp_path, cache, "sqlite:///faults.db", study={"n_trials": 2})
    process, _ = start_until(["run", str(path)], "finished trial(s)")
    killed = kill_the_start_point(process, path)
    process.communicate(timeout=PATIENCE)
    assert process.returncode == -signal.SIGKILL
    assert main(["run", str(path)]) in (0, 1)  # one process on SQLite: whatever is running is stale
    assert_recovered(path, killed, n_trials=2)
    assert f"trial {killed:>3}  {RECOVERED}" in capsys.readouterr().out


def test_a_run_killed_mid_trial_on_a_journal_is_recovered_once_its_heartbeat_is_stale(
    tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = fault_study(tmp_path, cache, "journal:faults.log", study={"n_trials": 2})
    process, _ = start_until(["run", str(path)], "finished trial(s)")
    killed = kill_the_start_point(process, path)
    process.communicate(timeout=PATIENCE)
    assert process.returncode == -signal.SIGKILL
    time.sleep(3)  # the grace period (2 s) after the last heartbeat
    assert main(["run", str(path)]) in (0, 1)
    assert_recovered(path, killed, n_trials=2)
    assert f"trial {killed:>3}  {RECOVERED}" in capsys.readouterr().out


def queued_again(path: Path, stopped: int, reason: str, *, others_may_run: bool = False) -> None:
    """The stopped trial failed with ``reason`` and is waiting again with its parameters; nothing else is left running
    (unless ``others_may_run``: a worker that a SIGKILLed parent's death reaches while it is still starting a trial
    leaves that trial running, for the next run's stale-trial recovery)."""
    trials = stored(path).get_trials()
    if not others_may_run:
        assert [t.number for t in trials if t.state == TrialState.RUNNING] == []
    (trial,) = [t for t in trials if t.number == stopped]
    # a SIGKILLed parent's worker may first find its output pipe gone, and stop on that rather than on the SIGTERM
    ends = (reason, f"interrupted ({CLOSED_PIPE})") if others_may_run else (reason,)
    assert trial.state == TrialState.FAIL and trial.user_attrs["failure"] in ends
    retries = [(t.state, t.system_attrs["fixed_params"]) for t in trials if t.user_attrs.get("retry_of") == stopped]
    if others_may_run:  # another worker, still alive for a moment, may have taken the retry up already
        assert [point for _, point in retries] == [START]
    else:
        assert retries == [(TrialState.WAITING, START)]


@pytest.mark.parametrize("sent, reason", [(signal.SIGTERM, "interrupted (SIGTERM)"),
                                          (signal.SIGINT, "interrupted (Ctrl-C)")])
def test_a_run_stopped_mid_trial_by_sigterm_or_ctrl_c_queues_its_trial_again(
    tmp_path: Path, cache: Path, sent: int, reason: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """SIGTERM (Slurm, Kubernetes) stops a run as Ctrl-C does: its trial failed with the reason and queued again,
    one interrupted line, exit 130; the next run evaluates the point."""
    path = fault_study(tmp_path, cache, "sqlite:///stopped.db", study={"n_trials": 1})
    process, _ = start_until(["run", str(path)], "finished trial(s)")
    stopped = kill_the_start_point(process, path, sent=sent)
    out, _ = process.communicate(timeout=PATIENCE)
    assert process.returncode == 130, out
    assert "Traceback" not in out and [line for line in out.splitlines() if "interrupted" in line] == [
        f"{reason}: the running trial is marked failed and queued again; 0 finished trials are kept. Run "
        f"`swagppm-tune run {path}` again to resume."]
    queued_again(path, stopped, reason)
    assert main(["run", str(path)]) in (0, 1)
    assert_recovered(path, stopped, n_trials=1)
    assert "left running" not in capsys.readouterr().out  # nothing was left for the stale-trial recovery


def test_ctrl_c_while_stage_1_is_computed_says_no_trial_was_running(tmp_path: Path) -> None:
    """Ctrl-C while the study is prepared (stage 1 computed in a cache of its own) stops before any trial: the line
    says so instead of "the running trial is marked failed", and the study holds no trial."""
    path = fault_study(tmp_path, tmp_path / "fresh-cache", "sqlite:///early-stop.db")
    process, _ = start_until(["run", str(path)], "finished trial(s)")  # stage 1 is computed next
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=PATIENCE)
    assert process.returncode == 130 and "Traceback" not in out, out
    assert [line for line in out.splitlines() if "interrupted" in line] == [
        "interrupted (Ctrl-C) before any trial began (while the study was prepared: data, features, stage 1), so no "
        f"trial is marked failed; 0 finished trials are kept. Run `swagppm-tune run {path}` again to resume."]
    assert stored(path).get_trials() == []


@pytest.mark.parametrize("verb", ["run", "status"])
def test_ctrl_c_while_a_verb_loads_its_libraries_is_one_line_and_exit_130(tmp_path: Path, cache: Path,
                                                                         verb: str) -> None:
    """SIGINT as soon as the command's own code runs (numpy, the first library it loads, is being mapped): one line,
    no import traceback."""
    path = fault_study(tmp_path, cache, "sqlite:///early.db")
    process = subprocess.Popen([sys.executable, "-m", "tuner.cli", verb, str(path)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, cwd=REPO)
    deadline = time.monotonic() + PATIENCE
    while "_multiarray_umath" not in Path(f"/proc/{process.pid}/maps").read_text():
        assert process.poll() is None and time.monotonic() < deadline, "numpy was never loaded"
        time.sleep(0.005)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=PATIENCE)
    assert process.returncode == 130, err
    assert "interrupted" in one_error_line(err)


def children(pid: int) -> list[int]:
    """The processes ``pid`` started (Linux's /proc)."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def wait_gone(pids: list[int], *, timeout: float = PATIENCE) -> None:
    """Wait until every process in ``pids`` has exited (a zombie no one reaps counts as exited)."""
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                    break
            except (OSError, IndexError):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"process {pid} still runs")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
def test_the_workers_of_a_stopped_or_killed_parent_queue_their_trials_again(tmp_path: Path, cache: Path,
                                                                            sent: int) -> None:
    """The parent of ``run --workers 2`` is stopped (SIGTERM: passed on) or killed (SIGKILL: each worker gets SIGTERM
    as its parent dies): no trial fails for a closed pipe, every stopped one is queued again, the next run runs it."""
    if not sys.platform.startswith("linux"):
        pytest.skip("a worker learns of its parent's death through Linux's prctl")
    path = fault_study(tmp_path, cache, "journal:faults.log", study={"n_trials": 2, "grace_period": 120})
    parent, _ = start_until(["run", str(path), "--workers", "2"], "starting 2 workers")
    stopped, _ = running_start_point(parent, path)
    workers = children(parent.pid)
    parent.send_signal(sent)
    out, _ = parent.communicate(timeout=PATIENCE)
    wait_gone(workers)
    if sent == signal.SIGTERM:
        assert parent.returncode == 130 and "Traceback" not in out, out
        # each worker's trial is failed and queued again: one or both, as the signal finds them
        assert re.search(r"interrupted \(SIGTERM\): the (running trial is|2 running trials are) marked failed and "
                         r"queued again", out), out
    else:
        assert parent.returncode == -signal.SIGKILL
    queued_again(path, stopped, "interrupted (SIGTERM)", others_may_run=sent == signal.SIGKILL)
    failed = [t for t in stored(path).get_trials() if t.state == TrialState.FAIL]
    reasons = {t.user_attrs["failure"] for t in failed}  # each an interruption, none a crash (a BrokenPipeError)
    assert reasons and all(reason.startswith("interrupted (") for reason in reasons)
    assert sent == signal.SIGKILL or "interrupted (SIGTERM)" in reasons
    resumed = subprocess.run([sys.executable, "-m", "tuner.cli", "run", str(path), "--workers", "2"], cwd=REPO,
                             capture_output=True, text=True, timeout=PATIENCE)  # the workers' own thread count
    assert resumed.returncode in (0, 1), resumed.stdout + resumed.stderr
    assert_recovered(path, stopped, n_trials=2, overshoot=1)


def run_workers_and_kill_one(path: Path) -> tuple[int, str]:
    """``run --workers 2`` with the worker running the start point killed; the trial and the whole output."""
    parent, lines = start_until(["run", str(path), "--workers", "2"], "starting 2 workers")
    killed = kill_the_start_point(parent, path)
    out, _ = parent.communicate(timeout=PATIENCE)
    output = "".join(lines) + out
    assert parent.returncode in (0, 1), output
    return killed, output


def test_a_worker_killed_on_a_journal_has_its_trial_retried_at_once_without_warnings(tmp_path: Path,
                                                                                     cache: Path) -> None:
    """The grace period outlasts the run: only the parent, which sees the worker die, can retry its trial."""
    path = fault_study(tmp_path, cache, "journal:faults.log", study={"n_trials": 4, "grace_period": 120})
    killed, out = run_workers_and_kill_one(path)
    assert_recovered(path, killed, n_trials=4, overshoot=1)
    assert "ExperimentalWarning" not in out and "Traceback" not in out, out
    assert "died (SIGKILL)" in out and f"trial {killed:>3}  {RECOVERED}" in out


def test_a_worker_killed_on_postgres_has_its_trial_retried_at_once_without_warnings(
    postgres: str, tmp_path: Path, cache: Path, cleanup: list[StudyConfig]
) -> None:
    path = fault_study(tmp_path, cache, postgres, name=f"faults-{uuid.uuid4().hex[:10]}",
                       study={"n_trials": 4, "grace_period": 120})
    cleanup.append(StudyConfig.from_toml(path))
    killed, out = run_workers_and_kill_one(path)
    assert_recovered(path, killed, n_trials=4, overshoot=1)
    assert "ExperimentalWarning" not in out and "Traceback" not in out, out
    assert "died (SIGKILL)" in out and f"trial {killed:>3}  {RECOVERED}" in out
    assert main(["run", str(path)]) in (0, 1)  # a re-run at the same n_trials finds nothing to clean
    assert not stored(path).get_trials(states=(TrialState.RUNNING,))


def test_a_run_on_postgres_fails_trials_with_a_stale_heartbeat_even_with_n_trials_reached(
    postgres: str, tmp_path: Path, cache: Path, cleanup: list[StudyConfig], capsys: pytest.CaptureFixture[str]
) -> None:
    """A worker dies in the start point; another reaches n_trials; a later run still fails it and evaluates its point
    (a run does not stop at n_trials while a retry waits)."""
    name = f"faults-{uuid.uuid4().hex[:10]}"
    path = fault_study(tmp_path, cache, postgres, name=name, study={"n_trials": 1, "grace_period": 120})
    config = StudyConfig.from_toml(path)
    cleanup.append(config)
    enqueue_start_points(open_study(config), config, n_trials=1)
    worker, _ = start_until(["worker", str(path)], "finished trial(s)")
    killed = kill_the_start_point(worker, path)
    worker.communicate(timeout=PATIENCE)
    assert main(["worker", str(path)]) == 0  # within its grace period the killed trial is left alone
    time.sleep(2.5)
    path = fault_study(tmp_path, cache, postgres, name=name, study={"n_trials": 1})  # a grace period of 2 s
    assert main(["run", str(path)]) in (0, 1)
    trials = stored(path).get_trials()
    assert [t.state for t in trials if t.number == killed] == [TrialState.FAIL]
    assert [(t.state, t.params) for t in trials if t.system_attrs.get("failed_trial") == killed] == \
        [(TrialState.COMPLETE, START)]
    assert sum(t.state in FINISHED for t in trials) == 2


def test_retries_of_a_stale_trial_stop_at_max_retries(tmp_path: Path, cache: Path) -> None:
    path = fault_study(tmp_path, cache, "sqlite:///bounded.db", study={"max_retries": 1})
    config = StudyConfig.from_toml(path)
    lines: list[str] = []
    with study_lock(config):
        study = open_study(config)
        enqueue_start_points(study, config, n_trials=1)  # the start point alone, not the probe
        for _ in range(2):
            study.ask()  # pops the waiting start point (then its retry) and leaves it running, as a killed run does
            recover_stale_trials(study, config, echo=lines.append)
    first, second = study.get_trials()
    assert first.state == second.state == TrialState.FAIL
    assert second.user_attrs["retry_of"] == 0 and second.system_attrs["fixed_params"] == START
    assert lines == [f"trial   0  {RECOVERED}",
                     "trial   1  was left running by a process that is gone: failed; not retried "
                     "(max_retries = 1 reached)"]


def test_a_second_run_on_one_sqlite_study_is_refused(tmp_path: Path, cache: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = fault_study(tmp_path, cache, "sqlite:///locked.db", study={"n_trials": 2})
    first, _ = start_until(["run", str(path)], "finished trial(s)")
    study = stored(path)
    while not study.get_trials(states=(TrialState.RUNNING,)):
        assert first.poll() is None
        time.sleep(0.2)
    second = subprocess.run([sys.executable, "-m", "tuner.cli", "run", str(path)], capture_output=True, text=True,
                            cwd=REPO, timeout=PATIENCE)
    assert second.returncode == 2, second.stdout + second.stderr
    (line,) = second.stderr.splitlines()
    assert str(path.resolve()) in line and str(tmp_path.resolve() / "locked.db") in line
    assert 'storage = "journal:faults.log"' in line and "PostgreSQL" in line
    for verb in (["status"], ["export", "-o", str(tmp_path / "best.json")], ["report", "-o", str(tmp_path / "r.html")]):
        assert main([verb[0], str(path), *verb[1:]]) != 2  # reading the study takes no lock
    first.communicate(timeout=PATIENCE)
    assert first.returncode in (0, 1)
    trials = stored(path).get_trials()
    assert len(trials) == 2 and all(t.state in FINISHED for t in trials)  # n_trials held, nothing ran twice
    assert [t.params for t in trials].count(START) == 1
    capsys.readouterr()
    main(["status", str(path)])
    assert "\n2 trials run: " in capsys.readouterr().out


def test_figures_that_cannot_be_written_do_not_lose_the_fit(tmp_path: Path, cache: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """The artifact folder becomes a file after the first trial: the second keeps its ε and says why."""
    path = fault_study(tmp_path, cache, "sqlite:///figures.db", study={"n_trials": 2}, swagppm={"draws_privacy": 12},
                       search={"start": [START, {"c": 0.9, "ft_epochs": 6}]})  # two fits known to complete
    config = StudyConfig.from_toml(path)
    lines: list[str] = []

    def echo(line: str) -> None:
        lines.append(line)
        if line.startswith("trial   0  "):
            shutil.rmtree(config.artifact_dir)
            config.artifact_dir.write_text("a file where the folder was")

    run_study(config, echo=echo)
    first, second = stored(path).get_trials()
    assert first.state == second.state == TrialState.COMPLETE and "figures_error" not in first.user_attrs
    assert second.value == second.user_attrs["epsilon"]
    assert second.user_attrs["figures_error"].startswith("WriteFailed: ")  # the one type of a failed write
    assert f"could not be written ({os.strerror(errno.ENOTDIR)})" in second.user_attrs["figures_error"]
    assert [line for line in lines if "figures not written" in line] == [
        f"trial   1  figures not written ({second.user_attrs['figures_error']}); the fit is kept"]
    assert main(["status", str(path)]) == 0
    assert "2 trials run: 2 complete" in capsys.readouterr().out


FULL_DISK_UPLOAD = """
import errno, resource, signal, sys
import optuna
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from tuner.artifacts import AtomicArtifactStore
folder, picture, atomic = sys.argv[1], sys.argv[2], sys.argv[3] == "atomic"
store = (AtomicArtifactStore if atomic else FileSystemArtifactStore)(folder)
trial = optuna.create_study().ask()
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
try:
    upload_artifact(artifact_store=store, file_path=picture, study_or_trial=trial, mimetype="image/svg+xml")
except OSError as error:
    print(errno.errorcode[error.errno])
"""


@pytest.mark.parametrize("store", ["plain", "atomic"])
def test_a_figure_cut_off_by_a_full_disk_leaves_no_truncated_artifact(tmp_path: Path, store: str) -> None:
    """A real write that fails partway (the kernel's file-size limit, as a disk that fills mid-write): Optuna's own
    store leaves the first 4 KiB as the trial's picture; the study's store leaves the picture whole or absent."""
    picture, folder = tmp_path / "figures.svg", tmp_path / "artifacts"
    picture.write_text("<svg>" + " " * 100_000 + "</svg>")
    folder.mkdir()
    done = subprocess.run([sys.executable, "-c", FULL_DISK_UPLOAD, str(folder), str(picture), store],
                          capture_output=True, text=True, timeout=PATIENCE, check=True)
    assert done.stdout.split() == ["EFBIG"]
    sizes = [path.stat().st_size for path in folder.iterdir()]
    assert sizes == ([4096] if store == "plain" else [])


def test_an_unwritable_artifact_folder_is_refused_before_the_first_fit(tmp_path: Path, cache: Path) -> None:
    path = fault_study(tmp_path, cache, "sqlite:///blocked.db")
    config = StudyConfig.from_toml(path)
    config.artifact_dir.write_text("a file where the folder should be")
    with pytest.raises(ConfigError) as refused:
        run_study(config, echo=lambda line: None)
    assert f"[study] artifacts {config.artifact_dir}: cannot be written" in str(refused.value)
    with pytest.raises(ConfigError, match="no study named"):
        stored(path)  # the study this refused first run created went with it


def test_run_study_restores_the_log_level_and_the_thread_excepthook(tmp_path: Path, cache: Path) -> None:
    def hook(args: threading.ExceptHookArgs) -> None:
        threading.__excepthook__(args)

    path = fault_study(tmp_path, cache, "sqlite:///restore.db", study={"n_trials": 1},
                       swagppm={"draws_privacy": 12})
    blocked = fault_study(tmp_path, cache, "sqlite:///blocked.db", name="blocked",
                          study={"artifacts": str(path)})  # a file: run_study raises
    saved = optuna.logging.get_verbosity(), threading.excepthook
    optuna.logging.set_verbosity(optuna.logging.INFO)
    threading.excepthook = hook
    try:
        run_study(StudyConfig.from_toml(path), echo=lambda line: None)
        assert (optuna.logging.get_verbosity(), threading.excepthook) == (optuna.logging.INFO, hook)
        with pytest.raises(ConfigError, match="artifacts"):
            run_study(StudyConfig.from_toml(blocked), echo=lambda line: None)
        assert (optuna.logging.get_verbosity(), threading.excepthook) == (optuna.logging.INFO, hook)
    finally:
        optuna.logging.set_verbosity(saved[0])
        threading.excepthook = saved[1]


class FullDisk(RDBStorage):
    """A real SQLite storage whose disk fills once a trial has completed and the next one is created: from then on
    every write that adds rows fails as SQLite fails on a full disk, while reads and updates in place still work (so
    every reconnect succeeds, as on a full disk)."""

    MAX_OPENS = 12  # reconnecting more often than this is the loop the attempt count must prevent

    def __init__(self, url: str, disk: dict[str, Any]) -> None:
        disk["opens"] += 1
        if disk["opens"] > self.MAX_OPENS:
            raise RuntimeError(f"reconnected {self.MAX_OPENS} times: the attempts do not count across reconnects")
        super().__init__(url)
        self.disk = disk

    def _write(self) -> None:
        if self.disk["full"]:
            raise sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))

    def _create_new_trial(self, study_id: int, template_trial: Any = None) -> Any:  # where Optuna's cache creates
        self._write()
        trial = super()._create_new_trial(study_id, template_trial)
        self.disk["full"] = self.disk["completed"]
        return trial

    def set_trial_state_values(self, trial_id: int, state: TrialState, values: Any = None) -> bool:
        if values is not None:
            self._write()
        updated = super().set_trial_state_values(trial_id, state, values)
        self.disk["completed"] = self.disk["completed"] or state == TrialState.COMPLETE
        return updated

    def _set_trial_param(self, *args: Any, **kwargs: Any) -> Any:  # where Optuna's cache writes a parameter
        self._write()
        return super()._set_trial_param(*args, **kwargs)

    def set_trial_user_attr(self, *args: Any, **kwargs: Any) -> None:
        self._write()
        super().set_trial_user_attr(*args, **kwargs)

    def set_trial_system_attr(self, *args: Any, **kwargs: Any) -> None:
        self._write()
        super().set_trial_system_attr(*args, **kwargs)


def test_a_full_disk_ends_the_run_with_status_3_after_the_attempts_counted_across_reconnects(
        tmp_path: Path, cache: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    path = fault_study(tmp_path, cache, "sqlite:///full.db", swagppm={"draws_privacy": 12},
                       study={"n_trials": 3, "reconnect_attempts": 3, "reconnect_wait": 0.01})
    disk = {"full": False, "completed": False, "opens": 0}
    monkeypatch.setattr(tuner.study, "open_storage", lambda config: FullDisk(config.storage_url, disk))
    assert main(["run", str(path)]) == 3
    captured = capsys.readouterr()
    assert [line for line in captured.out.splitlines() if "attempt" in line][-1].endswith("(attempt 3 of 3)")
    assert captured.out.count("reconnecting in") == 3 and disk["opens"] == 1 + 3
    line = captured.err.strip().splitlines()[-1]
    assert "could not reconnect after 3 attempts without a trial finishing" in line
    assert "database or disk is full" in line
    assert "Traceback" not in captured.err
    trials = stored(path).get_trials()
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    assert 1 <= len(complete) < 3 and complete[0].params == START  # the run ended before n_trials
    assert all("epsilon" in t.user_attrs and "diagnosis" in t.user_attrs for t in complete)  # whole, as they finished
    assert not [t for t in trials if t.state == TrialState.RUNNING]
