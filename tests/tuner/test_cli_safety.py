"""``swagppm-tune`` never destroys what it did not make, checks outputs first, hides credentials, says why it exits."""

from __future__ import annotations

import copy
import json
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import tuner.cli.study
from tests import PATIENCE
from tests.tuner.helpers import (
    a_folder_no_one_may_write,
    a_study_on_a_data_file,
    delete_studies,
    merged,
    one_error_line,
    with_a_feasible_trial,
    write_study,
)
from tuner import StudyConfig
from tuner.cli import EXIT_BROKEN_PIPE, EXIT_NOT_REPRODUCED, main
from tuner.export import export_trial, write_export
from tuner.record import AUDITED
from tuner.report import report_html
from tuner.storage import STORAGE_ENV
from tuner.study import open_study

pytestmark = pytest.mark.slow  # no fit, no service, but seconds a test

REPO = Path(__file__).resolve().parents[2]


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# --- 1. clean ---------------------------------------------------------------------------------------------------


@pytest.mark.fits
def test_clean_never_deletes_a_folder_the_tool_did_not_create(study_file: Callable[..., Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(swagppm={"cache_dir": "."})  # the study's own folder
    (tmp_path / "notes.txt").write_text("mine")
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["clean", str(path)]) == 2
    assert str(tmp_path) in one_error_line(capsys.readouterr().err)
    assert sorted(p.name for p in tmp_path.iterdir()) == before

    assert main(["fit", str(path), "--ft-epochs", "1"]) == 0
    cache = tmp_path / "swagppm-private"  # the tool made its own marked folder inside
    assert any(cache.iterdir())
    capsys.readouterr()
    assert main(["clean", str(path), "--yes"]) == 0
    assert f"removed the private cache {cache}" in capsys.readouterr().out
    assert not cache.exists() and (tmp_path / "notes.txt").read_text() == "mine" and path.exists()
    assert (tmp_path / "small-artifacts").is_dir()


def test_clean_with_nothing_cached_says_so(study_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["clean", str(study_file(swagppm={"cache_dir": "never-made"}))]) == 0
    assert "nothing to clean" in capsys.readouterr().out


# --- 2. outputs checked before the work, results kept -----------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["fit", "STUDY", "--json", "FILE/r.json"],
        ["fit", "STUDY", "--json", "DIR"],
        ["fit", "STUDY", "--figures", "DIR"],
        ["fit", "STUDY", "--figures", "FILE/sub/figures.html"],
        ["fit", "STUDY", "--release", "FILE", "--force"],
        ["fit", "STUDY", "--release", "FILE/model", "--force"],
        ["export", "STUDY", "-o", "DIR"],
        ["export", "STUDY", "-o", "FILE/best.json"],
        ["report", "STUDY", "-o", "DIR"],
        ["report", "STUDY", "-o", "FILE/report.html"],
    ],
)
def test_outputs_are_checked_before_any_work(study_file: Callable[..., Path], tmp_path: Path, argv: list[str],
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "adir").mkdir()
    places = {"STUDY": str(path), "FILE": str(tmp_path / "afile"), "DIR": str(tmp_path / "adir")}
    assert main([re.sub("STUDY|FILE|DIR", lambda m: places[m[0]], arg) for arg in argv]) == 2
    captured = capsys.readouterr()
    line = one_error_line(captured.err)
    assert "afile" in line or "adir" in line
    assert not (tmp_path / "cache").exists() and "eps" not in captured.out  # no fit ran
    assert (tmp_path / "afile").read_text() == "mine"


@pytest.mark.fits
def test_a_missing_folder_for_the_json_is_created(study_file: Callable[..., Path], tmp_path: Path) -> None:
    assert main(["fit", str(study_file()), "--ft-epochs", "1", "--json", str(tmp_path / "new" / "r.json")]) == 0
    assert json.loads((tmp_path / "new" / "r.json").read_text())["ft_epochs"] == 1


@pytest.mark.fits
def test_a_write_that_fails_after_the_fit_keeps_the_printed_result(study_file: Callable[..., Path],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full (a file every write to fails) on this system")
    assert main(["fit", str(study_file()), "--ft-epochs", "1", "--json", "/dev/full"]) == 2
    captured = capsys.readouterr()
    assert "c=1.000 epochs= 1" in captured.out and "eps" in captured.out
    lines = [line for line in captured.err.splitlines() if "swagppm-tune" in line]  # not the progress bars
    assert len(lines) == 1 and "/dev/full" in lines[0] and "the result above stands" in lines[0]
    assert "Traceback" not in captured.err


# --- 3. release writes over files only when asked ---------------------------------------------------------------


@pytest.mark.fits
def test_release_writes_over_a_folder_only_with_overwrite(a_feasible_study: Path, tmp_path: Path,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = a_feasible_study
    exported = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(exported)]) == 0
    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main(["release", "--from", str(exported), "-o", str(out), "--force"]) == 2
    assert "--overwrite" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "cache").exists()  # refused before the fit
    assert main(["release", "--from", str(exported), "-o", str(out), "--force", "--overwrite"]) == 2
    assert "replaces only a release folder swagppm wrote" in one_error_line(capsys.readouterr().err)
    assert [p.name for p in out.iterdir()] == ["notes.txt"]  # nothing of the user's is replaced, --overwrite or not
    (out / "notes.txt").unlink()
    for _ in range(2):  # into the empty folder, then over that release
        assert main(["release", "--from", str(exported), "-o", str(out), "--force", "--overwrite"]) == 0
    assert (out / "release_card.json").is_file()
    study = open_study(StudyConfig.from_toml(path), create=False)  # the export's study remembers the audit
    assert set(study.user_attrs[AUDITED]) == {"0"}  # status shows it beside trial 0's measured epsilon


# --- 4. credentials ---------------------------------------------------------------------------------------------


def test_no_form_of_password_reaches_the_terminal(study_file: Callable[..., Path], tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    port = closed_port()
    query = f"postgresql://tuner@127.0.0.1:{port}/studies?password=s3cret"
    path = study_file(study={"storage": query})
    for argv in (["status", str(path)], ["run", str(path)], ["export", str(path), "-o", str(tmp_path / "b.json")],
                 ["report", str(path), "-o", str(tmp_path / "r.html")],
                 ["status", str(path), "--storage", f"postgresql://tuner:p@ss@s3cret@127.0.0.1:{port}/studies"],
                 ["status", str(path), "--storage", f"redis://:s3cret@127.0.0.1:{port}/0"]):
        assert main(argv) == 2, argv
        captured = capsys.readouterr()
        line = one_error_line(captured.err)
        assert "s3cret" not in captured.out + captured.err and "ss@" not in line
        assert "127.0.0.1" in line


def test_a_port_that_is_not_a_number_is_one_line(study_file: Callable[..., Path],
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["status", str(path), "--storage", "postgresql://u@127.0.0.1:abc/db"]) == 2
    assert "is not a database URL" in one_error_line(capsys.readouterr().err)


def test_exports_and_reports_never_hold_a_credential(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path = study_file()
    study = with_a_feasible_trial(path)
    trial = study.get_trials()[0]
    for url in ("postgresql://tuner@db.internal/studies?password=s3cret", "postgresql://tuner:s3cret@db.internal/s",
                "redis://:s3cret@cache.internal:6379/0"):
        config = StudyConfig.from_toml(path).with_storage(url)
        written = write_export(export_trial(study, trial, config), tmp_path / "best.json").read_text()
        assert "s3cret" not in written and ("db.internal" in written or "cache.internal" in written)
        assert "s3cret" not in report_html(study, config)


# --- 5. dashboard -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "::", "tuner.example.org"])
def test_the_dashboard_refuses_a_network_address_without_consent(study_file: Callable[..., Path], host: str,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    assert main(["dashboard", str(path), "--host", host]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--expose-to-network" in line and "delete" in line and "ssh -L" in line
    assert not path.with_suffix(".db").exists()  # refused before the storage was touched


@pytest.mark.parametrize("flags", [["--host", "127.0.0.1"], ["--host", "localhost"], ["--host", "::1"],
                                   ["--host", "0.0.0.0", "--expose-to-network"]])
def test_loopback_or_consent_passes_the_host_check(study_file: Callable[..., Path], flags: list[str],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["dashboard", str(study_file()), *flags]) == 2  # refused only because no study exists yet
    assert "no study exists" in capsys.readouterr().err


def test_a_dashboard_port_in_use_is_one_line_before_any_listening_line(study_file: Callable[..., Path],
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["dashboard", str(path), "--port", str(port)]) == 2
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert f"--port {port}: cannot listen on 127.0.0.1:{port}" in line and "in use" in line
    assert "optuna-dashboard on" not in out and "Listening on" not in out + err


@pytest.mark.parametrize("verb", [["create"], ["run"], ["rejudge", "--epsilon-cap", "40", "--name"]])
def test_a_study_name_too_long_for_a_database_is_one_line(study_file: Callable[..., Path], postgres: str,
                                                          verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """PostgreSQL keeps study names of at most 512 characters: a longer one is the study file's (or --name's) fault,
    refused before the database is written, not an internal error."""
    long_name = "n" * 513
    if verb[0] == "rejudge":
        path = study_file(study={"name": f"short-{uuid.uuid4().hex[:10]}", "storage": postgres})
        with_a_feasible_trial(path)
        argv = [*verb, long_name]
    else:
        path = study_file(study={"name": long_name, "storage": postgres})
        argv = verb
    try:
        assert main([argv[0], str(path), *argv[1:]]) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "study.name = 'nnnn" in line and "(513 characters): must be at most 512 characters" in line
        assert len(line) < 300
    finally:
        delete_studies([path])


@pytest.fixture(scope="module")
def a_damaged_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A local model folder (a small BERT's config and vocabulary) whose ``model.safetensors`` is cut short."""
    from transformers import BertConfig

    folder = tmp_path_factory.mktemp("damaged-model")
    BertConfig(vocab_size=30, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
               intermediate_size=64).save_pretrained(folder)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "record", "text"]))
    (folder / "model.safetensors").write_bytes(b"\x40\x00\x00\x00\x00\x00\x00\x00{\"weight\": {")  # cut mid-header
    return folder


@pytest.mark.fits
@pytest.mark.parametrize("verb", [["fit", "--ft-epochs", "1"], ["run"]])
def test_a_damaged_model_file_is_one_line_naming_the_model(study_file: Callable[..., Path], a_damaged_model: Path,
                                                           verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(model={"name_or_path": str(a_damaged_model), "tiny_hidden_size": None, "tiny_layers": None,
                             "tiny_vocab_size": None})
    assert main([verb[0], str(path), *verb[1:], "-q"]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"model.name_or_path = {str(a_damaged_model)!r}: cannot load the model" in line and "internal" not in line


def test_help_says_what_the_network_option_exposes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["dashboard", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "can read and modify or delete the study" in text and "trials, notes, figures" in text


# --- 8. SWAGPPM_TUNE_STORAGE ------------------------------------------------------------------------------------


def test_every_verb_on_a_study_honours_the_storage_variable(study_file: Callable[..., Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str],
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    path = study_file()
    shared = f"journal:{tmp_path / 'shared.log'}"
    with_a_feasible_trial(path, storage=shared)
    monkeypatch.setenv(STORAGE_ENV, shared)
    assert main(["status", str(path)]) == 0
    assert main(["run", str(path), "--n-trials", "1"]) == 0  # already has its trial: no fit
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "report.html")]) == 0
    assert main(["rejudge", str(path), "--name", "looser", "--epsilon-cap", "60"]) == 0  # into the same storage
    assert capsys.readouterr().out.count("best feasible: trial 0") == 3
    assert main(["status", str(path), "--study-name", "looser"]) == 0
    assert not path.with_suffix(".db").exists()  # the study file's own storage was never opened
    other = tmp_path / "other.db"
    for verb in (["status"], ["rejudge", "--name", "again", "--epsilon-cap", "60"]):
        assert main([verb[0], str(path), *verb[1:], "--storage", f"sqlite:///{other}"]) == 2  # the flag wins
        assert str(other) in one_error_line(capsys.readouterr().err)


# --- 9. BrokenPipe, seeds, artifacts ----------------------------------------------------------------------------


@pytest.mark.fits
def test_status_into_a_closed_pipe_exits_quietly(study_file: Callable[..., Path]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    process = subprocess.Popen([sys.executable, "-m", "tuner.cli", "status", str(path)], cwd=REPO,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader leaves before the first line, as `| head` does after its own
    err = process.stderr.read()
    assert process.wait(timeout=PATIENCE) == EXIT_BROKEN_PIPE
    assert "Traceback" not in err and "BrokenPipe" not in err and "Exception ignored" not in err, err


def test_an_artifact_folder_that_is_a_file_is_refused_before_the_run(study_file: Callable[..., Path], tmp_path: Path,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "art").write_text("mine")
    path = study_file(study={"artifacts": "art"})
    assert main(["run", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(tmp_path / "art") in line and "is a file" in line
    assert not (tmp_path / "cache").exists() and (tmp_path / "art").read_text() == "mine"


# --- 10. exit codes ---------------------------------------------------------------------------------------------


def test_help_lists_every_exit_status(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for code, meaning in ((0, "ok"), (1, "no feasible trial"), (2, "bad input"), (3, "storage"),
                          (4, "internal error"), (5, "fit failed"), (6, "epsilon differs"), (130, "interrupted"),
                          (141, "pipe")):
        assert re.search(rf"^\s+{code}\s.*{meaning}", out, re.MULTILINE), (code, out)


def test_an_unexpected_error_is_one_line_with_its_own_status(a_feasible_study: Path,
                                                             capsys: pytest.CaptureFixture[str],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = a_feasible_study

    def broken(*args: object, **kwargs: object) -> str:
        raise RuntimeError("boom")

    monkeypatch.setattr(tuner.cli.study, "format_table", broken)  # a bug, injected where the table is printed
    assert main(["status", str(path)]) == 4
    line = one_error_line(capsys.readouterr().err)
    assert "internal error: RuntimeError: boom" in line and "SWAGPPM_TUNE_DEBUG=1" in line
    monkeypatch.setenv("SWAGPPM_TUNE_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["status", str(path)])


def test_a_storage_lost_outside_a_runs_reconnecting_is_status_3_without_its_text(
        a_feasible_study: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that goes away where no reconnect is tried (stage 1's end, a read of the table) was an internal
    error (status 4) quoting the driver's text; it is the storage-lost status, and the text (which may name the
    server) is not shown."""
    import sqlalchemy.exc

    def gone(*args: object, **kwargs: object) -> str:
        raise sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("server at db.internal closed the connection"))

    monkeypatch.setattr(tuner.cli.study, "format_table", gone)
    assert main(["status", str(a_feasible_study)]) == 3
    line = one_error_line(capsys.readouterr().err)
    assert line == ("swagppm-tune: error: lost the study storage where no reconnect is tried (OperationalError); "
                    "finished trials are kept there: run the command again once it is back")


# --- 7. reproducibility -----------------------------------------------------------------------------------------


@pytest.mark.fits
def test_a_refit_uses_the_exported_thread_count_and_names_the_suspects(study_file: Callable[..., Path],
                                                                       tmp_path: Path,
                                                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path, threads=1, cpu_kernels="DEFAULT", stage1_fingerprint="0123456789abcdef")
    exported = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(exported)]) == 0
    document = json.loads(exported.read_text())
    assert document["threads"] == 1 and document["cpu_kernels"] == "DEFAULT"
    assert document["stage1_fingerprint"] == "0123456789abcdef"
    before = torch.get_num_threads()
    try:
        code = main(["fit", "--from", str(exported)])
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
    out = capsys.readouterr().out
    assert used == 1 and "1 CPU thread" in out
    assert code == EXIT_NOT_REPRODUCED  # the made-up trial's epsilon is not this fit's
    differs = next(line for line in out.splitlines() if "differs from the export" in line)
    assert "thread" in differs and "device" in differs and "version" in differs
    kernels = torch.backends.cpu.get_cpu_capability()
    assert f"CPU kernels ({kernels} here, DEFAULT in the export)" in differs  # another CPU rounds differently
    fingerprint = re.search(r"stage 1 differs \(fingerprint ([0-9a-f]{16}) here, 0123456789abcdef in the export\)",
                            differs)
    assert fingerprint is not None  # the refit's own stage 1, named by its digest


def test_status_warns_when_the_trials_used_several_stage_1s(study_file: Callable[..., Path],
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path, stage1_fingerprint="0123456789abcdef")
    assert main(["status", str(path)]) == 0
    assert "stage 1" not in capsys.readouterr().err  # one stage 1: nothing to say
    with_a_feasible_trial(path, stage1_fingerprint="fedcba9876543210")  # e.g. a worker of a release before the check
    assert main(["status", str(path)]) == 0
    err = capsys.readouterr().err
    assert "the trials used 2 different stage 1s (0123456789abcdef: trials 0; fedcba9876543210: trials 1)" in err


# --- 11. no study yet; the hint after a run ---------------------------------------------------------------------


def test_verbs_on_a_study_never_run_create_nothing(study_file: Callable[..., Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    journal = study_file("journal", study={"storage": "journal:j.log"})
    for argv in (["status", str(path)], ["export", str(path), "-o", str(tmp_path / "b.json")],
                 ["report", str(path), "-o", str(tmp_path / "r.html")],
                 ["release", str(path), "-o", str(tmp_path / "m"), "--force"], ["status", str(journal)]):
        assert main(argv) == 2
        line = one_error_line(capsys.readouterr().err)
        assert "no study exists" in line and f"swagppm-tune run {argv[1]}" in line
    assert not path.with_suffix(".db").exists() and not (tmp_path / "j.log").exists()


def test_the_hint_after_a_run_adds_force_only_for_a_data_derived_tokenizer(study_file: Callable[..., Path],
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["run", str(path), "--n-trials", "1"]) == 0
    hint = capsys.readouterr().out.split("next:")[1]
    assert "release --from best.json -o released/ --force" in hint and "tokenizer" in hint
    public = study_file("public", model={"name_or_path": "distilroberta-base", "tiny_hidden_size": None,
                                         "tiny_layers": None, "tiny_vocab_size": None})
    with_a_feasible_trial(public)
    assert main(["run", str(public), "--n-trials", "1"]) == 0
    hint = capsys.readouterr().out.split("next:")[1]
    assert "released/" in hint and "--force" not in hint


def test_a_fit_outside_a_study_is_checked_like_one(capsys: pytest.CaptureFixture[str],
                                                   study_file: Callable[..., Path]) -> None:
    path = study_file()
    for flags, key in ((["--c", "nan"], "--c"), (["--ft-epochs", "0"], "--ft-epochs"), (["--g", "inf"], "--g"),
                       (["--stop-above-epsilon", "-1"], "--stop-above-epsilon")):
        assert main(["fit", str(path), *flags]) == 2
        assert key in one_error_line(capsys.readouterr().err)


# --- 11. one output rule: never an input, never a file the user keeps (issue 31 D1, D2, D6) ---------------------


@pytest.fixture(scope="module")
def a_study_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``a_study_on_a_data_file`` made once for the module's output-rule cases: each copies the folder."""
    folder = tmp_path_factory.mktemp("on-a-data-file")
    a_study_on_a_data_file(lambda name="small", **changes: write_study(folder / f"{name}.toml", merged(**changes)),
                           folder)
    return folder


@pytest.mark.parametrize("argv, named", [
    (["report", "STUDY", "-o", "STUDY.db"], "the study storage"),
    (["report", "STUDY", "-o", "STUDY.db", "--overwrite"], "the study storage"),
    (["report", "STUDY", "-o", "STUDY", "--overwrite"], "the study file"),
    (["export", "STUDY", "-o", "DATA", "--overwrite"], "the data"),
    (["audit", "STUDY", "-o", "DATA", "--overwrite"], "the data"),
    (["fit", "STUDY", "--json", "DATA", "--overwrite"], "the data"),
    (["fit", "STUDY", "--figures", "STUDY.db", "--overwrite"], "the study storage"),
    (["audit", "--from", "EXPORT", "-o", "EXPORT", "--overwrite"], "the export read"),
    (["release", "--from", "EXPORT", "-o", "EXPORT", "--force"], ""),
    (["report", "STUDY", "-o", "LINK", "--overwrite"], "the study storage"),
    (["compare", "STUDY", "-o", "DATA", "--overwrite"], "the data"),
])
def test_no_verb_writes_over_an_input_of_its_run(a_study_template: Path, tmp_path: Path, argv: list[str], named: str,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    shutil.copytree(a_study_template, tmp_path, dirs_exist_ok=True)
    path, data = tmp_path / "small.toml", tmp_path / "records.jsonl"
    exported = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(exported)]) == 0
    (tmp_path / "link.html").symlink_to(path.with_suffix(".db"))  # a symlink to the storage
    places = {"STUDY.db": str(path.with_suffix(".db")), "STUDY": str(path), "DATA": str(data),
              "EXPORT": str(exported), "LINK": str(tmp_path / "link.html")}
    before = {name: Path(place).read_bytes() for name, place in places.items()}
    capsys.readouterr()
    assert main([re.sub("STUDY.db|STUDY|DATA|EXPORT|LINK", lambda m: places[m[0]], a) for a in argv]) == 2
    captured = capsys.readouterr()
    assert named in one_error_line(captured.err) and "eps" not in captured.out  # refused before any fit
    assert not (tmp_path / "cache").exists()
    assert {name: Path(place).read_bytes() for name, place in places.items()} == before
    assert main(["status", str(path)]) == 0  # the study is whole


@pytest.mark.parametrize("verb", [["report", "STUDY", "-o"], ["export", "STUDY", "-o"], ["fit", "STUDY", "--json"]])
def test_an_existing_file_is_replaced_only_with_overwrite(a_feasible_study: Path, tmp_path: Path,
                                                          verb: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = a_feasible_study
    mine = tmp_path / "notes.html"
    mine.write_text("mine")
    argv = [str(path) if a == "STUDY" else a for a in verb] + [str(mine)]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "--overwrite" in line and str(mine) in line and mine.read_text() == "mine"
    assert not (tmp_path / "cache").exists()
    if verb[0] != "fit":  # a fit runs for real after the check: the refusal is the point here
        assert main([*argv, "--overwrite"]) == 0
        assert mine.read_text() != "mine" and mine.stat().st_size > 100
        assert not list(tmp_path.glob(".notes.html.*"))  # no temporary file is left beside it


def test_compare_refuses_a_folder_holding_its_files(a_feasible_study: Path, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    path = a_feasible_study
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "comparison.csv").write_text("my own table")
    assert main(["compare", str(path), "-o", str(folder)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert "comparison.csv" in line and "--overwrite" in line
    assert (folder / "comparison.csv").read_text() == "my own table" and not (tmp_path / "cache").exists()


def test_a_write_is_all_or_nothing(tmp_path: Path) -> None:
    from tuner.outputs import write_atomic

    target = tmp_path / "out.json"
    target.write_text("old")
    blocked = tmp_path / "blocked"
    blocked.mkdir()
    (blocked / "inner").mkdir()  # os.replace cannot put a file over a folder: the write fails at the end
    with pytest.raises(OSError):
        write_atomic(blocked / "inner", "new")
    assert sorted(p.name for p in blocked.iterdir()) == ["inner"]  # its temporary file is gone
    write_atomic(target, "new")
    assert target.read_text() == "new" and oct(target.stat().st_mode & 0o777) == oct(0o600)  # owner-side: 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "out.json"]


def test_a_device_is_written_straight_through() -> None:
    if not Path("/dev/stdout").exists():
        pytest.skip("no /dev/stdout on this system")
    from tuner.outputs import check_output

    assert check_output(Path("/dev/null"), inputs={}, overwrite=False) == Path("/dev/null")


# --- 12. unclear errors become one line naming the file (issue 31 U1, U2, U3, U6) -------------------------------


@pytest.mark.parametrize("verb", ["status", "run", "export"])
def test_a_study_file_in_utf16_is_one_line_naming_it(tmp_path: Path, verb: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "study.toml"
    path.write_bytes('[study]\nname = "x"\n'.encode("utf-16"))  # starts with FF FE
    argv = [verb, str(path)] + (["-o", str(tmp_path / "b.json")] if verb == "export" else [])
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(path) in line and "UTF-16" in line


def test_a_storage_folder_that_cannot_be_written_is_one_line(study_file: Callable[..., Path], tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = a_folder_no_one_may_write(tmp_path)
    path = study_file(study={"storage": f"sqlite:///{folder / 'small.db'}"})
    assert main(["run", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(folder) in line and "cannot be written" in line and not (tmp_path / "cache").exists()


@pytest.fixture(scope="module")
def an_export(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """One study with a feasible trial and its export, made once for the module's export-reading cases: the folder
    and the exported document (each case writes its own altered copy)."""
    folder = tmp_path_factory.mktemp("exported")
    path = write_study(folder / "small.toml", merged())
    with_a_feasible_trial(path)
    exported = folder / "best.json"
    assert main(["export", str(path), "-o", str(exported)]) == 0
    return folder, json.loads(exported.read_text())


@pytest.fixture
def a_feasible_study(an_export: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    """``small.toml`` with one feasible trial in ``tmp_path``: a copy of the module's made-once study (no export)."""
    shutil.copytree(an_export[0], tmp_path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("best.json"))
    return tmp_path / "small.toml"


@pytest.mark.parametrize("field, value, named", [
    ("params.c", "nan", "params.c = 'nan'"),
    ("params.c", -2, "params.c = -2"),
    ("params.ft_epochs", 0, "params.ft_epochs = 0"),
    ("params.ft_epochs", 2.5, "params.ft_epochs = 2.5"),
    ("metrics", [1, 2], "field metrics must be a table"),
    ("trials_run", [3], "field trials_run must be a table"),
    ("tuning", "lol", "field tuning must be a table"),
    ("metrics.epsilon", "high", "metrics.epsilon = 'high'"),
])
@pytest.mark.parametrize("verb", [["fit"], ["release", "-o", "OUT", "--force"], ["audit"], ["compare", "-o", "OUT"]])
def test_every_verb_reads_an_export_through_one_checked_reader(an_export: tuple[Path, dict[str, Any]],
                                                               tmp_path: Path, field: str, value: object,
                                                               named: str, verb: list[str],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    folder, document = an_export
    document = copy.deepcopy(document)
    *parents, key = field.split(".")
    table = document
    for parent in parents:
        table = table[parent]
    table[key] = value
    exported = tmp_path / "best.json"
    exported.write_text(json.dumps(document))
    capsys.readouterr()
    argv = [verb[0], "--from", str(exported), *[str(tmp_path / "out") if a == "OUT" else a for a in verb[1:]]]
    assert main(argv) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(exported) in line and named in line
    assert not (folder / "cache").exists() and not (tmp_path / "out").exists()  # before any fit or output


@pytest.mark.parametrize("document, named", [
    ("{not json", "not a comparison"),
    ('{"rows": "x"}', "not a comparison"),
    ('{"rows": []}', "without rows"),
    ('{"rows": [{"method": "m", "epsilon": null, "delta": null, "f1_macro": "high", "f1_weighted": 0.5, '
     '"f1_top_quartile": 0.5, "f1_bottom_quartile": 0.5}]}', "row 1: f1_macro = 'high'"),
    ('{"rows": [{"method": "m", "epsilon": -1, "delta": null, "f1_macro": 0.5, "f1_weighted": 0.5, '
     '"f1_top_quartile": 0.5, "f1_bottom_quartile": 0.5}]}', "row 1: epsilon = -1"),
])
def test_a_malformed_comparison_is_one_line(a_feasible_study: Path, tmp_path: Path, document: str,
                                            named: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = a_feasible_study
    comparison = tmp_path / "comparison.json"
    comparison.write_text(document)
    assert main(["report", str(path), "-o", str(tmp_path / "report.html"), "--comparison", str(comparison)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert str(comparison) in line and named in line and not (tmp_path / "report.html").exists()


@pytest.mark.parametrize("url", ["nonsense", "postgresql://u@127.0.0.1:abc/db"])
def test_a_bad_storage_url_is_the_flags_fault(study_file: Callable[..., Path], url: str,
                                              capsys: pytest.CaptureFixture[str],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    path = study_file()
    assert main(["status", str(path), "--storage", url]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert line.startswith("swagppm-tune: error: --storage: ") and str(path) not in line
    monkeypatch.setenv(STORAGE_ENV, url)
    assert main(["status", str(path)]) == 2
    assert one_error_line(capsys.readouterr().err).startswith(f"swagppm-tune: error: ${STORAGE_ENV}: ")
