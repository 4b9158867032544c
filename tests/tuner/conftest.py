"""The ``study_file`` fixture: small study files that run in seconds on a CPU (``tests.tuner.helpers``); the local
servers (``postgres``, ``mariadb``, ``redis``), each skipping its test with the reason when it is not running."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.tuner.helpers import MARIADB_URL, PG_URL, REDIS_URL, delete_studies, merged, unreachable, write_study


@pytest.fixture
def study_file(tmp_path: Path) -> Callable[..., Path]:
    """``study_file(**changes)`` writes ``SMALL_STUDY`` with changes to ``tmp_path/<name>.toml``."""
    def write(name: str = "small", **changes: Mapping[str, Any]) -> Path:
        return write_study(tmp_path / f"{name}.toml", merged(**changes))
    return write


def _server(name: str, port: int, url: str) -> str:
    reason = unreachable("127.0.0.1", port)
    if reason:
        pytest.skip(f"{name} is not running: {reason}")
    return url


@pytest.fixture(scope="module")
def postgres() -> str:
    """The local PostgreSQL's URL (trust authentication, database ``test``)."""
    return _server("PostgreSQL", 5432, PG_URL)


@pytest.fixture(scope="module")
def mariadb() -> str:
    """The local MariaDB's URL (root without a password, database ``test``)."""
    return _server("MariaDB", 3306, MARIADB_URL)


@pytest.fixture(scope="module")
def redis() -> str:
    """The local Redis's URL (database 0)."""
    return _server("Redis", 6379, REDIS_URL)


@pytest.fixture
def cleanup() -> Iterator[list[Path]]:
    """Study files whose studies are deleted from their storage after the test."""
    paths: list[Path] = []
    yield paths
    delete_studies(paths)
