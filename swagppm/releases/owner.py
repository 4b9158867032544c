"""The owner-only report of a release: every figure that is a function of the private data, kept off the card.

Written 0600 beside the release folder (``staging.owner_report_path``), never in
it. It holds what a data owner needs to sign a release and a reviewer with access
may ask for: the measured ε and its series, the private-split F1s and the
baseline, the released draw's per-class evaluation, the audit, seeds, threads,
trial counts, the full tuning cost, the class-name mapping, and the data
fingerprint (an HMAC under the owner's key, never a bare digest). Even here no
single record's label appears: the per-class evaluation shows no class of fewer
than ``swagppm.utility.MIN_REPORTED_CLASS_RECORDS`` test records on its own.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from swagppm.stage2 import SWAGPPMResult


def label_names(names: tuple[str, ...], *, public: bool) -> tuple[str, ...]:
    """What the released model calls its classes: the names when declared public, else ``LABEL_k``."""
    return names if public else tuple(f"LABEL_{k}" for k in range(len(names)))


def owner_report(result: SWAGPPMResult, *, stage1_seed: int, epsilon_cap: float, names: tuple[str, ...],
                 published_names: tuple[str, ...], evaluation: dict[str, Any], tuning: Mapping[str, Any] | None,
                 selection: Mapping[str, Any] | None, extra: Mapping[str, Any] | None) -> dict[str, Any]:
    """The owner's report of one release (``evaluation``: the released draw's class report on the test split)."""
    series = result.max_delta
    return {
        "epsilon": {"measured": result.epsilon, "is_lower_bound": result.epsilon_is_lower_bound,
                    "cap": epsilon_cap},
        "max_delta": {"draws": len(series), "median": statistics.median(series) if series else None,
                      "min": min(series, default=None), "max": max(series, default=None)},
        "private_test_split": {
            "f1_macro_median": result.f1_macro_median, "f1_macro_q10": result.f1_macro_q10,
            "f1_weighted_median": result.f1_weighted_median, "f1_weighted_q10": result.f1_weighted_q10,
            "released_draw": evaluation},
        "baseline": {"f1_macro": result.baseline_f1_macro, "f1_weighted": result.baseline_f1_weighted},
        "seeds": {"stage1": stage1_seed, "trial": result.seed},
        "machine": {"device": result.device, "cpu_threads": result.threads, "cpu_kernels": result.cpu_kernels},
        "data": {"fingerprint": result.data_hash, "fingerprint_kind": "HMAC-SHA-256 under the owner's key",
                 "stage1_fingerprint": result.stage1_fingerprint, "num_train": result.num_train,
                 "num_test": result.num_test, "num_classes": result.num_classes},
        "labels": dict(zip(published_names, names, strict=True)),
        "trials_run": (tuning or {}).get("trials_run"),
        "tuning": dict(tuning) if tuning is not None else None,
        "selection": dict(selection) if selection is not None else None,
        **dict(extra or {}),
    }
