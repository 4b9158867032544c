"""The all-or-nothing release folder: target checks and their one-line refusals, the lock, staging and its cleanup."""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

from swagppm.errors import ConfigError
from swagppm.releases.card import FORMAT as CARD_FORMAT
from swagppm.releases.staging import (
    HIDDEN_CONFIG,
    OWNER_FORMAT,
    STAGED_REPORT,
    ReleaseTarget,
    check_target,
    claim,
    hide_config,
    owner_report_path,
    write_owner_report,
)
from tests.swagppm.helpers import umask

TOOL_REPORT = json.dumps({"format": "swagppm-owner-report/1", "epsilon": {"measured": 1.5}})


def _listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def _refusal(out: Path, *, overwrite: bool) -> str:
    with pytest.raises(ConfigError) as info:
        check_target(out, overwrite=overwrite)
    message = str(info.value)
    assert "\n" not in message
    return message


def _not_empty(out: Path) -> str:
    return (f"{out}: the release folder is not empty; name a new folder, or pass --overwrite (overwrite=True in "
            "Python) to replace an earlier release there as a whole")


def _stage(target: ReleaseTarget, files: dict[str, str]) -> Path:
    """Write ``files`` through ``target.staging()`` and commit them with an owner report; the staging folder's
    path."""
    with target.staging() as folder:
        for name, text in files.items():
            (folder / name).write_text(text)
        target.commit(folder, {"epsilon": {"measured": 1.5}})
    return folder


def test_a_new_path_an_empty_folder_and_a_folder_beside_the_tools_own_report_are_accepted_untouched(
        tmp_path: Path) -> None:
    check_target(tmp_path / "new" / "model", overwrite=False)
    (tmp_path / "empty").mkdir()
    check_target(tmp_path / "empty", overwrite=False)
    owner_report_path(tmp_path / "again").write_text(TOOL_REPORT)
    check_target(tmp_path / "again", overwrite=False)
    assert _listing(tmp_path) == ["again.owner-report.json", "empty"]


def test_a_file_at_the_target_is_refused_in_one_line_even_with_overwrite(tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.write_text("my notes")
    for overwrite in (False, True):
        assert _refusal(out, overwrite=overwrite) == f"{out}: the release folder is a file; name a new folder"
    assert out.read_text() == "my notes"


def test_a_folder_that_is_not_empty_is_refused_in_one_line_and_overwrite_only_replaces_a_release(
        tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / ".hidden").write_text("mine")  # a hidden file counts
    assert _refusal(out, overwrite=False) == _not_empty(out)
    assert _refusal(out, overwrite=True) == (  # nothing the tool replaces was not written by it
        f"{out}: --overwrite replaces only a release folder swagppm wrote (one holding its release_card.json), and "
        "this folder holds other files; name a new folder")
    (out / "release_card.json").write_text(json.dumps({"format": "swagppm-release-card/2"}))
    check_target(out, overwrite=True)
    assert _listing(out) == [".hidden", "release_card.json"]


@pytest.mark.parametrize("content", [b"my notes", b"", b"[1, 2]", b'{"format": "swagppm-owner-report/0"}',
                                     b'{"epsilon": 1}', b"\xff\xfe not text", None],
                         ids=["text", "empty", "json-list", "other-format", "no-format", "not-utf8", "a-folder"])
def test_a_report_the_tool_did_not_write_is_refused_in_one_line_even_with_overwrite(content: bytes | None,
                                                                                    tmp_path: Path) -> None:
    out, report = tmp_path / "model", owner_report_path(tmp_path / "model")
    if content is None:
        report.mkdir()
    else:
        report.write_bytes(content)
    for overwrite in (False, True):
        assert _refusal(out, overwrite=overwrite) == (f"{report}: exists and was not written by swagppm (the "
                                                      "release's owner report goes there); move it or name another "
                                                      "--owner-report")
    assert content is None or report.read_bytes() == content


def test_claim_takes_the_lock_beside_the_target_and_a_second_claim_fails_at_once_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "releases" / "model"
    with claim(out, overwrite=False) as first:
        assert first.path == out and first.lock_fd is not None and first.report == owner_report_path(out)
        assert _listing(out.parent) == [".model.lock"]  # the parent is made; the target is not
        with pytest.raises(ConfigError) as info:
            claim(out, overwrite=False)
        assert str(info.value) == (f"{out}: another release into this folder is running (it holds .model.lock); "
                                   "wait for it or name another folder")
    assert first.lock_fd is None
    with claim(out, overwrite=False) as second:
        assert second.lock_fd is not None
    assert _listing(out.parent) == []  # the lock file goes with the lock: nothing of an attempt stays beside it


def test_a_refused_claim_leaves_the_running_releases_staging_folder_alone(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with claim(out, overwrite=False) as running, running.staging() as folder:
        (folder / "model.safetensors").write_text("weights")
        with pytest.raises(ConfigError, match="another release into this folder is running"):
            claim(out, overwrite=False)
        assert (folder / "model.safetensors").read_text() == "weights"
        running.commit(folder, {})
    assert _listing(out) == ["model.safetensors"]


def test_claim_checks_the_target_before_it_makes_a_lock(tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError) as info:
        claim(out, overwrite=False)
    assert str(info.value) == _not_empty(out) and _listing(tmp_path) == ["model"]


def test_claim_refuses_in_one_line_when_nothing_can_be_written_beside_the_target(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    out = tmp_path / "a-file" / "model"
    with pytest.raises(ConfigError) as info:
        claim(out, overwrite=False)
    assert str(info.value) == f"{out}: cannot write beside the release folder (File exists)"


def test_claim_removes_its_targets_stale_staging_and_replaced_folders_and_nothing_else(tmp_path: Path) -> None:
    for name in (".model.staging-1-0a0a0a0a", ".model.replaced-1-0b0b0b0b", ".model2.staging-1-0c0c0c0c",
                 ".other.staging-1-0d0d0d0d", "model.staging-1-0e0e0e0e"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.safetensors").write_text("weights")
    owner_report_path(tmp_path / "model").write_text(TOOL_REPORT)
    with claim(tmp_path / "model", overwrite=False):
        assert _listing(tmp_path) == [".model.lock", ".model2.staging-1-0c0c0c0c", ".other.staging-1-0d0d0d0d",
                                      "model.owner-report.json", "model.staging-1-0e0e0e0e"]


@pytest.mark.parametrize("name", ["model[1]", "model?"])
def test_claim_of_a_target_named_with_glob_characters_removes_only_its_own_stale_folders(name: str,
                                                                                          tmp_path: Path) -> None:
    (tmp_path / ".model1.staging-1-0a0a0a0a").mkdir()  # another target's, perhaps of a release running now
    (tmp_path / f".{name}.staging-1-0b0b0b0b").mkdir()
    with claim(tmp_path / name, overwrite=False):
        assert _listing(tmp_path) == sorted([".model1.staging-1-0a0a0a0a", f".{name}.lock"])


def test_closing_a_target_twice_or_one_without_a_lock_does_nothing(tmp_path: Path) -> None:
    target = claim(tmp_path / "model", overwrite=False)
    target.close()
    target.close()
    assert target.lock_fd is None
    ReleaseTarget(path=tmp_path / "other", overwrite=False, lock_fd=None).close()


def test_each_staging_folder_is_fresh_hidden_beside_the_target_and_named_by_pid_and_random_hex(
        tmp_path: Path) -> None:
    target = ReleaseTarget(path=tmp_path / "model", overwrite=True, lock_fd=None)
    seen = []
    for _ in range(2):
        with pytest.raises(RuntimeError), target.staging() as folder:
            assert folder.parent == tmp_path and folder.is_dir() and _listing(folder) == []
            seen.append(folder.name)
            raise RuntimeError("stop")
    assert all(re.fullmatch(rf"\.model\.staging-{os.getpid()}-[0-9a-f]{{8}}", name) for name in seen)
    assert seen[0] != seen[1]


def test_a_staging_folder_never_holds_config_json_until_the_commit(tmp_path: Path) -> None:
    target = ReleaseTarget(path=tmp_path / "model", overwrite=False, lock_fd=None)
    with target.staging() as folder:
        (folder / "config.json").write_text('{"model_type": "bert"}')
        hide_config(folder)
        assert _listing(folder) == [HIDDEN_CONFIG]
        target.commit(folder, {})
    assert _listing(tmp_path / "model") == ["config.json"]
    assert (tmp_path / "model" / "config.json").read_text() == '{"model_type": "bert"}'


def test_hiding_a_config_that_was_not_written_fails(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        hide_config(tmp_path)


@pytest.mark.parametrize("mask", [0o077, 0o022, 0o000])
def test_the_commit_makes_files_readable_by_others_and_the_report_owner_only_whatever_theumask(
        tmp_path: Path, mask: int) -> None:
    """The release folder is the one public output: 0644 files in a 0755 folder even under the command line's umask
    077, and never writable by others under 000; its owner report and lock stay owner-only."""
    out = tmp_path / "model"
    with umask(mask), claim(out, overwrite=False) as target:
        assert stat.S_IMODE((tmp_path / ".model.lock").stat().st_mode) == 0o600  # while the release holds it
        folder = _stage(target, {"model.safetensors": "weights", "release_card.json": "{}", "README.md": "# card"})
    assert not folder.exists() and _listing(tmp_path) == ["model", "model.owner-report.json"]
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in out.iterdir()} == {
        "model.safetensors": 0o644, "release_card.json": 0o644, "README.md": 0o644}
    assert stat.S_IMODE(owner_report_path(out).stat().st_mode) == 0o600


def test_an_empty_folder_at_the_target_is_replaced_by_the_release(tmp_path: Path) -> None:
    out = tmp_path / "model"
    out.mkdir()
    _stage(ReleaseTarget(path=out, overwrite=False, lock_fd=None), {"README.md": "# card"})
    assert _listing(out) == ["README.md"] and _listing(tmp_path) == ["model", "model.owner-report.json"]


@pytest.mark.parametrize("error", [RuntimeError("the fit failed"), KeyboardInterrupt()])
def test_a_failed_release_removes_its_staging_folder_and_leaves_nothing(error: BaseException, tmp_path: Path) -> None:
    target = ReleaseTarget(path=tmp_path / "model", overwrite=False, lock_fd=None)
    with pytest.raises(type(error)) as info, target.staging() as folder:
        (folder / "model.safetensors").write_text("weights")
        write_owner_report(folder, {})
        raise error
    assert info.value is error and _listing(tmp_path) == []


def test_a_staging_folder_left_without_a_commit_is_discarded_and_leaves_nothing(tmp_path: Path) -> None:
    target = ReleaseTarget(path=tmp_path / "model", overwrite=False, lock_fd=None)
    with target.staging() as folder:
        (folder / "README.md").write_text("x")
    assert _listing(tmp_path) == []


def test_a_target_filled_by_someone_else_while_staging_is_not_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with pytest.raises(ConfigError) as info, \
            ReleaseTarget(path=out, overwrite=False, lock_fd=None).staging() as folder:
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        ReleaseTarget(path=out, overwrite=False, lock_fd=None).commit(folder, {})
    assert str(info.value) == _not_empty(out)
    assert _listing(tmp_path) == ["model"] and (out / "notes.txt").read_text() == "mine"


def test_a_report_written_by_someone_else_while_staging_is_not_overwritten(tmp_path: Path) -> None:
    out, report = tmp_path / "model", owner_report_path(tmp_path / "model")
    with pytest.raises(ConfigError, match="was not written by swagppm"), \
            ReleaseTarget(path=out, overwrite=False, lock_fd=None).staging() as folder:
        report.write_text("my notes")
        ReleaseTarget(path=out, overwrite=False, lock_fd=None).commit(folder, {})
    assert _listing(tmp_path) == ["model.owner-report.json"] and report.read_text() == "my notes"


def test_overwrite_replaces_the_old_release_and_its_report_as_a_whole(tmp_path: Path) -> None:
    out = tmp_path / "model"
    _stage(ReleaseTarget(path=out, overwrite=False, lock_fd=None),
           {"old.bin": "old", "README.md": "old card", "release_card.json": json.dumps({"format": CARD_FORMAT})})
    owner_report_path(out).write_text(json.dumps({"format": OWNER_FORMAT, "old": True}))
    _stage(ReleaseTarget(path=out, overwrite=True, lock_fd=None), {"README.md": "new card"})
    assert _listing(tmp_path) == ["model", "model.owner-report.json"]  # no .model.replaced-* left
    assert _listing(out) == ["README.md"] and (out / "README.md").read_text() == "new card"
    assert json.loads(owner_report_path(out).read_text()) == {"format": OWNER_FORMAT,
                                                              "epsilon": {"measured": 1.5}}


def test_a_commit_whose_final_rename_fails_leaves_no_owner_report(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    out = tmp_path / "model"
    out.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(NotADirectoryError):
        _stage(ReleaseTarget(path=out, overwrite=False, lock_fd=None), {"README.md": "# card"})
    assert not owner_report_path(out).exists()


def test_the_owner_report_is_created_owner_only_whatever_the_umask_and_starts_with_its_format(
        tmp_path: Path) -> None:
    with umask(0):
        write_owner_report(tmp_path, {"epsilon": {"measured": float("nan")}, "trials_run": 3})
    path = tmp_path / STAGED_REPORT
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert path.read_text() == ('{\n  "format": "swagppm-owner-report/1",\n  "epsilon": {\n    "measured": NaN\n'
                                '  },\n  "trials_run": 3\n}')


def test_an_owner_report_is_never_written_over(tmp_path: Path) -> None:
    write_owner_report(tmp_path, {"first": True})
    with pytest.raises(FileExistsError):
        write_owner_report(tmp_path, {"second": True})
    assert json.loads((tmp_path / STAGED_REPORT).read_text()) == {"format": OWNER_FORMAT, "first": True}


def test_an_owner_report_kept_elsewhere_goes_there_owner_only_and_nothing_goes_beside(tmp_path: Path) -> None:
    out, report = tmp_path / "public" / "model", tmp_path / "private" / "reports" / "model.json"
    with umask(0o022), claim(out, overwrite=False, report=report) as target:
        assert target.report == report
        folder = _stage(target, {"model.safetensors": "weights", "release_card.json": "{}"})
    assert not folder.exists() and _listing(out.parent) == ["model"]
    assert json.loads(report.read_text())["format"] == OWNER_FORMAT and _listing(report.parent) == ["model.json"]
    assert stat.S_IMODE(report.stat().st_mode) == 0o600 and stat.S_IMODE(report.parent.stat().st_mode) == 0o700


def test_an_owner_report_inside_the_public_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "model"
    with pytest.raises(ConfigError) as info:
        claim(out, overwrite=True, report=out / "owner.json")
    assert str(info.value) == (f"{out / 'owner.json'}: the owner-only report would lie inside the release folder "
                               f"{out}, which is public; put it elsewhere")
    assert _listing(tmp_path) == []


def test_an_owner_report_on_another_file_system_is_copied_owner_only(tmp_path: Path) -> None:
    """A real second file system (a tmpfs): the report cannot be renamed there, so it is copied and the staged one
    removed."""
    other = tmp_path / "other"
    other.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(other)],
                                           capture_output=True, check=False).returncode != 0:
        pytest.skip("no second file system can be mounted here")
    try:
        with claim(tmp_path / "model", overwrite=False, report=other / "model.json") as target:
            _stage(target, {"README.md": "# card"})
        assert json.loads((other / "model.json").read_text())["format"] == OWNER_FORMAT
        assert stat.S_IMODE((other / "model.json").stat().st_mode) == 0o600 and _listing(other) == ["model.json"]
        assert _listing(tmp_path / "model") == ["README.md"]
    finally:
        subprocess.run(["umount", str(other)], check=False)
