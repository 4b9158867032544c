"""The comparison table on the tiny preset: every method runs, numbers are aggregates in range."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import pytest

import swagppm
from tests.swagppm.helpers import small_config
from tuner.compare import CompareSettings, compare, comparison_table, read_comparison, write_comparison

pytest.importorskip("opacus", reason="the compare extra (opacus) is not installed")


def test_the_comparison_runs_end_to_end_on_the_tiny_preset(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache")
    rows = compare(config, CompareSettings(c=1.0, ft_epochs=1, long_epochs=2, dpsgd_epochs=2, dpsgd_batch_size=64),
                   echo=lambda line: None)
    methods = [row.method for row in rows]
    assert methods[:2] == ["non-private (stage 1)", "non-private (2 epochs)"]
    assert methods.count("DP-SGD") == 2 and methods[2] == "SWAG-PPM" and methods[-3] == "reweighted SWAG-PPM k=0.95"
    swag, strict = rows[2], [r for r in rows if r.method == "DP-SGD"]
    assert swag.delta == "not quantified" and swag.epsilon is not None and swag.epsilon > 0
    assert strict[0].epsilon <= swag.epsilon * 1.001 and strict[1].epsilon <= swag.epsilon / 2 * 1.001
    assert all(0.0 <= getattr(r, k) <= 1.0 for r in rows
               for k in ("f1_macro", "f1_weighted", "f1_top_quartile", "f1_bottom_quartile"))
    assert "reweighted SWAG-PPM k=0.95" in comparison_table(rows)
    paths = write_comparison(rows, tmp_path / "out", about={"c": 1.0})
    assert read_comparison(paths[0]) == rows
    with paths[1].open() as handle:
        assert len(list(csv.DictReader(handle))) == len(rows)
    texts, _ = swagppm.synthetic_corpus(config.data.synthetic_size, num_classes=4, seed=config.seed)
    written = "".join(p.read_text() for p in paths)
    assert not any(text in written for text in texts)  # aggregates only


def test_compare_from_the_command_line_into_the_report(study_file: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from tuner.cli import main

    path = study_file(study={"n_trials": 1})
    assert main(["run", str(path)]) == 0
    out = tmp_path / "comparison"
    assert main(["compare", str(path), "-o", str(out), "--dpsgd-epochs", "1", "--dpsgd-batch-size", "64"]) == 0
    printed = capsys.readouterr().out
    assert "DP-SGD" in printed and "not quantified" in printed
    assert {p.name for p in out.iterdir()} == {"comparison.json", "comparison.csv", "f1_by_class_size.html"}
    report = tmp_path / "report.html"
    assert main(["report", str(path), "-o", str(report), "--comparison", str(out / "comparison.json")]) == 0
    html = report.read_text()
    assert "Comparison with DP-SGD" in html and "F1 by class size" in html and "Privacy statement" in html
