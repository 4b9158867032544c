"""Progress of long steps: one line per stage off a terminal (elapsed time, an estimate), silence with --quiet."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swagppm import progress
from tests.tuner.helpers import STUDY

ROOT = Path(__file__).resolve().parents[2]
LINE = re.compile(r"^(?P<label>.+) (?P<done>\d+)/(?P<total>\d+) \((?P<timing>[^)]*)\)$")


@pytest.fixture(autouse=True)
def unconfigured() -> None:
    """Each test starts from the library's default (shown on a terminal only)."""
    progress.configure(None)
    yield
    progress.configure(None)


def test_lines_state_elapsed_time_and_an_estimate(monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(progress, "LINE_INTERVAL", 0.0)  # every unit gets its line
    monkeypatch.setattr(progress, "LINE_SHARE", 0.0)
    assert list(progress.steps(range(3), label="stage1: risk draws", total=3, progress=True)) == [0, 1, 2]
    lines = capsys.readouterr().err.splitlines()
    assert [LINE.match(line)["done"] for line in lines] == ["1", "2", "3"]  # type: ignore[index]
    assert re.fullmatch(r"stage1: risk draws 1/3 \(\d+\.\d s elapsed, about \d+\.\d s left\)", lines[0])
    assert re.fullmatch(r"stage1: risk draws 3/3 \(\d+\.\d s, done\)", lines[2])


def test_lines_are_spaced_by_the_interval_or_a_share_of_the_elapsed_time(monkeypatch: pytest.MonkeyPatch,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """A clock that moves 10 s a unit: lines every unit at first, then every LINE_SHARE of the elapsed time."""
    clock = iter(range(0, 100_000, 10))
    monkeypatch.setattr(progress.time, "perf_counter", lambda: float(next(clock)))
    list(progress.steps(range(1000), label="draws", total=1000, progress=True))
    done = [int(LINE.match(line)["done"]) for line in capsys.readouterr().err.splitlines()]  # type: ignore[index]
    assert done[:5] == [1, 2, 3, 4, 5] and done[-1] == 1000
    assert len(done) < 150  # 1000 units over 10 000 s: spaced out to a few per cent of the elapsed time
    gaps = [b - a for a, b in zip(done, done[1:])]
    assert max(gaps[:-1]) <= 0.06 * 1000 and gaps[-2] >= 40


def test_a_stage_shows_its_last_line_even_between_intervals(capsys: pytest.CaptureFixture[str]) -> None:
    """With the default interval a fast stage shows one line: its end."""
    list(progress.steps(range(50), label="stage2: privacy draws", total=50, progress=True))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("stage2: privacy draws 50/50 (") and lines[0].endswith(", done)")


def test_a_stage_stopped_early_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    for draw in progress.steps(range(60), label="stage2: privacy draws", total=60, progress=True):
        if draw == 3:
            break
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("stage2: privacy draws 4/60 (")
    assert lines[0].endswith(", stopped early)")


def test_progress_false_none_and_configure(capsys: pytest.CaptureFixture[str]) -> None:
    """False hides; None follows ``configure`` and else shows only on a terminal (captured stderr is none)."""
    for setting, configured, shown in ((False, None, False), (None, None, False), (None, True, True),
                                       (True, False, True), (None, False, False)):
        progress.configure(configured)
        list(progress.steps(range(2), label="x", total=2, progress=setting))
        assert bool(capsys.readouterr().err) is shown, (setting, configured)
    assert progress.mode(True) == "lines" and progress.mode(False) == "off"


def test_durations_read_as_a_person_would_say_them() -> None:
    assert [progress.duration(s) for s in (0.44, 41.2, 185, 3725)] == ["0.4 s", "41 s", "3 min 05 s", "1 h 02 min"]


def test_a_registered_reporter_is_used_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, int]] = []

    class Recorder:
        def __init__(self, *, label: str, total: int) -> None:
            self.label = label

        def advance(self, done: int) -> None:
            seen.append((self.label, done))

        def close(self) -> None:
            seen.append((self.label, -1))

    monkeypatch.setitem(progress.REPORTERS, "lines", progress.REPORTERS["lines"])
    progress.register_reporter("lines", Recorder)
    list(progress.steps("ab", label="draws", total=2, progress=True))
    assert seen == [("draws", 1), ("draws", 2), ("draws", -1)]


def _fit(tmp_path: Path, *extra: str, study_text: str = STUDY) -> subprocess.CompletedProcess[str]:
    study = tmp_path / "study.toml"
    study.write_text(study_text)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "tuner.cli", "fit", str(study), "--c", "0.7", "--ft-epochs", "2",
                           *extra], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900)


@pytest.mark.fits
def test_the_command_line_reports_every_stage_of_a_fit_off_a_terminal(tmp_path: Path) -> None:
    """Real ``swagppm-tune fit --release`` with stderr a pipe: each stage, the release's audit included, ends with a
    ``done`` line; --quiet prints none."""
    done = _fit(tmp_path, "--release", str(tmp_path / "released"), "--force")
    assert done.returncode == 0, done.stderr[-800:]
    ends = {m["label"]: (int(m["done"]), int(m["total"])) for line in done.stderr.splitlines()
            if (m := LINE.match(line)) and m["timing"].endswith("done")}
    audits = {label: ends.pop(label)[0] for label in list(ends) if label.startswith("audit of ")}
    assert ends == {"stage1: fine-tune epoch": (4, 4), "stage1: SWAG epoch": (3, 3), "stage1: risk draws": (4, 4),
                    "stage2: fine-tune epoch": (2, 2), "stage2: SWAG epoch": (3, 3),
                    "stage2: privacy draws": (8, 8), "stage2: utility draws": (3, 3)}
    assert sorted(audits) == [f"audit of the {model}: {split} records' losses"
                              for model in ("non-private baseline", "released draw") for split in ("test", "training")]
    assert min(audits.values()) >= 1  # batches of each split, each stage to its end
    assert "eps=" in done.stdout and "stage1:" not in done.stdout  # progress on stderr, the result on stdout
    quiet = _fit(tmp_path, "--quiet")
    assert quiet.returncode == 0 and "eps=" in quiet.stdout
    assert not [line for line in quiet.stderr.splitlines() if LINE.match(line)], quiet.stderr[-800:]


@pytest.mark.fits
def test_encoding_the_records_through_the_frozen_layers_reports_its_progress(tmp_path: Path) -> None:
    """A head-only study encodes every record once through the frozen encoder before stage 1 (minutes on the OSHA
    sample, which printed nothing): each split is a stage with its batches, and a second fit reads the cache."""
    head_only = STUDY.replace("[model]\n", "[model]\ntrainable = \"head\"\n")
    assert head_only != STUDY
    first = _fit(tmp_path, study_text=head_only)
    assert first.returncode == 0, first.stderr[-800:]
    ends = {m["label"]: (int(m["done"]), int(m["total"])) for line in first.stderr.splitlines()
            if (m := LINE.match(line)) and m["timing"].endswith("done")}
    encoded = {label: done for label, done in ends.items() if label.startswith("encoding the ")}
    assert sorted(encoded) == [f"encoding the {split} records through the frozen layers (once, then cached)"
                               for split in ("test", "train")]
    assert all(done == total and done >= 1 for done, total in encoded.values())
    again = _fit(tmp_path, study_text=head_only)
    assert again.returncode == 0 and "encoding the " not in again.stderr  # read from the private cache


@pytest.mark.slow
def test_the_trial_legend_comes_once_before_the_first_trial_line(tmp_path: Path) -> None:
    import types

    import optuna

    from tests.tuner.helpers import SMALL_STUDY, write_study
    from tuner.config import StudyConfig
    from tuner.outcome import TRIAL_LEGEND
    from tuner.study import AfterTrial

    config = StudyConfig.from_toml(write_study(tmp_path / "s.toml", SMALL_STUDY))
    study = optuna.create_study(storage=config.storage_url, study_name=config.study.name)
    study.optimize(lambda trial: trial.suggest_float("c", 0.1, 1.0), n_trials=2)
    printed: list[str] = []
    objective = types.SimpleNamespace(lines={0: "first line", 1: "second line"})
    after = AfterTrial(config, objective, stop_rule=None, echo=printed.append)  # type: ignore[arg-type]
    for trial in study.trials:
        after(study, trial)
    assert printed == [TRIAL_LEGEND, "trial   0  first line", "trial   1  second line"]
    assert "an estimate from this trial's finitely many privacy draws,\n                  not a bound" in TRIAL_LEGEND
    assert "eps<= (proven)" in TRIAL_LEGEND and "swagppm-tune explain WORD" in TRIAL_LEGEND
