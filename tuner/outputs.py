"""The one rule for every output path of every verb, and writing outputs atomically.

An output is refused, before any work, when it resolves (symlinks followed, hard
links compared by inode) to an input of the run (the study file, its storage, the data, the selection data, the
export or comparison read, the public evaluation data) or lies inside an input
folder, with or without ``--overwrite``; and when it is an existing file, unless
``--overwrite``: the tool cannot tell a file it wrote from one the user keeps, so it
replaces none silently. A folder a verb replaces as a whole (a release with
``--overwrite``) is refused as well when it holds an input or a folder the study
keeps (its artifacts, its private cache).
Files are written to a temporary file beside the target and renamed into place, so
a failed or killed write leaves the old file (or none), never half of one; a write
that fails (a full disk, a read-only folder) is one ``WriteFailed`` line.

Every file the tool writes outside the release folder is owner-side (it holds the
exact ε, seeds and settings of a fit on private data), so it is created owner-only,
whatever the umask: files 0600, the folders the tool makes 0700. The command line
also sets the process umask to ``OWNER_UMASK``, so that what other libraries write
for it (optuna-dashboard's artifacts, submitit's job files, SQLite's sidecars) is
owner-only too; the public release folder sets its own modes when it is committed.
An owner-side file written inside a git working tree that git does not ignore is
named in one warning (``warn_in_checkout``): one ``git add -A`` would publish it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from swagppm import ConfigError, SWAGPPMConfig
from swagppm.config import PRIVATE_TEST
from tuner.config import StudyConfig
from tuner.storage import storage_file

SQLITE_SIDECARS = ("-journal", "-wal", "-shm", ".lock")  # files SQLite and the study lock keep beside the database
OWNER_FILE, OWNER_FOLDER = 0o600, 0o700
OWNER_UMASK = 0o077  # the command line's umask: whatever it writes, or has written, is its owner's only
_WARNED: set[Path] = set()  # owner-side paths already named in a checkout warning by this process


class WriteFailed(ConfigError, OSError):
    """An output that could not be written (a full disk, a read-only folder): one line and exit 2 on the command line
    (a ``ConfigError``), and still an ``OSError`` with the original ``errno`` and ``strerror`` for callers that catch
    those."""

    def __init__(self, path: Path, error: OSError) -> None:
        OSError.__init__(self, error.errno, error.strerror or str(error))
        self.message = f"{path}: could not be written ({error.strerror or error}); the file there, if any, is unchanged"

    def __str__(self) -> str:
        return self.message


def inputs_of(config: StudyConfig | SWAGPPMConfig | None, args: argparse.Namespace) -> dict[Path, str]:
    """Every file or folder the run reads, resolved, with what it is (for the refusal's line)."""
    named: list[tuple[object, str]] = [
        (getattr(args, "study", None), "the study file"), (getattr(args, "source", None), "the export read (--from)"),
        (getattr(args, "comparison", None), "the comparison read (--comparison)"),
        (getattr(args, "data", None), "the data (--data)")]
    selection = getattr(args, "selection_data", None)
    if selection != PRIVATE_TEST:
        named.append((selection, "the selection data (--selection-data)"))
    named.append((getattr(args, "public_eval", None), "the public evaluation data (--public-eval)"))
    fit = config.fit if isinstance(config, StudyConfig) else config
    if fit is not None:
        named.append((fit.data.source, "the data"))
    if isinstance(config, StudyConfig):
        named.append((config.path, "the study file"))
        named.append((config.study.public_eval, "the public evaluation data ([study] public_eval)"))
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


def check_replaced_folder(path: str | Path, *, config: StudyConfig | SWAGPPMConfig | None, args: argparse.Namespace,
                          what: str, beside: Iterable[Path] = ()) -> None:
    """Refuse, before any work, a folder the verb replaces as a whole (a release with ``--overwrite``) when it is,
    lies inside or holds an input of the run or a folder the study keeps (its artifacts, its private cache), or when
    a file it writes ``beside`` the folder (the owner report) is an input: replacing it would delete them."""
    inputs = {**inputs_of(config, args), **_kept_folders(config)}
    path = Path(path).expanduser()
    for target in (path, *beside):
        _refuse_input(target, inputs, what=what, shown=target)
    real = resolved(path)
    for source, kind in inputs.items():
        if real in source.parents:
            raise ConfigError(f"{what} {path}: holds {source}, {kind} of this run; replacing the folder would delete "
                              "it (name another folder; --overwrite does not allow this)")


def _kept_folders(config: StudyConfig | SWAGPPMConfig | None) -> dict[Path, str]:
    """The folders a study keeps its own files in (outputs may go inside them; nothing may replace them)."""
    fit = config.fit if isinstance(config, StudyConfig) else config
    folders: dict[Path, str] = {}
    if isinstance(config, StudyConfig):
        folders[resolved(config.artifact_dir)] = "the study's artifact folder"
    if fit is not None and fit.cache_dir is not None:
        folders[resolved(fit.cache_dir)] = "the private cache (cache_dir)"
    return folders


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
        owner_folder(home)
        tempfile.TemporaryFile(dir=home).close()
    except OSError as error:
        in_the_way = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else error.strerror or str(error)
        raise ConfigError(f"{what} {shown}: cannot be written ({reason})") from None


def owner_folder(path: str | Path) -> Path:
    """``path`` and its missing parents created owner-only (0700) whatever the umask; folders already there keep
    their mode (they are not the tool's)."""
    path = Path(path)
    missing = [folder for folder in (path, *path.parents) if not folder.exists()]
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=OWNER_FOLDER)
        except FileExistsError:
            if folder.is_dir():
                continue  # made by a process starting together: its own rule applied
            raise
        os.chmod(folder, OWNER_FOLDER)  # a umask that masks the owner's bits too
    return path


def create_owner_only(path: str | Path) -> bool:
    """An empty file at ``path`` created 0600 (its missing folders 0700) unless one is there; whether it was made.
    For files a library opens by name afterwards (the SQLite database, the journal), so they are never world-readable,
    not even for a moment."""
    path = Path(path)
    owner_folder(path.parent)
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_FILE)
    except FileExistsError:
        return False
    os.fchmod(handle, OWNER_FILE)
    os.close(handle)
    return True


def create_storage_file(config: StudyConfig) -> bool:
    """The study's SQLite or journal file created owner-only before Optuna opens it (SQLite gives its sidecars the
    database's mode); whether it was made now, i.e. the study is new. Server storages make nothing here."""
    file = _storage_file(config.storage_url)
    if file is None:
        return False
    try:
        created = create_owner_only(file)
    except OSError as error:
        raise ConfigError(f"{config.path} [study] storage: {file} cannot be created ({error.strerror or error})"
                          ) from None
    if created:  # a new study: say once where its owner-side files would be published from
        cache = [Path(config.fit.cache_dir)] if config.fit.cache_dir else []
        warn_in_checkout([file], folders=[config.artifact_dir, *cache])
    return created


def write_atomic(path: str | Path, content: str | bytes, *, parents: bool = True, warn: bool = True) -> Path:
    """Write ``content`` owner-only (0600) to a temporary file beside ``path`` and rename it into place (all or
    nothing); a device or pipe is written straight through. ``parents``: create missing folders, owner-only (else a
    missing one is an error). A failure is a ``WriteFailed`` naming ``path``; the file there, if any, stays.
    ``warn``: name the file once if it lands in a git checkout that does not ignore it (``warn_in_checkout``)."""
    target = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    try:
        if is_stream(target):
            target.write_bytes(data)
            return target
        if parents:
            owner_folder(target.parent)
        _replace_with(target, data)
    except OSError as error:
        raise WriteFailed(target, error) from None
    if warn:
        warn_in_checkout([target])
    return target


def _replace_with(target: Path, data: bytes) -> None:
    handle, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    try:
        with os.fdopen(handle, "wb") as stream:
            os.fchmod(stream.fileno(), OWNER_FILE)
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def warn_in_checkout(files: Sequence[Path], *, folders: Sequence[Path] = (), elsewhere: str = "") -> None:
    """One line on stderr naming the owner-side ``files`` and ``folders`` that lie in a git working tree which does not
    ignore them: they hold private figures, and one ``git add -A`` publishes them. It says how to keep them out
    (lines for ``.gitignore``, or ``elsewhere``: an option that writes them outside the checkout). Each path is named
    once per process; nothing is said outside a checkout or without git."""
    exposed: dict[Path, list[str]] = {}
    for path, slash in [*((f, "") for f in files), *((f, "/") for f in folders)]:
        path = resolved(path)
        top = _checkout_of(path)
        if top is not None and path not in _WARNED and not _ignored(top, f"{path.relative_to(top)}{slash}"):
            _WARNED.add(path)
            exposed.setdefault(top, []).append(f"{path.relative_to(top)}{slash}")
    for top, shown in exposed.items():
        it, named = "it" if len(shown) == 1 else "them", ", ".join(os.path.join(top, name) for name in shown)
        print(f"warning: {named}: private figures (exact epsilon, seeds, settings of fits on private data) in the git "
              f"working tree {top}, not ignored by git: one `git add -A` would publish {it}; add "
              f"{' '.join(f'/{name}' for name in shown)} to {top / '.gitignore'}, or keep {it} outside the "
              f"checkout{elsewhere}", file=sys.stderr)


def _checkout_of(path: Path) -> Path | None:
    """The top of the git working tree holding ``path`` (None: none, or no git to ask)."""
    if not any((folder / ".git").exists() for folder in path.parents) or shutil.which("git") is None:
        return None  # most outputs: no subprocess
    folder = next(folder for folder in path.parents if folder.is_dir())
    found = _git(folder, "rev-parse", "--show-toplevel")
    return Path(found.stdout.strip()) if found is not None and found.returncode == 0 else None


def _ignored(top: Path, name: str) -> bool:
    """Whether git ignores ``name`` (relative to ``top``; a folder ends in ``/``) by its .gitignore files,
    info/exclude or the global excludes; a failing git counts as ignoring it (no warning)."""
    found = _git(top, "check-ignore", "-q", "--", name)
    return found is None or found.returncode != 1


def _git(folder: Path, *argv: str) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(["git", "-C", str(folder), *argv], capture_output=True, text=True, timeout=10,
                              check=False)
    except (OSError, subprocess.SubprocessError):
        return None
