"""``launch`` through submitit's local executor on the real PostgreSQL and MariaDB, and ``jobs`` that lists and
cancels what it launched.

Processes and signals are real: a job's worker SIGKILLed mid-trial, the launcher
stopped by SIGTERM, the launcher SIGKILLed and its orphaned jobs cancelled by
``jobs --cancel``. Each time the running trial is failed and queued again with its
parameters, and no job process is left. The grace period is long (30 s), so a
live trial is never taken for a stale one on a busy machine: a dead local worker's
trial is recovered because its process is seen gone, not by heartbeat.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState

from tests.tuner.helpers import (
    FINISHED,
    CliProcess,
    distributed_study,
    job_processes,
    jobs_table,
    requeued,
    running_with_worker,
    stored,
    wait_for,
)
from tuner import StudyConfig
from tuner.executors.cluster import jobs_folder
from tuner.executors.jobs import LAUNCHED, read_launches

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("needs_submitit")]

ENDED = "ended without a result (cancelled or killed)"


def launched_study(tmp_path: Path, cache: Path, storage: str, cleanup: list[Path], *, n_trials: int) -> Path:
    """A study whose trials run long enough (200 privacy draws) to be caught running, with a 30 s grace period."""
    path = distributed_study(tmp_path, cache, storage, study={"n_trials": n_trials, "grace_period": 30},
                             swagppm={"draws_privacy": 200})
    cleanup.append(path)
    return path


def launch(path: Path, jobs: int) -> tuple[CliProcess, optuna.Study, FrozenTrial]:
    """``launch --cluster local`` with ``jobs`` jobs, the study once they are submitted, and a running trial."""
    launcher = CliProcess("launch", str(path), "--jobs", str(jobs), "--cluster", "local")
    launcher.until(f"submitted {jobs} local job(s)")
    study = stored(path)  # opened after the launcher made it: one storage for all the polling
    return launcher, study, wait_for(study, running_with_worker, alive=launcher)[0]


def test_a_killed_jobs_trial_is_retried_and_the_study_finishes(postgres: str, tmp_path: Path, cache: Path,
                                                               cleanup: list[Path]) -> None:
    """Three jobs on ``postgres://`` (SQLAlchemy's name is postgresql); one job's worker is SIGKILLed mid-trial.
    The jobs folder and its record are the owner's only, and the storage's password is in none of its files."""
    path = launched_study(tmp_path, cache, "postgres://postgres:s3cret@127.0.0.1:5432/test", cleanup, n_trials=3)
    launcher, study, running = launch(path, jobs=3)
    os.kill(int(running.user_attrs["worker"].rsplit(":", 1)[1]), signal.SIGKILL)
    assert launcher.finish() in (0, 1), launcher.output
    assert "ended without finishing" in launcher.output, launcher.output
    trials = {t.number: t for t in study.get_trials()}
    assert trials[running.number].state == TrialState.FAIL
    retries = requeued(study, running)
    assert len(retries) == 1 and retries[0].state in FINISHED and retries[0].params == running.params
    assert all(t.state in FINISHED or t.number == running.number for t in trials.values())  # nothing lost
    finished = [t for t in trials.values() if t.state in FINISHED]
    assert len(finished) >= 3
    points = [(t.params["c"], t.params["ft_epochs"]) for t in finished]
    assert len(set(points)) == len(points)  # no duplicate fit
    _, states = jobs_table(path)
    assert sorted(states.values()) == sorted(["done", "done", ENDED]), states
    folder = jobs_folder(StudyConfig.from_toml(path))
    assert folder.stat().st_mode & 0o777 == 0o700 and (folder / LAUNCHED).stat().st_mode & 0o777 == 0o600
    assert [job.tasks for job in read_launches(folder, StudyConfig.from_toml(path).study.name)] == [1, 1, 1]
    assert not [file for file in folder.iterdir() if b"s3cret" in file.read_bytes()]
    assert "s3cret" not in launcher.output and "postgres:***@127.0.0.1" in launcher.output


@pytest.mark.parametrize("storage", ["mariadb://root@127.0.0.1:3306/test", "postgresql://postgres@127.0.0.1/test"])
def test_sigterm_to_the_launcher_cancels_its_local_jobs_and_requeues_their_trials(
        request: pytest.FixtureRequest, storage: str, tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    request.getfixturevalue("mariadb" if storage.startswith("mariadb") else "postgres")  # skips without it
    path = launched_study(tmp_path, cache, storage, cleanup, n_trials=4)
    launcher, study, running = launch(path, jobs=2)
    listing, states = jobs_table(path)
    assert list(states.values()) == ["running", "running"], listing
    launcher.process.send_signal(signal.SIGTERM)
    assert launcher.finish() == 130, launcher.output
    assert "cancelled 2 local job(s); their running trials were failed and queued again" in launcher.output
    assert "interrupted (Ctrl-C or SIGTERM)" in launcher.output and "Traceback" not in launcher.output
    assert job_processes(path) == []  # no job survives its launcher
    assert study.get_trials(states=(TrialState.RUNNING,)) == []
    assert study.get_trials()[running.number].state == TrialState.FAIL
    retries = requeued(study, running)
    assert len(retries) == 1 and retries[0].state == TrialState.WAITING
    assert retries[0].system_attrs["fixed_params"] == running.params  # the next run evaluates it
    _, states = jobs_table(path)
    assert list(states.values()) == [ENDED, ENDED]


def test_jobs_cancel_ends_the_jobs_of_a_launcher_that_is_gone(postgres: str, tmp_path: Path, cache: Path,
                                                              cleanup: list[Path]) -> None:
    """The launcher is SIGKILLed (its session died): its local jobs run on, and ``jobs --cancel`` ends them."""
    path = launched_study(tmp_path, cache, "postgresql+psycopg://postgres@127.0.0.1:5432/test", cleanup,
                          n_trials=4)
    launcher, study, running = launch(path, jobs=2)
    launcher.process.kill()
    launcher.finish()
    _, states = jobs_table(path)
    assert list(states.values()) == ["running", "running"]  # orphaned, still at work
    out, states = jobs_table(path, "--cancel")
    assert "cancelled 2 job(s); the running trials of its gone local workers were failed and queued again" in out
    assert list(states.values()) == [ENDED, ENDED], out
    assert job_processes(path) == []
    assert study.get_trials()[running.number].state == TrialState.FAIL
    assert len(requeued(study, running)) == 1
    out, _ = jobs_table(path, "--cancel")
    assert out.startswith("cancelled 0 job(s)")  # nothing left to cancel
