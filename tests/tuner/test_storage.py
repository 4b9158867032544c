"""``tuner.storage`` directly: URL parsing, the storage's file and kind, drivers, masked errors and opening storages."""

from __future__ import annotations

import importlib.util
import pickle
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import redis
import sqlalchemy.exc
from optuna.storages import RDBStorage
from optuna.storages.journal import JournalStorage
from sqlalchemy.engine import make_url

from swagppm import ConfigError
from tests import PATIENCE
from tests.tuner.helpers import REPO, one_error_line, with_a_feasible_trial
from tuner import StudyConfig
from tuner.cli import main
from tuner.storage import (
    CurrentSchemaStorage,
    StorageTraits,
    _lost_schema_race,
    _schema_head,
    describe_error,
    grpc_address,
    is_connection_error,
    journal_path,
    kind,
    make_storage,
    parse_url,
    serve_grpc_proxy,
    storage_file,
    traits,
    with_driver,
)

EXAMPLE = "e.g. 'sqlite:///demo.db' or 'postgresql+psycopg://user@host:5432/db'"


# --- parse_url ---------------------------------------------------------------------------------------------------


def test_a_server_url_is_parsed_into_its_parts() -> None:
    url = parse_url("postgresql+psycopg://tuner:s3cret@db.example:5432/studies")
    assert (url.drivername, url.username, url.password, url.host, url.port, url.database) == (
        "postgresql+psycopg", "tuner", "s3cret", "db.example", 5432, "studies")


def test_a_percent_encoded_at_in_a_password_is_accepted_and_decoded() -> None:
    url = parse_url("postgresql://tuner:p%40ss@db.example/studies")
    assert url.password == "p@ss" and url.host == "db.example"


def test_text_that_is_no_url_is_refused_with_an_example() -> None:
    with pytest.raises(ConfigError) as info:
        parse_url("nonsense")
    assert str(info.value) == f"storage = 'nonsense' is not a database URL ({EXAMPLE})"


def test_a_port_that_is_no_number_is_refused_with_the_password_masked() -> None:
    with pytest.raises(ConfigError) as info:
        parse_url("postgresql://tuner:s3cret@db.example:abc/studies")
    assert str(info.value) == ("storage = 'postgresql://tuner:***@db.example:abc/studies' is not a database URL: "
                               f"the port must be a number ({EXAMPLE})")


def test_an_unescaped_at_is_refused_with_the_exact_advice() -> None:
    with pytest.raises(ConfigError) as info:
        parse_url("postgresql://u:p@ss@db.example/studies")
    assert str(info.value) == ("storage = 'postgresql://u:***@db.example/studies': the user name or password holds "
                               "an unescaped '@'; percent-encode each '@' in them as %40")


# --- storage_file, traits, journal_path --------------------------------------------------------------------


@pytest.mark.parametrize(("url", "file"), [
    ("sqlite:///runs/study.db", Path("runs/study.db")),
    ("sqlite:////srv/runs/study.db", Path("/srv/runs/study.db")),
    ("sqlite:///:memory:", None),
    ("sqlite://", None),
    ("journal:runs/study.log", Path("runs/study.log")),
    ("journal:/srv/study.log", Path("/srv/study.log")),
    ("journal:///srv/study.log", Path("/srv/study.log")),
    ("postgresql://tuner@db.example/studies", None),
    ("mysql+pymysql://tuner@db.example/studies", None),
    ("redis://cache.internal:6379/0", None),
    ("unix:///run/redis.sock", None),
])
def test_only_sqlite_and_journal_storages_keep_a_file(url: str, file: Path | None) -> None:
    assert storage_file(url) == file


def test_the_file_of_a_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="is not a database URL"):
        storage_file("nonsense")


@pytest.mark.parametrize(("url", "shared", "own_heartbeats", "server_database"), [
    ("sqlite:///study.db", False, False, False),
    ("sqlite:///:memory:", False, False, False),
    ("journal:study.log", True, True, False),
    ("redis://cache.internal:6379/0", True, True, False),
    ("rediss://cache.internal:6380/0", True, True, False),
    ("unix:///run/redis.sock", True, True, False),
    ("grpc://proxy.internal:13000", True, True, False),
    ("postgresql://tuner@db.example/studies", True, False, True),
    ("postgresql+psycopg://tuner@db.example/studies", True, False, True),
    ("postgres://tuner@db.example/studies", True, False, True),
    ("mysql://tuner@db.example/studies", True, False, True),
    ("mariadb://tuner@db.example/studies", True, False, True),
])
def test_each_storage_kind_has_its_traits_in_one_table(url: str, shared: bool, own_heartbeats: bool,
                                                        server_database: bool) -> None:
    """Every trait a caller needs comes from one row (``STORAGE_KINDS``): only SQLite is one process at a time; the
    journal, Redis and the gRPC proxy need the tool's own heartbeats; only server databases are proxied."""
    assert traits(url) == StorageTraits(shared=shared, own_heartbeats=own_heartbeats,
                                        server_database=server_database)


@pytest.mark.parametrize(("url", "path"), [
    ("journal:///abs/study.log", Path("/abs/study.log")),
    ("journal:/abs/study.log", Path("/abs/study.log")),
    ("journal:study.log", Path("study.log")),
    ("journal:runs/study.log", Path("runs/study.log")),
])
def test_a_journal_url_names_its_file(url: str, path: Path) -> None:
    assert journal_path(url) == path


# --- with_driver -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "with_it"), [
    ("postgresql://tuner@db.example:5432/studies", "postgresql+psycopg://tuner@db.example:5432/studies"),
    ("postgres://tuner@db.example/studies", "postgresql+psycopg://tuner@db.example/studies"),
    ("mysql://tuner:pw@db.example/studies", "mysql+pymysql://tuner:pw@db.example/studies"),
    ("mariadb://tuner@db.example/studies", "mariadb+pymysql://tuner@db.example/studies"),
    ("postgresql://tuner@db.example/studies?sslmode=require",
     "postgresql+psycopg://tuner@db.example/studies?sslmode=require"),
    ("postgresql+psycopg2://tuner@db.example/studies", "postgresql+psycopg2://tuner@db.example/studies"),
    ("mysql+pymysql://tuner@db.example/studies", "mysql+pymysql://tuner@db.example/studies"),
    ("sqlite:///study.db", "sqlite:///study.db"),
])
def test_a_server_url_without_a_driver_gets_the_installed_one(url: str, with_it: str) -> None:
    assert with_driver(url) == with_it


@pytest.mark.parametrize("password", ["p@ss", "a:b/c", "100%", "p+s x", "a#b?c", "%2B", "é"])
def test_adding_the_driver_keeps_the_password_as_it_was(password: str) -> None:
    encoded = "".join(f"%{byte:02X}" for byte in password.encode())  # every character percent-encoded
    rendered = with_driver(f"postgresql://tuner:{encoded}@db.example/studies")
    assert rendered.startswith("postgresql+psycopg://tuner:")
    assert make_url(rendered).password == password


# --- describe_error --------------------------------------------------------------------------------------------------


def test_an_error_is_described_by_its_type_and_first_line() -> None:
    error = ValueError("the first line\nthe second line")
    assert describe_error(error, "sqlite:///study.db") == "ValueError: the first line"


def test_an_error_without_a_message_is_its_type_alone() -> None:
    assert describe_error(ValueError(""), "sqlite:///study.db") == "ValueError"


def test_the_url_and_every_form_of_its_credentials_are_masked_in_a_description() -> None:
    url = "postgresql://tuner:p%40ss@db.example/studies?password=tok%2Bx"
    error = RuntimeError(f"cannot reach {url}: rejected p@ss, p%40ss and tok+x")
    assert describe_error(error, url) == ("RuntimeError: cannot reach postgresql://tuner:***@db.example/studies"
                                          "?password=***: rejected ***, *** and ***")


def test_a_wrapped_driver_error_is_described_by_the_drivers_error() -> None:
    url = "postgresql://tuner:s3cret@db.example/studies"
    error = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionRefusedError("password s3cret refused\nDETAIL"))
    assert describe_error(error, url) == "ConnectionRefusedError: password *** refused"


def test_a_wrapped_driver_error_without_a_message_is_its_type_alone() -> None:
    error = sqlalchemy.exc.OperationalError("SELECT 1", {}, ConnectionResetError())
    assert describe_error(error, "postgresql://tuner@db.example/studies") == "ConnectionResetError"


# --- is_connection_error ---------------------------------------------------------------------------------------------


def test_database_errors_that_mean_the_server_went_away_are_connection_errors() -> None:
    assert is_connection_error(sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("gone")))
    assert is_connection_error(sqlalchemy.exc.InterfaceError("SELECT 1", {}, Exception("closed")))


def test_other_errors_are_not_connection_errors() -> None:
    assert not is_connection_error(sqlalchemy.exc.IntegrityError("INSERT", {}, Exception("duplicate")))
    assert not is_connection_error(ValueError("gone"))
    assert not is_connection_error(redis.exceptions.ResponseError("WRONGTYPE"))
    assert not is_connection_error(redis.exceptions.TimeoutError("slow"))


def test_a_redis_socket_that_is_not_there_is_a_connection_error(tmp_path: Path) -> None:
    client = redis.Redis.from_url(f"unix://{tmp_path / 'none.sock'}", socket_connect_timeout=1, socket_timeout=1)
    with pytest.raises(redis.exceptions.ConnectionError) as info:
        client.ping()
    assert is_connection_error(info.value)


def test_a_connection_error_is_found_through_its_cause_or_context() -> None:
    gone = sqlalchemy.exc.OperationalError("SELECT 1", {}, Exception("gone"))
    try:
        raise RuntimeError("the trial failed") from gone
    except RuntimeError as error:
        assert is_connection_error(error)
    try:
        try:
            raise gone
        except sqlalchemy.exc.OperationalError:
            raise KeyError("while handling it") from None  # suppressed for display, still the context
    except KeyError as error:
        assert is_connection_error(error)


def test_a_cycle_of_causes_ends_the_search() -> None:
    first, second = ValueError("one"), ValueError("two")
    first.__cause__, second.__cause__ = second, first
    assert not is_connection_error(first)


# --- make_storage on real files ----------------------------------------------------------------------------------


def test_a_sqlite_storage_is_made_and_reopened_with_its_studies(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    storage = make_storage(url)
    assert isinstance(storage, RDBStorage) and (tmp_path / "study.db").is_file()
    optuna.create_study(storage=storage, study_name="kept")
    assert optuna.get_all_study_names(storage=make_storage(url)) == ["kept"]


def test_a_sqlite_file_at_the_current_schema_opens_without_alembic_as_the_same_storage(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    (tmp_path / "study.db").touch()  # as create_storage_file leaves it: empty, so Optuna makes the schema
    first = make_storage(url)
    assert type(first) is RDBStorage
    optuna.create_study(storage=first, study_name="kept").set_user_attr("note", "mine")
    again = make_storage(url)
    assert type(again) is CurrentSchemaStorage
    plain = RDBStorage(url)
    assert vars(again).keys() == vars(plain).keys() - {"_version_manager"}  # what RDBStorage sets, but Alembic
    assert {name: value for name, value in vars(again).items() if name not in ("engine", "scoped_session")} == {
        name: value for name, value in vars(plain).items() if name not in ("engine", "scoped_session",
                                                                           "_version_manager")}
    assert optuna.load_study(study_name="kept", storage=again).user_attrs == {"note": "mine"}
    assert again.get_current_version() == plain.get_head_version() == _schema_head()  # its manager, on demand
    assert type(pickle.loads(pickle.dumps(make_storage(url)))).__name__ == "CurrentSchemaStorage"


@pytest.mark.parametrize("change, refusal", [
    ("UPDATE alembic_version SET version_num = 'v3.0.0.d'", "RuntimeError: The runtime optuna version"),
    ("DELETE FROM alembic_version", None),  # Optuna stamps it again
    ("DROP TABLE trial_heartbeats", None),  # Optuna makes it again
])
def test_a_sqlite_file_not_at_the_current_schema_goes_through_optunas_own_open(
        tmp_path: Path, change: str, refusal: str | None) -> None:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    optuna.create_study(storage=make_storage(url), study_name="kept")
    with sqlite3.connect(tmp_path / "study.db") as connection:
        connection.execute(change)
    connection.close()
    if refusal is not None:
        with pytest.raises(ConfigError, match=f"cannot open the study storage {url}: {refusal}"):
            make_storage(url)
        return
    assert type(make_storage(url)) is RDBStorage
    assert type(make_storage(url)) is CurrentSchemaStorage and optuna.get_all_study_names(make_storage(url)) == [
        "kept"]


@pytest.mark.slow  # a second process
def test_status_shows_a_trial_another_process_added_since_the_last_status(
        study_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["status", str(path)]) == 0 and "1 trials run: 1 complete" in capsys.readouterr().out
    url = StudyConfig.from_toml(path).storage_url
    copy = ("import optuna, sys\n"
            "study = optuna.load_study(study_name='small', storage=sys.argv[1])\n"
            "study.add_trial(study.trials[0])")
    subprocess.run([sys.executable, "-c", copy, url], check=True, cwd=REPO, timeout=PATIENCE)
    assert main(["status", str(path)]) == 0
    out = capsys.readouterr().out
    assert "2 trials run: 2 complete" in out and out.count(" COMPLETE ") == 2


def test_a_journal_storage_makes_its_missing_folders(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "deep" / "study.log"
    storage = make_storage(f"journal:{path}")
    assert isinstance(storage, JournalStorage) and path.parent.is_dir()
    optuna.create_study(storage=storage, study_name="kept")
    assert path.is_file() and optuna.get_all_study_names(storage=make_storage(f"journal:{path}")) == ["kept"]


def test_a_sqlite_file_in_a_missing_folder_cannot_be_opened(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing' / 'study.db'}"
    with pytest.raises(ConfigError) as info:
        make_storage(url)
    assert str(info.value) == f"cannot open the study storage {url}: OperationalError: unable to open database file"
    assert not (tmp_path / "missing").exists()


def test_a_journal_under_a_file_cannot_be_opened(tmp_path: Path) -> None:
    (tmp_path / "notes").write_text("mine")
    url = f"journal:{tmp_path / 'notes' / 'study.log'}"
    with pytest.raises(ConfigError) as info:
        make_storage(url)
    assert str(info.value).startswith(f"cannot open the study storage {url}: FileExistsError: ")
    assert (tmp_path / "notes").read_text() == "mine"


def test_a_redis_socket_with_no_server_is_refused_with_its_password_masked(tmp_path: Path) -> None:
    socket = tmp_path / "none.sock"
    with pytest.raises(ConfigError) as info:
        make_storage(f"unix://{socket}?db=0&password=s3cret", connect_timeout=1)
    message = str(info.value)
    assert message.startswith(f"cannot open the study storage unix://{socket}?db=0&password=***: ConnectionError: ")
    assert "s3cret" not in message


def test_a_driver_that_is_not_installed_is_named_with_the_extras() -> None:
    if importlib.util.find_spec("asyncpg") is not None:
        pytest.skip("asyncpg is installed here")
    with pytest.raises(ConfigError) as info:
        make_storage("postgresql+asyncpg://tuner:s3cret@db.example/studies")
    message = str(info.value)
    assert message.startswith("the study storage postgresql+asyncpg://tuner:***@db.example/studies needs a database "
                              "driver that is not installed (")
    assert message.endswith("); pip install 'swagppm-tuner[postgres]' or 'swagppm-tuner[mysql]'")
    assert "s3cret" not in message


def test_an_unknown_dialect_is_refused_with_the_password_masked() -> None:
    with pytest.raises(ConfigError) as info:
        make_storage("postgresql+nosuch://tuner:s3cret@db.example/studies")
    assert str(info.value) == ("cannot open the study storage postgresql+nosuch://tuner:***@db.example/studies: "
                               "NoSuchModuleError: Can't load plugin: sqlalchemy.dialects:postgresql.nosuch")


# --- kinds, the schema race, the gRPC proxy ----------------------------------------------------------------------


@pytest.mark.parametrize("url, expected", [
    ("postgres://u@h/db", "postgresql"), ("postgresql+psycopg2://u@h/db", "postgresql"),
    ("mariadb://r@h/db", "mysql"), ("mariadb+pymysql://r@h/db", "mysql"), ("mysql://r@h/db", "mysql"),
    ("grpc://proxy.internal:13000", "grpc"), ("rediss://h:6380/0", "redis"), ("sqlite:///s.db", "sqlite"),
])
def test_every_spelling_of_a_backend_is_one_kind(url: str, expected: str) -> None:
    assert kind(url) == expected


@pytest.mark.parametrize("url, address", [
    ("grpc://proxy.internal:13000", ("proxy.internal", 13000)), ("grpc://10.0.0.5:80/", ("10.0.0.5", 80)),
    ("grpc://[::1]:13000", ("::1", 13000)),
])
def test_a_grpc_url_names_the_proxys_host_and_port(url: str, address: tuple[str, int]) -> None:
    assert grpc_address(url) == address


@pytest.mark.parametrize("url", ["grpc://proxy.internal", "grpc://:13000", "grpc://proxy:port", "grpc://p:0"])
def test_a_grpc_url_without_a_port_is_refused_with_the_form(url: str) -> None:
    with pytest.raises(ConfigError, match=r"a gRPC proxy URL is grpc://HOST:PORT \(e.g. grpc://proxy.internal"):
        grpc_address(url)


@pytest.mark.slow
def test_a_grpc_proxy_that_is_not_there_is_refused_within_the_connect_timeout() -> None:
    pytest.importorskip("grpc")
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(ConfigError) as refused:
        make_storage(f"grpc://127.0.0.1:{port}?token=sekrit", connect_timeout=1)
    assert time.monotonic() - started < 30
    assert str(refused.value) == (f"cannot open the study storage grpc://127.0.0.1:{port}?token=***: ConnectionError: "
                                  f"no gRPC storage proxy answered at 127.0.0.1:{port} within 1s (start one with "
                                  "`swagppm-tune proxy`)")


def test_an_unavailable_grpc_call_is_a_connection_error() -> None:
    grpc = pytest.importorskip("grpc")

    class Unavailable(grpc.RpcError):
        def code(self) -> object:
            return grpc.StatusCode.UNAVAILABLE

    class Refused(grpc.RpcError):
        def code(self) -> object:
            return grpc.StatusCode.PERMISSION_DENIED

    Unavailable.__module__ = Refused.__module__ = "grpc._channel"
    assert is_connection_error(Unavailable()) and not is_connection_error(Refused())


@pytest.mark.parametrize("url", ["sqlite:///s.db", "journal:s.log", "redis://127.0.0.1:6379/0", "grpc://h:1"])
def test_the_grpc_proxy_serves_only_a_server_database(url: str) -> None:
    with pytest.raises(ConfigError, match="the gRPC proxy serves a PostgreSQL or MySQL/MariaDB database"):
        serve_grpc_proxy(url, host="127.0.0.1", port=13000, token="t", connect_timeout=1, echo=print)


@pytest.mark.parametrize("error, lost", [
    ('duplicate key value violates unique constraint "pg_type_typname_nsp_index"', True),
    ("(1050, \"Table 'studies' already exists\")", True),
    ("(1062, \"Duplicate entry 'v3.2.0.a' for key 'PRIMARY'\")", True),
    ("permission denied for schema public", False),
])
def test_only_a_lost_race_to_create_the_tables_is_retried(error: str, lost: bool) -> None:
    assert _lost_schema_race(sqlalchemy.exc.IntegrityError("CREATE TABLE", {}, Exception(error))) is lost
# --- a journal verified before anything appends to it ----------------------------------------------------------------


def cut_mid_line(journal: Path) -> bytes:
    """Append the first half of a copy of the journal's last operation, without its newline: the file as a process
    killed while writing an operation leaves it. The half line."""
    half = journal.read_bytes().splitlines()[-1][:40]
    with open(journal, "ab") as handle:
        handle.write(half)
    return half


@pytest.mark.slow
def test_a_journal_cut_mid_line_is_named_and_mended_before_anything_appends(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path, journal = study_file(), tmp_path / "study.log"
    with_a_feasible_trial(path, storage=f"journal:{journal}")
    whole = journal.read_bytes()
    half = cut_mid_line(journal)
    capsys.readouterr()
    assert main(["status", str(path), "--storage", f"journal:{journal}"]) == 0
    [aside] = tmp_path.glob("study.log.cut-*")
    warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: the journal")]
    assert warning == [f"warning: the journal {journal} ended in a line cut mid-write (a process was killed while "
                       "writing it); Optuna never read that unfinished operation, so it was moved to "
                       f"{aside} ({len(half)} bytes) and the study goes on without it"]
    assert journal.read_bytes() == whole and aside.read_bytes() == half
    assert stat.S_IMODE(aside.stat().st_mode) == 0o600
    with_a_feasible_trial(path, storage=f"journal:{journal}")  # appends where the cut line was
    study = optuna.load_study(study_name="small", storage=make_storage(f"journal:{journal}"))
    assert len(study.trials) == 2 and not capsys.readouterr().err  # nothing left to mend


@pytest.mark.slow
def test_a_journal_damaged_inside_is_refused_in_one_line_naming_the_line(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """What an unchecked append onto a cut line leaves: one line that is two operations glued together."""
    path, journal = study_file(), tmp_path / "study.log"
    with_a_feasible_trial(path, storage=f"journal:{journal}")
    lines = journal.read_bytes().splitlines(keepends=True)
    journal.write_bytes(b"".join([*lines[:3], lines[3][:25], *lines[3:]]))
    before = journal.read_bytes()
    assert main(["status", str(path), "--storage", f"journal:{journal}"]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"swagppm-tune: error: the journal {journal} is damaged at "
        "line 4: it is not one whole operation (a write cut short, then written after), so the study cannot be read "
        "past it; restore the file from a copy, or keep a copy and cut it to its first 3 lines (the operations after "
        "them are lost)")
    assert journal.read_bytes() == before
