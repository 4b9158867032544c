"""Releasing one fit: the secret draw and its files (``writer``), the public card (``card``), the owner-only report
(``owner``), the all-or-nothing folder (``staging``) and private selection (``selection``).

``check_release_dir`` (check a release folder before a fit) loads on first use: ``staging`` needs no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["check_release_dir"]


def __getattr__(name: str) -> Any:
    if name != "check_release_dir":
        raise AttributeError(f"module 'swagppm.releases' has no attribute {name!r}")
    return importlib.import_module("swagppm.releases.writer").check_release_dir
