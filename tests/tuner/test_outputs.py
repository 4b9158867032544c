"""``tuner.outputs`` directly: a run's inputs, the output rule's every refusal, streams and atomic writes."""

from __future__ import annotations

import argparse
import dataclasses
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

import pytest

from swagppm import ConfigError, SWAGPPMConfig
from tuner.config import StudyConfig
from tuner.outputs import check_output, inputs_of, is_stream, resolved, write_atomic

NEVER = "writing there would destroy it (name another path; --overwrite does not allow this)"
KEPT = "swagppm-tune replaces no file it finds (pass --overwrite to replace it)"


def on_a_data_file(study_file: Callable[..., Path], tmp_path: Path) -> tuple[Path, Path]:
    """A study file whose records are ``records.jsonl`` beside it (nothing opened): (study file, data file)."""
    data = tmp_path / "records.jsonl"
    data.write_text('{"text": "a record", "label": 0}\n')
    return study_file(data={"source": "records.jsonl", "synthetic_size": None, "synthetic_classes": None}), data


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
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "c" / "out.json", "{}", parents=False)
    assert not (tmp_path / "c").exists()


def test_a_written_file_has_the_modes_the_umask_allows(tmp_path: Path) -> None:
    before = os.umask(0o027)
    try:
        write_atomic(tmp_path / "out.json", "{}")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "out.json").stat().st_mode) == 0o640


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
