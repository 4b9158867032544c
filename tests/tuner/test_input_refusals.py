"""Bad input is one line naming what to fix, before any work, and leaves nothing behind: a device or FIFO given as
a file, a labels file that is not UTF-8, a cache folder that cannot be written, ``rejudge`` without targets, and a
first ``run`` refused for its data (the corrected file must then run)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from swagppm import ConfigError, synthetic_corpus
from swagppm.cache import PrivateCache
from tests.swagppm.helpers import read_only
from tests.tuner.helpers import one_error_line, run_cli, with_a_feasible_trial
from tuner import StudyConfig
from tuner.cli import main
from tuner.storage import make_storage
from tuner.study import changed_keys

pytestmark = pytest.mark.slow  # command lines in subprocesses (a FIFO would hang this process), no fit


def records(path: Path, *, labels: int = 3) -> Path:
    """A JSONL file of the synthetic corpus with ``labels`` classes, labelled "k0", "k1", ..."""
    texts, classes = synthetic_corpus(120, num_classes=labels, seed=1)
    names = {name: f"k{index}" for index, name in enumerate(sorted(set(classes)))}
    path.write_text("".join(json.dumps({"text": text, "label": names[label]}) + "\n"
                            for text, label in zip(texts, classes)))
    return path


def no_study(path: Path) -> bool:
    """Whether the study file's storage holds no study of its name (or does not exist)."""
    config = StudyConfig.from_toml(path)
    database = path.with_suffix(".db")
    if not database.exists():
        return True
    storage = make_storage(config.storage_url)
    return config.study.name not in [study.study_name for study in storage.get_all_studies()]


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make", [lambda folder: Path("/dev/zero"), lambda folder: fifo(folder / "study.toml")],
                         ids=["device", "fifo"])
def test_a_study_file_that_is_no_regular_file_is_one_line_before_reading(tmp_path: Path,
                                                                           make: Callable[[Path], Path]) -> None:
    path = make(tmp_path)
    refused = run_cli("status", str(path), timeout=120)  # /dev/zero was read until memory ran out; a FIFO hung
    assert refused.returncode == 2
    kind = "a character device" if path == Path("/dev/zero") else "a FIFO (named pipe)"
    assert one_error_line(refused.stderr) == f"swagppm-tune: error: {path}: is {kind}, not a regular file; name a file"


@pytest.mark.parametrize("source, kind", [("/dev/zero", "a character device"), ("FIFO", "a FIFO (named pipe)")])
def test_data_that_is_no_regular_file_is_refused_by_what_it_is_and_leaves_no_study(
        study_file: Callable[..., Path], tmp_path: Path, source: str, kind: str) -> None:
    if source == "FIFO":
        source = str(fifo(tmp_path / "records.jsonl"))
    path = study_file(data={"source": source, "synthetic_size": None, "synthetic_classes": None,
                            "labels": ["k0", "k1"]})
    refused = run_cli("run", str(path), timeout=300)  # it said "no such file or folder" or "file not found"
    assert refused.returncode == 2
    assert one_error_line(refused.stderr) == (
        f"swagppm-tune: error: {source}: is {kind}, not a data file or folder; name a .csv, .jsonl, .json or .parquet "
        "file, a folder or a Hugging Face dataset name")
    assert no_study(path)


def test_an_export_that_is_a_fifo_is_one_line(tmp_path: Path) -> None:
    export = fifo(tmp_path / "best.json")
    refused = run_cli("fit", "--from", str(export), timeout=120)
    assert refused.returncode == 2
    assert f"--from {export}: is a FIFO (named pipe), not a regular file" in one_error_line(refused.stderr)


def test_a_labels_file_that_is_not_utf8_is_named_as_the_labels_file(study_file: Callable[..., Path],
                                                                    tmp_path: Path) -> None:
    (tmp_path / "labels.txt").write_bytes(b"k0\nk1\xff\n")
    path = study_file(data={"source": str(records(tmp_path / "r.jsonl")), "synthetic_size": None,
                            "synthetic_classes": None, "labels_file": "labels.txt"})
    with pytest.raises(ConfigError) as refused:
        StudyConfig.from_toml(path)
    assert str(refused.value) == (f"{path} [data] labels_file {tmp_path / 'labels.txt'}: the labels file is not "
                                  "UTF-8 text (byte 5); save it as UTF-8")  # it said "the study file"


def test_a_labels_file_that_is_a_fifo_is_one_line(study_file: Callable[..., Path], tmp_path: Path) -> None:
    fifo(tmp_path / "labels.txt")
    path = study_file(data={"labels_file": "labels.txt"})
    refused = run_cli("status", str(path), timeout=120)
    assert refused.returncode == 2 and "labels.txt: is a FIFO (named pipe)" in one_error_line(refused.stderr)


def test_rejudge_without_a_target_says_what_to_pass(study_file: Callable[..., Path],
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["rejudge", str(path), "--name", "again"]) == 2
    out, err = capsys.readouterr()
    assert out == ""  # it printed "judged against " and a table
    assert one_error_line(err) == (
        "swagppm-tune: error: rejudge: pass the targets to judge against: one or more of --epsilon-cap, "
        "--max-f1-degradation, --statistic and --require-well-fit/--no-require-well-fit")


def test_a_cache_folder_that_cannot_be_written_is_refused_before_the_study_database(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache = PrivateCache(tmp_path / "cache").directory  # the tool's own folder, then made read-only
    path = study_file()
    with read_only(cache):
        assert main(["run", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"swagppm-tune: error: {path} [swagppm] cache_dir: the private cache {cache} cannot be "
                           "written")
    assert not path.with_suffix(".db").exists()  # it was created, then the run died with an internal error


def test_a_definition_change_names_the_data_table_not_swagppm() -> None:
    stored = {"search": {"c_min": 0.1}, "swagppm": {"data": {"labels": ["a", "b"]}, "draws_privacy": 12}}
    now = {"search": {"c_min": 0.2}, "swagppm": {"data": {"labels": ["a", "b", "c"]}, "draws_privacy": 20}}
    assert changed_keys(now, stored) == ["[data] labels", "[search] c_min", "[swagppm] draws_privacy"]


@pytest.mark.fits
def test_a_first_run_refused_for_its_data_leaves_no_study_and_the_corrected_file_runs(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = records(tmp_path / "records.jsonl", labels=3)
    undeclared = {"source": str(data), "synthetic_size": None, "synthetic_classes": None, "labels": ["k0", "k1"]}
    path = study_file(study={"n_trials": 1}, data=undeclared)
    assert main(["run", str(path)]) == 2
    assert "have a label outside the declared label set" in one_error_line(capsys.readouterr().err)
    assert no_study(path)  # it was left empty, holding the refused definition
    path = study_file(study={"n_trials": 1}, data={**undeclared, "labels": ["k0", "k1", "k2"]})
    assert main(["run", str(path)]) in (0, 1)  # it was refused: "[swagppm] data changed"
    assert "definition" not in capsys.readouterr().err


def test_a_first_run_of_workers_all_refused_for_their_data_leaves_no_study(study_file: Callable[..., Path],
                                                                           tmp_path: Path) -> None:
    data = records(tmp_path / "records.jsonl", labels=3)
    path = study_file(study={"storage": "journal:small.log"}, data={
        "source": str(data), "synthetic_size": None, "synthetic_classes": None, "labels": ["k0", "k1"]})
    refused = run_cli("run", str(path), "--workers", "2", timeout=600)
    assert refused.returncode == 2, refused.stdout[-800:] + refused.stderr[-800:]
    assert one_error_line(refused.stderr) == (
        "swagppm-tune: error: every worker was refused before its first trial (their lines above say why); the study "
        "'small' this run created was removed, so the corrected study file runs")
    assert refused.stdout.count("have a label outside the declared label set") == 2  # each worker's own line
    config = StudyConfig.from_toml(path)
    assert config.study.name not in [s.study_name for s in make_storage(config.storage_url).get_all_studies()]


def test_a_release_into_a_folder_that_cannot_be_written_is_one_line_before_any_fit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    folder = tmp_path / "shared"
    folder.mkdir()
    with read_only(folder):
        assert main(["release", str(path), "-o", str(folder / "model"), "--force"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith(f"swagppm-tune: error: {folder / 'model'}: cannot write beside the release folder")
    assert not (tmp_path / "cache").exists() and list(folder.iterdir()) == []  # before any fit, nothing left
