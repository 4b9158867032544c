"""The private on-disk cache for stage 1 and frozen-encoder features.

Entries hold per-record values (risks, features), so the directory is created
owner-only (0700) and files 0600. Writes go to a temporary file in the same
directory and are renamed into place (atomic on POSIX); an exclusive ``flock``
per key lets several processes share the cache, the first computing and the
others waiting, then reading. A corrupt entry is recomputed with a warning.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import torch

T = TypeVar("T")

CACHE_FORMAT = 1


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "swagppm"


def cache_key(*parts: Any) -> str:
    """A stable hex key for JSON-serialisable parts (configs, hashes, seeds)."""
    text = json.dumps([CACHE_FORMAT, *parts], sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:40]


class PrivateCache:
    """Owner-only directory of ``torch.save`` payloads, computed once per key."""

    def __init__(self, directory: str | Path | None = None) -> None:
        self.directory = Path(directory).expanduser() if directory is not None else default_cache_dir()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(self.directory, 0o700)

    def path(self, kind: str, key: str) -> Path:
        return self.directory / f"{kind}-{key}.pt"

    @contextmanager
    def _lock(self, kind: str, key: str) -> Iterator[None]:
        lock_path = self.directory / f"{kind}-{key}.lock"
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
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
            payload = compute()
            self._write(path, payload)
            return payload, False

    @staticmethod
    def _read(path: Path, validate: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        try:
            payload = torch.load(path, map_location="cpu", weights_only=True)
            if isinstance(payload, dict) and payload.get("format") == CACHE_FORMAT and validate(payload):
                return payload
            problem = "unexpected contents"
        except Exception as error:  # a truncated or foreign file: any unpickling error
            problem = f"{type(error).__name__}: {error}"
        warnings.warn(f"private cache entry {path.name} is corrupt ({problem}); recomputing it", stacklevel=3)
        return None

    def _write(self, path: Path, payload: dict[str, Any]) -> None:
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{path.stem}-", suffix=".tmp")
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
