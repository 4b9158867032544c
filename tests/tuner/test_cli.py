"""``swagppm-tune fit``: one fit from a study file, its line, and clear errors."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import swagppm
from swagppm import TrialParams
from swagppm.config import PRIVATE_TEST
from tests import PATIENCE
from tests.tuner.helpers import REPO, STUDY, with_a_feasible_trial
from tuner.cli import EXIT_FIT_FAILED, main


@pytest.mark.fits
def test_fit_prints_a_line_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    code = main(["fit", str(study), "--c", "0.7", "--ft-epochs", "2", "--json", str(tmp_path / "r.json")])
    assert code == 0
    line = capsys.readouterr().out
    assert "c=0.700 epochs= 2" in line and "eps=" in line and "F1 macro" in line
    result = json.loads((tmp_path / "r.json").read_text())
    assert result["epsilon"] == 2 * max(result["max_delta"]) and len(result["max_delta"]) == 8
    assert (tmp_path / "cache").is_dir()  # relative cache_dir resolved beside the study file


def test_bad_study_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY.replace('source = "synthetic"', 'source = "missing.csv"'))
    assert main(["fit", str(study)]) == 2
    err = capsys.readouterr().err
    assert "missing.csv" in err and "file not found" in err and "Traceback" not in err
    study.write_text(STUDY.replace("draws_utility = 3", "draws_utilty = 3"))
    assert main(["fit", str(study)]) == 2
    assert "draws_utilty" in capsys.readouterr().err


def test_release_of_a_tiny_model_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(tmp_path / "out")]) == 2
    assert "tokenizer" in capsys.readouterr().err


@pytest.mark.fits
def test_the_early_stop_is_in_epsilon_units(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    assert main(["fit", str(study), "--ft-epochs", "2", "--json", str(tmp_path / "full.json")]) == 0
    first = json.loads((tmp_path / "full.json").read_text())["max_delta"][0]
    bound = 1.5 * first  # in epsilon units the first draw (epsilon 2 * first) is already above it
    assert main(["fit", str(study), "--ft-epochs", "2", "--stop-above-epsilon", repr(bound),
                 "--json", str(tmp_path / "stopped.json")]) == 0
    stopped = json.loads((tmp_path / "stopped.json").read_text())
    assert stopped["epsilon_is_lower_bound"] and stopped["max_delta"] == [first]
    assert "eps>=" in capsys.readouterr().out


@pytest.mark.fits
def test_fit_release_fits_once_and_replaces_a_folder_only_when_asked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(out), "--force"]) == 2
    assert "--overwrite" in capsys.readouterr().err and not (tmp_path / "cache").exists()  # refused before fitting
    fits = []
    real_fit = swagppm.Session.fit

    def counted(self: swagppm.Session, params: swagppm.TrialParams, **kwargs: object) -> swagppm.Fit:
        fits.append(params)
        return real_fit(self, params, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(swagppm.Session, "fit", counted)
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(out), "--force", "--overwrite"]) == 2
    assert "replaces only a release folder swagppm wrote" in capsys.readouterr().err  # the user's notes stay
    (out / "notes.txt").unlink()
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(out), "--force", "--overwrite"]) == 0
    assert len(fits) == 1  # the released draw comes from the fit whose line was printed
    report = json.loads((tmp_path / "out.owner-report.json").read_text())  # the measured epsilon is owner-only
    assert f"eps={report['epsilon']['measured']:.3f}" in capsys.readouterr().out.replace(" ", "")
    assert (out / "release_card.json").is_file()


@pytest.mark.slow
def test_a_fit_whose_training_failed_has_its_own_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY.replace('device = "cpu"', 'device = "cpu"\nfinetune_lr = 1e9'))
    assert main(["fit", str(study), "--ft-epochs", "1"]) == EXIT_FIT_FAILED
    assert "non-finite training loss" in capsys.readouterr().err


@pytest.mark.fits
def test_release_with_private_selection_states_its_cost_or_why_it_has_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(tmp_path / "a"), "--force",
                 "--min-utility", "0.5"]) == 2  # refused before any work: the selection set is missing
    assert "--selection-data must be given too" in capsys.readouterr().err and not (tmp_path / "cache").exists()
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(tmp_path / "b"), "--force",
                 "--min-utility", "0.5", "--selection-data", str(tmp_path / "missing.csv")]) == 2
    assert "missing.csv: no such file" in capsys.readouterr().err and not (tmp_path / "cache").exists()
    out = tmp_path / "released"
    assert main(["fit", str(study), "--ft-epochs", "1", "--release", str(out), "--force", "--min-utility", "0",
                 "--selection-data", PRIVATE_TEST, "--selection-delta", "1e-6"]) == 0  # delta from no private count
    printed = capsys.readouterr().out
    card = json.loads((out / "release_card.json").read_text())
    assert card["selection"]["accounted"] is False and card["selection"]["threshold"] == 0.0
    assert "Selection of the released draw: the first of a random number of secret draws" in printed
    assert "unaccounted: scored on the private test split" in printed


@pytest.mark.fits
def test_a_selection_no_draw_passes_releases_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    out = tmp_path / "released"
    code = main(["fit", str(study), "--ft-epochs", "1", "--release", str(out), "--force", "--min-utility", "1",
                 "--selection-data", PRIVATE_TEST, "--selection-stop-probability", "1", "--selection-delta", "1e-6"])
    err = capsys.readouterr().err
    assert code == 1 and "nothing released: no candidate draw reached f1_macro >= 1" in err
    assert not (out / "release_card.json").exists()


@pytest.mark.fits  # subprocesses
def test_the_command_line_loads_no_heavy_library_until_a_verb_needs_it() -> None:
    """--help, status, export, report and dashboard answer at once: no torch, transformers, sklearn, scipy.stats
    or dp-accounting (together several seconds of imports) is loaded with the command line."""
    heavy = ("torch", "transformers", "sklearn", "scipy.stats", "dp_accounting", "swagppm.session")
    code = ("import sys, tuner.cli\n"
            f"loaded = [m for m in {heavy!r} if m in sys.modules]\n"
            "assert not loaded, loaded")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE)
    assert done.returncode == 0, done.stderr[-500:]


def loaded_after(argv: list[str], modules: tuple[str, ...], cwd: Path) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``swagppm-tune ARGV`` (its exit status ignored)."""
    code = ("import sys\nfrom tuner.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            f"print('loaded:' + ','.join(m for m in {modules!r} if m in sys.modules), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=PATIENCE,
                          cwd=cwd)
    assert done.returncode == 0, done.stderr[-500:]
    listed = done.stderr.strip().splitlines()[-1].removeprefix("loaded:")
    return [name for name in listed.split(",") if name]


def loaded_by_import(module: str, modules: tuple[str, ...], cwd: Path) -> list[str]:
    """Which of ``modules`` a fresh interpreter holds after ``import module`` alone, in ``modules``' order."""
    code = f"import sys, {module}\nprint(','.join(m for m in {modules!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=PATIENCE, cwd=cwd)
    assert done.returncode == 0, done.stderr[-500:]
    return [name for name in done.stdout.strip().split(",") if name]


@pytest.mark.slow  # subprocesses
def test_help_loads_no_study_plotting_or_training_library(tmp_path: Path) -> None:
    """--help answers at once: the verbs' modules, and the libraries they need, are loaded by the verb that runs."""
    heavy = ("optuna", "sqlalchemy", "numpy", "plotly", "scipy", "pandas", "torch", "tqdm", "redis.client", "alembic",
             "tuner.config", "tuner.cli.study", "tuner.cli.fitting")
    assert loaded_after(["--help"], heavy, tmp_path) == []
    assert loaded_after(["explain", "--help"], heavy, tmp_path) == []


@pytest.mark.slow  # subprocesses
def test_status_loads_only_what_reading_a_study_needs(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    modules = ("plotly.graph_objects", "scipy", "pandas", "torch", "optuna_dashboard", "tuner.report", "tuner.figures",
               "tuner.objective", "tuner.compare", "tuner.executors", "tuner.cli.fitting", "redis.client",
               "opentelemetry", "alembic", "optuna")
    # what `import optuna` loads itself is Optuna's (with the gcs extra installed, its artifacts package imports
    # google-cloud-storage, and that opentelemetry); nothing else may come with reading a study
    optunas = loaded_by_import("optuna", modules, tmp_path)
    loaded = loaded_after(["status", str(path)], modules, tmp_path)
    assert "optuna" in loaded and set(loaded) <= set(optunas) and "redis.client" not in loaded  # redis: on first use


def test_a_deferred_module_stays_unloaded_when_inspect_asks_every_module_for_its_file(tmp_path: Path) -> None:
    """torch registers its operators through ``inspect.getframeinfo``, which asks every loaded module for its
    ``__file__``: the deferred stub answers without loading the module, which loads at its first real use."""
    if importlib.util.find_spec("redis") is None:
        pytest.skip("the redis extra is not installed")
    script = tmp_path / "frames.py"
    script.write_text("import inspect, sys\nfrom tuner.cli import defer_import\ndefer_import('redis')\n"
                      "inspect.getframeinfo(sys._getframe())\nprint('redis.client' in sys.modules)\n"
                      "import redis\nprint(redis.Redis.__module__)\n")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=PATIENCE,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.split() == ["False", "redis.client"]


@pytest.mark.services
def test_a_redis_storage_works_with_redis_loaded_on_first_use(study_file: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    import uuid

    import optuna
    redis = pytest.importorskip("redis", reason="the redis extra is not installed")

    url = "redis://127.0.0.1:6379/13"
    try:
        redis.Redis.from_url(url, socket_connect_timeout=2).ping()
    except redis.exceptions.ConnectionError:
        pytest.skip("no Redis server on 127.0.0.1:6379")
    name = f"deferred-{uuid.uuid4().hex[:8]}"
    path = study_file(study={"name": name})
    with_a_feasible_trial(path, storage=url)
    try:
        done = subprocess.run([sys.executable, "-m", "tuner.cli", "status", str(path), "--storage", url],
                              capture_output=True, text=True, timeout=PATIENCE, cwd=tmp_path)
        assert done.returncode == 0, done.stderr[-500:]
        assert "best feasible: trial 0" in done.stdout
    finally:
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalRedisBackend(url))
        optuna.delete_study(study_name=name, storage=storage)


@pytest.mark.parametrize("argv, named", [
    (["compare", "STUDY", "-o", "OUT", "--long-epochs", "-2"], "--long-epochs"),
    (["compare", "STUDY", "-o", "OUT", "--dpsgd-batch-size", "0"], "--dpsgd-batch-size"),
    (["compare", "STUDY", "-o", "OUT", "--delta", "5"], "--delta"),
    (["compare", "STUDY", "-o", "OUT", "--stricter-epsilon", "-1"], "--stricter-epsilon"),
    (["compare", "STUDY", "-o", "OUT", "--stricter-epsilon", "0"], "--stricter-epsilon"),
    (["compare", "STUDY", "-o", "OUT", "--dpsgd-epochs", "0"], "--dpsgd-epochs"),
    (["compare", "STUDY", "-o", "OUT", "--long-epochs", "1000000000"], "from 1 to 1000"),
    (["compare", "STUDY", "-o", "OUT", "--reweight-k", "-3"], "--reweight-k"),
    (["compare", "STUDY", "-o", "OUT", "--dpsgd-lr", "inf"], "--dpsgd-lr"),
    (["fit", "STUDY", "--ft-epochs", "0"], "--ft-epochs"),
    (["fit", "STUDY", "--c", "nan"], "--c"),
    (["fit", "STUDY", "--json", "OUT", "--over"], "--over"),  # no abbreviation is taken for --overwrite
    (["fit", "STUDY", "--release", "OUT", "--force", "--min-utility", "0.5", "--selection-data", "private-test",
      "--selection-stop-probability", "1e-300"], "1e+300 candidate draws"),
    (["run", "STUDY", "--n-trials", "0"], "--n-trials"),
    (["run", "STUDY", "--workers", "-1"], "--workers"),
    (["run", "STUDY", "--timeout", "-5"], "--timeout"),
    (["dashboard", "STUDY", "--port", "70000"], "--port"),
    (["export", "STUDY", "-o", "OUT", "--trial", "-1"], "--trial"),
    (["rejudge", "STUDY", "--name", "strict", "--epsilon-cap", "0"], "--epsilon-cap"),
    (["launch", "STUDY", "--jobs", "0"], "--jobs"),
])
def test_every_flag_is_checked_before_any_work(tmp_path: Path, argv: list[str], named: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    study = tmp_path / "study.toml"
    study.write_text(STUDY)
    places = {"STUDY": str(study), "OUT": str(tmp_path / "out")}
    assert main([places.get(arg, arg) for arg in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err and "Traceback" not in err, err
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_the_library_checks_the_comparison_settings_too() -> None:
    from tuner.compare import CompareSettings

    with pytest.raises(swagppm.ConfigError, match="long_epochs = -2"):
        CompareSettings(params=TrialParams(c=1.0, ft_epochs=1), long_epochs=-2)
    with pytest.raises(swagppm.ConfigError, match="stricter_epsilon = 0"):
        CompareSettings(params=TrialParams(c=1.0, ft_epochs=1), stricter_epsilon=0.0)
