"""An all-or-nothing release folder: claimed under a lock, written into a staging folder, renamed into place.

A release ``DIR`` is claimed by an exclusive ``flock`` on ``.DIR.lock`` beside it,
held from before the fit until the folder is in place, so a second release into
the same folder fails at once. Everything is written into ``.DIR.staging-<pid>-<hex>``
beside the target, with ``config.json`` kept under another name until the end (a
staging folder never loads as a model), and renamed into place only when the
model, card, README and owner report are all written. The owner report is moved
out first, beside the folder (``DIR.owner-report.json``, 0600) or wherever the
caller puts it (outside a git checkout, say), never inside the public folder. A failed release
removes its staging folder; a killed one leaves it, and the next claim of the same
target removes it (whoever holds the lock, no staging folder of that target is live).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import glob
import json
import os
import secrets
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from swagppm.errors import ConfigError

OWNER_FORMAT = "swagppm-owner-report/1"
CARD_FILE = "release_card.json"  # the public card every release holds (swagppm.releases.card)
CARD_FORMAT_PREFIX = "swagppm-release-card/"
STAGED_REPORT = ".owner-report.json"
HIDDEN_CONFIG = ".config.json.staged"
FILE_MODE, FOLDER_MODE, OWNER_MODE = 0o644, 0o755, 0o600


def owner_report_path(out: Path) -> Path:
    """Where the owner-only report of the release ``out`` goes: beside it, never inside."""
    return out.parent / f"{out.name}.owner-report.json"


def check_target(out: Path, *, overwrite: bool, report: Path | None = None) -> None:
    """Refuse a target that is a file, a folder that is not empty (with ``overwrite``: one that holds no release the
    tool wrote), a report the tool did not write, and a ``report`` path (default: beside the folder) inside the
    public folder: nothing the tool replaces was not written by it."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: the release folder is a file; name a new folder")
    if out.is_dir() and any(out.iterdir()):
        if not overwrite:
            raise ConfigError(f"{out}: the release folder is not empty; name a new folder, or pass --overwrite "
                              "(overwrite=True in Python) to replace an earlier release there as a whole")
        if not _is_release(out):
            raise ConfigError(f"{out}: --overwrite replaces only a release folder swagppm wrote (one holding its "
                              f"{CARD_FILE}), and this folder holds other files; name a new folder")
    report = owner_report_path(out) if report is None else report
    if Path(os.path.realpath(out)) in Path(os.path.realpath(report)).parents:
        raise ConfigError(f"{report}: the owner-only report would lie inside the release folder {out}, which is "
                          "public; put it elsewhere")
    if report.exists() and not _is_owner_report(report):
        raise ConfigError(f"{report}: exists and was not written by swagppm (the release's owner report goes "
                          "there); move it or name another --owner-report")


def _is_release(folder: Path) -> bool:
    """Whether ``folder`` holds a release card this tool wrote (its format names swagppm's card)."""
    try:
        card = json.loads((folder / CARD_FILE).read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(card, dict) and str(card.get("format", "")).startswith(CARD_FORMAT_PREFIX)


def _is_owner_report(path: Path) -> bool:
    try:
        return bool(json.loads(path.read_text()).get("format") == OWNER_FORMAT)
    except (OSError, UnicodeDecodeError, ValueError, AttributeError):
        return False


@dataclass(kw_only=True)
class ReleaseTarget:
    """A claimed release folder: its lock is held until ``close``; ``staging`` writes it all or nothing."""

    path: Path
    overwrite: bool
    lock_fd: int | None
    report_path: Path | None = None  # where the owner-only report goes (None: beside the folder)

    @property
    def report(self) -> Path:
        return owner_report_path(self.path) if self.report_path is None else self.report_path

    def close(self) -> None:
        """Remove the lock file and let the lock go: nothing of a release attempt stays beside the target (a process
        that opened the file meanwhile finds it unlinked once it holds the lock, and opens it again: ``claim``)."""
        if self.lock_fd is not None:
            Path(_lock_path(self.path)).unlink(missing_ok=True)
            os.close(self.lock_fd)
            self.lock_fd = None

    def __enter__(self) -> ReleaseTarget:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def staging(self) -> Iterator[Path]:
        """A fresh staging folder beside the target, removed at the end of the block unless ``commit`` moved it."""
        folder = _hidden_beside(self.path, "staging")
        folder.mkdir(mode=FOLDER_MODE)
        try:
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)  # after a commit the name is gone: nothing to remove

    def commit(self, folder: Path, document: dict[str, object]) -> Path:
        """Put the staged ``folder`` in place with its owner-only report ``document`` beside it; its path.

        The report is written (0600), the files' permissions set, the report moved to
        a hidden name beside the folder, ``config.json`` back, the folder renamed into
        place, then the report: a folder that cannot be put in place leaves no report
        of a release that never happened (and, with ``overwrite``, the live release's
        report untouched).
        """
        write_owner_report(folder, document)
        check_target(self.path, overwrite=self.overwrite, report=self.report)  # still true: nothing else writes
        for path in folder.iterdir():
            path.chmod(OWNER_MODE if path.name == STAGED_REPORT else FILE_MODE)
        folder.chmod(FOLDER_MODE)
        report = _hidden_beside(self.report, "staging")
        _move(folder / STAGED_REPORT, report)
        try:
            if (folder / HIDDEN_CONFIG).exists():
                os.replace(folder / HIDDEN_CONFIG, folder / "config.json")
            self._put_in_place(folder)
        except BaseException:
            report.unlink(missing_ok=True)
            raise
        os.replace(report, self.report)
        return self.path

    def _put_in_place(self, folder: Path) -> None:
        """One rename; with ``overwrite`` the old release goes as a whole."""
        if self.path.is_dir() and any(self.path.iterdir()):
            old = _hidden_beside(self.path, "replaced")
            os.replace(self.path, old)
            os.replace(folder, self.path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(folder, self.path)


def _move(source: Path, target: Path) -> None:
    """A rename, or, onto another file system (an owner report kept elsewhere), an owner-only copy then the
    original's removal."""
    try:
        os.replace(source, target)
        return
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_MODE)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(source.read_bytes())
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    source.unlink()


def _hidden_beside(path: Path, kind: str) -> Path:
    """A fresh hidden name beside ``path`` (``.NAME.KIND-PID-HEX``), which ``claim`` cleans when it is stale."""
    return path.parent / f".{path.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}"


def claim(out_dir: str | Path, *, overwrite: bool, report: str | Path | None = None) -> ReleaseTarget:
    """Check the target, take its lock (a second release into it fails here) and remove stale staging folders.
    ``report``: where the owner-only report goes (default: beside the folder)."""
    out = Path(out_dir)
    report_path = None if report is None else Path(report)
    check_target(out, overwrite=overwrite, report=report_path)
    if report_path is not None:
        try:
            report_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"{report_path}: cannot write the owner report there ({error.strerror or error})") \
                from None
    fd = _locked(out)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.staging-*"):
        shutil.rmtree(stale, ignore_errors=True)
    for stale in out.parent.glob(f".{glob.escape(out.name)}.replaced-*"):
        shutil.rmtree(stale, ignore_errors=True)
    target = ReleaseTarget(path=out, overwrite=overwrite, lock_fd=fd, report_path=report_path)
    for stale in target.report.parent.glob(f".{glob.escape(target.report.name)}.staging-*"):
        stale.unlink(missing_ok=True)
    return target


def _lock_path(out: Path) -> Path:
    return out.parent / f".{out.name}.lock"


def _locked(out: Path) -> int:
    """The target's lock file, open and exclusively locked; a file its holder unlinked on release is opened again."""
    lock = _lock_path(out)
    while True:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, OWNER_MODE)
        except OSError as error:
            raise ConfigError(f"{out}: cannot write beside the release folder ({error.strerror or error})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise ConfigError(f"{out}: another release into this folder is running (it holds {lock.name}); wait "
                              "for it or name another folder") from None
        try:
            if os.fstat(fd).st_ino == os.stat(lock).st_ino:
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)  # unlinked by the holder we waited for: lock the file that is there now


def hide_config(folder: Path) -> None:
    """Keep ``config.json`` under another name until the commit, so a staging folder never loads as a model."""
    os.replace(folder / "config.json", folder / HIDDEN_CONFIG)


def write_owner_report(folder: Path, document: dict[str, object]) -> None:
    """The owner-only report (0600) into the staging folder; the commit moves it beside the release."""
    fd = os.open(folder / STAGED_REPORT, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_MODE)
    with os.fdopen(fd, "w") as handle:
        json.dump({"format": OWNER_FORMAT, **document}, handle, indent=2, allow_nan=True)
