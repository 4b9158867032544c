"""The private on-disk cache for stage 1 and frozen-encoder features.

Entries hold per-record values (risks, features), so the cache lives in a folder
the tool creates itself, owner-only (0700), with files 0600 and a marker file that
says it is the tool's own: a ``cache_dir`` naming a folder that already exists
without the marker (a shared folder, a home cache) gets a subfolder
``swagppm-private`` instead of being taken over, and ``clear_cache`` deletes only
a marked folder's own entries. Writes go to a temporary file in the same folder
and are renamed into place (atomic on POSIX); an exclusive ``flock`` per key lets
several processes share the cache, the first computing and the others waiting,
then reading. Each entry stores a SHA-256 checksum of its contents (every tensor's
exact bytes), checked on every read: an entry that does not load, or whose bytes
no longer match (a damaged disk, a copy cut short), is named in a warning and
recomputed, never used. Temporary files left by a killed writer are removed by the
next writer of the same key.

A process that fits holds a shared lock on the marker for as long as it uses the
cache (``PrivateCache(hold=True)``); ``clear_cache`` takes it exclusively, so it
refuses a cache in use instead of deleting entries and the key under a running fit.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from swagppm.errors import ConfigError

if TYPE_CHECKING:  # imported where entries are read, written or digested: naming or cleaning the cache loads no torch
    import torch

CACHE_FORMAT = 3  # 3: entries carry a checksum of their contents
CHECKSUM = "checksum"
MARKER = ".swagppm-private-cache"
SUBFOLDER = "swagppm-private"
_MARKER_TEXT = "Private working cache of swagppm (per-record values). `swagppm-tune clean` deletes it.\n"
FINGERPRINT_KEY = "fingerprint.key"  # provenance.fingerprint_key's secret: random, not derived from any record
HUB_FOLDER = "hub"  # Hugging Face Hub datasets a study downloaded (swagppm.data.sources.hub_cache), private records
# entries, their locks and temporary files, and the fingerprint key
_OWN_FILE = re.compile(rf"^(\.?[a-z0-9]+-[0-9a-f]{{40}}(\.pt|\.json|\.lock|-.*\.tmp)"
                       rf"|{re.escape(FINGERPRINT_KEY)})$")


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swagppm"


def cache_key(*parts: Any) -> str:
    """A stable hex key for JSON-serialisable parts (configs, hashes, seeds)."""
    text = json.dumps([CACHE_FORMAT, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


def _requested(directory: str | Path | None) -> Path:
    return Path(directory).expanduser() if directory is not None else default_cache_dir()


def _is_own(folder: Path) -> bool:
    return (folder / MARKER).is_file()


def own_cache_dir(directory: str | Path | None) -> Path | None:
    """The folder the tool's cache for ``directory`` lives in, if it exists (None when nothing was created)."""
    requested = _requested(directory)
    for folder in (requested, requested / SUBFOLDER):
        if folder.is_dir() and _is_own(folder):
            return folder
    return None


def _create_own(directory: str | Path | None) -> Path:
    """The cache folder for ``directory``: the folder itself when new, else a marked subfolder of it."""
    requested = _requested(directory)
    existed = requested.exists()  # looked at before the marker: a folder a process starting together publishes
    found = own_cache_dir(requested)  # appears marked, so one that existed and is unmarked now is not the tool's
    if found is not None:
        return found
    folder = requested / SUBFOLDER if existed else requested
    if not folder.exists():
        try:
            published = _publish_marked(folder)
        except OSError as error:
            raise ConfigError(f"swagppm.cache_dir = {str(requested)!r}: cannot create the private cache folder "
                              f"{folder} ({error.strerror or error})") from None
        if published is not None:
            return published
    found = own_cache_dir(requested)  # published meanwhile by a process starting together
    if found is None:
        raise ConfigError(f"swagppm.cache_dir = {str(requested)!r}: {folder} exists and was not created by swagppm; "
                          "name a new folder for the private cache")
    return found


def _publish_marked(folder: Path) -> Path | None:
    """Create ``folder`` with its marker in one step (a marked staging folder renamed into place), so that processes
    starting together never see it unmarked; None when something else created ``folder`` first."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    os.chmod(staging, 0o700)  # owner only, whatever the umask
    marker = staging / MARKER
    marker.write_text(_MARKER_TEXT)
    os.chmod(marker, 0o600)
    try:
        staging.rename(folder)
    except OSError:
        if not folder.exists():
            raise
        marker.unlink()
        staging.rmdir()
        return None
    return folder


@dataclass(frozen=True, kw_only=True)
class CacheContents:
    """What ``clear_cache`` would delete: the tool's cache folder (None: there is none) and its own files in it."""

    folder: Path | None
    files: tuple[Path, ...] = ()
    key: Path | None = None  # the fingerprint key, when it is among ``files``


def cache_contents(directory: str | Path | None, *, keep_key: bool = False) -> CacheContents:
    """The tool's own files in the cache for ``directory``, read before deleting anything (so a caller can say what
    goes); a folder without the marker that holds anything is refused: it is not the tool's."""
    folder = own_cache_dir(directory)
    if folder is None:
        requested = _requested(directory)
        if requested.exists() and any(requested.iterdir()):
            raise ConfigError(f"{requested} is not a private cache created by swagppm (no {MARKER} marker); "
                              "nothing was deleted")
        return CacheContents(folder=None)
    files = tuple(sorted(path for path in folder.iterdir() if path.is_file() and _OWN_FILE.match(path.name)
                         and not (keep_key and path.name == FINGERPRINT_KEY)))
    hub = folder / HUB_FOLDER
    downloaded = tuple(sorted(path for path in hub.rglob("*") if path.is_file() and not path.is_symlink())) \
        if hub.is_dir() and not hub.is_symlink() else ()
    key = folder / FINGERPRINT_KEY
    return CacheContents(folder=folder, files=files + downloaded, key=key if key in files else None)


def clear_cache(directory: str | Path | None, *, keep_key: bool = False) -> tuple[Path | None, int]:
    """Delete the tool's own cache entries for ``directory``: (the folder, or None if there is none; files removed).

    Only a folder carrying the tool's marker is touched, and in it only files named
    as the cache names them and the ``hub`` folder of the Hub datasets a study
    downloaded; the folder itself goes when nothing else is left in it.
    ``keep_key`` keeps the fingerprint key (and the marked folder holding it): it is
    random, not derived from any record, and without it a study's stored keyed
    fingerprint can never be matched again, so the study cannot be resumed. A cache
    a process is using is refused whole, and so is one whose files cannot be deleted
    (a read-only folder: the first deletion fails, before any other): a
    ``ConfigError`` naming the folder.
    """
    folder = cache_contents(directory, keep_key=keep_key).folder
    if folder is None:
        return None, 0
    with _unused(folder):
        contents = cache_contents(directory, keep_key=keep_key)  # again, under the lock: entries a run just wrote
        last = [path for path in contents.files if path.name == FINGERPRINT_KEY]  # the key goes last
        for removed, path in enumerate([*(p for p in contents.files if p not in last), *last]):
            _delete(path, folder=folder, removed=removed)
        if (folder / HUB_FOLDER).is_dir():  # what is left of the downloads: their links and folders
            shutil.rmtree(folder / HUB_FOLDER, ignore_errors=True)
        if keep_key and (folder / FINGERPRINT_KEY).exists():
            return folder, len(contents.files)
        _delete(folder / MARKER, folder=folder, removed=len(contents.files))
    with contextlib.suppress(OSError):  # files the tool did not write stay, and so does their folder
        folder.rmdir()
    return folder, len(contents.files)


@contextmanager
def _unused(folder: Path) -> Iterator[None]:
    """The marker's lock, exclusive: no process is using the cache while it is held (see ``PrivateCache``)."""
    with open(folder / MARKER, "rb") as marker:
        try:
            fcntl.flock(marker.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(f"the private cache {folder} is in use by a running fit, study or worker; nothing was "
                              "deleted: clean it once that process has ended") from None
        yield


def _delete(path: Path, *, folder: Path, removed: int) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as error:
        done = "nothing was deleted" if removed == 0 else f"{removed} of its files were deleted before it"
        raise ConfigError(f"the private cache {folder} cannot be cleaned: {path.name} cannot be deleted "
                          f"({error.strerror or error}); {done}") from None


class PrivateCache:
    """Owner-only directory of ``torch.save`` payloads, computed once per key. ``hold``: keep a shared lock on the
    cache until ``release`` (or the process ends), so that ``clear_cache`` refuses it while it is in use."""

    def __init__(self, directory: str | Path | None = None, *, hold: bool = False) -> None:
        self.directory = _create_own(directory)
        self._holder: BinaryIO | None = None
        if hold:
            self._hold(directory)

    def _hold(self, directory: str | Path | None) -> None:
        """The marker's lock, shared; a clean that held it first removed the folder, which is then made again."""
        for _ in range(3):
            try:
                holder = open(self.directory / MARKER, "rb")  # noqa: SIM115 - kept open until release()
            except FileNotFoundError:
                self.directory = _create_own(directory)
                continue
            fcntl.flock(holder.fileno(), fcntl.LOCK_SH)  # waits for a clean that is deleting
            if os.fstat(holder.fileno()).st_nlink > 0:
                self._holder = holder
                return
            holder.close()
            self.directory = _create_own(directory)
        raise ConfigError(f"the private cache {self.directory} keeps being cleaned while this process opens it; "
                          "run again once `swagppm-tune clean` has ended")

    def release(self) -> None:
        """Let the shared lock go (a held cache can be cleaned again); nothing happens when none is held."""
        if self._holder is not None:
            self._holder.close()
            self._holder = None

    def path(self, kind: str, key: str) -> Path:
        return self.directory / f"{kind}-{key}.pt"

    @contextmanager
    def _lock(self, kind: str, key: str) -> Iterator[None]:
        lock_path = self.directory / f"{kind}-{key}.lock"
        try:
            fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
        except OSError as error:
            raise ConfigError(f"the private cache folder {self.directory} is not writable "
                              f"({error.strerror or error}); set swagppm.cache_dir to a writable folder") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def get_or_compute(
        self, kind: str, key: str, compute: Callable[[], dict[str, Any]], *, validate: Callable[[dict[str, Any]], bool]
    ) -> tuple[dict[str, Any], bool]:
        """(payload, was_cached): read the entry, or compute and store it under the key's lock."""
        path = self.path(kind, key)
        with self._lock(kind, key):
            if path.exists():
                payload = self._read(path, validate)
                if payload is not None:
                    return payload, True
            self._remove_orphans(path)
            payload = compute()
            self._write(path, payload)
            return payload, False

    def _remove_orphans(self, path: Path) -> None:
        """Temporary files of this key left by a killed writer (none can be live: we hold the key's lock)."""
        for orphan in self.directory.glob(f".{path.stem}-*.tmp"):
            with contextlib.suppress(FileNotFoundError):
                orphan.unlink()

    @staticmethod
    def _read(path: Path, validate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        import torch

        try:
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # large entries stay on disk
            if not isinstance(payload, dict) or payload.get("format") != CACHE_FORMAT:
                problem = "unexpected contents"
            elif payload.get(CHECKSUM) != payload_checksum(payload):
                problem = "its checksum does not match its contents: the file was damaged"
            elif not validate(payload):
                problem = "unexpected contents"
            else:
                return payload
        except Exception as error:  # a truncated or foreign file: any unpickling error
            problem = type(error).__name__
        warnings.warn(f"private cache entry {path} is corrupt ({problem}); recomputing it", stacklevel=3)
        return None

    def _write(self, path: Path, payload: dict[str, Any]) -> None:
        import torch

        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.stem}-", suffix=".tmp")
        except OSError as error:
            raise ConfigError(f"cannot write to the private cache folder {self.directory} "
                              f"({error.strerror or error}); set swagppm.cache_dir to a writable folder") from None
        try:
            with os.fdopen(fd, "wb") as handle:
                stored = {**payload, "format": CACHE_FORMAT}
                torch.save({**stored, CHECKSUM: payload_checksum(stored)}, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def payload_checksum(payload: dict[str, Any]) -> str:
    """SHA-256 of an entry's contents, its ``CHECKSUM`` left out: every tensor's dtype, shape and exact bytes, every
    other value's ``repr``, in a fixed order."""
    digest = hashlib.sha256()
    _feed(digest, {key: value for key, value in payload.items() if key != CHECKSUM})
    return digest.hexdigest()


def _feed(digest: Any, value: Any) -> None:
    import torch

    if isinstance(value, torch.Tensor):
        digest.update(tensor_digest(value).encode())
    elif isinstance(value, dict):
        digest.update(f"{{{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"[{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"{type(value).__name__}:{value!r};".encode())


def tensor_digest(tensor: torch.Tensor) -> str:
    """SHA-256 of a tensor's dtype, shape and exact bytes (bit-identical values give equal digests)."""
    import torch

    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
    digest = hashlib.sha256(f"{tensor.dtype}{tuple(tensor.shape)}".encode())
    digest.update(data.data)
    return digest.hexdigest()
