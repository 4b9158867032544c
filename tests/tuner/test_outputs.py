"""``tuner.outputs`` directly: a run's inputs, the output rule's every refusal, streams and atomic writes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pytest

from swagppm import ConfigError, SWAGPPMConfig
from tests import PATIENCE
from tests.swagppm.helpers import umask
from tests.tuner.helpers import a_study_on_a_data_file, merged, one_error_line, with_a_feasible_trial, write_study
from tuner.cli import main
from tuner.config import StudyConfig
from tuner.outputs import (
    check_output,
    check_replaced_folder,
    create_owner_only,
    inputs_of,
    is_stream,
    owner_folder,
    resolved,
    write_atomic,
)

NEVER = "writing there would destroy it (name another path; --overwrite does not allow this)"
KEPT = "swagppm-tune replaces no file it finds (pass --overwrite to replace it)"


def on_a_data_file(study_file: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A study file whose records are ``records.jsonl`` beside it (nothing opened): (study file, data file)."""
    data = tmp_path / "records.jsonl"
    data.write_text('{"text": "a record", "label": 0}\n')
    return study_file(data={"source": "records.jsonl", "synthetic_size": None, "synthetic_classes": None}), data


def modes(folder: Path) -> dict[str, int]:
    """The mode of ``folder`` and of everything under it, by path from ``folder``'s parent."""
    return {str(p.relative_to(folder.parent)): stat.S_IMODE(p.stat().st_mode) for p in [folder, *folder.rglob("*")]}


def refusal(path: Path | str, *, inputs: Mapping[Path, str] | None = None, overwrite: bool = False, what: str = "-o",
            folder: bool = False, files: Iterable[str] = ()) -> str:
    """The message of ``check_output``'s refusal of ``path`` (no inputs unless given)."""
    with pytest.raises(ConfigError) as info:
        check_output(path, inputs=inputs or {}, overwrite=overwrite, what=what, folder=folder, files=files)
    return str(info.value)


# --- inputs_of -------------------------------------------------------------------------------------------------------


def test_a_study_reads_its_file_its_storage_and_the_storages_sidecars(study_file: Callable[..., Path],
                                                                      tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file())
    home = resolved(tmp_path)
    assert list(inputs_of(config, argparse.Namespace()).items()) == [
        (home / "small.toml", "the study file"),
        (home / "small.db", "the study storage"),
        (home / "small.db-journal", "the study storage"),
        (home / "small.db-wal", "the study storage"),
        (home / "small.db-shm", "the study storage"),
        (home / "small.db.lock", "the study storage"),
    ]


def test_a_data_file_and_a_journal_storage_are_inputs(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path, data = on_a_data_file(study_file, tmp_path)
    config = StudyConfig.from_toml(path).with_storage(f"journal:{tmp_path / 'shared.log'}")
    inputs = inputs_of(config, argparse.Namespace())
    assert inputs[resolved(data)] == "the data"
    assert inputs[resolved(tmp_path / "shared.log")] == "the study storage"
    assert resolved(tmp_path / "small.db") not in inputs


def test_what_a_flag_names_keeps_the_flags_label(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path, data = on_a_data_file(study_file, tmp_path)
    args = argparse.Namespace(study=str(path), data=str(data))
    inputs = inputs_of(StudyConfig.from_toml(path), args)
    assert inputs[resolved(data)] == "the data (--data)"
    assert inputs[resolved(path)] == "the study file"
    assert list(inputs)[:2] == [resolved(path), resolved(data)]  # flags first, then the study's own


def test_every_flag_that_reads_a_file_makes_it_an_input(tmp_path: Path) -> None:
    files = {name: tmp_path / name for name in ("best.json", "comparison.json", "records.jsonl", "public.jsonl")}
    for file in files.values():
        file.write_text("{}")
    args = argparse.Namespace(source=str(files["best.json"]), comparison=str(files["comparison.json"]),
                              data=str(files["records.jsonl"]), selection_data=str(files["public.jsonl"]))
    home = resolved(tmp_path)
    assert inputs_of(None, args) == {
        home / "best.json": "the export read (--from)",
        home / "comparison.json": "the comparison read (--comparison)",
        home / "records.jsonl": "the data (--data)",
        home / "public.jsonl": "the selection data (--selection-data)",
    }


def test_names_that_are_no_files_are_not_inputs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "private-test").write_text("a file that happens to bear the option's name")
    args = argparse.Namespace(data="synthetic", selection_data="private-test", source="org/a-hub-dataset",
                              comparison=None, study=None)
    assert inputs_of(None, args) == {}


def test_a_path_object_is_an_input_even_before_it_exists(tmp_path: Path) -> None:
    args = argparse.Namespace(comparison=tmp_path / "missing.json", data=str(tmp_path / "missing.jsonl"))
    assert inputs_of(None, args) == {resolved(tmp_path) / "missing.json": "the comparison read (--comparison)"}


def test_a_fit_outside_a_study_reads_its_data(tmp_path: Path) -> None:
    data = tmp_path / "records.jsonl"
    data.write_text("")
    fit = SWAGPPMConfig.from_dict({"data": {"source": str(data)}})
    assert inputs_of(fit, argparse.Namespace()) == {resolved(data): "the data"}
    assert inputs_of(SWAGPPMConfig.from_dict({"data": {"source": "synthetic"}}), argparse.Namespace()) == {}


def test_a_malformed_storage_url_adds_no_input_and_no_error(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file())
    config = dataclasses.replace(config, study=dataclasses.replace(config.study, storage="nonsense"))
    assert inputs_of(config, argparse.Namespace()) == {resolved(tmp_path) / "small.toml": "the study file"}


# --- check_output ----------------------------------------------------------------------------------------------------


def test_an_input_is_refused_by_its_name_a_symlink_or_a_hard_link(tmp_path: Path) -> None:
    study = tmp_path / "small.toml"
    study.write_text("[study]")
    (tmp_path / "link.toml").symlink_to(study)
    os.link(study, tmp_path / "hard.toml")
    inputs = {resolved(study): "the study file"}
    for name in ("small.toml", "link.toml", "hard.toml"):
        path = tmp_path / name
        assert refusal(path, inputs=inputs, overwrite=True, what="--json") == (
            f"--json {path}: is the study file of this run; {NEVER}")
    assert study.read_text() == "[study]"


def test_a_path_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "records"
    data.mkdir()
    path = data / "figures" / "out.png"
    assert refusal(path, inputs={resolved(data): "the data"}, overwrite=True, what="--figures") == (
        f"--figures {path}: lies inside {resolved(data)}, which is the data of this run; {NEVER}")
    assert not (data / "figures").exists()


def test_an_existing_file_is_kept_unless_overwrite(tmp_path: Path) -> None:
    mine = tmp_path / "notes.html"
    mine.write_text("mine")
    assert refusal(mine) == f"-o {mine}: exists; {KEPT}"
    assert check_output(mine, inputs={}, overwrite=True) == mine
    assert mine.read_text() == "mine"  # checked, not written


def test_a_dangling_symlink_counts_as_an_existing_file(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "nowhere.json")
    assert refusal(link) == f"-o {link}: exists; {KEPT}"
    assert check_output(link, inputs={}, overwrite=True) == link


def test_a_folder_where_a_file_belongs_and_a_file_where_a_folder_belongs(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("mine")
    assert refusal(tmp_path / "folder", overwrite=True) == f"-o {tmp_path / 'folder'}: is a folder; name a file"
    assert refusal(tmp_path / "file", overwrite=True, folder=True, files=["model.safetensors"]) == (
        f"-o {tmp_path / 'file'}: is a file; name a folder")


def test_each_file_a_folder_output_would_write_is_checked(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "comparison.csv").write_text("my own table")
    files = ["comparison.json", "comparison.csv"]
    assert refusal(folder, folder=True, files=files) == f"-o {folder / 'comparison.csv'}: exists; {KEPT}"
    assert check_output(folder, inputs={}, overwrite=True, folder=True, files=files) == folder
    assert (folder / "comparison.csv").read_text() == "my own table"


def test_a_missing_output_folder_is_made(tmp_path: Path) -> None:
    assert check_output(tmp_path / "new" / "deeper" / "best.json", inputs={}, overwrite=False) == (
        tmp_path / "new" / "deeper" / "best.json")
    assert (tmp_path / "new" / "deeper").is_dir() and not (tmp_path / "new" / "deeper" / "best.json").exists()
    assert check_output(tmp_path / "release", inputs={}, overwrite=False, folder=True, files=["config.json"]) == (
        tmp_path / "release")
    assert list((tmp_path / "new" / "deeper").iterdir()) == [] and list((tmp_path / "release").iterdir()) == []


def test_a_file_in_the_way_of_the_folder_is_named(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("mine")
    path = tmp_path / "notes" / "runs" / "best.json"
    assert refusal(path) == f"-o {path}: cannot be written ({tmp_path / 'notes'} is a file, not a folder)"
    assert refusal(tmp_path / "notes" / "model", folder=True, files=["config.json"]) == (
        f"-o {tmp_path / 'notes' / 'model'}: cannot be written ({tmp_path / 'notes'} is a file, not a folder)")
    assert (tmp_path / "notes").read_text() == "mine"


def test_a_home_relative_output_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert check_output("~/runs/best.json", inputs={}, overwrite=False) == tmp_path / "runs" / "best.json"
    assert (tmp_path / "runs").is_dir()


def test_an_existing_pipe_is_passed_through_even_without_overwrite(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert check_output(pipe, inputs={}, overwrite=False) == pipe


def test_a_folder_output_holding_an_input_names_that_file(tmp_path: Path) -> None:
    study = tmp_path / "small.toml"
    study.write_text("[study]")
    message = refusal(tmp_path, inputs={resolved(study): "the study file"}, overwrite=True, folder=True,
                      files=["small.toml"])
    assert message == f"-o {study}: is the study file of this run; {NEVER}"


# --- is_stream and resolved ------------------------------------------------------------------------------------------


def test_only_devices_pipes_and_sockets_are_streams(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere")
    assert is_stream(tmp_path / "pipe")
    assert not is_stream(tmp_path / "file") and not is_stream(tmp_path) and not is_stream(tmp_path / "missing")
    assert not is_stream(tmp_path / "dangling")
    if Path("/dev/null").exists():
        assert is_stream(Path("/dev/null"))


def test_resolved_follows_every_symlink_and_expands_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = resolved(tmp_path)
    (real / "data").mkdir()
    (real / "data" / "records.jsonl").write_text("")
    (real / "link").symlink_to(real / "data")
    (real / "again").symlink_to(real / "link" / "records.jsonl")
    assert resolved(real / "again") == real / "data" / "records.jsonl"
    monkeypatch.setenv("HOME", str(real))
    assert resolved("~/link/records.jsonl") == real / "data" / "records.jsonl"
    monkeypatch.chdir(real / "data")
    assert resolved("../link/../data/x") == real / "data" / "x"


# --- write_atomic ----------------------------------------------------------------------------------------------------


def test_text_is_written_as_utf8_and_bytes_as_they_are(tmp_path: Path) -> None:
    assert write_atomic(str(tmp_path / "text.txt"), "é\n") == tmp_path / "text.txt"
    assert (tmp_path / "text.txt").read_bytes() == b"\xc3\xa9\n"
    write_atomic(tmp_path / "data.bin", b"\x00\xff")
    assert (tmp_path / "data.bin").read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin", "text.txt"]  # no temporary file is left


def test_missing_folders_are_made_unless_parents_is_false(tmp_path: Path) -> None:
    write_atomic(tmp_path / "a" / "b" / "out.json", "{}")
    assert (tmp_path / "a" / "b" / "out.json").read_text() == "{}"
    with pytest.raises(OSError) as missing:
        write_atomic(tmp_path / "c" / "out.json", "{}", parents=False)
    assert missing.value.errno == errno.ENOENT and str(missing.value).startswith(f"{tmp_path / 'c' / 'out.json'}: ")
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize("mask", [0o022, 0o000, 0o027])
def test_a_written_file_and_the_folders_made_for_it_are_owner_only_whatever_the_umask(tmp_path: Path,
                                                                                      mask: int) -> None:
    (tmp_path / "theirs").mkdir(mode=0o755)
    with umask(mask):
        write_atomic(tmp_path / "theirs" / "new" / "deeper" / "out.json", "{}")
        write_atomic(tmp_path / "theirs" / "new" / "out.json", "{}")  # written over: the new file is owner-only too
    assert modes(tmp_path / "theirs") == {"theirs": 0o755, "theirs/new": 0o700, "theirs/new/deeper": 0o700,
                                          "theirs/new/deeper/out.json": 0o600, "theirs/new/out.json": 0o600}


@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_owner_only_files_and_folders_are_made_so_and_what_exists_is_left_alone(tmp_path: Path, mask: int) -> None:
    (tmp_path / "kept").mkdir(mode=0o755)
    (tmp_path / "kept" / "mine.db").write_text("mine")
    (tmp_path / "kept" / "mine.db").chmod(0o644)
    with umask(mask):
        assert owner_folder(tmp_path / "kept" / "a" / "b") == tmp_path / "kept" / "a" / "b"
        assert create_owner_only(tmp_path / "kept" / "c" / "study.db") is True
        assert create_owner_only(tmp_path / "kept" / "mine.db") is False
    assert modes(tmp_path / "kept") == {"kept": 0o755, "kept/a": 0o700, "kept/a/b": 0o700, "kept/c": 0o700,
                                        "kept/c/study.db": 0o600, "kept/mine.db": 0o644}
    assert (tmp_path / "kept" / "mine.db").read_text() == "mine" and (tmp_path / "kept" / "c" / "study.db").stat(
    ).st_size == 0


def test_sqlite_gives_its_sidecars_the_mode_of_the_database_the_tool_created(tmp_path: Path) -> None:
    """Why creating the database 0600 is enough: SQLite creates its journal, WAL and shared-memory files with the
    database's own mode, whatever the umask."""
    import sqlite3

    with umask(0):
        create_owner_only(tmp_path / "study.db")
        connection = sqlite3.connect(tmp_path / "study.db")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE t (x)")
        connection.execute("INSERT INTO t VALUES (1)")
        connection.commit()
        sidecars = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
        connection.close()
    assert sidecars == {"study.db": 0o600, "study.db-shm": 0o600, "study.db-wal": 0o600}


def test_writing_over_a_symlink_replaces_the_link_not_its_target(tmp_path: Path) -> None:
    (tmp_path / "mine.json").write_text("mine")
    (tmp_path / "out.json").symlink_to(tmp_path / "mine.json")
    write_atomic(tmp_path / "out.json", "new")
    assert not (tmp_path / "out.json").is_symlink() and (tmp_path / "out.json").read_text() == "new"
    assert (tmp_path / "mine.json").read_text() == "mine"


def test_a_device_is_written_straight_through() -> None:
    if not Path("/dev/null").exists():
        pytest.skip("no /dev/null on this system")
    assert write_atomic("/dev/null", "discarded") == Path("/dev/null")
    assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)  # still the device, not a file renamed over it


# --- owner-side files through the command line -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("mask", [0o022, 0o000])
def test_every_owner_side_file_of_the_command_line_is_owner_only_whatever_the_umask(
        study_file: Callable[..., Path], tmp_path: Path, mask: int) -> None:
    """The study database and its artifact folder, an export, a report, a journal storage, and a file written by
    plain ``open`` under the command line (as optuna-dashboard and submitit write): 0600 files in 0700 folders."""
    path = study_file()
    with umask(mask):
        with_a_feasible_trial(path)
        with_a_feasible_trial(path, storage=f"journal:{tmp_path / 'runs' / 'journal.log'}")
        assert main(["export", str(path), "-o", str(tmp_path / "out" / "best.json")]) == 0
        assert main(["report", str(path), "-o", str(tmp_path / "out" / "reports" / "report.html")]) == 0
        assert main(["demo", "--dir", str(tmp_path / "demo")]) == 0
        assert os.umask(mask) == mask  # the command line gave the caller its umask back
    assert modes(tmp_path / "out") == {"out": 0o700, "out/best.json": 0o600, "out/reports": 0o700,
                                       "out/reports/report.html": 0o600}
    assert modes(tmp_path / "runs") == {"runs": 0o700, "runs/journal.log": 0o600}
    assert modes(tmp_path / "demo") == {"demo": 0o700, "demo/demo.toml": 0o600}
    assert modes(tmp_path / "small-artifacts")["small-artifacts"] == 0o700
    assert stat.S_IMODE((tmp_path / "small.db").stat().st_mode) == 0o600


# --- a folder replaced as a whole ------------------------------------------------------------------------------------


def test_a_replaced_folder_holding_an_input_is_refused_and_so_is_an_input_beside_it(study_file: Callable[..., Path],
                                                                                    tmp_path: Path) -> None:
    path, data = on_a_data_file(study_file, tmp_path)
    config, args = StudyConfig.from_toml(path), argparse.Namespace()
    for folder in (tmp_path, tmp_path.parent):
        with pytest.raises(ConfigError) as info:
            check_replaced_folder(folder, config=config, args=args, what="-o")
        assert str(info.value) == (f"-o {folder}: holds {resolved(data)}, the data of this run; replacing the folder "
                                   "would delete it (name another folder; --overwrite does not allow this)")
    with pytest.raises(ConfigError, match=f"-o {tmp_path / 'records.jsonl'}: is the data of this run"):
        check_replaced_folder(tmp_path / "records.jsonl", config=config, args=args, what="-o")
    with pytest.raises(ConfigError, match=f"-o {data}: is the data of this run"):
        check_replaced_folder(tmp_path / "model", config=config, args=args, what="-o", beside=[data])
    check_replaced_folder(tmp_path / "model", config=config, args=args, what="-o",
                          beside=[tmp_path / "model.owner-report.json"])
    assert not (tmp_path / "model").exists()  # a check creates nothing


def test_a_replaced_folder_holding_the_studys_cache_or_artifacts_is_refused(study_file: Callable[..., Path],
                                                                          tmp_path: Path) -> None:
    work = tmp_path / "work"
    path = study_file(study={"artifacts": str(work / "figures")}, swagppm={"cache_dir": str(work / "cache")})
    config = StudyConfig.from_toml(path).with_storage(f"sqlite:///{tmp_path / 'db' / 'small.db'}")
    (work / "figures").mkdir(parents=True)
    with pytest.raises(ConfigError, match="holds .*figures, the study's artifact folder of this run"):
        check_replaced_folder(work, config=config, args=argparse.Namespace(), what="-o")
    (work / "cache").mkdir()
    with pytest.raises(ConfigError, match=r"is the private cache \(cache_dir\) of this run"):
        check_replaced_folder(work / "cache", config=config, args=argparse.Namespace(), what="--release")
    check_replaced_folder(tmp_path / "model", config=config, args=argparse.Namespace(), what="-o")


@pytest.mark.slow
@pytest.mark.parametrize("argv, named", [
    (["release", "STUDY", "-o", "HOME", "--overwrite", "--force"], "the study file"),
    (["release", "--from", "EXPORT", "-o", "HOME", "--overwrite", "--force"], "the export read (--from)"),
    (["release", "STUDY", "--storage", "sqlite:///ELSEWHERE/other.db", "-o", "ELSEWHERE", "--overwrite", "--force"],
     "the study storage"),
    (["fit", "STUDY", "--release", "HOME", "--overwrite", "--force"], "the study file"),
    (["release", "STUDY", "-o", "DATA", "--overwrite", "--force"], "the data"),
])
def test_release_overwrite_never_deletes_an_input(study_file: Callable[..., Path], tmp_path: Path, argv: list[str],
                                                  named: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``--overwrite`` replaces the release folder as a whole: a folder holding the study file, its database, the
    data or the export read is refused in one line before anything is read or fitted, and all of it stays."""
    path, data = a_study_on_a_data_file(study_file, tmp_path)
    export = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(export)]) == 0
    elsewhere = tmp_path / "elsewhere"
    with_a_feasible_trial(path, storage=f"sqlite:///{elsewhere / 'other.db'}")
    names = {"STUDY": str(path), "HOME": str(tmp_path), "EXPORT": str(export), "DATA": str(data),
             "ELSEWHERE": str(elsewhere)}
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    capsys.readouterr()
    assert main([names.get(arg, arg.replace("ELSEWHERE", str(elsewhere))) for arg in argv]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert named in line and "--overwrite does not allow this" in line, line
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    assert not (tmp_path / "cache").exists()  # refused before any fit


# --- a full disk -----------------------------------------------------------------------------------------------------

# The command line where no file may grow past LIMIT bytes: a write past it fails partway (EFBIG), as on a full disk.
LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
from tuner.cli import main
sys.exit(main(sys.argv[2:]))
"""
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real full file system: a tiny tmpfs filled to its last byte (skipped where this user cannot mount one)."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
                                                   capture_output=True, check=False).returncode == 0
    if not mounted:
        pytest.skip("no tmpfs can be mounted here (the file-size-limit test covers the same failure)")
    try:
        handle = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        with contextlib.suppress(OSError):
            while True:
                os.write(handle, b"\0" * 4096)
        os.close(handle)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def write_failure(path: Path, line: str, reason: str) -> None:
    assert line == (f"swagppm-tune: error: {path}: could not be written ({reason}); the file there, if any, is "
                    "unchanged"), line


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["export", "report"])
def test_an_output_on_a_full_disk_is_one_line_and_exit_2(study_file: Callable[..., Path], full_disk: Path, verb: str,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    capsys.readouterr()
    assert main([verb, str(path), "-o", str(full_disk / "out")]) == 2
    write_failure(full_disk / "out", one_error_line(capsys.readouterr().err), os.strerror(errno.ENOSPC))
    assert sorted(p.name for p in full_disk.iterdir()) == ["filler"]  # no half file, no temporary file


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["export", "report"])
def test_an_output_cut_by_a_file_size_limit_is_one_line_and_exit_2(study_file: Callable[..., Path], tmp_path: Path,
                                                                   verb: str) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    (tmp_path / "out").write_text("kept")
    done = subprocess.run([sys.executable, "-c", LIMITED, "512", verb, str(path), "-o", str(tmp_path / "out"),
                           "--overwrite"], env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                          text=True, timeout=PATIENCE, check=False)
    assert done.returncode == 2, done.stderr[-800:]
    write_failure(tmp_path / "out", one_error_line(done.stderr), os.strerror(errno.EFBIG))
    assert (tmp_path / "out").read_text() == "kept" and not list(tmp_path.glob(".out.*"))


@pytest.mark.fits
def test_an_audit_output_on_a_full_device_is_one_line_and_exit_2(study_file: Callable[..., Path],
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """The audit fits and audits first; its JSON then meets /dev/full (every write: no space left): one line, exit 2,
    the audit's result printed above it."""
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full (a file every write to fails) on this system")
    path = study_file()
    with_a_feasible_trial(path)
    capsys.readouterr()
    assert main(["audit", str(path), "-o", "/dev/full", "-q"]) == 2
    out, err = capsys.readouterr()
    write_failure(Path("/dev/full"), one_error_line(err), os.strerror(errno.ENOSPC))
    assert "membership-inference audit of c = " in out


# --- owner-side files in a git checkout ------------------------------------------------------------------------------


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A real git working tree (``git init``) in ``tmp_path / "repo"``."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    repo = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True, capture_output=True)
    return resolved(repo)


def checkout_warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "in the git working tree" in line]


def test_an_owner_side_file_in_a_checkout_is_named_once_until_git_ignores_it(
        checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_atomic(checkout / "out" / "best.json", "{}")
    write_atomic(checkout / "out" / "best.json", "{}")  # the same file again: not named again
    assert checkout_warnings(capsys.readouterr().err) == [
        f"warning: {checkout / 'out' / 'best.json'}: private figures (exact epsilon, seeds, settings of fits on "
        f"private data) in the git working tree {checkout}, not ignored by git: one `git add -A` would publish it; "
        f"add /out/best.json to {checkout / '.gitignore'}, or keep it outside the checkout"]
    (checkout / ".gitignore").write_text("*.html\n")
    write_atomic(checkout / "report.html", "<html>")
    write_atomic(tmp_path / "outside.json", "{}")
    write_atomic(checkout / "figure.svg", "<svg/>", warn=False)
    assert checkout_warnings(capsys.readouterr().err) == []


@pytest.mark.slow
def test_a_new_study_in_a_checkout_names_its_database_figures_and_cache_in_one_line(
        checkout: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_study(checkout / "small.toml", merged())
    with_a_feasible_trial(path)
    assert checkout_warnings(capsys.readouterr().err) == [
        f"warning: {checkout / 'small.db'}, {checkout}/small-artifacts/, {checkout}/cache/: private figures "
        f"(exact epsilon, seeds, settings of fits on private data) in the git working tree {checkout}, not ignored "
        f"by git: one `git add -A` would publish them; add /small.db /small-artifacts/ /cache/ to "
        f"{checkout / '.gitignore'}, or keep them outside the checkout"]
    with_a_feasible_trial(path)  # the study exists: nothing is said again
    assert checkout_warnings(capsys.readouterr().err) == []


@pytest.mark.fits
def test_a_release_in_a_checkout_names_its_owner_report_and_owner_report_keeps_it_outside(
        checkout: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's flow leaves FOLDER.owner-report.json beside the release, in the user's checkout: said once, with
    the way out; ``--owner-report`` puts it outside, owner-only, and nothing private stays beside the folder."""
    path = write_study(checkout / "small.toml", merged())
    (checkout / ".gitignore").write_text("/small.db\n/small-artifacts/\n/cache/\n")
    fit = ["fit", str(path), "--c", "1.0", "--ft-epochs", "1", "--figures", os.devnull, "--force", "--release"]
    assert main([*fit, str(checkout / "released")]) == 0
    report = checkout / "released.owner-report.json"
    assert checkout_warnings(capsys.readouterr().err) == [
        f"warning: {report}: private figures (exact epsilon, seeds, settings of fits on private data) in the git "
        f"working tree {checkout}, not ignored by git: one `git add -A` would publish it; add "
        f"/released.owner-report.json to {checkout / '.gitignore'}, or keep it outside the checkout (--owner-report "
        "FILE)"]
    elsewhere = tmp_path / "private" / "owner.json"
    assert main([*fit, str(checkout / "again"), "--owner-report", str(elsewhere)]) == 0
    out, err = capsys.readouterr()
    assert checkout_warnings(err) == [] and f"owner-only report (not for publication): {elsewhere}" in out
    assert stat.S_IMODE(elsewhere.stat().st_mode) == 0o600 and (checkout / "again" / "release_card.json").is_file()
    assert not (checkout / "again.owner-report.json").exists()
