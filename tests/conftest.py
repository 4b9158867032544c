"""Test lanes by marker: ``unit``, ``slow``, ``fits``, ``services`` and ``gpu``.

A module or test declares ``slow`` (no fit and no service, but seconds a test),
``fits`` (real fits, CLI subprocesses, kills and restarts),
``services`` (the local PostgreSQL, MariaDB, Redis or Chromium) or ``gpu`` (CUDA) with
``pytest.mark``; a test that asks for a service fixture is ``services`` by itself;
everything else is ``unit`` and must stay fast (``pytest -m unit``).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

SLOW_LANES = ("slow", "fits", "services", "gpu")
LEDGER_ENV = "SWAGPPM_TUNE_LEDGER"  # tuner.ledger.LEDGER_ENV: the privacy ledgers' folder
KEY_ENV = "SWAGPPM_TUNE_KEY_FILE"  # tuner.keys.KEY_ENV: the owner key that seals every study's claim
SERVICE_FIXTURES = {"postgres", "browser"}  # the local PostgreSQL, Chromium through selenium


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)
        if not any(item.get_closest_marker(lane) for lane in SLOW_LANES):
            item.add_marker(pytest.mark.unit)


@event.listens_for(Engine, "connect")
def _sqlite_without_fsync(connection: Any, record: Any) -> None:
    """SQLite in this test process commits without waiting for the disk (``synchronous=OFF``): a third of the slow
    lane's time was fsync. What a commit guarantees against a killed process is unchanged (only a power loss could
    lose it), and the tests that kill processes run them as subprocesses, with SQLite's defaults."""
    if isinstance(connection, sqlite3.Connection):
        connection.execute("PRAGMA synchronous=OFF")


def pytest_configure(config: pytest.Config) -> None:
    """Every test's privacy ledgers and owner key in a folder of this test session, never in the user's home, set
    before any test module is imported (modules seal claims at import); the processes the tests start inherit them.
    A test that counts a ledger's entries, or loses its key, sets a folder of its own."""
    config.stash[_SAVED] = {name: os.environ.get(name) for name in (LEDGER_ENV, KEY_ENV)}
    folder = tempfile.mkdtemp(prefix="swagppm-test-ledgers-")
    os.environ[LEDGER_ENV], os.environ[KEY_ENV] = os.path.join(folder, "ledger"), os.path.join(folder, "owner.key")
    config.stash[_FOLDER] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(config.stash.get(_FOLDER, ""), ignore_errors=True)
    for name, saved in config.stash.get(_SAVED, {}).items():
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


_SAVED = pytest.StashKey[dict[str, str | None]]()
_FOLDER = pytest.StashKey[str]()
