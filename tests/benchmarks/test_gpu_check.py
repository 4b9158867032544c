"""The prepared GPU check's CPU smoke run: every section runs and lands in the JSON."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.gpu.check import SECTIONS, chosen_sections

pytestmark = pytest.mark.fits

REPO = Path(__file__).resolve().parents[2]


def test_the_gpu_check_smoke_run_writes_every_section(tmp_path: Path) -> None:
    out = tmp_path / "smoke.json"
    subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu" / "check.py"), "--smoke", "--out", str(out)],
                   check=True, capture_output=True, timeout=1800)
    report = json.loads(out.read_text())
    assert report["sections_skipped"] == {} and "running" not in report
    in_order = [section.name for section in SECTIONS if section.on_cpu]
    assert report["section_order"] == in_order and in_order[0] == "trial" and list(report["budgets_s"]) == in_order
    for section in ("tests", "draw_pruning", "side_by_side", "trial", "posteriors", "sweeps", "concurrency",
                    "ablations"):
        assert "error" not in report[section], report[section]
    assert set(report["posteriors"]) == {"swag (head)", "laplace (head)", "exact (head)", "sgld (head)",
                                         "swag (last layer)", "sgld (last layer)"}
    assert all(row.get("trial_s") is not None and row["failure"] is None for row in report["posteriors"].values())
    assert report["tests"]["returncode"] == 0 and "skipped" in report["tests"]["summary"]  # no CUDA here
    assert report["draw_pruning"]["same_draws_before_the_stop"]
    assert all(report["side_by_side"]["same_epsilon"])
    assert report["trial"]["workload"]["train_records"] == 60
    runs = report["concurrency"]["runs"]
    assert set(runs) == {"1", "2"} and all(run["same_epsilon_for_same_seed"] for run in runs.values())


def test_sections_are_taken_in_the_order_named_and_unknown_or_repeated_names_are_refused() -> None:
    assert [section.name for section in chosen_sections(None)] == [section.name for section in SECTIONS]
    assert [section.name for section in chosen_sections("sweeps, trial")] == ["sweeps", "trial"]
    with pytest.raises(ValueError, match="unknown laplace_kron; known: trial, posteriors, "):
        chosen_sections("trial,laplace_kron")
    with pytest.raises(ValueError, match="trial named twice"):
        chosen_sections("trial,sweeps,trial")
