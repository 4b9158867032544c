"""Real signals at each stage of a release, and a study resumed by another number of workers: one line, a
documented exit status, nothing of the user's lost or left half-made."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import PATIENCE
from tests.tuner.helpers import REPO, STALLED, merged, stored, with_a_feasible_trial, write_study
from tuner.cli import main
from tuner.record import TrialRecord

pytestmark = pytest.mark.fits

ENV = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def wait_until(done: object, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + PATIENCE
    while not done():  # type: ignore[operator]
        assert process.poll() is None, f"the release ended first: {process.communicate()}"
        assert time.monotonic() < deadline
        time.sleep(0.1)


@pytest.mark.parametrize("stage", ["fit", "staged"])
def test_sigterm_during_a_release_is_one_line_exit_130_and_leaves_no_lock_or_staging(tmp_path: Path,
                                                                                     stage: str) -> None:
    """SIGTERM (what `timeout`, Slurm and Kubernetes send) killed `release` with 143, no line and its lock file left;
    now it ends as Ctrl-C does, at the fit and with the model staged alike."""
    study = write_study(tmp_path / "study.toml", merged())
    with_a_feasible_trial(study)
    export = tmp_path / "best.json"
    assert main(["export", str(study), "-o", str(export)]) == 0
    out, ready, lock = tmp_path / "model", tmp_path / "written", tmp_path / ".model.lock"
    stalled = ["swagppm.releases.writer", "record_losses"]  # the audit's losses: the model is staged by then
    process = subprocess.Popen([sys.executable, "-c", STALLED, str(ready), *stalled, "release", "--from", str(export),
                                "-o", str(out), "--force"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    wait_until(ready.exists if stage == "staged" else lock.exists, process)
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=PATIENCE)
    assert process.returncode == 130, err[-800:]
    said = [line for line in err.splitlines() if line.startswith("swagppm-tune")]
    assert said == [f"swagppm-tune: interrupted (SIGTERM): nothing was released to {out} (its lock and staging "
                    "folder are removed; an attempt that had begun its draws is entered in the privacy ledger as "
                    "interrupted)"] and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".model")) == []  # no lock, no staging
    assert not out.exists() and not (tmp_path / "model.owner-report.json").exists()


def test_a_study_begun_with_two_workers_resumes_with_one(tmp_path: Path) -> None:
    """``run --workers 2`` gives each worker half the cores' threads; a later ``run`` (one process, every core) was
    refused after computing stage 1 again ("this worker's stage 1 differs"). It now runs with the thread count the
    study's trials used, and says so."""
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: the two runs use the same thread count")
    cache = tmp_path / "cache"
    study = write_study(tmp_path / "study.toml", merged(
        study={"name": "workers", "storage": "journal:workers.log", "n_trials": 2},
        swagppm={**merged()["swagppm"], "cache_dir": str(cache)}))
    env = {key: value for key, value in ENV.items() if key not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    first = subprocess.run([sys.executable, "-m", "tuner.cli", "run", str(study), "--workers", "2"], env=env,
                           capture_output=True, text=True, timeout=PATIENCE, cwd=REPO)
    assert first.returncode in (0, 1), first.stdout[-800:] + first.stderr[-800:]
    threads = {record.threads for t in stored(study).trials if (record := TrialRecord.of(t)) is not None}
    resumed = subprocess.run([sys.executable, "-m", "tuner.cli", "run", str(study), "--n-trials", "4"], env=env,
                             capture_output=True, text=True, timeout=PATIENCE, cwd=REPO)
    assert resumed.returncode in (0, 1), resumed.stderr[-800:]
    (thread_count,) = threads
    assert f"using {thread_count} CPU thread(s), as the study's earlier trials did" in resumed.stdout
    trials = stored(study).get_trials()
    assert len([t for t in trials if t.state.is_finished()]) >= 4
    assert {record.threads for t in trials if (record := TrialRecord.of(t)) is not None} == threads
