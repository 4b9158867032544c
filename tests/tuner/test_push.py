"""``release --push-to-hub REPO``: the name and a token are checked before any fit; the push comes after the commit,
carries exactly the release folder's files, and a failed push (here: offline) is one line and exit 8 with the
release committed. ``--standard-class`` saves a mean-pooled head as the standard class."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from swagppm.releases.staging import owner_report_path
from tests import PATIENCE
from tests.tuner.helpers import one_error_line, with_a_feasible_trial
from tuner.cli import EXIT_BAD_INPUT, EXIT_PUSH_FAILED, main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("flags, named", [
    (["--push-to-hub", "no-owner"], "--push-to-hub 'no-owner': name the owner too"),
    (["--public-repo"], "--public-repo needs --push-to-hub OWNER/NAME"),
])
def test_push_flags_are_refused_before_the_study_is_opened(flags: list[str], named: str, tmp_path: Path,
                                                           study_file: Callable[..., Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()  # never run: opening its study would fail on another line
    assert main(["release", str(path), "-o", str(tmp_path / "out"), "--force", *flags]) == EXIT_BAD_INPUT
    assert named in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.fits
def test_an_offline_push_is_one_line_and_exit_8_after_the_release_is_committed(
        study_file: Callable[..., Path], tmp_path: Path) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    out = tmp_path / "released"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "HF_TOKEN": "hf_not_a_real_token",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "release", str(path), "-o", str(out), "--force",
                           "--push-to-hub", "me/swagppm-release", "-q"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=PATIENCE)
    assert done.returncode == EXIT_PUSH_FAILED, done.stderr[-2000:]
    line = one_error_line("\n".join(line for line in done.stderr.splitlines() if "swagppm-tune" in line))
    assert f"the release is committed at {out}, but pushing it to me/swagppm-release failed" in line
    assert "Traceback" not in done.stderr and "hf upload me/swagppm-release" in line
    files = sorted(p.name for p in out.iterdir())
    assert "release_card.json" in files and "model.safetensors" in files
    planned = next(line for line in done.stdout.splitlines() if line.startswith("pushing "))
    assert planned == (f"pushing {len(files)} files to the private Hub repository me/swagppm-release: "
                       f"{', '.join(files)}")
    assert owner_report_path(out).is_file() and owner_report_path(out).name not in planned


@pytest.mark.fits
def test_standard_class_saves_a_mean_pooled_release_as_the_standard_class(study_file: Callable[..., Path],
                                                                          tmp_path: Path) -> None:
    path = study_file()  # the tiny preset: mean pooling
    out, pooled = tmp_path / "standard", tmp_path / "pooled"
    assert main(["fit", str(path), "--c", "1", "--ft-epochs", "1", "--release", str(out), "--force",
                 "--standard-class", "-q"]) == 0
    assert main(["fit", str(path), "--c", "1", "--ft-epochs", "1", "--release", str(pooled), "--force", "-q"]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertForSequenceClassification"]
    assert "trust_remote_code" not in (out / "README.md").read_text() and not (out / "pooled.py").exists()
    assert json.loads((pooled / "config.json").read_text())["architectures"] == ["PooledClassifier"]
