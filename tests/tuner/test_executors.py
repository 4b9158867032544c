"""The executors by name, and what the local and cluster executors decide before any worker or job starts."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from swagppm import ConfigError
from tests import PATIENCE
from tests.tuner.helpers import one_error_line, with_a_feasible_trial
from tuner.cli import build_parser, main
from tuner.cli.arguments import study_config
from tuner.config import StudyConfig
from tuner.executors import (
    EXECUTORS,
    ProcessesExecutor,
    SequentialExecutor,
    SubmititExecutor,
    make_executor,
    register_executor,
)
from tuner.executors.cluster import check_shared_storage, environment, interrupt_on_sigterm
from tuner.executors.jobs import (
    LAUNCHED,
    ControllerProcess,
    LaunchedJob,
    controller_alive,
    is_active,
    job_handle,
    job_state,
    make_private_folder,
    read_launches,
    record_launch,
)
from tuner.executors.processes import shared_study, worker_command, worker_environment
from tuner.faults import (
    Terminated,
    interruption,
    is_interruption,
    recover_stale_trials,
    retold,
    vanished_workers,
    worker_id,
)
from tuner.record import RAN_BY
from tuner.storage import STORAGE_ENV, traits

SECRET_URL = "postgresql://tuner:s3cret@db.internal:5432/studies"
SPACE = {"c": FloatDistribution(0.3, 1.2), "ft_epochs": IntDistribution(4, 8)}


def on_journal(path: Path) -> StudyConfig:
    """The study of ``path`` in a journal file beside it (several processes may share one)."""
    return StudyConfig.from_toml(path).with_storage(f"journal:{path.parent / 's.log'}")


# --- the registry -----------------------------------------------------------------------------------------------


def test_the_three_executors_are_registered_under_their_names() -> None:
    assert set(EXECUTORS) == {"sequential", "processes", "submitit"}
    assert EXECUTORS["sequential"] is SequentialExecutor
    assert EXECUTORS["processes"] is ProcessesExecutor
    assert EXECUTORS["submitit"] is SubmititExecutor


def test_make_executor_builds_the_named_executor_with_its_options() -> None:
    assert make_executor("sequential") == SequentialExecutor(progress_fit=None)
    assert make_executor("sequential", progress_fit=False) == SequentialExecutor(progress_fit=False)
    assert make_executor("processes", workers=3, gpus=("0", "1"), data="records.csv") == ProcessesExecutor(
        workers=3, gpus=("0", "1"), data="records.csv")
    assert make_executor("submitit", jobs=2) == SubmititExecutor(
        jobs=2, workers_per_job=1, gpus_per_job=0, cluster="auto", folder=None, timeout_min=24 * 60, data=None,
        parameters={})


def test_an_unknown_executor_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError) as refused:
        make_executor("slurm", jobs=2)
    assert str(refused.value) == f"unknown executor 'slurm'; known: {', '.join(EXECUTORS)}"
    assert all(name in str(refused.value) for name in ("sequential", "processes", "submitit"))


def test_an_option_the_executor_does_not_take_is_refused() -> None:
    with pytest.raises(TypeError, match="workers"):
        make_executor("sequential", workers=2)
    with pytest.raises(TypeError, match="missing 1 required keyword-only argument: 'workers'"):
        make_executor("processes")


def test_a_registered_factory_is_built_by_name_with_its_options() -> None:
    built: list[dict[str, object]] = []

    def factory(**options: object) -> SequentialExecutor:
        built.append(options)
        return SequentialExecutor(progress_fit=bool(options["progress"]))

    try:
        assert register_executor("test-only")(factory) is factory  # the decorator returns the factory itself
        assert make_executor("test-only", progress=True) == SequentialExecutor(progress_fit=True)
        assert built == [{"progress": True}]
    finally:
        EXECUTORS.pop("test-only", None)


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError) as refused:
        register_executor("sequential")(ProcessesExecutor)
    assert str(refused.value) == "an executor named 'sequential' is already registered"
    assert EXECUTORS["sequential"] is SequentialExecutor


# --- sequential -------------------------------------------------------------------------------------------------


def test_the_sequential_executor_says_why_it_stopped(study_file: Callable[..., Path]) -> None:
    """A study that already has its trials: no fit, and the one line says so."""
    path = study_file()
    config = on_journal(path)
    with_a_feasible_trial(path, storage=config.storage_url)
    lines: list[str] = []
    summary = SequentialExecutor().run(config, n_trials=1, timeout=None, echo=lines.append)
    assert lines == ["stopped: the study already has 1 finished trials (n_trials = 1) (0 new finished trials)"]
    assert (summary.finished_before, summary.finished_now) == (1, 0)
    assert summary.best is not None and summary.best.number == 0


# --- local worker processes: their command, environment and study ----------------------------------------------


def test_a_worker_command_names_only_what_was_given(tmp_path: Path) -> None:
    study = tmp_path / "small.toml"
    base = [sys.executable, "-m", "tuner.cli", "worker", str(study), "--name", "w0"]
    assert worker_command(study, name="w0", n_trials=None, timeout=None, data=None) == base
    assert worker_command(study, name="w0", n_trials=5, timeout=90, data="records.csv") == [
        *base, "--n-trials", "5", "--timeout", "90.0", "--data", "records.csv"]
    assert worker_command(study, name="w0", n_trials=None, timeout=1.23456, data=None)[-2:] == ["--timeout", "1.23456"]


def test_a_worker_command_is_one_the_worker_verb_accepts(tmp_path: Path) -> None:
    study = tmp_path / "small.toml"
    command = worker_command(study, name="w3", n_trials=7, timeout=2.5, data="records.csv")
    parser, _ = build_parser()
    args = parser.parse_args(command[3:])  # after `python -m tuner.cli`
    assert (args.verb, args.study, args.name, args.n_trials, args.timeout, args.data) == (
        "worker", study, "w3", 7, 2.5, "records.csv")


def test_a_tiny_timeout_that_run_accepts_reaches_the_workers_intact(tmp_path: Path) -> None:
    parser, _ = build_parser()
    timeout = parser.parse_args(["run", str(tmp_path / "small.toml"), "--timeout", "0.0004"]).timeout
    command = worker_command(tmp_path / "small.toml", name="w0", n_trials=None, timeout=timeout, data=None)
    assert parser.parse_args(command[3:]).timeout > 0


def test_the_storage_url_travels_in_the_environment_never_on_the_command_line(
        study_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    config = StudyConfig.from_toml(study_file()).with_storage(SECRET_URL)
    command = worker_command(config.path, name="w0", n_trials=3, timeout=60.0, data=None)
    env = worker_environment(config, index=0, workers=2, gpus=())
    assert "s3cret" not in " ".join(command) and "db.internal" not in " ".join(command)
    assert env[STORAGE_ENV] == SECRET_URL and env["PYTHONUNBUFFERED"] == "1"
    assert STORAGE_ENV not in os.environ  # the parent's own environment is left as it was


def test_the_configured_storage_replaces_the_one_in_the_parents_environment(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(STORAGE_ENV, f"journal:{tmp_path / 'other.log'}")
    config = on_journal(study_file())
    assert worker_environment(config, index=0, workers=2, gpus=())[STORAGE_ENV] == config.storage_url
    assert os.environ[STORAGE_ENV] == f"journal:{tmp_path / 'other.log'}"


def test_gpus_are_assigned_round_robin_and_leave_the_thread_count_alone(study_file: Callable[..., Path],
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    config = on_journal(study_file())
    envs = [worker_environment(config, index=index, workers=5, gpus=("0", "2", "3")) for index in range(5)]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["0", "2", "3", "0", "2"]
    assert not any("OMP_NUM_THREADS" in env for env in envs)


def test_cpu_workers_share_the_cores_and_get_at_least_one_thread(study_file: Callable[..., Path],
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    config = on_journal(study_file())
    cores = os.cpu_count() or 1

    def threads(workers: int) -> str:
        return worker_environment(config, index=0, workers=workers, gpus=())["OMP_NUM_THREADS"]

    assert threads(1) == str(cores)
    assert threads(2) == str(max(1, cores // 2))
    assert threads(cores) == "1" and threads(4 * cores) == "1"
    assert worker_environment(config, index=0, workers=2, gpus=())["CUDA_VISIBLE_DEVICES"] == "7"  # inherited


def test_a_thread_count_the_user_set_is_kept(study_file: Callable[..., Path],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    config = on_journal(study_file())
    assert worker_environment(config, index=1, workers=64, gpus=())["OMP_NUM_THREADS"] == "3"


def test_a_worker_in_another_folder_reads_back_the_same_storage(study_file: Callable[..., Path], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A journal path relative to the study file reaches the worker absolute, through the variable."""
    config = StudyConfig.from_toml(study_file(study={"storage": "journal:j.log"}))
    assert config.storage_url == f"journal:{tmp_path / 'j.log'}"
    env = worker_environment(config, index=0, workers=2, gpus=())
    command = worker_command(config.path, name="w0", n_trials=None, timeout=None, data=None)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv(STORAGE_ENV, env[STORAGE_ENV])
    parser, _ = build_parser()
    assert study_config(parser.parse_args(command[3:])).storage_url == config.storage_url


def test_sqlite_is_refused_for_several_workers_before_anything_is_created(study_file: Callable[..., Path],
                                                                          tmp_path: Path) -> None:
    path = study_file()
    config = StudyConfig.from_toml(path)
    with pytest.raises(ConfigError) as refused:
        shared_study(config, workers=2, n_trials=None)
    assert str(refused.value) == (
        f"{path} [study]: storage sqlite:///{tmp_path / 'small.db'} is SQLite, which one process at a time can use; "
        "for 2 local workers set storage = \"journal:small.log\" (a journal file beside the study) or a "
        "PostgreSQL/MySQL URL (several machines)")
    lines: list[str] = []
    with pytest.raises(ConfigError, match="for 3 local workers"):
        ProcessesExecutor(workers=3).run(config, n_trials=None, timeout=None, echo=lines.append)
    assert lines == []  # refused before any worker was started or announced
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]


def test_the_shared_study_waits_with_its_start_points_once(study_file: Callable[..., Path]) -> None:
    config = on_journal(study_file())

    def waiting() -> list[dict[str, object]]:
        return [t.system_attrs["fixed_params"] for t in study.get_trials(states=(TrialState.WAITING,))]

    study = shared_study(config, workers=1, n_trials=1)  # at most n_trials of them
    assert study.study_name == "small" and waiting() == [{"c": 1.0, "ft_epochs": 6}]
    for _ in range(2):
        study = shared_study(config, workers=2, n_trials=None)  # then [study] n_trials = 3: the start and the probe
        assert waiting() == [{"c": 1.0, "ft_epochs": 6}, {"c": 0.75, "ft_epochs": 8}]


# --- cluster jobs (checked without Slurm) -----------------------------------------------------------------------


@pytest.mark.parametrize("options, message", [
    ({"cluster": "pbs"}, "--cluster 'pbs': must be one of auto, slurm, local"),
    ({"jobs": 0}, "--jobs = 0: must be at least 1"),
    ({"workers_per_job": 0}, "--workers-per-job = 0: must be at least 1"),
    ({"timeout_min": 0}, "--timeout-min = 0: must be at least 1"),
    ({"gpus_per_job": -1}, "--gpus-per-job = -1: must be 0 or more"),
])
def test_cluster_options_are_refused_naming_the_flag(options: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError) as refused:
        make_executor("submitit", **{"jobs": 2, **options})
    assert str(refused.value) == message


def test_cluster_jobs_accept_no_gpu_a_local_cluster_and_submitit_parameters() -> None:
    executor = make_executor("submitit", jobs=1, gpus_per_job=0, cluster="local",
                             parameters={"slurm_partition": "gpu"})
    assert executor == SubmititExecutor(jobs=1, gpus_per_job=0, cluster="local", parameters={"slurm_partition": "gpu"})


def test_cluster_jobs_refuse_sqlite_with_the_reason_before_any_job(study_file: Callable[..., Path],
                                                                  tmp_path: Path) -> None:
    path = study_file()
    config = StudyConfig.from_toml(path)
    lines: list[str] = []
    with pytest.raises(ConfigError) as refused:
        SubmititExecutor(jobs=2, cluster="local").run(config, n_trials=None, timeout=None, echo=lines.append)
    assert str(refused.value) == (
        f"{path} [study]: storage sqlite:///{tmp_path / 'small.db'} is SQLite, which one process at a time can use, "
        "and every cluster job is a process of its own; use a PostgreSQL or MySQL/MariaDB URL, the Redis journal "
        "(redis://HOST:6379/0), a gRPC proxy (grpc://HOST:PORT), or a journal file that every job sees "
        "(journal:FILE on a shared file system)")
    assert lines == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["small.toml"]  # no study, no jobs/ folder


@pytest.mark.parametrize("storage", [
    "postgres://tuner:s3cret@db.internal:5432/studies", "postgresql://tuner@db.internal/studies",
    "postgresql+psycopg://tuner@db.internal/studies", "postgresql+psycopg2://tuner@db.internal/studies",
    "mysql://root@db.internal:3306/studies", "mysql+pymysql://root@db.internal/studies",
    "mariadb://root@db.internal:3306/studies", "mariadb+pymysql://root@db.internal/studies",
    "redis://:s3cret@cache.internal:6379/0", "rediss://cache.internal:6380/0", "grpc://proxy.internal:13000",
    "journal:/shared/studies/small.log",
])
def test_cluster_jobs_take_every_storage_several_processes_share(study_file: Callable[..., Path],
                                                                 storage: str) -> None:
    """Every spelling the storage layer accepts for a shared storage passes the launcher's check (no connection)."""
    config = StudyConfig.from_toml(study_file()).with_storage(storage)
    check_shared_storage(config)
    assert traits(config.storage_url).shared


def test_the_launch_verb_refuses_sqlite_in_one_line(study_file: Callable[..., Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["launch", str(path), "--jobs", "1", "--cluster", "local"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"swagppm-tune: error: {path} [study]: storage sqlite:///") and "is SQLite" in line


# --- the launched jobs' records and handles ---------------------------------------------------------------------


class _Submitted:
    """What ``record_launch`` reads of a submitit job: its id."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id


def test_launched_jobs_are_recorded_owner_only_and_read_back_by_study(tmp_path: Path) -> None:
    folder = tmp_path / "jobs"
    make_private_folder(folder)
    first = record_launch(folder, [_Submitted("101"), _Submitted("102")], cluster="local", study="a", tasks=2)
    record_launch(folder, [_Submitted("7")], cluster="slurm", study="b", tasks=1)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / LAUNCHED).stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == [LAUNCHED]  # the temporary file was renamed into place
    assert read_launches(folder, "a") == first and [job.job_id for job in first] == ["101", "102"]
    assert [(job.job_id, job.cluster, job.tasks) for job in read_launches(folder, "b")] == [("7", "slurm", 1)]
    assert len(read_launches(folder)) == 3 and read_launches(tmp_path / "nothing") == []
    (folder / LAUNCHED).write_text("{not json")
    with pytest.raises(ConfigError, match=f"{folder / LAUNCHED}: not a list of launched jobs"):
        read_launches(folder)


def test_an_existing_folder_keeps_its_own_mode(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir(mode=0o755)
    folder.chmod(0o755)
    make_private_folder(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o755  # not the tool's folder: never changed


def test_a_local_job_whose_controller_is_gone_reads_as_ended(tmp_path: Path) -> None:
    pytest.importorskip("submitit")
    from submitit.core.utils import cloudpickle_dump

    folder = tmp_path / "jobs"
    make_private_folder(folder)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    job = LaunchedJob(job_id=str(dead.pid), cluster="local", study="a", tasks=1, submitted="2026-01-01T00:00:00")
    handle = job_handle(folder, job)
    assert handle._process is None and job_state(handle) == "ended without a result (cancelled or killed)"
    assert not is_active(job_state(handle))
    cloudpickle_dump(("success", 3), handle.paths.result_pickle)
    assert job_state(job_handle(folder, job)) == "done"
    cloudpickle_dump(("error", "Traceback ..."), handle.paths.result_pickle)
    assert job_state(job_handle(folder, job)) == "failed"


def test_only_a_running_controller_of_the_folder_counts_as_the_job(tmp_path: Path) -> None:
    assert not controller_alive(os.getpid(), folder=None)  # a live process that is no submitit controller
    fake = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)", "submitit.local._local",
                             str(tmp_path)])
    try:
        deadline = time.monotonic() + PATIENCE
        while b"_local" not in Path(f"/proc/{fake.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
            time.sleep(0.01)  # until the child has exec'd python (before, /proc shows the parent's command line)
        assert controller_alive(fake.pid, folder=tmp_path) and controller_alive(fake.pid, folder=None)
        assert not controller_alive(fake.pid, folder=tmp_path / "other")
        process = ControllerProcess(fake.pid)
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        fake.wait(timeout=30)
        assert process.poll() == -signal.SIGTERM
    finally:
        fake.kill()
        fake.wait()


def test_the_jobs_verb_says_when_nothing_was_launched(study_file: Callable[..., Path],
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["jobs", str(path)]) == 0
    folder = StudyConfig.from_toml(path).artifact_dir / "jobs"
    assert capsys.readouterr().out == f"no jobs were launched for study 'small' (none recorded in {folder})\n"


def test_sigterm_interrupts_the_launcher_like_ctrl_c_and_the_handler_is_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt), interrupt_on_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the signal lands at once; never reached
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_named_beside_sigterm_interrupts_in_its_own_words_which_a_retelling_keeps() -> None:
    before = signal.getsignal(signal.SIGUSR2)
    with pytest.raises(Terminated) as stopped, interrupt_on_sigterm(also={signal.SIGUSR2: "SIGUSR2: time limit"}):
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(5)  # the signal lands at once; never reached
    assert signal.getsignal(signal.SIGUSR2) is before
    assert interruption(stopped.value) == "interrupted (SIGUSR2: time limit)" and is_interruption(
        interruption(stopped.value))
    told = retold(stopped.value, "nothing was released")
    assert isinstance(told, Terminated) and str(told) == "nothing was released"
    assert interruption(told) == "interrupted (SIGUSR2: time limit)"
    assert interruption(retold(KeyboardInterrupt(), "x")) == "interrupted (Ctrl-C)"
    assert not is_interruption("RuntimeError: out of memory") and not is_interruption(None)


def test_the_jobs_environment_is_set_for_the_block_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SWAGPPM_TEST_KEPT", "old")
    monkeypatch.delenv("SWAGPPM_TEST_NEW", raising=False)
    with environment({"SWAGPPM_TEST_KEPT": "new", "SWAGPPM_TEST_NEW": "1"}):
        assert os.environ["SWAGPPM_TEST_KEPT"] == "new" and os.environ["SWAGPPM_TEST_NEW"] == "1"
    assert os.environ["SWAGPPM_TEST_KEPT"] == "old" and "SWAGPPM_TEST_NEW" not in os.environ


def test_running_trials_of_vanished_processes_on_this_machine_are_found(study_file: Callable[..., Path]) -> None:
    config = on_journal(study_file())
    study = shared_study(config, workers=1, n_trials=None)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    owners = [worker_id(dead.pid), worker_id(os.getpid()), f"elsewhere:{dead.pid}"]
    for owner in owners:
        study.add_trial(create_trial(state=TrialState.RUNNING, params={"c": 0.5, "ft_epochs": 5},
                                     distributions=SPACE, user_attrs={RAN_BY: owner}))
    assert vanished_workers(study) == {worker_id(dead.pid)}  # not a live one, not another machine's
    recover_stale_trials(study, config, echo=lambda line: None, gone=vanished_workers(study))
    assert vanished_workers(study) == set()
    retried = [t for t in study.get_trials() if t.state == TrialState.WAITING and "failed_trial" in t.system_attrs]
    assert len(retried) == 1 and retried[0].system_attrs["fixed_params"] == {"c": 0.5, "ft_epochs": 5}
