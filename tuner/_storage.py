"""Study storages from a URL: SQLite (one process), PostgreSQL/MySQL (many workers), a journal file or Redis.

Server databases get connection settings that survive hour-long trials (pre-ping,
recycling, TCP keepalives, a connect timeout) and heartbeats, so a trial whose
worker died is failed after the grace period and retried a bounded number of
times. Every message names the host with the password masked.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import JournalFileBackend, JournalRedisBackend, JournalStorage
from sqlalchemy.engine import URL, make_url

from swagppm import ConfigError

JOURNAL = "journal:"
_DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg", "mysql": "mysql+pymysql",
            "mariadb": "mariadb+pymysql"}
_EXTRAS = {"psycopg": "postgres", "pymysql": "mysql", "redis": "redis"}


def masked_url(url: str) -> str:
    """The storage URL with any password replaced by ``***`` (for messages, logs and exports)."""
    if url.startswith(JOURNAL):
        return url
    try:
        return make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def kind(url: str) -> str:
    """``"sqlite"``, ``"journal"``, ``"redis"`` or the database backend (``"postgresql"``, ``"mysql"``, ...)."""
    if url.startswith(JOURNAL):
        return "journal"
    if url.startswith(("redis://", "rediss://", "unix://")):
        return "redis"
    return make_url(url).get_backend_name()


def supports_workers(url: str) -> bool:
    """Whether several processes may share the storage (everything but SQLite)."""
    return kind(url) != "sqlite"


def journal_path(url: str) -> Path:
    """The file of a ``journal:`` URL (``journal:///abs/path.log`` or ``journal:relative.log``)."""
    rest = url[len(JOURNAL):]
    return Path(rest[2:] if rest.startswith("///") else rest)


def with_driver(url: str) -> str:
    """A server URL with the driver this project installs (psycopg 3, PyMySQL) when none is named."""
    parsed = make_url(url)
    driver = _DRIVERS.get(parsed.drivername)
    return parsed.set(drivername=driver).render_as_string(hide_password=False) if driver else url


def make_storage(
    url: str,
    *,
    heartbeat_interval: int | None = None,
    grace_period: int | None = None,
    max_retries: int = 2,
    connect_timeout: int = 5,
) -> BaseStorage:
    """The storage for ``url``; an unreachable server is a ``ConfigError`` naming it within ``connect_timeout``."""
    shown = masked_url(url)
    storage_kind = kind(url)
    try:
        with warnings.catch_warnings():  # heartbeats and the Redis journal are still marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return _open(url, storage_kind, heartbeat_interval=heartbeat_interval, grace_period=grace_period,
                         max_retries=max_retries, connect_timeout=connect_timeout)
    except ModuleNotFoundError as error:
        extra = _EXTRAS.get((error.name or "").split(".")[0], "postgres")
        raise ConfigError(f"the study storage {shown} needs the {error.name!r} driver: "
                          f"pip install 'swagppm-tuner[{extra}]'") from None
    except ImportError as error:
        raise ConfigError(f"the study storage {shown} needs a database driver that is not installed ({error}); "
                          "pip install 'swagppm-tuner[postgres]' or 'swagppm-tuner[mysql]'") from None
    except ConfigError:
        raise
    except Exception as error:  # driver errors quote the URL: never print it unmasked
        raise ConfigError(f"cannot open the study storage {shown}: {describe_error(error, url)}") from None


def _open(url: str, storage_kind: str, *, heartbeat_interval: int | None, grace_period: int | None,
          max_retries: int, connect_timeout: int) -> BaseStorage:
    if storage_kind == "journal":
        path = journal_path(url)
        path.parent.mkdir(parents=True, exist_ok=True)
        return JournalStorage(JournalFileBackend(str(path)))
    if storage_kind == "redis":
        _ping_redis(url, connect_timeout)
        return JournalStorage(JournalRedisBackend(url))
    if storage_kind == "sqlite":
        return RDBStorage(url)
    url = with_driver(url)
    heartbeat: dict[str, Any] = {}
    if heartbeat_interval is not None:
        heartbeat = {"heartbeat_interval": heartbeat_interval, "grace_period": grace_period,
                     "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=max_retries)}
    return RDBStorage(url, engine_kwargs=_engine_kwargs(make_url(url), connect_timeout), **heartbeat)


def _engine_kwargs(url: URL, connect_timeout: int) -> dict[str, Any]:
    """Connections that survive hour-long trials: checked before use, recycled, kept alive, quick to fail."""
    connect_args: dict[str, Any] = {"connect_timeout": connect_timeout}
    if url.get_backend_name() == "postgresql":
        connect_args |= {"keepalives": 1, "keepalives_idle": 60, "keepalives_interval": 10, "keepalives_count": 5}
    return {"pool_pre_ping": True, "pool_recycle": 1800, "connect_args": connect_args}


def _ping_redis(url: str, timeout: int) -> None:
    import redis

    client = redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout)
    client.ping()


def describe_error(error: BaseException, url: str) -> str:
    """A one-line reason for a storage error, with the URL's password masked."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()[0] if str(error).strip() else ""
    text = text.replace(url, masked_url(url))
    try:
        password = make_url(url).password
    except sqlalchemy.exc.ArgumentError:
        password = None
    if password:
        text = text.replace(str(password), "***")
    return f"{type(getattr(error, 'orig', None) or error).__name__}: {text}"


def is_connection_error(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) means the storage server went away."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        if type(current).__module__.startswith("redis") and "Connection" in type(current).__name__:
            return True
        current = current.__cause__ or current.__context__
    return False
