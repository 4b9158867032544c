"""Test lanes by marker: ``unit``, ``slow``, ``fits``, ``services`` and ``gpu``.

A module or test declares ``slow`` (no fit and no service, but seconds a test),
``fits`` (real fits, CLI subprocesses, kills and restarts),
``services`` (the local PostgreSQL, MariaDB, Redis or Chromium) or ``gpu`` (CUDA) with
``pytest.mark``; a test that asks for a service fixture is ``services`` by itself;
everything else is ``unit`` and must stay fast (``pytest -m unit``).
"""

from __future__ import annotations

import pytest

SLOW_LANES = ("slow", "fits", "services", "gpu")
SERVICE_FIXTURES = {"postgres", "browser"}  # the local PostgreSQL, Chromium through selenium


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.services)
        if not any(item.get_closest_marker(lane) for lane in SLOW_LANES):
            item.add_marker(pytest.mark.unit)
