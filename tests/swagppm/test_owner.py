"""The owner-only report of a release: every private figure it holds, the class-name mapping, its place and mode."""

from __future__ import annotations

import json
import math
import stat
from pathlib import Path
from typing import Any

import pytest

from swagppm.releases.owner import label_names, owner_report
from swagppm.releases.staging import ReleaseTarget, owner_report_path
from swagppm.stage2 import SWAGPPMResult

NAMES = ("burn", "fracture", "amputation")
PUBLISHED = ("LABEL_0", "LABEL_1", "LABEL_2")
EVALUATION = {"per_class": {"burn": {"f1-score": 0.5, "support": 3}}, "confusion_matrix": [[1, 2], [0, 3]]}
TUNING = {"mode": "unaccounted", "total_epsilon": None, "delta": None, "statement": "unaccounted: adaptive search",
          "trials_run": 17, "max_trial_epsilon": 4.75, "by_state": {"complete": 16, "fail": 1}}


def _result(**fields: Any) -> SWAGPPMResult:
    """A fit's outcome with binary-exact figures (median and 10th percentile of 0, 1/8, ..., 10/8: 5/8 and 1/8)."""
    values: dict[str, Any] = dict(
        c=0.9, g=0.0, ft_epochs=2, seed=4242, epsilon=1.75, max_delta=[0.5, 0.875, 0.25, 0.625],
        f1_macro=[k / 8 for k in range(11)], f1_weighted=[k / 4 for k in range(11)], baseline_f1_macro=0.8125,
        baseline_f1_weighted=0.875, stage1_fingerprint="s1-fingerprint", num_train=120, num_test=118, num_classes=3,
        data_hash="keyed-fingerprint", device="cpu", threads=7, cpu_kernels="AVX512")
    values.update(fields)
    return SWAGPPMResult(**values)


def _report(result: SWAGPPMResult | None = None, **overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = dict(stage1_seed=11, epsilon_cap=2.0, names=NAMES, published_names=PUBLISHED,
                                     evaluation=EVALUATION, tuning=TUNING, selection=None, extra=None)
    arguments.update(overrides)
    return owner_report(result or _result(), **arguments)


def test_label_names_are_label_k_unless_declared_public() -> None:
    assert label_names(NAMES, public=False) == PUBLISHED
    assert label_names(NAMES, public=True) == NAMES
    assert label_names((), public=False) == ()


def test_the_report_holds_every_private_figure_of_the_fit_exactly() -> None:
    assert _report() == {
        "epsilon": {"measured": 1.75, "is_lower_bound": False, "cap": 2.0},
        "max_delta": {"draws": 4, "median": 0.5625, "min": 0.25, "max": 0.875},
        "private_test_split": {"f1_macro_median": 0.625, "f1_macro_q10": 0.125, "f1_weighted_median": 1.25,
                               "f1_weighted_q10": 0.25, "released_draw": EVALUATION},
        "baseline": {"f1_macro": 0.8125, "f1_weighted": 0.875},
        "seeds": {"stage1": 11, "trial": 4242},
        "machine": {"device": "cpu", "cpu_threads": 7, "cpu_kernels": "AVX512"},
        "data": {"fingerprint": "keyed-fingerprint", "fingerprint_kind": "HMAC-SHA-256 under the owner's key",
                 "stage1_fingerprint": "s1-fingerprint", "num_train": 120, "num_test": 118, "num_classes": 3},
        "labels": {"LABEL_0": "burn", "LABEL_1": "fracture", "LABEL_2": "amputation"},
        "trials_run": 17,
        "tuning": TUNING,
        "selection": None,
    }


def test_the_report_keeps_the_whole_tuning_cost_and_the_private_side_of_a_selection() -> None:
    """What the card drops (trial counts, the largest trial ε, candidates tried) is what the owner keeps."""
    report = _report(selection={"candidates_tried": 3, "score": 0.625})
    assert report["tuning"] == TUNING and report["tuning"] is not TUNING
    assert report["tuning"]["trials_run"] == 17 and report["tuning"]["max_trial_epsilon"] == 4.75
    assert report["selection"] == {"candidates_tried": 3, "score": 0.625}


def test_extra_sections_are_added_beside_the_fixed_ones() -> None:
    audit = {"refutes_the_cap": False, "forced": False, "epsilon_lower_bound": 0.25}
    report = _report(extra={"audit": audit, "study": {"name": "osha"}})
    assert report["audit"] == audit and report["study"] == {"name": "osha"}
    assert list(report)[-2:] == ["audit", "study"] and list(_report()) == list(report)[:-2]


def test_a_fit_stopped_above_the_cap_reports_its_lower_bound_and_no_utility_summary() -> None:
    stopped = _result(epsilon=math.inf, epsilon_is_lower_bound=True, max_delta=[], f1_macro=[], f1_weighted=[])
    report = _report(stopped, tuning=None)
    assert report["epsilon"] == {"measured": math.inf, "is_lower_bound": True, "cap": 2.0}
    assert report["max_delta"] == {"draws": 0, "median": None, "min": None, "max": None}
    split = report["private_test_split"]
    assert all(math.isnan(split[key]) for key in ("f1_macro_median", "f1_macro_q10", "f1_weighted_median",
                                                  "f1_weighted_q10"))
    assert report["trials_run"] is None and report["tuning"] is None


def test_a_label_mapping_of_another_length_is_refused() -> None:
    with pytest.raises(ValueError):
        _report(published_names=("LABEL_0", "LABEL_1"))


def test_the_report_lies_beside_the_folder_never_inside_it() -> None:
    assert owner_report_path(Path("/releases/model")) == Path("/releases/model.owner-report.json")
    assert owner_report_path(Path("/releases/model.v2")) == Path("/releases/model.v2.owner-report.json")
    assert owner_report_path(Path("model")) == Path("model.owner-report.json")


def test_a_committed_release_leaves_the_report_beside_it_owner_only_and_as_built(tmp_path: Path) -> None:
    """Through the real staging folder: the report (with an infinite ε and NaN medians) reads back as written."""
    stopped = _result(epsilon=math.inf, epsilon_is_lower_bound=True, f1_macro=[], f1_weighted=[])
    document = _report(stopped)
    out = tmp_path / "model"
    with ReleaseTarget(path=out, overwrite=False, lock_fd=None) as target, target.staging() as folder:
        (folder / "release_card.json").write_text("{}")
        target.commit(folder, document)
    path = tmp_path / "model.owner-report.json"
    assert target.report == path and sorted(p.name for p in out.iterdir()) == ["release_card.json"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    read = json.loads(path.read_text())
    assert list(read)[0] == "format" and read["format"] == "swagppm-owner-report/1"
    assert read["epsilon"]["measured"] == math.inf and math.isnan(read["private_test_split"]["f1_macro_median"])
    assert {key: value for key, value in read.items() if key not in ("format", "private_test_split")} == {
        key: value for key, value in document.items() if key != "private_test_split"}
