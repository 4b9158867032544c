"""Stand-ins for Slurm's ``sbatch``, ``srun``, ``sacct``, ``squeue`` and ``scancel`` on one node (this machine).

``python slurm.py COMMAND ARGS`` behaves as Slurm's COMMAND does for what submitit's
``SlurmExecutor`` and ``SlurmJob`` ask of it (``submitit/slurm/slurm.py``):

- ``sbatch FILE`` copies the script, prints ``Submitted batch job N`` and runs it in the
  background with the submitting environment (``--export=ALL``, Slurm's default), in
  the submitting folder, its output and error in the ``#SBATCH --output/--error``
  files (``%j``: the job id), with the batch step's ``SLURM_*`` variables.
- ``srun [--unbuffered] [--output F] [--error F] [-n N] COMMAND`` starts one process per
  task (``SLURM_NTASKS``), each with ``SLURM_PROCID``/``SLURM_LOCALID``/``SLURM_NODEID``
  and its own output files (``%t``: the task id), and exits with the tasks' worst status.
- ``sacct -o FIELDS --parsable2 -j N`` prints each job's line and its batch step's
  (``N.batch``, which submitit skips); a cancelled job reads ``CANCELLED by UID``.
- ``squeue [-h] [-j N] [-o FORMAT]`` lists the pending and running jobs.
- ``scancel N`` marks the job CANCELLED at once and has its processes sent SIGCONT and
  SIGTERM, then SIGKILL once ``SLURM_STANDIN_KILL_WAIT`` seconds (Slurm's ``KillWait``,
  default 30) have passed; ``scancel --signal SIG N`` only sends SIG, to the job steps'
  tasks and not to the batch shell (Slurm's way without ``--batch`` or ``--full``).

The jobs' states live in ``$SLURM_STANDIN_STATE`` (one JSON file a job), which every
command shares: PENDING (for ``SLURM_STANDIN_PENDING`` seconds, default 0), RUNNING,
then COMPLETED, FAILED or CANCELLED. The node has no GPU (no generic resources): a
``--gpus-per-node`` request is refused as by a cluster without GPU GRES, unless
``SLURM_STANDIN_GPUS`` gives the node's GPUs. Job arrays, several nodes and time limits
are not modelled: arrays and several nodes are refused, ``--time`` is not enforced.
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import Any

ACTIVE = ("PENDING", "RUNNING")
HOST = socket.gethostname()
_PR_SET_CHILD_SUBREAPER = 36  # prctl(2): orphaned descendants are re-parented to this process


def fail(message: str, status: int = 1) -> None:
    """Slurm's way of refusing: one ``error:`` line on standard error and a non-zero status."""
    print(f"{Path(sys.argv[1] if len(sys.argv) > 1 else 'slurm').name}: error: {message}", file=sys.stderr)
    sys.exit(status)


def state_folder() -> Path:
    folder = os.environ.get("SLURM_STANDIN_STATE")
    if not folder:
        fail("SLURM_STANDIN_STATE is not set (the stand-ins' shared state folder)")
    return Path(str(folder))


@contextmanager
def locked() -> Iterator[Path]:
    """The state folder, held exclusively (every read-modify-write of a job goes through here)."""
    folder = state_folder()
    with open(folder / "lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield folder


def read_job(folder: Path, job_id: str) -> dict[str, Any] | None:
    path = folder / f"{job_id}.json"
    return json.loads(path.read_text()) if path.exists() else None


def write_job(folder: Path, job: dict[str, Any]) -> None:
    temporary = folder / f".{job['id']}.json.tmp"
    temporary.write_text(json.dumps(job))
    os.replace(temporary, folder / f"{job['id']}.json")


def all_jobs(folder: Path) -> list[dict[str, Any]]:
    return sorted((json.loads(path.read_text()) for path in folder.glob("[0-9]*.json")), key=lambda j: int(j["id"]))


# --- sbatch ----------------------------------------------------------------------------------------------------


def directives(script: str) -> dict[str, str]:
    """The ``#SBATCH --key=value`` lines of a batch script (before its first command), as {key: value}."""
    found: dict[str, str] = {}
    for line in script.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        match = re.match(r"#SBATCH\s+--([\w-]+)(?:=(.*))?$", line.strip())
        if match:
            found[match[1]] = (match[2] or "").strip("'\"")
    return found


def sbatch(arguments: list[str]) -> None:
    if len(arguments) != 1 or arguments[0].startswith("-"):
        fail("the stand-in takes one batch script and its #SBATCH lines, no options")
    script = Path(arguments[0]).read_text()
    options = directives(script)
    if "array" in options:
        fail("the stand-in runs no job arrays (--array)")
    if int(options.get("nodes", "1")) != 1:
        fail("Requested node configuration is not available (the stand-in is one node)")
    gpus = int(os.environ.get("SLURM_STANDIN_GPUS", "0"))
    if "gpus-per-node" in options and (gpus == 0 or int(options["gpus-per-node"]) > gpus):
        fail("Invalid generic resource (gres) specification")
    with locked() as folder:
        counter = folder / "last_job_id"
        job_id = str(int(counter.read_text()) + 1 if counter.exists() else 1001)
        counter.write_text(job_id)
        (folder / f"{job_id}.sh").write_text(script)
        write_job(folder, {
            "id": job_id, "name": options.get("job-name", Path(arguments[0]).name), "state": "PENDING",
            "tasks": int(options.get("ntasks-per-node", "1")), "partition": options.get("partition", "standin"),
            "output": options.get("output", f"{os.getcwd()}/slurm-%j.out"), "error": options.get("error"),
            "cwd": os.getcwd(), "submitted": time.time(), "exit_code": None, "pgid": None, "cancelled": None,
            "steps": 0})
    with open(folder / f"{job_id}.runner.log", "a") as log:
        subprocess.Popen([sys.executable, __file__, "_run", job_id], stdin=subprocess.DEVNULL, stdout=log,
                         stderr=log, start_new_session=True)
    print(f"Submitted batch job {job_id}")


def batch_environment(job: dict[str, Any]) -> dict[str, str]:
    """The submitting environment with the batch step's ``SLURM_*`` variables (one node, task 0)."""
    tasks = str(job["tasks"])
    return {**os.environ, "SLURM_JOB_ID": job["id"], "SLURM_JOBID": job["id"], "SLURM_JOB_NAME": job["name"],
            "SLURM_NTASKS": tasks, "SLURM_NPROCS": tasks, "SLURM_NTASKS_PER_NODE": tasks,
            "SLURM_JOB_NUM_NODES": "1", "SLURM_NNODES": "1", "SLURM_JOB_NODELIST": HOST, "SLURM_NODELIST": HOST,
            "SLURMD_NODENAME": HOST, "SLURM_SUBMIT_DIR": job["cwd"], "SLURM_SUBMIT_HOST": HOST,
            "SLURM_JOB_PARTITION": job["partition"], "SLURM_NODEID": "0", "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0", "SLURM_CPUS_ON_NODE": str(os.cpu_count() or 1)}


def run_job(job_id: str) -> None:
    """The batch step (``sbatch``'s background process): the script in a process group of its own, its processes
    reaped here (a subreaper), signalled on ``scancel``; the job's end state."""
    ctypes.CDLL(None).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    time.sleep(float(os.environ.get("SLURM_STANDIN_PENDING", "0")))
    with locked() as folder:
        job = read_job(folder, job_id)
        assert job is not None
        if job["cancelled"] is not None:
            return
        output = open(job["output"].replace("%j", job_id), "a")
        error = output if job["error"] is None else open(job["error"].replace("%j", job_id), "a")
        script = subprocess.Popen(["/bin/bash", str(folder / f"{job_id}.sh")], cwd=job["cwd"], stdout=output,
                                  stderr=error, stdin=subprocess.DEVNULL, env=batch_environment(job),
                                  start_new_session=True)
        job.update(state="RUNNING", pgid=script.pid, started=time.time())
        write_job(folder, job)
    status = supervise(job_id, script.pid, error)
    with locked() as folder:
        job = read_job(folder, job_id)
        assert job is not None
        ended = "CANCELLED" if job["cancelled"] is not None else "COMPLETED" if status == 0 else "FAILED"
        job.update(state=ended, exit_code=status, ended=time.time())
        write_job(folder, job)


def supervise(job_id: str, script: int, error: Any) -> int:
    """Reap the job's processes until none is left: what the script leaves running when it ends is killed; on
    ``scancel``, SIGCONT and SIGTERM to them all, SIGKILL after the kill wait. The script's exit code (128 + the
    signal that ended it)."""
    kill_wait = float(os.environ.get("SLURM_STANDIN_KILL_WAIT", "30"))
    status, terminated_at, killed = None, None, False
    while True:
        try:
            pid, code = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            break
        if pid == script:
            status = os.waitstatus_to_exitcode(code)
        if pid:
            continue
        cancelled = json.loads((state_folder() / f"{job_id}.json").read_text())["cancelled"] is not None
        if cancelled and terminated_at is None:
            stamp = datetime.now().isoformat(timespec="seconds")
            print(f"slurmstepd: error: *** JOB {job_id} ON {HOST} CANCELLED AT {stamp} ***", file=error, flush=True)
            with_group(script, signal.SIGCONT)
            with_group(script, signal.SIGTERM)
            terminated_at = time.monotonic()
        ended = status is not None and not cancelled
        late = terminated_at is not None and time.monotonic() - terminated_at > kill_wait
        if (ended or late) and not killed:
            with_group(script, signal.SIGKILL)
            killed = True
        time.sleep(0.1)
    assert status is not None
    return status if status >= 0 else 128 - status


def with_group(pgid: int, number: int) -> None:
    try:
        os.killpg(pgid, number)
    except ProcessLookupError:
        pass


# --- srun ------------------------------------------------------------------------------------------------------


def srun(arguments: list[str]) -> None:
    if "SLURM_JOB_ID" not in os.environ:
        fail("the stand-in srun runs inside a batch job only (SLURM_JOB_ID is not set)")
    options: dict[str, str] = {}
    valued = {"--output": "output", "-o": "output", "--error": "error", "-e": "error", "--ntasks": "ntasks",
              "-n": "ntasks"}
    while arguments and arguments[0].startswith("-"):
        word = arguments.pop(0)
        name, _, value = word.partition("=")
        if name in valued:
            options[valued[name]] = value or arguments.pop(0)
        elif word not in ("--unbuffered", "-u"):
            fail(f"the stand-in srun does not know {word}")
    if not arguments:
        fail("no command to run")
    signal.signal(signal.SIGTERM, lambda number, frame: print(
        f"srun: Job step aborted: Waiting up to {os.environ.get('SLURM_STANDIN_KILL_WAIT', '30')} seconds for job "
        "step to finish.", file=sys.stderr, flush=True))  # scancel signals the tasks themselves, as Slurm does
    step = next_step(os.environ["SLURM_JOB_ID"])
    tasks = int(options.get("ntasks", os.environ.get("SLURM_NTASKS", "1")))
    processes = [subprocess.Popen(arguments, env=task_environment(i, tasks, step),
                                  stdout=task_file(options.get("output"), i, step),
                                  stderr=task_file(options.get("error"), i, step)) for i in range(tasks)]
    with locked() as folder:  # the tasks a ``scancel --signal`` reaches
        job = read_job(folder, os.environ["SLURM_JOB_ID"])
        assert job is not None
        job["task_pids"] = job.get("task_pids", []) + [process.pid for process in processes]
        write_job(folder, job)
    codes = [process.wait() for process in processes]
    sys.exit(max(code if code >= 0 else 128 - code for code in codes))


def next_step(job_id: str) -> str:
    """The job's next step id (0 for its first ``srun``)."""
    with locked() as folder:
        job = read_job(folder, job_id)
        assert job is not None
        job["steps"] += 1
        write_job(folder, job)
        return str(job["steps"] - 1)


def task_environment(task: int, tasks: int, step: str) -> dict[str, str]:
    return {**os.environ, "SLURM_PROCID": str(task), "SLURM_LOCALID": str(task), "SLURM_NODEID": "0",
            "SLURM_STEP_ID": step, "SLURM_STEPID": step, "SLURM_NTASKS": str(tasks), "SLURM_STEP_NUM_TASKS": str(tasks),
            "SLURM_STEP_NUM_NODES": "1", "SLURM_STEP_NODELIST": HOST}


def task_file(pattern: str | None, task: int, step: str) -> Any:
    """A task's output file (``%j`` job, ``%t`` task, ``%s`` step, ``%N`` node), appended to; None: the step's."""
    if pattern is None:
        return None
    name = (pattern.replace("%j", os.environ["SLURM_JOB_ID"]).replace("%t", str(task)).replace("%s", step)
            .replace("%N", HOST))
    return open(name, "a")


# --- sacct, squeue, scancel ------------------------------------------------------------------------------------


def job_ids(values: list[str]) -> list[str]:
    return [part.split("_")[0] for value in values for part in value.split(",") if part]


def sacct(arguments: list[str]) -> None:
    fields = ["JobID", "JobName", "Partition", "State", "ExitCode"]
    wanted: list[str] = []
    separator, header, steps = None, True, True
    while arguments:
        word = arguments.pop(0)
        name, _, value = word.partition("=")
        if name in ("-o", "--format"):
            fields = (value or arguments.pop(0)).split(",")
        elif name in ("-j", "--jobs"):
            wanted.append(value or arguments.pop(0))
        elif word in ("--parsable2", "-P"):
            separator = "|"
        elif word in ("-n", "--noheader"):
            header = False
        elif word in ("-X", "--allocations"):
            steps = False
        else:
            fail(f"the stand-in sacct does not know {word}")
    known = {"JobID", "JobIDRaw", "JobName", "Partition", "State", "ExitCode", "NodeList"}
    unknown = [field for field in fields if field not in known]
    if unknown:
        fail(f"Invalid field requested: \"{unknown[0]}\"")
    with locked() as folder:
        jobs = [job for job in all_jobs(folder) if not wanted or job["id"] in job_ids(wanted)]
    rows = [fields] if header else []
    for job in jobs:
        rows.append([cell(job, field) for field in fields])
        if steps and job["state"] != "PENDING":
            rows.append([cell(job, field, step="batch") for field in fields])
    for row in rows:
        print(separator.join(row) if separator else "  ".join(f"{value:<12}" for value in row))


def cell(job: dict[str, Any], field: str, *, step: str | None = None) -> str:
    """One ``sacct`` field of a job (or of its batch step)."""
    state = job["state"]
    if state == "CANCELLED" and step is None:
        state = f"CANCELLED by {os.getuid()}"
    code = job["exit_code"]
    values = {"JobID": job["id"] + (f".{step}" if step else ""), "JobIDRaw": job["id"] + (f".{step}" if step else ""),
              "JobName": "batch" if step else job["name"], "Partition": "" if step else job["partition"],
              "State": state, "NodeList": "None assigned" if job["state"] == "PENDING" else HOST,
              "ExitCode": "0:0" if code is None else f"{code}:0" if code < 128 else f"0:{code - 128}"}
    return values[field]


def squeue(arguments: list[str]) -> None:
    form, wanted, header = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R", [], True
    while arguments:
        word = arguments.pop(0)
        name, _, value = word.partition("=")
        if name in ("-o", "--format"):
            form = value or arguments.pop(0)
        elif name in ("-j", "--jobs"):
            wanted.append(value or arguments.pop(0))
        elif word in ("-h", "--noheader"):
            header = False
        elif name in ("-u", "--user", "--me"):
            if not value and word != "--me":
                arguments.pop(0)  # one user runs every job here
        else:
            fail(f"the stand-in squeue does not know {word}")
    with locked() as folder:
        jobs = [job for job in all_jobs(folder)
                if job["state"] in ACTIVE and (not wanted or job["id"] in job_ids(wanted))]
    titles = {"i": "JOBID", "P": "PARTITION", "j": "NAME", "u": "USER", "t": "ST", "T": "STATE", "M": "TIME",
              "D": "NODES", "R": "NODELIST(REASON)"}
    if header:
        print(formatted(form, lambda letter: titles.get(letter, letter)))
    for job in jobs:
        print(formatted(form, lambda letter, job=job: queue_value(job, letter)))


def formatted(form: str, value: Any) -> str:
    def replace(match: re.Match[str]) -> str:
        width, letter = match[1], match[2]
        text = str(value(letter))
        if not width:
            return text
        size = int(width.lstrip("."))
        return text[:size].rjust(size) if width.startswith(".") else text[:size].ljust(size)
    return re.sub(r"%(\.?\d+)?([a-zA-Z])", replace, form)


def queue_value(job: dict[str, Any], letter: str) -> str:
    running = job["state"] == "RUNNING"
    seconds = int(time.time() - job.get("started", time.time())) if running else 0
    values = {"i": job["id"], "P": job["partition"], "j": job["name"], "u": os.environ.get("USER", "user"),
              "t": "R" if running else "PD", "T": job["state"], "M": f"{seconds // 60}:{seconds % 60:02d}",
              "D": "1", "R": HOST if running else "(None)"}
    return values.get(letter, "")


def scancel(arguments: list[str]) -> None:
    sent, ids = None, []
    while arguments:
        word = arguments.pop(0)
        name, _, value = word.partition("=")
        if name in ("-s", "--signal"):
            sent = value or arguments.pop(0)
        elif word.isdigit():
            ids.append(word)
        else:
            fail(f"the stand-in scancel does not know {word}")
    status = 0
    for job_id in ids:
        with locked() as folder:
            job = read_job(folder, job_id)
            if job is None:
                print(f"scancel: error: Invalid job id {job_id}", file=sys.stderr)
                status = 1
            elif job["state"] not in ACTIVE:
                print(f"scancel: error: Kill job error on job id {job_id}: Job/step already completing or "
                      "completed", file=sys.stderr)
                status = 1
            elif sent is not None:
                for pid in job.get("task_pids", []):
                    with suppress(ProcessLookupError):
                        os.kill(pid, getattr(signal, "SIG" + sent.upper().removeprefix("SIG")))
            else:
                job.update(cancelled=time.time(), state="CANCELLED")
                write_job(folder, job)
    sys.exit(status)


COMMANDS = {"sbatch": sbatch, "srun": srun, "sacct": sacct, "squeue": squeue, "scancel": scancel}

if __name__ == "__main__":
    if sys.argv[1] == "_run":
        run_job(sys.argv[2])
    else:
        COMMANDS[sys.argv[1]](sys.argv[2:])
