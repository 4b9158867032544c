"""The one rule for every output path of every verb, and writing outputs atomically.

An output is refused, before any work, when it resolves (symlinks followed, hard
links compared by inode) to an input of the run (the study file, its storage, the data, the selection data, the
export or comparison read) or lies inside an input folder, with or without
``--overwrite``; and when it is an existing file, unless ``--overwrite``: the tool
cannot tell a file it wrote from one the user keeps, so it replaces none silently.
Files are written to a temporary file beside the target and renamed into place, so
a failed or killed write leaves the old file (or none), never half of one.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from swagppm import ConfigError, SWAGPPMConfig
from swagppm.config import PRIVATE_TEST
from tuner.config import StudyConfig
from tuner.storage import storage_file

SQLITE_SIDECARS = ("-journal", "-wal", "-shm", ".lock")  # files SQLite and the study lock keep beside the database


def inputs_of(config: StudyConfig | SWAGPPMConfig | None, args: argparse.Namespace) -> dict[Path, str]:
    """Every file or folder the run reads, resolved, with what it is (for the refusal's line)."""
    named: list[tuple[object, str]] = [
        (getattr(args, "study", None), "the study file"), (getattr(args, "source", None), "the export read (--from)"),
        (getattr(args, "comparison", None), "the comparison read (--comparison)"),
        (getattr(args, "data", None), "the data (--data)")]
    selection = getattr(args, "selection_data", None)
    if selection != PRIVATE_TEST:
        named.append((selection, "the selection data (--selection-data)"))
    fit = config.fit if isinstance(config, StudyConfig) else config
    if fit is not None:
        named.append((fit.data.source, "the data"))
    if isinstance(config, StudyConfig):
        named.append((config.path, "the study file"))
        database = _storage_file(config.storage_url)
        if database is not None:
            named += [(database, "the study storage")]
            named += [(database.with_name(database.name + suffix), "the study storage") for suffix in SQLITE_SIDECARS]
    inputs: dict[Path, str] = {}
    for value, what in named:
        if _is_path(value):
            inputs.setdefault(resolved(value), what)
    return inputs


def _storage_file(url: str) -> Path | None:
    try:
        return storage_file(url)
    except ConfigError:  # a malformed URL is reported by the verb that opens it
        return None


def _is_path(value: object) -> bool:
    """Whether a source names a file or folder (not ``synthetic`` or a Hugging Face name that is not a path)."""
    return isinstance(value, (str, Path)) and (isinstance(value, Path) or Path(value).expanduser().exists())


def resolved(path: object) -> Path:
    """``path`` with ``~`` expanded and every symlink followed (the file a write would reach)."""
    return Path(os.path.realpath(Path(str(path)).expanduser()))


def check_output(path: str | Path, *, inputs: Mapping[Path, str], overwrite: bool, what: str = "-o",
                 folder: bool = False, files: Iterable[str] = ()) -> Path:
    """Refuse, before any work, an output that is an input, an existing file (without ``overwrite``) or cannot be
    written; missing folders are made. ``folder``: ``path`` is a folder the verb writes ``files`` into."""
    path = Path(path).expanduser()
    targets = [path / name for name in files] if folder else [path]
    for target in [path, *targets]:
        _refuse_input(target, inputs, what=what, shown=target)
    if not folder and path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; name a file")
    if folder and path.exists() and not path.is_dir():
        raise ConfigError(f"{what} {path}: is a file; name a folder")
    for target in targets:
        if (target.is_file() or target.is_symlink() and not target.exists()) and not overwrite:
            raise ConfigError(f"{what} {target}: exists; swagppm-tune replaces no file it finds (pass --overwrite "
                              "to replace it)")
    if not folder and is_stream(path):
        return path  # a device or pipe (/dev/stdout) holds nothing to destroy: written straight through
    _check_writable(path if folder else path.parent, what=what, shown=path)
    return path


def is_stream(path: Path) -> bool:
    """Whether ``path`` exists and is neither a regular file nor a folder (a device, a pipe, a socket)."""
    return path.exists() and not path.is_file() and not path.is_dir()


def _refuse_input(target: Path, inputs: Mapping[Path, str], *, what: str, shown: Path) -> None:
    real = resolved(target)
    for source, kind in inputs.items():
        same = real == source or _same_file(real, source)
        if same or (source.is_dir() and source in real.parents):
            inside = "" if same else f" lies inside {source}, which"
            raise ConfigError(f"{what} {shown}:{inside} is {kind} of this run; writing there would destroy it "
                              "(name another path; --overwrite does not allow this)")


def _same_file(one: Path, other: Path) -> bool:
    """Whether two existing paths are one file (a hard link has another name but the same inode)."""
    try:
        return one.exists() and other.exists() and os.path.samefile(one, other)
    except OSError:
        return False


def _check_writable(home: Path, *, what: str, shown: Path) -> None:
    try:
        home.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=home).close()
    except OSError as error:
        in_the_way = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else error.strerror or str(error)
        raise ConfigError(f"{what} {shown}: cannot be written ({reason})") from None


def write_atomic(path: str | Path, content: str | bytes, *, parents: bool = True) -> Path:
    """Write ``content`` to a temporary file beside ``path`` and rename it into place (all or nothing); a device or
    pipe is written straight through. ``parents``: create missing folders (else a missing one is an error)."""
    target = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    if is_stream(target):
        target.write_bytes(data)
        return target
    if parents:
        target.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~_umask())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return target


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
