"""``swagppm-tune init DATA --label-column COL``: a study file for one's own records that ``run`` accepts, its label
set declared from a public file or the flag (from the data only when asked, with a warning), the recommended
trainable mode and its learning rates; the data and columns checked and an existing file refused before writing."""

from __future__ import annotations

import csv
import stat
from pathlib import Path

import optuna
import pytest

from swagppm.config import DEFAULT_LEARNING_RATES
from tests.tuner.helpers import one_error_line
from tuner import StudyConfig
from tuner.cli import main

LABELS = ("burn", "cut", "fracture", "hearing loss")  # the schema declares a class the records never hold


@pytest.fixture
def records(tmp_path: Path) -> Path:
    path = tmp_path / "records.csv"
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["narrative", "nature"])
        for i in range(30):
            writer.writerow([f"a worker hurt the {('hand', 'leg', 'eye')[i % 3]} at station {i}", LABELS[i % 3]])
    return path


@pytest.fixture
def schema(tmp_path: Path) -> Path:
    path = tmp_path / "schema" / "natures.txt"
    path.parent.mkdir()
    path.write_text("".join(f"{label}\t{label.title()}\n" for label in LABELS))
    return path


def init(*argv: str | Path) -> int:
    return main(["init", *map(str, argv)])


def test_a_schema_file_gives_a_study_that_run_accepts(records: Path, schema: Path, tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "studies" / "mine.toml"
    assert init(records, "--label-column", "nature", "--text-column", "narrative", "--labels-file", schema,
                "-o", out) == 0
    printed = capsys.readouterr()
    assert printed.err == "" and f"wrote {out}: 30 records" in printed.out and "4 declared classes" in printed.out
    assert f"next: swagppm-tune run {out}" in printed.out
    config = StudyConfig.from_toml(out)
    data, model = config.fit.data, config.fit.model
    assert data.declared_labels == LABELS and data.label_titles == tuple(label.title() for label in LABELS)
    assert Path(data.source) == records and (data.text_column, data.label_column) == ("narrative", "nature")
    text = out.read_text()  # outside the study's folder: absolute; below it: relative (the next test)
    assert f'source = "{records}"' in text and f'labels_file = "{schema}"' in text
    assert (model.name_or_path, model.trainable, model.resolved_pooling) == ("all-MiniLM-L6-v2", "head", "mean")
    assert config.fit.learning_rates == DEFAULT_LEARNING_RATES["head"]
    assert (config.fit.finetune_lr, config.fit.swag_lr) == DEFAULT_LEARNING_RATES["head"]  # written out
    assert config.study.name == "mine" and config.targets.epsilon_cap == 10.0
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_labels_from_the_flag_and_another_trainable_mode_take_that_mode_s_rates(records: Path,
                                                                                tmp_path: Path) -> None:
    out = tmp_path / "flag.toml"
    assert init(records, "--label-column", "nature", "--text-column", "narrative", "--labels", *LABELS,
                "--trainable", "last_n_layers", "--model", "tiny", "-o", out) == 0
    config = StudyConfig.from_toml(out)
    assert config.fit.data.declared_labels == LABELS and 'source = "records.csv"' in out.read_text()
    assert (config.fit.model.trainable, config.fit.model.n_layers, config.fit.model.name_or_path) == (
        "last_n_layers", 1, "tiny")
    assert (config.fit.finetune_lr, config.fit.swag_lr) == DEFAULT_LEARNING_RATES["last_n_layers"]
    out_all = tmp_path / "all.toml"
    assert init(records, "--label-column", "nature", "--text-column", "narrative", "--labels", *LABELS,
                "--trainable", "all", "-o", out_all) == 0
    assert "pooling" not in out_all.read_text()  # the architecture's own head: native


def test_labels_taken_from_the_data_warn_in_one_line_and_mark_the_study_exploration_only(
        records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "explore.toml"
    assert init(records, "--label-column", "nature", "--text-column", "narrative", "--labels-from-data",
                "-o", out) == 0
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("warning: the declared label set was taken from the private column 'nature'")
    assert "tells whether a record of a rare class is present" in line and "exploration only" in line
    assert StudyConfig.from_toml(out).fit.data.declared_labels == ("burn", "cut", "fracture")
    assert "for exploration only; replace it with a" in out.read_text()


def test_no_label_source_is_a_usage_error(records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert init(records, "--label-column", "nature", "-o", tmp_path / "x.toml") == 2
    assert "one of the arguments --labels-file --labels --labels-from-data is required" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()


@pytest.mark.parametrize("argv, named", [
    (["--label-column", "natur", "--labels", "a", "b"], "column 'natur' not found"),
    (["--label-column", "nature", "--labels", "burn", "cut"],
     "column 'nature': 10 record(s) (the first at row 3) have a label outside the declared label set"),
    (["--label-column", "nature", "--labels", "burn"], "--labels: declare at least 2 labels"),
    (["--label-column", "nature", "--labels-file", "missing.txt"], "--labels-file"),
])
def test_bad_data_columns_or_labels_are_one_line_and_nothing_is_written(
        argv: list[str], named: str, records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bad.toml"
    assert init(records, "--text-column", "narrative", *argv, "-o", out) == 2
    line = one_error_line(capsys.readouterr().err)
    assert named in line and "burn, cut" not in line
    assert not out.exists()


def test_a_missing_data_file_is_one_line_naming_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert init(tmp_path / "nope.csv", "--label-column", "nature", "--labels-from-data", "-o",
                tmp_path / "x.toml") == 2
    assert f"{tmp_path / 'nope.csv'}: file not found" in one_error_line(capsys.readouterr().err)


def test_an_existing_file_is_never_replaced(records: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "records.toml").write_text("# mine\n")  # the default -o: the data's name with .toml, here
    assert init(records, "--label-column", "nature", "--labels-from-data") == 2
    assert "-o records.toml: exists; init never replaces a file" in one_error_line(capsys.readouterr().err)
    assert (tmp_path / "records.toml").read_text() == "# mine\n"


@pytest.mark.fits
def test_the_written_study_runs(records: Path, schema: Path, tmp_path: Path) -> None:
    out = tmp_path / "run.toml"
    assert init(records, "--label-column", "nature", "--text-column", "narrative", "--labels-file", schema,
                "--model", "tiny", "-o", out) == 0
    with out.open("a") as handle:  # a smaller fit than the paper's counts the file keeps, and the CPU
        handle.write('stage1_epochs = 2\nswag_epochs = 3\nswag_rank = 3\ndraws_risk = 4\ndraws_privacy = 8\n'
                     'draws_utility = 3\n')
    text = out.read_text().replace('device = "auto"', 'device = "cpu"')
    out.write_text(text)
    assert main(["run", str(out), "--n-trials", "1", "-q"]) in (0, 1)
    study = optuna.load_study(study_name="run", storage=StudyConfig.from_toml(out).storage_url)
    assert [trial.state.name in ("COMPLETE", "PRUNED") for trial in study.trials] == [True]  # judged (or catastrophic)


def test_a_hub_dataset_is_read_through_the_study_files_private_cache(schema: Path, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """``init`` reads a Hub dataset as ``run`` will: in the private cache the study file names (where a download
    goes), never the shared Hugging Face cache, which stays empty here."""
    from swagppm.cache import HUB_FOLDER, PrivateCache
    from tests.swagppm.helpers import local_hub_dataset, offline_hub, parquet_bytes

    rows = [{"narrative": f"a worker hurt the {('hand', 'leg', 'eye')[i % 3]} at station {i}", "nature": LABELS[i % 3]}
            for i in range(30)]
    private = PrivateCache(tmp_path / ".swagppm-cache").directory / HUB_FOLDER
    local_hub_dataset(private, "agency/injuries", {"c" * 40: {"data/train.parquet": parquet_bytes(rows)}},
                      refs={"main": "c" * 40})
    shared = tmp_path / "shared-hub"
    shared.mkdir()
    offline_hub(shared, monkeypatch)
    out = tmp_path / "mine.toml"
    assert init("agency/injuries", "--label-column", "nature", "--text-column", "narrative", "--labels-file",
                schema, "-o", out) == 0
    assert StudyConfig.from_toml(out).fit.cache_dir == str(tmp_path / ".swagppm-cache")
    assert list(shared.iterdir()) == []
