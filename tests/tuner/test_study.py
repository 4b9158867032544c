"""Whole studies on SQLite with real tiny-model fits: run, status, export → refit, release, report, resume."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.artifacts import get_all_artifact_meta
from optuna.trial import TrialState

import scorers
import swagppm
from tests import PATIENCE
from tests.tuner.helpers import merged, write_study
from tuner import StudyConfig, best_feasible, open_study
from tuner.cli import main
from tuner.record import CONSTRAINT_KEYS, named_constraints

pytestmark = pytest.mark.fits

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def shared_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One private cache for the module: every study here shares the same stage 1."""
    return tmp_path_factory.mktemp("cache")


def study_at(folder: Path, shared_cache: Path, name: str = "small", **changes: dict[str, Any]) -> Path:
    swag = {**merged()["swagppm"], "cache_dir": str(shared_cache)}
    tables = merged(**{"swagppm": swag, **changes})
    tables["study"]["name"] = name
    return write_study(folder / f"{name}.toml", tables)


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory, shared_cache: Path) -> tuple[Path, str]:
    """A three-trial study run through the command line; its file and the run's output."""
    folder = tmp_path_factory.mktemp("finished")
    path = study_at(folder, shared_cache)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["run", str(path)])
    assert code == 0, out.getvalue()
    return path, out.getvalue()


def load(path: Path) -> tuple[StudyConfig, optuna.Study]:
    config = StudyConfig.from_toml(path)
    return config, open_study(config, create=False)


def test_run_prints_one_line_per_trial_and_the_best(finished: tuple[Path, str]) -> None:
    _, output = finished
    lines = [line for line in output.splitlines() if line.startswith("trial ")]
    assert len(lines) == 3
    assert lines[0].startswith("trial   0  c=1.000 epochs= 6  eps=")  # the enqueued start point first
    assert lines[1].startswith("trial   1  c=0.750 epochs= 8  eps=")  # then the probe: mid c, most epochs
    assert all("F1 macro" in line and ("FEASIBLE" in line or "infeasible" in line) for line in lines)
    assert "non-private baseline F1 macro" in output and "best feasible: trial" in output


def test_trials_carry_constraints_attributes_notes_and_figures(finished: tuple[Path, str]) -> None:
    config, study = load(finished[0])
    trials = study.get_trials(states=(TrialState.COMPLETE,))
    pruned = study.get_trials(states=(TrialState.PRUNED,))
    assert len(study.trials) == 3 and len(trials) + len(pruned) == 3
    # the third proposal's fit is catastrophic on some CPUs: then it, and only it, is pruned as such
    assert [(t.number, t.user_attrs["diagnosis"]) for t in pruned] in ([], [(2, "catastrophic")])
    for trial in trials:
        assert tuple(named_constraints(trial)) == CONSTRAINT_KEYS  # GPSampler needs the same keys
        assert trial.system_attrs["constraints"] == list(named_constraints(trial).values())  # as the dashboard reads
        attrs = trial.user_attrs
        assert {f"constraint_{k}" for k in CONSTRAINT_KEYS} <= set(attrs)  # the dashboard shows user attributes
        assert attrs["epsilon"] == pytest.approx(2 * max(attrs["max_delta_series"]))
        assert attrs["stage1_fingerprint"] == study.user_attrs["stage1_fingerprint"]  # one stage 1 for all
        assert attrs["diagnosis"] in ("underfit", "well_fit", "overfit") and attrs["reasons"]
        assert set(attrs["timings"]) >= {"finetune", "swag", "privacy", "utility", "total"}
        note = optuna_dashboard_note(study, trial)
        assert f"Trial {trial.number}" in note and attrs["recommendation"] in note
        metas = get_all_artifact_meta(trial, storage=study._storage)
        assert [(m.filename, m.mimetype) for m in metas] == [(f"trial-{trial.number}-figures.svg", "image/svg+xml")]
        size = (config.artifact_dir / metas[0].artifact_id).stat().st_size
        assert 1_000 < size < 200_000  # an SVG picture of the figures, which the dashboard renders
    system = study._storage.get_study_system_attrs(study._study_id)
    assert any(key.startswith("dashboard:plot_data:search-grid") for key in system)
    assert any(key.startswith("dashboard:plot_data:tradeoff") for key in system)


def optuna_dashboard_note(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> str:
    import optuna_dashboard
    return optuna_dashboard.get_note(optuna.Trial(study, trial._trial_id))


def test_status_export_refit_and_report(finished: tuple[Path, str], tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = finished[0]
    capsys.readouterr()
    assert main(["status", str(path)]) == 0
    status = capsys.readouterr().out
    assert "best feasible: trial" in status
    assert re.search(r"3 trials run: (3 complete|2 complete, 1 pruned)", status)  # the third fit may be catastrophic

    exported = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(exported)]) == 0
    document = json.loads(exported.read_text())
    config, study = load(path)
    best = best_feasible(study)
    assert best is not None and document["trial"] == best.number and document["feasible"]
    assert document["params"] == {"c": best.params["c"], "ft_epochs": best.params["ft_epochs"], "g": 0.0}
    assert document["metrics"]["epsilon"] == best.user_attrs["epsilon"]
    assert document["swagppm"] == config.fit.to_dict()
    assert document["trials_run"]["total"] == 3 and document["data_hash"] == best.user_attrs["data_hash"]
    assert document["seeds"] == {"fit": 0, "sampler": 0} and "optuna" in document["versions"]
    assert any("is an estimate" in caveat for caveat in document["caveats"])
    assert all(v <= 0 for v in document["constraints"].values()) and document["violated"] == {}
    assert document["not_measured"] == []

    assert main(["fit", "--from", str(exported), "--json", str(tmp_path / "refit.json")]) == 0
    assert "reproduces the export exactly" in capsys.readouterr().out
    assert json.loads((tmp_path / "refit.json").read_text())["epsilon"] == document["metrics"]["epsilon"]

    report = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(report)]) == 0
    html = report.read_text()
    assert "Search grid" in html and "Privacy–utility trade-off" in html and "Caveats" in html
    assert html.count("<details") == 3 and "plotly" in html.lower()
    assert f"Chosen configuration:</b> trial {best.number}" in html


def test_release_from_the_study_or_an_export(finished: tuple[Path, str], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = finished[0]
    assert main(["release", str(path), "-o", str(tmp_path / "refused")]) == 2  # tiny tokenizer: demos only
    assert "tokenizer" in capsys.readouterr().err
    assert main(["release", str(path), "-o", str(tmp_path / "model"), "--force"]) == 0
    assert json.loads((tmp_path / "model.owner-report.json").read_text())["trials_run"] == 3  # owner-only
    assert main(["release", "-o", str(tmp_path / "x")]) == 2  # neither a study nor --from
    assert "give a study TOML file or --from" in capsys.readouterr().err


def test_rerunning_a_finished_study_adds_nothing(finished: tuple[Path, str],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(finished[0])]) == 0
    assert "already has 3 finished trials" in capsys.readouterr().out
    assert len(load(finished[0])[1].trials) == 3


def test_no_training_text_lands_in_the_database_artifacts_export_or_report(
    finished: tuple[Path, str], tmp_path: Path
) -> None:
    path = finished[0]
    config, _ = load(path)
    data = swagppm.prepare_data(config.fit.data, seed=config.fit.seed)
    main(["export", str(path), "-o", str(tmp_path / "best.json")])
    main(["report", str(path), "-o", str(tmp_path / "report.html")])
    blobs = [path.with_suffix(".db").read_bytes(), (tmp_path / "best.json").read_bytes(),
             (tmp_path / "report.html").read_bytes()]
    blobs += [f.read_bytes() for f in config.artifact_dir.iterdir()]
    for text in data.train_texts + data.test_texts:
        needle = text.encode()
        assert not any(needle in blob for blob in blobs), f"a record's text was stored: {text[:40]!r}"


def test_epsilon_early_stop_completes_with_a_lower_bound(tmp_path: Path, shared_cache: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = study_at(tmp_path, shared_cache, name="strict", study={"n_trials": 2}, targets={"epsilon_cap": 0.05})
    assert main(["run", str(path)]) == 1  # nothing feasible: non-zero exit and the closest trial
    output = capsys.readouterr().out
    assert "no feasible trial; closest: trial" in output and "violates: epsilon +" in output
    assert "; not measured: f1_macro, f1_weighted, fit_spread, fit_spikes" in output
    _, study = load(path)
    for trial in study.trials:
        assert trial.state == TrialState.COMPLETE
        attrs = trial.user_attrs
        assert attrs["epsilon_is_lower_bound"] and attrs["diagnosis"] == "not_judged"
        assert attrs["draws_privacy"] + attrs["draws_skipped"] == 12 and attrs["draws_skipped"] > 0
        assert attrs["f1_macro_median"] is None and "utility" not in attrs["timings"]
        assert named_constraints(trial)["epsilon"] > 0
        assert trial.value == attrs["epsilon"]
    assert main(["export", str(path), "-o", str(tmp_path / "none.json")]) == 1
    assert not (tmp_path / "none.json").exists()
    assert "nothing exported" in capsys.readouterr().err


def test_a_fit_stuck_at_the_majority_class_is_pruned_cheaply(tmp_path: Path, shared_cache: Path) -> None:
    path = study_at(tmp_path, shared_cache, name="stuck", study={"n_trials": 1},
                    targets={"stuck_epochs": 1, "epsilon_cap": 50.0})
    assert main(["run", str(path)]) == 1
    _, study = load(path)
    (trial,) = study.trials
    assert trial.state == TrialState.PRUNED
    assert trial.user_attrs["diagnosis"] == "catastrophic"
    assert "training stuck at the majority-class rate" in trial.user_attrs["failure"]
    assert named_constraints(trial) == dict.fromkeys(CONSTRAINT_KEYS, scorers.CONSTRAINT_CAP)
    assert trial.user_attrs["timings"]["total"] < 10 and "privacy" not in trial.user_attrs["timings"]


def test_a_changed_definition_is_refused(finished: tuple[Path, str], tmp_path: Path, shared_cache: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    config = StudyConfig.from_toml(finished[0])
    changed = study_at(tmp_path, shared_cache, study={"storage": config.storage_url}, targets={"epsilon_cap": 40.0})
    assert main(["run", str(changed)]) == 2
    err = capsys.readouterr().err
    assert "[targets] epsilon_cap changed" in err and "use a new [study] name" in err and "Traceback" not in err
    moved = study_at(tmp_path, shared_cache, study={"storage": config.storage_url},
                     search={"start": [{"c": 0.9, "ft_epochs": 5}], "probe": False})
    open_study(StudyConfig.from_toml(moved))  # where a study starts is not part of its definition


def test_a_worker_with_another_stage_1_is_refused(tmp_path: Path, shared_cache: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = study_at(tmp_path, shared_cache, name="elsewhere")
    study = open_study(StudyConfig.from_toml(path))
    study.set_user_attr("stage1_fingerprint", "0123456789abcdef")  # as if another CPU had run its first trials
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "stage 1 differs from the one the study's earlier trials used" in err and "0123456789abcdef" in err
    assert "cache_dir and thread count" in err and not study.get_trials()  # refused before any trial


def test_pareto_objective(tmp_path: Path, shared_cache: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_at(tmp_path, shared_cache, name="pareto", study={"n_trials": 2, "objective": "pareto",
                                                                 "sampler": "nsga2"})
    assert main(["run", str(path)]) == 0
    _, study = load(path)
    assert len(study.directions) == 2 and all(len(t.values) == 2 for t in study.trials)
    assert all(t.values[1] == t.user_attrs["f1_macro_median"] for t in study.trials)
    assert main(["status", str(path)]) == 0
    assert "feasible Pareto front: #" in capsys.readouterr().out


def test_an_interrupted_run_keeps_finished_trials_and_resumes(tmp_path: Path, shared_cache: Path) -> None:
    """Ctrl-C (SIGINT) in the second trial: the first stays complete, the second is failed and queued again with its
    parameters, and a re-run evaluates that point."""
    path = study_at(tmp_path, shared_cache, name="interrupted", study={"n_trials": 2},
                    swagppm={**merged()["swagppm"], "cache_dir": str(shared_cache), "draws_privacy": 400})
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "tuner.cli", "run", str(path)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=REPO)
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith("trial   0"):
            break
    time.sleep(1.0)  # into trial 1 (400 privacy draws take a few seconds)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=PATIENCE)
    assert process.returncode == 130, err
    assert "interrupted" in err and "1 finished trials are kept" in err and "Traceback" not in err
    _, study = load(path)
    first, failed, queued = study.trials
    assert (first.state, failed.state, queued.state) == (TrialState.COMPLETE, TrialState.FAIL, TrialState.WAITING)
    assert queued.system_attrs["fixed_params"] == failed.params  # the point is not lost

    assert main(["run", str(path)]) == 0
    _, study = load(path)
    assert [t.state for t in study.trials] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE]
    assert study.trials[0].user_attrs == first.user_attrs and study.trials[0].params == first.params
    assert study.trials[2].params == failed.params


def test_study_files_in_the_repository_run_from_any_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    config = StudyConfig.from_toml(REPO / "studies" / "demo.toml")
    assert config.storage_url == f"sqlite:///{REPO / 'studies' / 'demo.db'}"
    assert Path(config.fit.cache_dir or "").parent == REPO / "studies"


def test_the_flowchart_stops_at_its_first_feasible_fit(tmp_path: Path, shared_cache: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = study_at(tmp_path, shared_cache, name="guide", study={"n_trials": 5, "sampler": "flowchart"},
                    targets={"spike_z": 1000.0})
    assert main(["run", str(path)]) == 0
    output = capsys.readouterr().out
    assert "stopped: the flowchart stops after trial 0: well fit and every target met: stop here" in output
    _, study = load(path)
    assert [(t.params["c"], t.params["ft_epochs"]) for t in study.trials] == [(1.0, 6)]
    assert study.trials[0].user_attrs["draws_skipped"] == 0  # no early stop: the guide reads whole series


def test_a_crashing_fit_fails_its_trial_and_the_study_goes_on(tmp_path: Path, shared_cache: Path,
                                                               monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """Out of memory (simulated) in one fit: that trial FAILs with the reason, the next one runs."""
    real_fit = swagppm.Session.fit
    calls = {"n": 0}

    def out_of_memory_once(*args: Any, **kwargs: Any) -> swagppm.Fit:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real_fit(*args, **kwargs)

    monkeypatch.setattr(swagppm.Session, "fit", out_of_memory_once)
    path = study_at(tmp_path, shared_cache, name="crash", study={"n_trials": 1})
    assert main(["run", str(path)]) == 0
    assert "trial   0  FAILED: RuntimeError: CUDA out of memory" in capsys.readouterr().out
    _, study = load(path)
    failed, done = study.trials
    assert failed.state == TrialState.FAIL and done.state == TrialState.COMPLETE
    assert failed.user_attrs["failure"].startswith("RuntimeError: CUDA out of memory")

    def always_crash(*args: Any, **kwargs: Any) -> swagppm.Fit:
        raise RuntimeError("device-side assert triggered")

    monkeypatch.setattr(swagppm.Session, "fit", always_crash)
    path = study_at(tmp_path, shared_cache, name="crashes", study={"n_trials": 5})
    assert main(["run", str(path)]) == 1
    assert "3 trials in a row crashed" in capsys.readouterr().out
    assert [t.state for t in load(path)[1].trials] == [TrialState.FAIL] * 3


def test_a_missing_gpu_is_a_configuration_error(study_file: Callable[..., Path],
                                                capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    path = study_file(swagppm={**merged()["swagppm"], "device": "cuda"})
    assert main(["run", str(path)]) == 2
    err = capsys.readouterr().err
    assert "swagppm.device = 'cuda', but CUDA is not available" in err and "Traceback" not in err


def test_a_study_resumes_after_clean_keep_key_and_is_refused_after_a_plain_clean(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The fingerprint key is random: keeping it lets the study match its stored keyed fingerprint again (stage 1 is
    recomputed); a plain clean deletes it, and the next run is refused with the reason before any fit."""
    cache = tmp_path / "cache"
    path = study_at(tmp_path, cache, study={"n_trials": 1}, swagppm={"cache_dir": str(cache), "draws_privacy": 8})
    assert main(["run", str(path)]) in (0, 1)
    assert main(["clean", str(path), "--keep-key", "--yes"]) == 0
    out = capsys.readouterr().out
    assert f"kept its fingerprint key {cache / 'fingerprint.key'}" in out
    assert sorted(p.name for p in cache.iterdir()) == [".swagppm-private-cache", "fingerprint.key"]
    path = study_at(tmp_path, cache, study={"n_trials": 2}, swagppm={"cache_dir": str(cache), "draws_privacy": 8})
    assert main(["run", str(path)]) in (0, 1)
    assert len(load(path)[1].get_trials(states=(TrialState.COMPLETE,))) == 2
    assert main(["clean", str(path), "--yes"]) == 0
    assert "its fingerprint key went with it: this study cannot be resumed" in capsys.readouterr().out
    path = study_at(tmp_path, cache, study={"n_trials": 3}, swagppm={"cache_dir": str(cache), "draws_privacy": 8})
    assert main(["run", str(path)]) == 2
    [line] = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert "the private cache's fingerprint key did (`clean` deletes it" in line
    assert len(load(path)[1].trials) == 2
