"""The stand-in Slurm (``tests/tuner/slurm_standin/slurm.py``) answers as Slurm does where submitit reads it: the
``sbatch`` line, ``sacct``'s fields through submitit's own parser, ``squeue``, and ``scancel``'s SIGTERM, then
SIGKILL after the kill wait, to every task ``srun`` started."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.tuner.helpers import slurm_ended, slurm_jobs

pytestmark = pytest.mark.slow

# Two tasks that say who they are, note SIGTERM and go on until SIGKILL.
SCRIPT = """#!/bin/bash
#SBATCH --job-name=stubborn
#SBATCH --output={folder}/%j.out
#SBATCH --ntasks-per-node=2
srun --unbuffered --output {folder}/%j_%t.out bash -c \
  'trap "echo TERM" TERM; echo "task $SLURM_PROCID of $SLURM_NTASKS in job $SLURM_JOB_ID"; while :; do sleep 0.1; done'
"""


def run(*command: str) -> str:
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_sbatch_srun_sacct_squeue_and_scancel_answer_as_slurm_does(slurm: Path, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("submitit")
    from submitit.slurm.slurm import SlurmExecutor, SlurmInfoWatcher

    monkeypatch.setenv("SLURM_STANDIN_KILL_WAIT", "2")
    script = tmp_path / "job.sh"
    script.write_text(SCRIPT.format(folder=tmp_path))
    submitted = run("sbatch", str(script))
    job_id = SlurmExecutor._get_job_id_from_submission_command(submitted)
    assert submitted == f"Submitted batch job {job_id}\n"
    outputs = [tmp_path / f"{job_id}_{task}.out" for task in (0, 1)]
    deadline = time.monotonic() + 60
    while not all(path.exists() and path.read_text() for path in outputs) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert [path.read_text() for path in outputs] == [f"task {task} of 2 in job {job_id}\n" for task in (0, 1)]
    assert run("squeue", "-h", "-j", job_id, "-o", "%i %j %T") == f"{job_id} stubborn RUNNING\n"
    info = SlurmInfoWatcher().read_info(run("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job_id))
    assert info[job_id]["State"] == "RUNNING"
    run("scancel", job_id)
    info = SlurmInfoWatcher().read_info(run("sacct", "-o", "JobID,State,NodeList", "--parsable2", "-j", job_id))
    assert info[job_id]["State"] == f"CANCELLED by {os.getuid()}"  # at once, as Slurm marks it
    (job,) = slurm_ended(slurm)
    assert 2 <= job["ended"] - job["cancelled"] < 30  # the tasks ignored SIGTERM: killed after the kill wait
    assert [path.read_text().splitlines()[-1] for path in outputs] == ["TERM", "TERM"]
    assert "CANCELLED AT" in (tmp_path / f"{job_id}.out").read_text()
    assert run("squeue", "-h") == ""
    assert slurm_jobs(slurm)[0]["state"] == "CANCELLED"
