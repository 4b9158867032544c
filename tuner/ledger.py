"""One privacy ledger per declared data set: every study and every release attempt on it, and their composed total.

A ledger is a JSON-lines file, owner-side (0600 in a 0700 folder), named by the data
set a study declares (``[study] data_set``): ``<folder>/<data set>.jsonl``, in
``$SWAGPPM_TUNE_LEDGER``, else ``$XDG_DATA_HOME/swagppm-tune/ledger``. Keep it with the
data, never beside a release. Its first line names the data set, the ledger's own
random id and the owner key it is kept under (``tuner.keys``); every entry carries the
*version* of the records it was made on, a keyed fingerprint (an HMAC under the owner
key), so a changed record is a new version of the same data set and adds to the same
total, and a data set's records found in another data set's ledger are refused. Entries:

* ``study``: a study on the private records (its mode; an accounted study's cap ε* and
  its hidden trial count's distribution), once, when its stage 1 first runs;
* ``release``: every release attempt, twice: ``started`` before its first secret draw,
  then how it ended (released, forced, refused by its audit, not selected, failed,
  interrupted);
* ``audit``: every audit run on the records (counted; it publishes nothing).

``total`` composes every accounted study and every published attempt (released or
forced; an attempt whose end was never written, its process killed, counts as
published) with dp-accounting (``tuner.accounting.ledger_epsilon``): the figure an
accounted card states. Attempts that ended refused, not selected, failed or interrupted
published nothing and do not move it; the owner report counts them.

Every append is one write of whole lines under an exclusive lock, synced before it
returns, and undone when the disk refuses part of it. A last line cut mid-write (a
process killed while writing) is moved aside with a warning, as journals are, so the
next entry is whole; a damaged line inside is refused in one line naming it. A ledger
a study was entered in and that is gone, or kept under another key, is refused, never
made again (that would restart the accounting).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from swagppm import ConfigError
from swagppm.claim import PUBLIC_PROXY
from tuner.accounting import GeometricStopping, TrialCountDistribution, ledger_epsilon
from tuner.keys import RESTORE, OwnerKey
from tuner.outputs import OWNER_FILE, owner_folder

LEDGER_ENV = "SWAGPPM_TUNE_LEDGER"
FORMAT = "swagppm-ledger/2"
HEADER, STUDY_ENTRY, RELEASE_ENTRY, AUDIT_ENTRY = "header", "study", "release", "audit"
STARTED = "started"
PUBLISHED = ("released", "forced")  # the ends of an attempt whose draw was published
KEEP = (f"restore it from a backup, or point ${LEDGER_ENV} at the folder that holds it (a new ledger would restart "
        "the accounting of these data)")


def ledger_dir() -> Path:
    """Where the ledgers live: ``$SWAGPPM_TUNE_LEDGER``, else ``$XDG_DATA_HOME/swagppm-tune/ledger``."""
    named = os.environ.get(LEDGER_ENV)
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "swagppm-tune" / "ledger"


def sealed_ledgers(folder: Path | None = None) -> list[tuple[str, str]]:
    """(what, key id) of every ledger in ``folder`` (default ``ledger_dir()``): what a new owner key must not orphan."""
    folder = ledger_dir() if folder is None else folder
    found = []
    for path in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        header = _first_line(path)
        if header.get("kind") == HEADER and isinstance(header.get("key"), str):
            found.append((f"the privacy ledger {path}", header["key"]))
    return found


class FingerprintsRecords(Protocol):
    """What names a version of a data set: ``swagppm.Resources.records_fingerprint``."""

    def records_fingerprint(self, key: bytes) -> str: ...


@dataclass(frozen=True, kw_only=True)
class Ledger:
    """The ledger of the data set ``data_set`` (``path``), kept under the owner ``key``; ``version`` names the records
    this process read."""

    path: Path
    data_set: str
    key: OwnerKey
    version: str

    @classmethod
    def of(cls, data_set: str, records: FingerprintsRecords, *, key: OwnerKey, folder: Path | None = None) -> Ledger:
        """The ledger of ``data_set``, for the records a session read (``swagppm.Resources``)."""
        folder = ledger_dir() if folder is None else folder
        return cls(path=folder / f"{data_set}.jsonl", data_set=data_set, key=key,
                   version=records.records_fingerprint(key.secret)[:32])

    def entries(self) -> list[dict[str, Any]]:
        """Every entry after the header, oldest first (none for a new data set)."""
        if not self.path.exists():
            return []
        with self._locked(create=False) as (_, entries):
            return entries

    def append(self, entry: Mapping[str, Any]) -> None:
        """Add one entry (with the time and the records' version), made new with its header when there is none yet;
        on disk before it returns."""
        with self._locked(create=True) as (fd, _):
            self._write(fd, [{**entry, "version": self.version, "time": time.time()}])

    def record_study(self, study: Mapping[str, Any]) -> str:
        """A study on these records, once (by its ``id``); the ledger's own id, for the study to keep."""
        with self._locked(create=True) as (fd, entries):
            if not any(e.get("kind") == STUDY_ENTRY and e.get("id") == study["id"] for e in entries):
                self._write(fd, [{"kind": STUDY_ENTRY, **study, "version": self.version, "time": time.time()}])
            return self.uid()

    def uid(self) -> str:
        """The ledger's own random id (its header's)."""
        return str(_first_line(self.path).get("ledger", ""))

    def require_study(self, study_id: str, study: str) -> None:
        """Refuse, in one line naming what is gone, a ledger that does not hold the study ``study_id`` (``study``
        names it: "the study 'NAME'") entered in it: the file is missing, or this is another ledger (the ledger
        folder points elsewhere)."""
        if not self.path.exists():
            raise ConfigError(f"the privacy ledger of data set {self.data_set!r} is missing ({self.path} is not "
                              f"there), but {study} was entered in it: {KEEP}")
        if not any(e.get("kind") == STUDY_ENTRY and e.get("id") == study_id for e in self.entries()):
            raise ConfigError(f"the privacy ledger {self.path} holds no entry of {study}, which was entered in the "
                              f"ledger of data set {self.data_set!r}: this is another ledger; {KEEP}")

    def public_proxy_study(self) -> tuple[str, Path] | None:
        """(name, ledger file) of a public-proxy study that tuned on these very records, in any data set's ledger
        here (the version is order-independent): the records it declared public, which a public-proxy choice must
        never be released on."""
        for path in sorted(self.path.parent.glob("*.jsonl")) if self.path.parent.is_dir() else []:
            for entry in _lines(path):
                if (entry.get("kind") == STUDY_ENTRY and entry.get("mode") == PUBLIC_PROXY
                        and entry.get("version") == self.version):
                    return str(entry.get("study")), path
        return None

    def check_writable(self) -> None:
        """Refuse, before any fit, a ledger (or its folder) this process cannot write."""
        try:
            owner_folder(self.path.parent)
            probe = self.path.with_name(f".{self.path.name}.write-check-{os.getpid()}")
            probe.touch(mode=OWNER_FILE)
            probe.unlink()
            if self.path.exists() and not os.access(self.path, os.W_OK):
                raise PermissionError(13, os.strerror(13))
        except OSError as error:
            raise ConfigError(f"the privacy ledger {self.path} cannot be written ({error.strerror or error}); every "
                              f"release attempt must be entered in it: make it writable or set ${LEDGER_ENV} to the "
                              "owner-only folder that holds it") from None

    def total(self, *, delta: float, pending: tuple[float, float | None] | None = None) -> float | None:
        """ε at ``delta`` of every accounted study and every published attempt on these records, and a ``pending``
        attempt (its cap and selection stop probability), composed by dp-accounting; None when there is nothing."""
        entries = self.entries()
        studies = [(e["epsilon_cap"], TrialCountDistribution(shape=e["trials_shape"], mean=e["trials_mean"]))
                   for e in entries if e.get("kind") == STUDY_ENTRY and e.get("mode") == "accounted"]
        releases: list[tuple[float, GeometricStopping | None]] = []
        for cap, stop in [*_published(entries), *([pending] if pending is not None else [])]:
            releases.append((cap, None if stop is None else GeometricStopping(stop_probability=stop)))
        if not studies and not releases:
            return None
        return ledger_epsilon(studies=studies, releases=releases, delta=delta)

    def unaccounted_studies(self) -> bool:
        """Whether a study on these records chose by private scores without an accounted total."""
        return any(entry.get("kind") == STUDY_ENTRY and entry.get("mode") == "unaccounted" for entry in self.entries())

    def summary(self) -> dict[str, Any]:
        """The owner report's view: the ledger's file, its data set, versions, entries and release attempts by end
        (the refused, failed and interrupted ones published nothing and are not in the total)."""
        entries = self.entries()
        counts = Counter(f"{entry.get('kind')}:{entry.get('outcome', entry.get('mode', ''))}" for entry in entries)
        ends = Counter(_attempt_ends(entries).values())
        return {"file": str(self.path), "data_set": self.data_set,
                "versions": len({e.get("version") for e in entries}), "entries": dict(sorted(counts.items())),
                "attempts": dict(sorted(ends.items())),
                "not_in_the_total": sum(n for end, n in ends.items() if end not in (*PUBLISHED, STARTED))}

    @contextlib.contextmanager
    def _locked(self, *, create: bool) -> Iterator[tuple[int, list[dict[str, Any]]]]:
        """The ledger open under its exclusive lock, mended and checked: (its descriptor, its entries)."""
        new = not self.path.exists()
        if new and create:
            self._check_new()
        try:
            owner_folder(self.path.parent)
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0), OWNER_FILE)
        except OSError as error:
            raise ConfigError(f"the privacy ledger {self.path} cannot be {'written' if create else 'read'} "
                              f"({error.strerror or error}); set ${LEDGER_ENV} to the owner-only folder that holds "
                              "it") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries = self._read(fd)
            if entries is None:  # an empty file: a new ledger, its header first
                self._write(fd, [{"kind": HEADER, "format": FORMAT, "data_set": self.data_set,
                                  "ledger": secrets.token_hex(16), "key": self.key.id, "time": time.time()}])
                entries = []
            yield fd, entries
        finally:
            os.close(fd)

    def _read(self, fd: int) -> list[dict[str, Any]] | None:
        """The entries after the header (None: the file is empty), its cut last line set aside first."""
        data = _read_all(fd)
        whole = data.rfind(b"\n") + 1
        if whole < len(data):
            self._set_aside(fd, data[whole:], whole)
            data = data[:whole]
        if not data:
            return None
        lines = []
        for number, line in enumerate(data.splitlines(), start=1):
            try:
                value = json.loads(line)
            except ValueError:
                value = None
            if not isinstance(value, dict):
                raise ConfigError(f"the privacy ledger {self.path} is damaged at line {number} (not one whole entry): "
                                  "restore it from a backup; releases on these data cannot be accounted without it")
            lines.append(value)
        self._check_header(lines[0])
        return lines[1:]

    def _check_header(self, header: Mapping[str, Any]) -> None:
        if header.get("kind") != HEADER or header.get("format") != FORMAT:
            raise ConfigError(f"the privacy ledger {self.path} is not a ledger of this swagppm-tune (its first line "
                              f"is not a {FORMAT} header): move it away, or restore the ledger from a backup")
        if header.get("data_set") != self.data_set:
            raise ConfigError(f"the privacy ledger {self.path} is the ledger of data set {header.get('data_set')!r}, "
                              f"not {self.data_set!r}: restore the file under its own name")
        if header.get("key") != self.key.id:
            raise ConfigError(f"the privacy ledger {self.path} is kept under owner key {header.get('key')}, but the "
                              f"owner key {self.key.path} is another one (id {self.key.id}): {RESTORE}")

    def _check_new(self) -> None:
        """A new ledger only for records no other data set's ledger holds: one data set, one total."""
        for path in sorted(self.path.parent.glob("*.jsonl")) if self.path.parent.is_dir() else []:
            if path != self.path and _holds_version(path, self.version):
                other = _first_line(path).get("data_set")
                raise ConfigError(f"these records were entered in the privacy ledger of data set {other!r} ({path}); "
                                  f"declare [study] data_set = \"{other}\" so that one total covers every study and "
                                  "release on them")

    def _write(self, fd: int, entries: list[dict[str, Any]]) -> None:
        """Append whole lines and sync them; a write the disk refuses partway is undone (one line says so)."""
        data = b"".join(json.dumps(entry).encode() + b"\n" for entry in entries)
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        except OSError as error:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise ConfigError(f"the privacy ledger {self.path} could not be written ({error.strerror or error}): the "
                              "entry was not made, and nothing that needs it was done; free the disk or make the "
                              "ledger writable, then run the command again") from None

    def _set_aside(self, fd: int, tail: bytes, whole: int) -> None:
        aside = self.path.with_name(f"{self.path.name}.cut-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        kept = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_FILE)
        with os.fdopen(kept, "wb") as handle:
            handle.write(tail)
            handle.flush()
            os.fsync(handle.fileno())
        os.ftruncate(fd, whole)
        os.fsync(fd)
        print(f"warning: the privacy ledger {self.path} ended in a line cut mid-write (a process was killed while "
              f"writing it); that unfinished entry was moved to {aside} ({len(tail)} bytes) and the ledger goes on "
              "without it (a release attempt whose end is missing counts as released)", file=sys.stderr)


def _attempt_ends(entries: list[dict[str, Any]]) -> dict[str, str]:
    """Each release attempt's end (``started``: none was written)."""
    ends: dict[str, str] = {}
    for entry in entries:
        if entry.get("kind") == RELEASE_ENTRY:
            attempt = str(entry.get("attempt"))
            if entry.get("outcome") == STARTED:
                ends.setdefault(attempt, STARTED)
            else:
                ends[attempt] = str(entry.get("outcome"))
    return ends


def _published(entries: list[dict[str, Any]]) -> list[tuple[float, float | None]]:
    """(cap, selection stop probability) of every attempt that published a draw, or may have."""
    ends = _attempt_ends(entries)
    return [(entry["epsilon_cap"], entry.get("selection_stop_probability")) for entry in entries
            if entry.get("kind") == RELEASE_ENTRY and entry.get("outcome") == STARTED
            and ends[str(entry.get("attempt"))] in (*PUBLISHED, STARTED)]


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


def _first_line(path: Path) -> dict[str, Any]:
    """A ledger's header, read without its lock (written once, first); {} when it cannot be read."""
    try:
        with path.open("rb") as handle:
            value = json.loads(handle.readline())
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _lines(path: Path) -> Iterator[dict[str, Any]]:
    """A ledger's whole entries, read without its lock (a cut or damaged line is skipped: only a search reads this)."""
    try:
        with path.open("rb") as handle:
            for line in handle:
                with contextlib.suppress(ValueError):
                    value = json.loads(line)
                    if isinstance(value, dict):
                        yield value
    except OSError:
        return


def _holds_version(path: Path, version: str) -> bool:
    try:
        with path.open("rb") as handle:
            return any(f'"version": "{version}"'.encode() in line for line in handle)
    except OSError:
        return False
