"""The private on-disk cache for stage 1 and frozen-encoder features.

Entries hold per-record values (risks, features), so the cache lives in a folder
the tool creates itself, owner-only (0700), with files 0600 and a marker file that
says it is the tool's own: a ``cache_dir`` naming a folder that already exists
without the marker (a shared folder, a home cache) gets a subfolder
``swagppm-private`` instead of being taken over, and ``clear_cache`` deletes only
a marked folder's own entries. Writes go to a temporary file in the same folder
and are renamed into place (atomic on POSIX); an exclusive ``flock`` per key lets
several processes share the cache, the first computing and the others waiting,
then reading. A corrupt entry is recomputed with a warning; temporary files left
by a killed writer are removed by the next writer of the same key.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from swagppm.errors import ConfigError

CACHE_FORMAT = 2
MARKER = ".swagppm-private-cache"
SUBFOLDER = "swagppm-private"
_MARKER_TEXT = "Private working cache of swagppm (per-record values). `swagppm-tune clean` deletes it.\n"
FINGERPRINT_KEY = "fingerprint.key"  # provenance.fingerprint_key's secret: random, not derived from any record
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


def clear_cache(directory: str | Path | None, *, keep_key: bool = False) -> tuple[Path | None, int]:
    """Delete the tool's own cache entries for ``directory``: (the folder, or None if there is none; files removed).

    Only a folder carrying the tool's marker is touched, and in it only files named
    as the cache names them; the folder itself goes when nothing else is left in it.
    ``keep_key`` keeps the fingerprint key (and the marked folder holding it): it is
    random, not derived from any record, and without it a study's stored keyed
    fingerprint can never be matched again, so the study cannot be resumed.
    """
    folder = own_cache_dir(directory)
    if folder is None:
        requested = _requested(directory)
        if requested.exists() and any(requested.iterdir()):
            raise ConfigError(f"{requested} is not a private cache created by swagppm (no {MARKER} marker); "
                              "nothing was deleted")
        return None, 0
    removed = 0
    for path in folder.iterdir():
        if path.is_file() and _OWN_FILE.match(path.name) and not (keep_key and path.name == FINGERPRINT_KEY):
            path.unlink()
            removed += 1
    if keep_key and (folder / FINGERPRINT_KEY).exists():
        return folder, removed
    (folder / MARKER).unlink()
    with contextlib.suppress(OSError):  # files the tool did not write stay, and so does their folder
        folder.rmdir()
    return folder, removed


class PrivateCache:
    """Owner-only directory of ``torch.save`` payloads, computed once per key."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = _create_own(directory)

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
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)  # large entries stay on disk
            if isinstance(payload, dict) and payload.get("format") == CACHE_FORMAT and validate(payload):
                return payload
            problem = "unexpected contents"
        except Exception as error:  # a truncated or foreign file: any unpickling error
            problem = type(error).__name__
        warnings.warn(f"private cache entry {path.name} is corrupt ({problem}); recomputing it", stacklevel=3)
        return None

    def _write(self, path: Path, payload: dict[str, Any]) -> None:
        try:
            fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.stem}-", suffix=".tmp")
        except OSError as error:
            raise ConfigError(f"cannot write to the private cache folder {self.directory} "
                              f"({error.strerror or error}); set swagppm.cache_dir to a writable folder") from None
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save({**payload, "format": CACHE_FORMAT}, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
