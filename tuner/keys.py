"""The data owner's key: 32 random bytes, made once per installation, that seal every study's claim.

It lives at ``$SWAGPPM_TUNE_KEY_FILE``, else ``$XDG_DATA_HOME/swagppm-tune/owner.key``
(``~/.local/share/...``), 0600 in a 0700 folder, apart from the privacy ledgers (so
pointing the ledger folder elsewhere never brings a key of its own). It seals a
study's claim when the study is created (``swagppm.claim.SealedClaim``), names the
versions of a data set in its ledger (a keyed fingerprint of its records) and is
recorded by id in every study and ledger it sealed. A key is made only where nothing
was sealed before: a study or a ledger sealed by a key that is gone is refused in one
line naming that key, never answered with a new one (which could not verify it and
would restart the accounting). Back it up with the ledgers.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from swagppm import ConfigError
from swagppm.claim import key_id
from tuner.outputs import OWNER_FILE, owner_folder

KEY_ENV = "SWAGPPM_TUNE_KEY_FILE"
KEY_BYTES = 32
RESTORE = (f"restore the key file from a backup, or point ${KEY_ENV} at it (a new key would not verify what the old "
           "one sealed, and would restart the privacy accounting)")


def key_path() -> Path:
    """Where the owner key lives: ``$SWAGPPM_TUNE_KEY_FILE``, else ``$XDG_DATA_HOME/swagppm-tune/owner.key``."""
    named = os.environ.get(KEY_ENV)
    if named:
        return Path(named).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "swagppm-tune" / "owner.key"


@dataclass(frozen=True, kw_only=True)
class OwnerKey:
    """The owner key read from ``path``: its bytes (``secret``, never written anywhere else) and its public ``id``."""

    path: Path
    secret: bytes = field(repr=False)

    @property
    def id(self) -> str:
        return key_id(self.secret)


def owner_key(*, sealed: str | None = None, what: str = "") -> OwnerKey:
    """The owner key; refused in one line when it is missing or damaged, or (``sealed``: the id of the key that sealed
    ``what``) when it is another key."""
    path = key_path()
    key = _read(path)
    if key is None:
        gone = f"; {what} was sealed with owner key {sealed}" if sealed else ""
        raise ConfigError(f"the owner key {path} is missing{gone}: {RESTORE}")
    if sealed is not None and key.id != sealed:
        raise ConfigError(f"{what} was sealed with owner key {sealed}, but the owner key {path} is another one (id "
                          f"{key.id}): {RESTORE}")
    return key


def owner_key_for(sealed_elsewhere: Iterable[tuple[str, str]]) -> OwnerKey:
    """The owner key, made now (once, atomically) when there is none and nothing was sealed before:
    ``sealed_elsewhere`` names what already holds a seal or a key id (a study, a ledger) and by which key, and any of
    it refuses a new key in one line."""
    path = key_path()
    key = _read(path)
    if key is not None:
        return key
    for what, sealed in sealed_elsewhere:
        raise ConfigError(f"the owner key {path} is missing, but {what} was sealed with owner key {sealed}: {RESTORE}")
    return _create(path)


def _read(path: Path) -> OwnerKey | None:
    try:
        secret = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        raise ConfigError(f"the owner key {path} cannot be read ({error.strerror or error}); it must be the owner's "
                          f"file (0600), or set ${KEY_ENV} to where it is") from None
    if len(secret) != KEY_BYTES:
        raise ConfigError(f"the owner key {path} is damaged (not {KEY_BYTES} bytes): {RESTORE}")
    return OwnerKey(path=path, secret=secret)


def _create(path: Path) -> OwnerKey:
    """A new key written whole to a temporary file and linked into place: a process starting at the same moment finds
    either no key or the whole of one, and the loser of the race reads the winner's."""
    temporary = path.with_name(f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        owner_folder(path.parent)
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, OWNER_FILE)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_bytes(KEY_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        with contextlib.suppress(FileExistsError):
            os.link(temporary, path)
    except OSError as error:
        raise ConfigError(f"the owner key {path} cannot be created ({error.strerror or error}); set ${KEY_ENV} to a "
                          "file in a folder only you can write") from None
    finally:
        with contextlib.suppress(OSError):
            temporary.unlink()
    key = _read(path)
    assert key is not None  # linked above, by this process or the one that won
    return key
