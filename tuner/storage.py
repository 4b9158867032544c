"""Study storages from a URL: SQLite (one process), a journal file (a few processes on one machine), PostgreSQL/MySQL
or the Redis journal (many workers), and Optuna's gRPC proxy in front of a database (hundreds of workers).

Server databases get connection settings that survive hour-long trials (pre-ping,
recycling, TCP keepalives, a connect timeout) and heartbeats, so a trial whose
worker died is failed after the grace period and retried a bounded number of
times. Every message names the host with every credential masked.
"""

from __future__ import annotations

import functools
import hmac
import json
import os
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, unquote, unquote_plus

import optuna
import sqlalchemy.exc
from optuna.storages import BaseStorage, RDBStorage, RetryHeartbeatStaleTrialCallback
from optuna.storages.journal import (
    JournalFileBackend,
    JournalFileSymlinkLock,
    JournalRedisBackend,
    JournalStorage,
)
from sqlalchemy.engine import URL, make_url

from swagppm import ConfigError

if TYPE_CHECKING:
    from optuna.storages import GrpcStorageProxy

JOURNAL = "journal:"
GRPC = "grpc://"  # Optuna's gRPC storage proxy (``swagppm-tune proxy``) in front of a server database
PROXY_TOKEN_ENV = "SWAGPPM_TUNE_PROXY_TOKEN"  # a worker's proxy token when its storage URL carries none
AUTHORIZATION = "authorization"  # the gRPC metadata key of the proxy's token (lower case, as gRPC requires)
PROBE_STUDY = "swagppm-tune: token probe"  # a study name no one uses: asked for to check the token
STORAGE_ENV = "SWAGPPM_TUNE_STORAGE"  # a storage URL that overrides [study] storage, kept out of the process list
_DRIVERS = {"postgresql": "postgresql+psycopg", "postgres": "postgresql+psycopg", "mysql": "mysql+pymysql",
            "mariadb": "mariadb+pymysql"}
_BACKENDS = {"postgres": "postgresql", "mariadb": "mysql"}  # spellings of one backend, by SQLAlchemy's name
_EXTRAS = {"psycopg": "postgres", "pymysql": "mysql", "redis": "redis", "grpc": "grpc"}
SCHEMA_ATTEMPTS = 3  # workers that open a new database at once race to create Optuna's tables: the losers retry
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|key", re.IGNORECASE)
_QUERY_PARAMETER = re.compile(r"(?P<lead>^|[&;])(?P<name>[^=&;]*)=(?P<value>[^&;]*)")


def masked_url(url: str) -> str:
    """The storage URL with every credential replaced by ``***`` (for messages, logs and exports)."""
    return _credentials(url)[0]


def _credentials(url: str) -> tuple[str, list[str]]:
    """``url`` with its credentials masked, and the credentials themselves (to mask them in error messages).

    The userinfo password is everything after the user name's ``:`` up to the LAST
    ``@``, so an unescaped ``@`` in a password never shows part of it as the host;
    a userinfo with several ``@`` and no ``:`` is masked whole. Query parameters
    named like a password, secret, token or key are masked too.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        return url, []
    secrets: list[str] = []
    userinfo, at, address = rest.rpartition("@")
    if at:
        user, colon, password = userinfo.partition(":")
        if colon:
            secrets.append(password)
            rest = f"{user}:***@{address}"
        elif "@" in userinfo:
            secrets.append(userinfo)
            rest = f"***@{address}"
    location, question, query = rest.partition("?")

    def mask(match: re.Match[str]) -> str:
        if not _SECRET_NAME.search(match["name"]):
            return match[0]
        secrets.append(match["value"])
        return f"{match['lead']}{match['name']}=***"

    shown = f"{scheme}://{location}{question}{_QUERY_PARAMETER.sub(mask, query)}"
    return shown, [secret for secret in secrets if secret]


def parse_url(url: str) -> URL:
    """A database storage URL, parsed; a malformed one is a ``ConfigError`` that shows it masked."""
    shown, example = masked_url(url), "e.g. 'sqlite:///demo.db' or 'postgresql+psycopg://user@host:5432/db'"
    try:
        parsed = make_url(url)
    except sqlalchemy.exc.ArgumentError:
        raise ConfigError(f"storage = {shown!r} is not a database URL ({example})") from None
    except ValueError:  # int() of the port; its text may hold part of a password, so it is not shown
        raise ConfigError(f"storage = {shown!r} is not a database URL: the port must be a number ({example})") from None
    if parsed.host and "@" in parsed.host:  # what follows a password's '@' would be taken for the host
        raise ConfigError(f"storage = {shown!r}: the user name or password holds an unescaped '@'; "
                          "percent-encode each '@' in them as %40")
    return parsed


def storage_file(url: str) -> Path | None:
    """The file a SQLite or journal storage keeps its studies in (None for servers and in-memory SQLite)."""
    if url.startswith(JOURNAL):
        return journal_path(url)
    if traits(url).shared:
        return None
    database = parse_url(url).database
    return Path(database) if database and database != ":memory:" else None


def kind(url: str) -> str:
    """``"sqlite"``, ``"journal"``, ``"redis"``, ``"grpc"`` or the database backend (``"postgresql"`` for
    ``postgres://`` too, ``"mysql"`` for ``mariadb://`` too, ...)."""
    if url.startswith(JOURNAL):
        return "journal"
    if url.startswith(("redis://", "rediss://", "unix://")):
        return "redis"
    if url.startswith(GRPC):
        return "grpc"
    backend = parse_url(url).get_backend_name()
    return _BACKENDS.get(backend, backend)


def grpc_address(url: str) -> tuple[str, int]:
    """The host and port of a ``grpc://host:port[?token=TOKEN]`` URL; one without a port is a ``ConfigError``."""
    location = url[len(GRPC):].partition("?")[0].rstrip("/")
    host, colon, port = location.rpartition(":")
    if not (colon and host and port.isdigit() and 1 <= int(port) <= 65535):
        raise ConfigError(f"storage = {masked_url(url)!r}: a gRPC proxy URL is grpc://HOST:PORT "
                          "(e.g. grpc://proxy.internal:13000)")
    return host.strip("[]"), int(port)


def grpc_token(url: str) -> str | None:
    """The proxy token a ``grpc://`` URL carries (``?token=``), else ``$SWAGPPM_TUNE_PROXY_TOKEN``; None: neither."""
    query = dict(parse_qsl(url.partition("?")[2], keep_blank_values=True))
    return query.get("token") or os.environ.get(PROXY_TOKEN_ENV) or None


def same_token(given: str | None, token: str) -> bool:
    """Whether ``given`` is ``token``, compared in constant time."""
    return given is not None and hmac.compare_digest(given.encode("utf-8", "replace"), token.encode())


@dataclass(frozen=True, kw_only=True)
class StorageTraits:
    """What one kind of storage can do; every caller asks ``traits(url)``, so a new backend is one row of
    ``STORAGE_KINDS``. ``shared``: several processes may use it at once (SQLite: one at a time, under the study's
    lock); ``own_heartbeats``: its running trials need the tool's heartbeat (Optuna keeps heartbeats only for a
    database's direct clients); ``server_database``: a PostgreSQL or MySQL/MariaDB database (what the gRPC proxy
    serves)."""

    shared: bool
    own_heartbeats: bool
    server_database: bool = False


SERVER_DATABASE = StorageTraits(shared=True, own_heartbeats=False, server_database=True)
STORAGE_KINDS = {  # by kind(url); any other database backend is a server database
    "sqlite": StorageTraits(shared=False, own_heartbeats=False),
    "journal": StorageTraits(shared=True, own_heartbeats=True),
    "redis": StorageTraits(shared=True, own_heartbeats=True),
    "grpc": StorageTraits(shared=True, own_heartbeats=True),
    "postgresql": SERVER_DATABASE,
    "mysql": SERVER_DATABASE,
}


def traits(url: str) -> StorageTraits:
    """What the storage at ``url`` can do (a malformed URL is a ``ConfigError``, as ``kind``)."""
    return STORAGE_KINDS.get(kind(url), StorageTraits(shared=True, own_heartbeats=False))


def journal_path(url: str) -> Path:
    """The file of a ``journal:`` URL (``journal:///abs/path.log`` or ``journal:relative.log``)."""
    rest = url[len(JOURNAL):]
    return Path(rest[2:] if rest.startswith("///") else rest)


def with_driver(url: str) -> str:
    """A server URL with the driver this project installs (psycopg 3, PyMySQL) when none is named."""
    parsed = parse_url(url)
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
        return open_journal(journal_path(url))
    if storage_kind == "redis":
        _ping_redis(url, connect_timeout)
        return JournalStorage(JournalRedisBackend(url))
    if storage_kind == "grpc":
        return _grpc_proxy(url, connect_timeout)
    if storage_kind == "sqlite":
        return open_sqlite(url)
    url = with_driver(url)
    heartbeat: dict[str, Any] = {}
    if heartbeat_interval is not None:
        heartbeat = {"heartbeat_interval": heartbeat_interval, "grace_period": grace_period,
                     "heartbeat_stale_trial_callback": RetryHeartbeatStaleTrialCallback(max_retry=max_retries)}
    for attempt in range(1, SCHEMA_ATTEMPTS + 1):
        try:
            return RDBStorage(url, engine_kwargs=_engine_kwargs(make_url(url), connect_timeout), **heartbeat)
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError, sqlalchemy.exc.OperationalError) \
                as error:
            if attempt == SCHEMA_ATTEMPTS or not _lost_schema_race(error):
                raise
            time.sleep(0.2 * attempt)  # the winner is committing its CREATE TABLEs
    raise AssertionError("unreachable")


def open_sqlite(url: str) -> RDBStorage:
    """A SQLite storage: one whose file already holds Optuna's current schema opens without Alembic.

    RDBStorage loads Alembic on every open, with its checks skipped or not, only to find
    the revision current (a quarter of what ``status`` takes). When the file's tables,
    version row and Alembic revision are all there and current, that open would change
    nothing, so the same storage is built without it; anything else (a new or empty file,
    an older schema, a foreign database) goes through RDBStorage itself, with its own
    table creation, checks and messages.
    """
    head = _schema_head()
    if head is not None:
        storage = CurrentSchemaStorage(url)
        if _holds_schema(storage.engine, head):
            return storage
        storage.engine.dispose()
    return RDBStorage(url)


class CurrentSchemaStorage(RDBStorage):
    """An ``RDBStorage`` on a database already at Optuna's current schema: what ``RDBStorage.__init__`` sets for a
    URL without heartbeats, less its version manager (Alembic), which is built only when asked for (an upgrade,
    a version query). A pickled copy reopens as a plain RDBStorage does, checks included."""

    def __init__(self, url: str) -> None:  # RDBStorage.__init__ is not called: it would load Alembic
        from sqlalchemy import create_engine
        from sqlalchemy.orm import scoped_session, sessionmaker

        self.engine_kwargs: dict[str, Any] = {}
        self.url = self._fill_storage_url_template(url)
        self.skip_compatibility_check = False
        self.heartbeat_interval = None
        self.grace_period = None
        self.heartbeat_stale_trial_callback = None
        self.failed_trial_callback = None
        self.engine = create_engine(self.url)
        self.scoped_session = scoped_session(sessionmaker(bind=self.engine))

    def __getattr__(self, name: str) -> Any:
        if name != "_version_manager":
            raise AttributeError(name)
        from optuna.storages._rdb.storage import _VersionManager

        manager = self.__dict__["_version_manager"] = _VersionManager(self.url, self.engine, self.scoped_session)
        return manager

    def __getstate__(self) -> dict[Any, Any]:
        state = self.__dict__.copy()
        for name in ("scoped_session", "engine", "_version_manager"):
            state.pop(name, None)
        return state


@functools.cache
def _schema_head() -> str | None:
    """The newest revision of Optuna's schema, read from the migration scripts it ships (``revision`` and
    ``down_revision`` of each) without importing Alembic; None when they do not name exactly one head."""
    from optuna.storages import _rdb

    folder = Path(_rdb.__file__).parent / "alembic" / "versions"
    assignment = re.compile(r"^(down_revision|revision)\s*=\s*[\"']([^\"']+)[\"']", re.MULTILINE)
    revisions, parents = set(), set()
    for script in folder.glob("*.py"):
        found = dict(assignment.findall(script.read_text(encoding="utf-8")))
        if "revision" in found:
            revisions.add(found["revision"])
        if "down_revision" in found:
            parents.add(found["down_revision"])
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def _holds_schema(engine: Any, head: str) -> bool:
    """Whether the database has every table of Optuna's models, its version row, and ``head`` as its only
    Alembic revision: what RDBStorage would create, stamp or check on open."""
    from optuna.storages._rdb import models

    try:
        with engine.connect() as connection:
            tables = {row[0] for row in connection.exec_driver_sql(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not set(models.BaseModel.metadata.tables) | {"alembic_version"} <= tables:
                return False
            versions = [row[0] for row in connection.exec_driver_sql("SELECT version_num FROM alembic_version")]
            rows = connection.exec_driver_sql("SELECT COUNT(*) FROM version_info").scalar()
    except sqlalchemy.exc.DBAPIError:
        return False
    return versions == [head] and bool(rows)


def _lost_schema_race(error: BaseException) -> bool:
    """Whether opening a database failed because another process was creating Optuna's tables at that moment
    (PostgreSQL: a duplicate type or key; MySQL: a table that already exists, a duplicate entry)."""
    text = str(getattr(error, "orig", None) or error).lower()
    return any(sign in text for sign in ("already exists", "duplicate key", "duplicate entry"))


def _grpc_proxy(url: str, connect_timeout: int) -> BaseStorage:
    import grpc

    host, port = grpc_address(url)
    token = grpc_token(url)
    if token is None:
        raise ConfigError(f"storage = {masked_url(url)!r}: the gRPC proxy needs its token: use the storage URL "
                          f"`swagppm-tune proxy` printed (grpc://{host}:{port}?token=...) or set ${PROXY_TOKEN_ENV}")
    proxy = token_proxy(host=host, port=port, token=token)
    try:
        proxy.wait_server_ready(timeout=connect_timeout)
        proxy.get_study_id_from_name(PROBE_STUDY)  # the cheapest call that the token must pass
    except KeyError:  # no such study: the proxy answered, so it took the token
        return proxy
    except ConnectionError:
        proxy.close()
        raise ConnectionError(f"no gRPC storage proxy answered at {host}:{port} within {connect_timeout}s "
                              "(start one with `swagppm-tune proxy`)") from None
    except grpc.RpcError as error:
        proxy.close()
        if error.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise ConfigError(f"the gRPC storage proxy at {host}:{port} refused this token: use the storage URL "
                              "its `swagppm-tune proxy` run printed (each run makes a new token)") from None
        raise
    return proxy


def token_proxy(*, host: str, port: int, token: str) -> GrpcStorageProxy:
    """Optuna's ``GrpcStorageProxy`` whose every call carries ``token`` (``authorization: Bearer`` metadata), also
    after it is pickled into another process."""
    from optuna.storages import GrpcStorageProxy

    class TokenStorageProxy(GrpcStorageProxy):
        def __init__(self) -> None:
            self._token = token
            super().__init__(host=host, port=port)

        def _setup(self) -> None:
            import grpc

            super()._setup()
            self._channel = grpc.intercept_channel(self._channel, _bearer_interceptor(self._token))
            self._stub = type(self._stub)(self._channel)
            self._cache = type(self._cache)(self._stub)

        def __reduce__(self) -> tuple[Any, ...]:
            return _reopened_proxy, (self._host, self._port, self._token)

    return TokenStorageProxy()


def _reopened_proxy(host: str, port: int, token: str) -> GrpcStorageProxy:
    return token_proxy(host=host, port=port, token=token)


def _bearer_interceptor(token: str) -> Any:
    """A gRPC client interceptor adding ``authorization: Bearer TOKEN`` to every call's metadata (Optuna's calls are
    all unary)."""
    import grpc

    class Details(grpc.ClientCallDetails):
        """A call's details with the token added to its metadata."""

        def __init__(self, base: Any) -> None:
            self.method, self.timeout, self.credentials = base.method, base.timeout, base.credentials
            self.wait_for_ready = getattr(base, "wait_for_ready", None)
            self.compression = getattr(base, "compression", None)
            self.metadata = [*(base.metadata or ()), (AUTHORIZATION, f"Bearer {token}")]

    class Bearer(grpc.UnaryUnaryClientInterceptor):
        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(Details(details), request)

    return Bearer()


def open_journal(path: Path) -> JournalStorage:
    """A journal file storage, verified before anything appends to it: a last line cut mid-write (a process killed
    while writing it) is moved aside, and a damaged line inside is refused in one line naming it (``ConfigError``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    cut_off_unfinished_line(path)
    try:
        return JournalStorage(JournalFileBackend(str(path)))
    except ValueError:  # a line that is not one whole operation, inside the file: Optuna stops reading there
        number = _first_damaged_line(path)
        if number is None:
            raise
        raise ConfigError(f"the journal {path} is damaged at line {number}: it is not one whole operation (a write "
                          "cut short, then written after), so the study cannot be read past it; restore the file "
                          f"from a copy, or keep a copy and cut it to its first {number - 1} lines (the operations "
                          "after them are lost)") from None


def cut_off_unfinished_line(path: Path) -> Path | None:
    """Under the journal's own lock (no writer is mid-line then), move a last line that lacks its newline to
    ``<path>.cut-<time>``: Optuna never read it as an operation, and the next append would glue itself to it and break
    the file for good. Says so on stderr; the file it was moved to, or None when the journal ends whole."""
    if not path.is_file() or path.stat().st_size == 0:
        return None
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        with open(path, "rb+") as journal:
            journal.seek(-1, os.SEEK_END)
            if journal.read(1) == b"\n":
                return None
            journal.seek(0)
            data = journal.read()
            whole = data.rfind(b"\n") + 1
            aside = path.with_name(f"{path.name}.cut-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
            handle = os.open(aside, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(handle, "wb") as kept:
                kept.write(data[whole:])
                kept.flush()
                os.fsync(kept.fileno())
            journal.truncate(whole)
            journal.flush()
            os.fsync(journal.fileno())
    finally:
        lock.release()
    print(f"warning: the journal {path} ended in a line cut mid-write (a process was killed while writing it); "
          f"Optuna never read that unfinished operation, so it was moved to {aside} ({len(data) - whole} bytes) "
          "and the study goes on without it", file=sys.stderr)
    return aside


def _first_damaged_line(path: Path) -> int | None:
    with open(path, "rb") as journal:
        for number, line in enumerate(journal, start=1):
            try:
                json.loads(line)
            except ValueError:
                return number
    return None


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


def serve_grpc_proxy(url: str, *, host: str, port: int, token: str, connect_timeout: int,
                     echo: Callable[[str], None]) -> None:
    """Optuna's gRPC storage proxy on ``host:port`` in front of the server database ``url``, until interrupted; every
    call must carry ``token`` (``authorization: Bearer`` metadata), and a port another process holds is refused
    (gRPC would otherwise share it, ``SO_REUSEPORT``, and the two proxies would split the workers).

    The workers behind it keep the tool's own heartbeats (as on a journal), since
    Optuna's reach only a database's direct clients.
    """
    if not traits(url).server_database:
        raise ConfigError(f"storage {masked_url(url)}: the gRPC proxy serves a PostgreSQL or MySQL/MariaDB database "
                          "to many workers; give it one with --storage or $SWAGPPM_TUNE_STORAGE")
    storage = make_storage(url, connect_timeout=connect_timeout)
    try:
        import grpc  # noqa: F401 - Optuna imports it lazily: missing, it would fail only at the first request
        from optuna.storages import get_storage
    except ModuleNotFoundError as error:
        raise ConfigError(f"the gRPC proxy needs the {error.name!r} package: pip install 'swagppm-tuner[grpc]'") \
            from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        server = _proxy_server(get_storage(storage), host=host, port=port, token=token)
    echo(f"gRPC storage proxy on {host}:{port} in front of {masked_url(url)}; workers join with "
         f"SWAGPPM_TUNE_STORAGE='grpc://{host}:{port}?token={token}' swagppm-tune worker STUDY.toml (the token is "
         "this run's; keep it off shared logs); Ctrl-C stops it")
    server.start()
    try:
        server.wait_for_termination()
    finally:
        server.stop(grace=None)


def _proxy_server(storage: BaseStorage, *, host: str, port: int, token: str) -> Any:
    """The gRPC server of Optuna's storage service (``optuna.storages.run_grpc_proxy_server``'s) with the token
    check in front and the port its own."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc
    from optuna.storages._grpc import servicer  # what run_grpc_proxy_server serves; it takes no interceptor
    from optuna.storages._grpc.auto_generated import api_pb2_grpc

    server = grpc.server(ThreadPoolExecutor(max_workers=10), interceptors=[_token_interceptor(token)],
                         options=[("grpc.so_reuseport", 0)])
    api_pb2_grpc.add_StorageServiceServicer_to_server(servicer.OptunaStorageProxyService(storage), server)
    try:
        bound = server.add_insecure_port(f"{host}:{port}")
    except RuntimeError:  # grpc: "Failed to bind to address"
        bound = 0
    if not bound:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port} (another server holds it: a proxy already "
                          "running?); pass another --port")
    return server


def _token_interceptor(token: str) -> Any:
    """A gRPC server interceptor that ends every call without the token with UNAUTHENTICATED, before the storage is
    touched."""
    import grpc

    def refuse(request: Any, context: Any) -> None:
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "swagppm-tune proxy: this call lacks the proxy's token")

    refusal = grpc.unary_unary_rpc_method_handler(refuse)

    class TokenCheck(grpc.ServerInterceptor):
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            sent = dict(details.invocation_metadata or ()).get(AUTHORIZATION, "")
            if sent.startswith("Bearer ") and same_token(sent[len("Bearer "):], token):
                return continuation(details)
            return refusal

    return TokenCheck()


def describe_error(error: BaseException, url: str) -> str:
    """A one-line reason for a storage error, with every credential of the URL masked."""
    cause = getattr(error, "orig", None) or error
    text = next(iter(str(cause).strip().splitlines()), "")
    shown, secrets = _credentials(url)
    text = text.replace(url, shown)
    for secret in sorted({form for raw in secrets for form in (raw, unquote(raw), unquote_plus(raw))}, key=len,
                         reverse=True):
        text = text.replace(secret, "***")
    return f"{type(cause).__name__}: {text}" if text else type(cause).__name__


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
        if type(current).__module__.startswith("grpc") and _grpc_status(current) == "StatusCode.UNAVAILABLE":
            return True
        current = current.__cause__ or current.__context__
    return False


def _grpc_status(error: BaseException) -> str:
    """A gRPC error's status code (``grpc.RpcError.code()``), as text; empty for other errors."""
    code = getattr(error, "code", None)
    return str(code()) if callable(code) else ""
