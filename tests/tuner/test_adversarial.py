"""Ten adversarial cases beyond issue 31's list: outputs reached by other names, inputs given other ways, flags a
typo makes absurd, and writes that race. Each runs the real command line on real files; none fits a model."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.tuner.helpers import a_study_on_a_data_file, one_error_line, with_a_feasible_trial
from tuner.cli import main
from tuner.outputs import write_atomic
from tuner.storage import STORAGE_ENV

pytestmark = pytest.mark.slow  # no fit, no service, but seconds a test


def refused(argv: list[str], capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """Run ``argv``: exit 2 and one line holding every one of ``words``; the line."""
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert all(word in line for word in words), line
    return line


def test_a_hard_link_to_the_storage_is_the_storage(study_file: Callable[..., Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    database = path.with_suffix(".db")
    os.link(database, tmp_path / "innocent.html")  # another name, the same inode: realpath cannot see it
    before = database.read_bytes()
    refused(["report", str(path), "-o", str(tmp_path / "innocent.html"), "--overwrite"], capsys, "the study storage")
    assert database.read_bytes() == before


def test_the_sqlite_journal_beside_the_storage_is_an_input(study_file: Callable[..., Path], tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    refused(["export", str(path), "-o", str(tmp_path / "small.db-journal"), "--overwrite"], capsys,
            "the study storage")
    refused(["export", str(path), "-o", str(tmp_path / "small.db.lock"), "--overwrite"], capsys, "the study storage")


def test_the_storage_given_by_flag_or_variable_is_protected(study_file: Callable[..., Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = study_file()
    other = tmp_path / "elsewhere.db"
    with_a_feasible_trial(path, storage=f"sqlite:///{other}")
    refused(["report", str(path), "--storage", f"sqlite:///{other}", "-o", str(other), "--overwrite"], capsys,
            "the study storage")
    journal = tmp_path / "shared.log"
    with_a_feasible_trial(path, storage=f"journal:{journal}")
    monkeypatch.setenv(STORAGE_ENV, f"journal:{journal}")
    refused(["export", str(path), "-o", str(journal), "--overwrite"], capsys, "the study storage")
    assert main(["status", str(path)]) == 0  # the journal still holds the study


def test_a_relative_output_from_another_folder_that_is_the_data(study_file: Callable[..., Path], tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    path, data = a_study_on_a_data_file(study_file, tmp_path)
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    before = data.read_bytes()
    refused(["export", str(path), "-o", "../sub/../records.jsonl", "--overwrite"], capsys, "the data")
    assert data.read_bytes() == before


def test_the_selection_data_is_an_input_of_a_fit(study_file: Callable[..., Path], tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    public = tmp_path / "public.jsonl"
    public.write_text(json.dumps({"text": "a public record", "label": 0}) + "\n")
    refused(["fit", str(path), "--json", str(public), "--overwrite", "--release", str(tmp_path / "out"), "--force",
             "--min-utility", "0.5", "--selection-data", str(public)], capsys, "the selection data")
    assert not (tmp_path / "cache").exists() and public.read_text().startswith('{"text": "a public record"')


def test_the_comparison_read_is_not_the_report_written(study_file: Callable[..., Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    comparison = tmp_path / "comparison.json"
    comparison.write_text('{"rows": []}')
    refused(["report", str(path), "--comparison", str(comparison), "-o", str(comparison), "--overwrite"], capsys,
            "the comparison read")
    assert comparison.read_text() == '{"rows": []}'


def test_a_study_file_given_through_a_symlink_is_still_the_study_file(study_file: Callable[..., Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    (tmp_path / "link.toml").symlink_to(path)
    before = path.read_text()
    refused(["report", str(tmp_path / "link.toml"), "-o", str(path), "--overwrite"], capsys, "the study file")
    assert path.read_text() == before


@pytest.mark.parametrize("argv, named", [
    (["run", "STUDY", "--n-trials", "1e3"], "'1e3' is not an integer"),
    (["run", "STUDY", "--timeout", "nan"], "--timeout: nan must be a positive finite number"),
    (["dashboard", "STUDY", "--port", "0"], "--port: 0 must be a port"),
    (["fit", "STUDY", "--g", "inf"], "--g: inf must be a finite number"),
    (["run", "STUDY", "--n-trial", "3"], "unrecognized arguments: --n-trial"),
])
def test_typos_that_would_make_a_flag_absurd_are_one_line(study_file: Callable[..., Path], argv: list[str], named: str,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main([str(path) if arg == "STUDY" else arg for arg in argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and named in err, err


def test_a_reader_never_sees_half_a_file_while_it_is_rewritten(tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    versions = ["A" * 200_000, "B" * 300_000]
    write_atomic(target, versions[0])
    done = threading.Event()

    def writer() -> None:
        for i in range(200):
            write_atomic(target, versions[i % 2])
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    seen = set()
    while not done.is_set():
        seen.add(target.read_text())
    thread.join()
    assert seen <= set(versions) and sorted(p.name for p in tmp_path.iterdir()) == ["report.html"]
