"""``launch --cluster slurm`` and ``jobs`` against a Slurm-shaped cluster on the real PostgreSQL.

The stand-ins of ``tests/tuner/slurm_standin/slurm.py`` (``sbatch``, ``srun``, ``sacct``,
``squeue``, ``scancel``) are put on PATH: submitit's own ``SlurmExecutor`` writes the
batch script, ``sbatch`` runs it in the background, its ``srun`` starts one worker
per task with Slurm's variables, ``sacct`` reports the states and ``scancel`` sends
SIGCONT and SIGTERM to the job's processes, then SIGKILL after ``KILL_WAIT`` seconds
(Slurm's ``KillWait``). Processes and signals are real; the grace period is long
(30 s), so no trial is recovered by heartbeat within a test.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from tests import PATIENCE
from tests.tuner.helpers import (
    FINISHED,
    KILL_WAIT,
    CliProcess,
    distributed_study,
    job_processes,
    jobs_table,
    requeued,
    run_cli,
    running_with_worker,
    slurm_ended,
    slurm_jobs,
    stored,
    wait_for,
)
from tuner import StudyConfig
from tuner.executors.cluster import TIME_LIMIT, jobs_folder
from tuner.pause import pause_of

pytestmark = [pytest.mark.services, pytest.mark.usefixtures("needs_submitit")]


def launched_study(tmp_path: Path, cache: Path, postgres: str, cleanup: list[Path], *, n_trials: int,
                   draws_privacy: int = 12) -> Path:
    path = distributed_study(tmp_path, cache, postgres, study={"n_trials": n_trials, "grace_period": 30},
                             swagppm={"draws_privacy": draws_privacy})
    cleanup.append(path)
    return path


def launch(path: Path) -> CliProcess:
    launcher = CliProcess("launch", str(path), "--jobs", "1", "--cluster", "slurm")
    launcher.until("submitted 1 slurm job(s)")
    return launcher


def job_log(path: Path, job: dict[str, Any], task: int = 0) -> str:
    """A task's output file, written by ``srun`` (and, for task 0, the batch script's own output)."""
    return (jobs_folder(StudyConfig.from_toml(path)) / f"{job['id']}_{task}_log.out").read_text()


def test_launch_submits_through_sbatch_and_the_jobs_two_workers_finish_the_study(
        postgres: str, slurm: Path, tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    """One job of two tasks: ``srun`` starts a worker for each; ``jobs`` reads the job's state from sacct. No GPU is
    asked for, so the batch script has no GPU directive (the stand-in, like a cluster without GPU GRES, refuses
    one)."""
    path = launched_study(tmp_path, cache, postgres, cleanup, n_trials=2)
    done = run_cli("launch", str(path), "--jobs", "1", "--workers-per-job", "2", "--cluster", "slurm")
    assert done.returncode in (0, 1), done.stdout + done.stderr
    (job,) = slurm_ended(slurm)
    assert "submitted 1 slurm job(s) of 2 worker(s) on study" in done.stdout
    assert f"[job {job['id']}] done" in done.stdout
    assert job["state"] == "COMPLETED" and job["tasks"] == 2
    study = stored(path)
    assert len(study.get_trials(states=FINISHED)) >= 2 and not study.get_trials(states=(TrialState.RUNNING,))
    for task in (0, 1):
        assert f"[job0.{task}] stopped: " in job_log(path, job, task)  # one worker per task, each to its end
    script = (jobs_folder(StudyConfig.from_toml(path)) / f"{job['id']}_submission.sh").read_text()
    assert "#SBATCH --ntasks-per-node=2" in script and "gpus-per-node" not in script
    _, states = jobs_table(path)
    assert states == {job["id"]: "completed"}


def test_a_job_the_cluster_refuses_is_one_line_naming_its_reason(postgres: str, slurm: Path, tmp_path: Path,
                                                                  cache: Path, cleanup: list[Path]) -> None:
    """A GPU asked of the stand-in's node, which has none: sbatch's own error, in one line, exit status 2."""
    path = launched_study(tmp_path, cache, postgres, cleanup, n_trials=1)
    done = run_cli("launch", str(path), "--jobs", "1", "--gpus-per-job", "1", "--cluster", "slurm")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"swagppm-tune: error: {path}: the cluster refused a job (sbatch: error: Invalid generic resource (gres) "
        f"specification); 0 job(s) were submitted before it (`swagppm-tune jobs {path}` lists them, `--cancel` "
        "cancels them)")
    assert slurm_jobs(slurm) == []


def test_jobs_cancel_runs_scancel_and_the_worker_fails_and_requeues_its_trial_on_slurms_sigterm(
        postgres: str, slurm: Path, tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    """The cancelled job's worker fails its running trial with the reason and queues it again itself, then ends
    before Slurm's SIGKILL (a worker on another node is seen gone by no one here)."""
    path = launched_study(tmp_path, cache, postgres, cleanup, n_trials=3, draws_privacy=200)
    launcher = launch(path)
    study = stored(path)
    running = wait_for(study, running_with_worker, alive=launcher)[0]
    (job,) = slurm_jobs(slurm)
    listing, states = jobs_table(path)
    assert states == {job["id"]: "running"}, listing
    out, states = jobs_table(path, "--cancel")
    assert out.startswith("cancelled 1 job(s); ") and states == {job["id"]: "cancelled"}, out
    assert launcher.finish() in (0, 1), launcher.output
    assert f"[job {job['id']}] ended without finishing" in launcher.output
    failed = study.get_trials()[running.number]
    assert failed.state == TrialState.FAIL and failed.user_attrs["failure"] == "interrupted (SIGTERM)"
    retries = requeued(study, running)
    assert len(retries) == 1 and retries[0].state == TrialState.WAITING
    assert retries[0].system_attrs["fixed_params"] == running.params
    assert "[job0.0] interrupted (SIGTERM): the running trial was failed and queued again" in job_log(path, job)
    (cancelled,) = slurm_ended(slurm)
    assert cancelled["ended"] - cancelled["cancelled"] < KILL_WAIT  # it ended on SIGTERM, not at the SIGKILL
    assert job_processes(path) == []


def test_slurms_warning_before_the_time_limit_fails_and_requeues_the_running_trial(
        postgres: str, slurm: Path, tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    """submitit asks Slurm for USR2 before a job's time limit (or a preemption); submitit's own handler would raise
    inside the trial and fail it as a crash, never queued again. The task fails it with the reason, queues it again
    and ends."""
    path = launched_study(tmp_path, cache, postgres, cleanup, n_trials=3, draws_privacy=200)
    launcher = launch(path)
    study = stored(path)
    running = wait_for(study, running_with_worker, alive=launcher)[0]
    (job,) = slurm_jobs(slurm)
    warned = subprocess.run(["scancel", "--signal", "USR2", job["id"]], capture_output=True, text=True,
                            timeout=PATIENCE)
    assert warned.returncode == 0, warned.stderr
    assert launcher.finish() in (0, 1), launcher.output
    failed = study.get_trials()[running.number]
    assert failed.state == TrialState.FAIL
    assert failed.user_attrs["failure"] == f"interrupted ({TIME_LIMIT})"
    (retry,) = requeued(study, running)
    assert retry.state == TrialState.WAITING and retry.system_attrs["fixed_params"] == running.params
    assert f"[job0.0] interrupted ({TIME_LIMIT}): the running trial was failed and queued again" in job_log(path, job)
    assert job_processes(path) == []


def test_jobs_pause_ends_the_job_after_its_running_trial_and_launch_goes_on_after_resume(
        postgres: str, slurm: Path, tmp_path: Path, cache: Path, cleanup: list[Path]) -> None:
    """Paused while its first trial runs, the job finishes and judges that trial, starts no other and completes;
    ``launch`` on the paused study submits nothing; after ``--resume`` it finishes the study."""
    path = launched_study(tmp_path, cache, postgres, cleanup, n_trials=2, draws_privacy=200)
    launcher = launch(path)
    study = stored(path)
    running = wait_for(study, running_with_worker, alive=launcher)[0]
    paused = run_cli("jobs", str(path), "--pause")
    assert paused.returncode == 0 and paused.stdout.startswith("paused study "), paused.stdout + paused.stderr
    assert "(1 running now)" in paused.stdout
    assert launcher.finish() == 0, launcher.output
    pause = pause_of(study)
    assert pause is not None
    line = pause.line(StudyConfig.from_toml(path))
    assert f"stopped: every job ended (0 of 1 failed or were cancelled); {line}" in launcher.output
    (job,) = slurm_ended(slurm)
    assert job["state"] == "COMPLETED" and f"[job0.0] stopped: {line}" in job_log(path, job)
    trials = study.get_trials()
    assert trials[running.number].state in FINISHED  # finished and judged, never failed
    assert [t.number for t in trials if t.state != TrialState.WAITING] == [running.number]  # none started after it
    again = run_cli("launch", str(path), "--jobs", "1", "--cluster", "slurm")
    assert (again.returncode, again.stdout) == (0, f"stopped: {line}\n"), again.stderr
    assert len(slurm_jobs(slurm)) == 1  # nothing submitted to a paused study
    assert run_cli("jobs", str(path), "--resume").stdout.startswith("resumed study ")
    final = run_cli("launch", str(path), "--jobs", "1", "--cluster", "slurm", timeout=PATIENCE)
    assert final.returncode in (0, 1), final.stdout + final.stderr
    assert len(study.get_trials(states=FINISHED)) == 2 and len(slurm_jobs(slurm)) == 2
    second = slurm_ended(slurm)[-1]
    assert "[job1.0] " in job_log(path, second)  # a new name, so a sampler seed of its own
