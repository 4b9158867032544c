"""One privacy ledger per private data set: every study and every release attempt on it, and their composed total.

A ledger is a JSON-lines file, owner-side (0600 in a 0700 folder), named by a keyed
fingerprint of the data set's records (an HMAC under the ledger folder's own random
key, so the name tells nothing of the records to anyone without the key, and stays
the same when the private cache is cleaned). Its folder is ``$SWAGPPM_TUNE_LEDGER``,
else ``$XDG_DATA_HOME/swagppm-tune/ledger`` (``~/.local/share/...``): keep it with
the data, never beside a release. Entries are appended under an exclusive lock by
every process that works on the data:

* ``study``: a study on the private records (its mode; an accounted study's cap ε*
  and its hidden trial count's distribution), once, when its stage 1 first runs;
* ``release``: every release attempt (released, forced, refused by its audit,
  failed): each drew the secret noise at least once from the private posterior;
* ``audit``: every audit run on the records (counted; it publishes nothing).

``total`` composes every accounted study and every release attempt with
dp-accounting (``tuner.accounting.ledger_epsilon``): the figure a card states. An
unaccounted study on the same records is not covered by any total, and the card
says so.
"""

from __future__ import annotations

import fcntl
import hashlib
import hmac
import json
import os
import secrets
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from swagppm import ConfigError
from tuner.accounting import GeometricStopping, TrialCountDistribution, ledger_epsilon

LEDGER_ENV = "SWAGPPM_TUNE_LEDGER"
KEY_FILE = "ledger.key"
FORMAT = "swagppm-ledger/1"
STUDY_ENTRY, RELEASE_ENTRY, AUDIT_ENTRY = "study", "release", "audit"


def ledger_dir() -> Path:
    """Where the ledgers live: ``$SWAGPPM_TUNE_LEDGER``, else ``$XDG_DATA_HOME/swagppm-tune/ledger``."""
    named = os.environ.get(LEDGER_ENV)
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "swagppm-tune" / "ledger"


def ledger_key(folder: Path) -> bytes:
    """The folder's random key (32 bytes, 0600), created once: it names the ledgers and seals exports' claims."""
    _owner_folder(folder)
    path = folder / KEY_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        key = path.read_bytes()
        if len(key) != 32:
            raise ConfigError(f"{path}: not a ledger key (32 bytes); restore it from a backup") from None
        return key
    except OSError as error:
        raise ConfigError(f"the privacy ledger folder {folder} cannot be written ({error.strerror or error}); set "
                          f"${LEDGER_ENV} to an owner-only folder") from None
    key = secrets.token_bytes(32)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key)
    return key


def seal(claim: Mapping[str, Any]) -> str:
    """An HMAC of a claim under the ledger key: an export whose claim was edited no longer matches it."""
    text = json.dumps(claim, sort_keys=True)
    return hmac.new(ledger_key(ledger_dir()), text.encode(), hashlib.sha256).hexdigest()


def _owner_folder(folder: Path) -> None:
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
    except OSError as error:
        raise ConfigError(f"the privacy ledger folder {folder} cannot be created ({error.strerror or error}); set "
                          f"${LEDGER_ENV} to an owner-only folder") from None


class FingerprintsRecords(Protocol):
    """What names a data set: ``swagppm.Resources.records_fingerprint``."""

    def records_fingerprint(self, key: bytes) -> str: ...


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """The ledger of one private data set (``path``), read and appended under its lock."""

    path: Path

    @classmethod
    def of(cls, records: FingerprintsRecords, *, folder: Path | None = None) -> Ledger:
        """The ledger of the records a session read (``swagppm.Resources``)."""
        folder = ledger_dir() if folder is None else folder
        return cls(path=folder / f"{records.records_fingerprint(ledger_key(folder))[:32]}.jsonl")

    def entries(self) -> list[dict[str, Any]]:
        """Every entry, oldest first (none for a new data set)."""
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return []
        except OSError as error:
            raise ConfigError(f"the privacy ledger {self.path} cannot be read ({error.strerror or error})") from None
        try:
            return [json.loads(line) for line in lines if line.strip()]
        except json.JSONDecodeError:
            raise ConfigError(f"the privacy ledger {self.path} is damaged (a line is not JSON); restore it from a "
                              "backup: releases on these data cannot be accounted without it") from None

    def append(self, entry: Mapping[str, Any]) -> None:
        """Add one entry (with the time), flushed to disk before it returns."""
        with self._locked() as handle:
            handle.write(json.dumps({"format": FORMAT, "time": time.time(), **entry}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    def record_study(self, study: Mapping[str, Any]) -> None:
        """A study on these records, once (by its ``id``)."""
        with self._locked() as handle:
            handle.seek(0)
            if any(json.loads(line).get("id") == study["id"] for line in handle if line.strip()):
                return
            handle.write(json.dumps({"format": FORMAT, "time": time.time(), "kind": STUDY_ENTRY, **study}) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        _owner_folder(self.path.parent)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        except OSError as error:
            raise ConfigError(f"the privacy ledger {self.path} cannot be written ({error.strerror or error})") from None
        with os.fdopen(fd, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield handle

    def total(self, *, delta: float, pending: tuple[float, float | None] | None = None) -> float | None:
        """ε at ``delta`` of every accounted study and every release attempt on these records, and a ``pending``
        attempt (its cap and selection stop probability), composed by dp-accounting; None when there is nothing."""
        studies: list[tuple[float, TrialCountDistribution]] = []
        releases: list[tuple[float, GeometricStopping | None]] = []
        if pending is not None:
            cap, stop = pending
            releases.append((cap, None if stop is None else GeometricStopping(stop_probability=stop)))
        for entry in self.entries():
            if entry.get("kind") == STUDY_ENTRY and entry.get("mode") == "accounted":
                studies.append((entry["epsilon_cap"], TrialCountDistribution(shape=entry["trials_shape"],
                                                                             mean=entry["trials_mean"])))
            elif entry.get("kind") == RELEASE_ENTRY:
                stop = entry.get("selection_stop_probability")
                releases.append((entry["epsilon_cap"],
                                 None if stop is None else GeometricStopping(stop_probability=stop)))
        if not studies and not releases:
            return None
        return ledger_epsilon(studies=studies, releases=releases, delta=delta)

    def unaccounted_studies(self) -> bool:
        """Whether a study on these records chose by private scores without an accounted total."""
        return any(entry.get("kind") == STUDY_ENTRY and entry.get("mode") == "unaccounted" for entry in self.entries())

    def summary(self) -> dict[str, Any]:
        """The owner report's view: the ledger's file and its counts by kind and outcome."""
        counts = Counter(f"{entry.get('kind')}:{entry.get('outcome', entry.get('mode', ''))}"
                         for entry in self.entries())
        return {"file": str(self.path), "entries": dict(sorted(counts.items()))}
