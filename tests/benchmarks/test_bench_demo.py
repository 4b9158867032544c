"""The demo benchmark's breakdown: a run's progress lines summed by stage, as ``--stages`` prints them."""

from __future__ import annotations

import pytest

from benchmarks.cli.bench_demo import stage_seconds

pytestmark = pytest.mark.unit


def test_the_progress_lines_ends_are_summed_by_stage_and_the_rest_is_left_out() -> None:
    progress = "\n".join([
        "encoding the train records through the frozen layers (once, then cached) 1/1 (2.1 s, done)",
        "encoding the test records through the frozen layers (once, then cached) 1/1 (2.4 s, done)",
        "stage1: fine-tune epoch 3/4 (14 s elapsed, about 4.5 s left)",  # not an end: left out
        "stage1: fine-tune epoch 4/4 (16 s, done)",
        "stage2: privacy draws 60/60 (5.9 s, done)",
        "stage2: privacy draws 1/60 (1.1 s, stopped early)",
        "stage2: fine-tune epoch 10/10 (1.5 min, done)",
        "trial   0  c=1.000 epochs= 7  eps=  0.039 ...",
    ])
    assert stage_seconds(progress) == pytest.approx({
        "stage2: fine-tune epoch": 90.0, "stage1: fine-tune epoch": 16.0, "stage2: privacy draws": 7.0,
        "encoding the records (frozen layers, once)": 4.5})
    assert list(stage_seconds(progress))[0] == "stage2: fine-tune epoch"  # largest first
