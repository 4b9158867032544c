"""Helpers the tuner tests share: small study files, made-up fit results, studies with a judged trial, error lines;
and, for the tests on the local servers (their fixtures are in conftest.py), their URLs, small studies in them and
CLI subprocesses read line by line."""

from __future__ import annotations

import json
import math
import os
import queue
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import pytest
from optuna.trial import FrozenTrial, TrialState, create_trial

from swagppm import SWAGPPMResult
from swagppm.provenance import keyed_fingerprint
from tests import PATIENCE
from tuner import StudyConfig
from tuner.executors.cluster import jobs_folder
from tuner.objective import Objective, record_outcome
from tuner.outcome import judge
from tuner.record import TrialRecord, constraint_attrs
from tuner.study import enter_in_ledger, open_storage, open_study

# A tiny model on a small synthetic corpus: stage 1 and each trial take seconds on a CPU.
SMALL_STUDY: dict[str, dict[str, Any]] = {
    "study": {"name": "small", "n_trials": 3},
    "search": {"c_min": 0.3, "c_max": 1.2, "ft_epochs_min": 4, "ft_epochs_max": 8, "restart_epochs": 6,
               "start": [{"c": 1.0, "ft_epochs": 6}]},
    "targets": {"epsilon_cap": 50.0, "stuck_epochs": 20, "max_f1_degradation": 0.5, "max_bulk_spread": 10.0},
    "data": {"source": "synthetic", "synthetic_size": 240, "synthetic_classes": 4},
    "model": {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1, "tiny_vocab_size": 400},
    "swagppm": {"stage1_epochs": 6, "swag_epochs": 4, "swag_rank": 4, "draws_risk": 6, "draws_privacy": 12,
                "draws_utility": 4, "device": "cpu", "cache_dir": "cache"},
}


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # strings, numbers and booleans read the same in TOML


def write_study(path: Path, tables: Mapping[str, Mapping[str, Any]]) -> Path:
    """Write ``tables`` as a study TOML file."""
    lines = []
    for table, values in tables.items():
        lines.append(f"[{table}]")
        lines += [f"{key} = {_toml_value(value)}" for key, value in values.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def merged(**changes: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``SMALL_STUDY`` with some keys of some tables changed (``None`` removes a key)."""
    tables = {name: dict(values) for name, values in SMALL_STUDY.items()}
    for table, values in changes.items():
        tables.setdefault(table, {})
        for key, value in values.items():
            if value is None:
                tables[table].pop(key, None)
            else:
                tables[table][key] = value
    return tables


def result(series: list[float], *, c: float = 1.0, epochs: int = 7, f1: float = 0.80,
           **fields: object) -> SWAGPPMResult:
    """A fit's public outcome with a given max-delta series and F1 draws around ``f1``."""
    rng = np.random.default_rng(0)
    values: dict[str, object] = dict(
        c=c, g=0.0, ft_epochs=epochs, seed=0, epsilon=2 * max(series) if series else math.inf, max_delta=series,
        f1_macro=list(f1 + 0.005 * rng.standard_normal(30)),
        f1_weighted=list(f1 + 0.05 + 0.005 * rng.standard_normal(30)),
        baseline_f1_macro=0.82, baseline_f1_weighted=0.87, majority_rate=0.3, timings={"total": 12.5},
    )
    values.update(fields)
    return SWAGPPMResult(**values)  # type: ignore[arg-type]


def tight(median: float = 3.0, n: int = 500, seed: int = 1) -> list[float]:
    """A well-fit series: a tight Gaussian band (IQR/median ≈ 1.3%)."""
    return list(median * (1 + 0.01 * np.random.default_rng(seed).standard_normal(n)))


# A tiny model a command-line fit finishes in seconds (the fits and progress tests run it).
STUDY = """
[study]
name = "t"
[data]
source = "synthetic"
synthetic_size = 240
synthetic_classes = 4
[model]
name_or_path = "tiny"
tiny_hidden_size = 32
tiny_layers = 1
[swagppm]
stage1_epochs = 4
swag_epochs = 3
draws_risk = 4
draws_privacy = 8
draws_utility = 3
device = "cpu"
cache_dir = "cache"
"""


class MadeUpRecords:
    """What a session offers the privacy ledger, for a study whose records are never read: a keyed fingerprint of a
    made-up digest."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def records_fingerprint(self, key: bytes) -> str:
        return keyed_fingerprint(key, self.digest)


def with_a_feasible_trial(path: Path, *, storage: str | None = None, **fields: object) -> optuna.Study:
    """The study of ``path`` with one finished, feasible trial judged from a made-up result (no fit), entered in its
    data set's ledger as its stage 1 would have entered it."""
    config = StudyConfig.from_toml(path)
    config = config if storage is None else config.with_storage(storage)
    storage = open_storage(config)
    study = open_study(config, storage=storage)
    enter_in_ledger(study, MadeUpRecords(str(path)), config)
    Objective(config, storage=storage).close()  # as a run does: its artifact folder made, owner-only
    trial = study.ask()
    params = config.search.suggest(trial)
    outcome = judge(result(tight(), c=params.c, epochs=params.ft_epochs, **fields), targets=config.targets,
                    search=config.search)
    assert outcome.feasible
    record_outcome(trial, outcome, storage=storage)
    study.tell(trial, outcome.objective_values("epsilon"))
    return study


def a_study_on_a_data_file(study_file: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A study whose records are a JSONL file beside it, with its SQLite storage made; (study file, data file)."""
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps({"text": f"record {i}", "label": i % 2}) + "\n" for i in range(8)))
    path = study_file(data={"source": "records.jsonl", "synthetic_size": None, "synthetic_classes": None})
    with_a_feasible_trial(path)
    return path, data


def a_folder_no_one_may_write(tmp_path: Path) -> Path:
    """A real folder this process cannot write: chmod 555, or, for root (whom modes do not stop), sysfs."""
    if os.geteuid() != 0:
        folder = tmp_path / "read-only"
        folder.mkdir()
        folder.chmod(0o555)
        return folder
    folder = Path("/sys")
    try:
        (folder / "swagppm-probe").open("a").close()
    except OSError:
        return folder
    pytest.skip("no folder here refuses this user's writes")


def one_error_line(err: str) -> str:
    """The one line a refusal prints on standard error (no traceback), checked to be one."""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


# --- the local servers ---------------------------------------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]
PG_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/test"
MARIADB_URL = "mysql+pymysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/0"
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def unreachable(host: str, port: int) -> str | None:
    """Why ``host:port`` takes no connection, or None when it does."""
    try:
        socket.create_connection((host, port), timeout=2).close()
        return None
    except OSError as error:
        return f"{host}:{port} not reachable ({error})"


def distributed_study(folder: Path, cache: Path, storage: str, **changes: Any) -> Path:
    """The small study with a unique name in ``storage``, fast heartbeats, short retries."""
    study = {"name": f"t-{uuid.uuid4().hex[:10]}", "storage": storage, "heartbeat_interval": 1, "grace_period": 2,
             "reconnect_attempts": 2, "reconnect_wait": 0.5, **changes.pop("study", {})}
    swag = {**merged()["swagppm"], "cache_dir": str(cache), **changes.pop("swagppm", {})}
    return write_study(folder / "study.toml", merged(study=study, swagppm=swag, **changes))


def run_cli(*args: str, env: dict[str, str] | None = None,
            timeout: float = PATIENCE) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tuner.cli", *args], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def stored(path: Path) -> optuna.Study:
    return open_study(StudyConfig.from_toml(path), create=False)


def delete_studies(paths: list[Path]) -> None:
    """Delete the studies of these study files from their storages (best effort: names are unique anyway)."""
    for path in paths:
        try:
            optuna.delete_study(study_name=StudyConfig.from_toml(path).study.name, storage=stored(path)._storage)
        except Exception:  # noqa: BLE001 - a study never created, or a server gone
            pass


class CliProcess:
    """``swagppm-tune ARGS`` as a real subprocess whose output is read line by line as it comes."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "tuner.cli", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, cwd=REPO,
                                        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})})
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._queue.put(line)
        self._queue.put(None)

    def until(self, marker: str, *, timeout: float = PATIENCE) -> str:
        """Wait for a line holding ``marker``; it fails with the whole output if the process ends first."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._queue.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.lines.append(line)
            if marker in line:
                return line
        raise AssertionError(f"no line with {marker!r} (exit status {self.process.poll()}):\n{self.output}")

    def finish(self, *, timeout: float = PATIENCE) -> int:
        """Wait for the process to exit and for all of its output; its exit status."""
        code = self.process.wait(timeout=timeout)
        while (line := self._queue.get(timeout=timeout)) is not None:
            self.lines.append(line)
        return code

    @property
    def output(self) -> str:
        return "".join(self.lines)


def wait_for(study: optuna.Study, ready: Callable[[list[FrozenTrial]], list[FrozenTrial]], *, alive: CliProcess,
             timeout: float = PATIENCE) -> list[FrozenTrial]:
    """Poll the study (one storage, opened once) until ``ready`` of its trials is not empty; it fails with the
    process's output if the process ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = ready(study.get_trials(deepcopy=False))
        if found:
            return found
        if alive.process.poll() is not None:
            break
        time.sleep(0.3)
    alive.finish(timeout=60)
    raise AssertionError(f"the awaited trials never came (exit status {alive.process.poll()}):\n{alive.output}")


def running_with_worker(trials: list[FrozenTrial]) -> list[FrozenTrial]:
    """The running trials whose worker process has said who it is (``worker`` = host:pid)."""
    return [t for t in trials if t.state == TrialState.RUNNING and "worker" in t.user_attrs]


def requeued(study: optuna.Study, trial: FrozenTrial) -> list[FrozenTrial]:
    """The trials that re-run ``trial``'s parameters after it failed."""
    return [t for t in study.get_trials() if t.system_attrs.get("failed_trial") == trial.number]


def jobs_table(path: Path, *flags: str) -> tuple[str, dict[str, str]]:
    """``swagppm-tune jobs PATH FLAGS``: its output and each launched job's state by id."""
    done = run_cli("jobs", str(path), *flags)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split(None, 4) for line in done.stdout.splitlines()[1:] if line.strip()[:1].isdigit()]
    return done.stdout, {row[0]: row[4] for row in rows}


def job_processes(path: Path) -> list[int]:
    """The processes still running for the study's jobs folder: local controllers and the jobs' tasks."""
    folder = str(jobs_folder(StudyConfig.from_toml(path)))
    found = []
    for entry in Path("/proc").iterdir():
        try:
            words = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if folder in words and state != "Z" and any("submitit" in word for word in words):
            found.append(int(entry.name))
    return found


def synthetic_trial(number: int, *, epsilon: float, f1: float, constraints: dict[str, float],
                    state: TrialState = TrialState.COMPLETE,
                    unmeasured: tuple[str, ...] = ()) -> optuna.trial.FrozenTrial:
    return create_trial(
        state=state, value=epsilon if state == TrialState.COMPLETE else None,
        params={"c": 1.0 - 0.1 * number, "ft_epochs": 7},
        distributions={"c": optuna.distributions.FloatDistribution(0.1, 1.5),
                       "ft_epochs": optuna.distributions.IntDistribution(1, 16)},
        user_attrs=TrialRecord(
            feasible=all(v <= 0 for v in constraints.values()), diagnosis="well_fit", reasons=(), recommendation="",
            next_action="stop", next_c=None, next_ft_epochs=None, epsilon=epsilon, epsilon_is_lower_bound=False,
            draws_privacy=8, draws_skipped=0, failure=None, max_delta_median=None, bulk_spread=None,
            max_robust_z=None, spike_count=0, baseline_f1_macro=f1, baseline_f1_weighted=f1, f1_macro_median=f1,
            f1_macro_q10=f1, f1_weighted_median=f1, f1_weighted_q10=f1, stage1_cache_hit=True, data_hash="",
            seed=0, device="cpu", constraints=constraints, unmeasured=unmeasured).attrs(),
        system_attrs=constraint_attrs(constraints),
    )


# Runs the command line with one function stalled (module and name after the ready file): at the audit's per-record
# losses the draw is made and written in the staging folder; at stage 2's fit nothing is drawn yet. The test signals
# the process at that point (it says so by creating the ready file).
STALLED = """
import importlib, pathlib, sys, time
def stalled(*args, **kwargs):
    pathlib.Path(sys.argv[1]).touch()
    while True:
        time.sleep(1)
setattr(importlib.import_module(sys.argv[2]), sys.argv[3], stalled)
from tuner.cli import main
sys.exit(main(sys.argv[4:]))
"""


# --- the stand-in Slurm (tests/tuner/slurm_standin/slurm.py; the ``slurm`` fixture puts it on PATH) ------------

SLURM_STANDIN = Path(__file__).parent / "slurm_standin" / "slurm.py"
SLURM_COMMANDS = ("sbatch", "srun", "sacct", "squeue", "scancel")
KILL_WAIT = 20  # seconds from the stand-in scancel's SIGTERM to its SIGKILL (Slurm's KillWait)


def slurm_jobs(state: Path) -> list[dict[str, Any]]:
    """The stand-in's record of every job submitted to it, in submission order."""
    return sorted((json.loads(path.read_text()) for path in state.glob("[0-9]*.json")), key=lambda job: job["id"])


def slurm_ended(state: Path) -> list[dict[str, Any]]:
    """Every job, once each is over and its processes are gone (``ended``): a job's tasks write their results before
    they exit, so a launcher can be done before its job is; a cancelled job is CANCELLED at once, before its
    processes end."""
    def over(job: dict[str, Any]) -> bool:
        return job["state"] not in ("PENDING", "RUNNING") and (job["pgid"] is None or "ended" in job)

    deadline = time.monotonic() + PATIENCE
    while not all(over(job) for job in slurm_jobs(state)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return slurm_jobs(state)


def slurm_job_alive(job: dict[str, Any]) -> bool:
    """Whether a process of the job is left (in its process group), or the job has not started yet."""
    if job["state"] == "PENDING":
        return True
    try:
        os.killpg(job["pgid"], 0)
    except ProcessLookupError:
        return False
    return True
