"""Releasing one fit: staging the secret draw and its files and committing them (``writer``), the public card
(``card``), the owner-only report (``owner``), the all-or-nothing folder (``staging``) and private selection
(``selection``).

A release is staged, then committed by its caller, under a claim verified against its seal::

    spec = ReleaseSpec(claim=verified)                   # a swagppm.claim.VerifiedClaim: the study's, sealed
    check_release("released/", spec, config)            # before the fit: the folder, the label set, the tokenizer
    with stage(session, fit, "released/", spec) as staged:
        staged.commit(audit=NO_AUDIT)                    # in the open: no audit was run (the card says so)

These are the steps of the one gate, ``tuner.release`` (``tuner.release_chosen``), which also enters every attempt in
the data set's privacy ledger and audits the draw; call that. The names load on first use (``writer`` needs torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["NO_AUDIT", "AuditRefuted", "ReleaseSpec", "StagedRelease", "check_release", "stage"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'swagppm.releases' has no attribute {name!r}")
    return getattr(importlib.import_module("swagppm.releases.writer"), name)
