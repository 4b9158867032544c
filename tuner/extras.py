"""The optional packages (the extras of pyproject.toml), checked before any work and named with their install line.

A verb that needs one calls ``require`` first, so a missing package is one line
(``pip install 'swagppm-tuner[compare]'``) at once, never a ModuleNotFoundError
after minutes of fitting. Only whether the package can be found is checked
(``importlib.util.find_spec``): nothing is imported.
"""

from __future__ import annotations

import importlib.util

from swagppm import ConfigError

# The extras a verb checks, and the modules each installs (pyproject.toml's [project.optional-dependencies]).
EXTRAS: dict[str, tuple[str, ...]] = {
    "compare": ("opacus",),
    "cluster": ("submitit",),
    "postgres": ("psycopg",),
    "mysql": ("pymysql",),
    "redis": ("redis",),
}
# The driver module of each storage URL scheme the storage layer completes (``tuner.storage.with_driver``) or reads.
STORAGE_DRIVERS: dict[str, str] = {"postgresql+psycopg": "postgres", "mysql+pymysql": "mysql",
                                   "mariadb+pymysql": "mysql", "redis": "redis"}


def missing(extra: str) -> list[str]:
    """The modules of ``extra`` that are not installed."""
    return [module for module in EXTRAS[extra] if importlib.util.find_spec(module) is None]


def require(extra: str, *, needed_by: str) -> None:
    """Refuse at once, in one line naming the install, when ``extra`` is not installed."""
    absent = missing(extra)
    if absent:
        raise ConfigError(f"{needed_by} needs {' and '.join(absent)}, which is not installed: "
                          f"pip install 'swagppm-tuner[{extra}]'")


def require_storage_driver(url: str, *, shown: str) -> None:
    """The driver of a server or Redis storage URL (``shown``: the URL with its credentials masked), checked before
    the storage is opened; SQLite, journal files and drivers the user named themselves need no extra."""
    from tuner.storage import kind, with_driver

    storage_kind = kind(url)
    if storage_kind in ("sqlite", "journal"):
        return
    scheme = "redis" if storage_kind == "redis" else with_driver(url).split("://", 1)[0]
    extra = STORAGE_DRIVERS.get(scheme)
    if extra is not None:
        require(extra, needed_by=f"the study storage {shown}")
