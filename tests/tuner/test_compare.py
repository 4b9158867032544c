"""The comparison table on the tiny preset: every method runs, numbers are aggregates in range."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

import swagppm
from swagppm import TrialParams
from tests.swagppm.helpers import small_config
from tuner.compare import (
    QUARTILES_WITHHELD,
    CompareSettings,
    compare,
    comparison_table,
    read_comparison,
    write_comparison,
)

pytestmark = pytest.mark.fits

pytest.importorskip("opacus", reason="the compare extra (opacus) is not installed")


def test_the_comparison_runs_end_to_end_on_the_tiny_preset(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache")
    settings = CompareSettings(params=TrialParams(c=1.0, ft_epochs=1), long_epochs=2, dpsgd_epochs=2,
                               dpsgd_batch_size=64)
    rows = compare(config, settings,
                   echo=lambda line: None)
    methods = [row.method for row in rows]
    assert methods[:2] == ["non-private (stage 1)", "non-private (2 epochs)"]
    assert methods.count("DP-SGD") == 2 and methods[2] == "SWAG-PPM" and methods[-3] == "reweighted SWAG-PPM k=0.95"
    swag, strict = rows[2], [r for r in rows if r.method == "DP-SGD"]
    assert swag.delta == "not quantified" and swag.epsilon is not None and swag.epsilon > 0
    assert strict[0].epsilon <= swag.epsilon * 1.001 and strict[1].epsilon <= swag.epsilon / 2 * 1.001
    assert [r.remark.split(",")[0] for r in strict] == [f"asked for epsilon {swag.epsilon:.3g}",
                                                       f"asked for epsilon {swag.epsilon / 2:.3g}"]
    assert all(0.0 <= getattr(r, k) <= 1.0 for r in rows for k in ("f1_macro", "f1_weighted"))
    # 4 classes: a quartile is one class, whose F1 would be published as the quartile's: withheld in every row
    assert all(r.f1_top_quartile is None and r.f1_bottom_quartile is None for r in rows)
    table = comparison_table(rows)
    assert "reweighted SWAG-PPM k=0.95" in table and table.endswith(f"  {QUARTILES_WITHHELD}")
    paths = write_comparison(rows, tmp_path / "out", about={"c": 1.0})
    assert read_comparison(paths[0]) == rows
    assert json.loads(paths[0].read_text())["about"] == {"c": 1.0, "quartiles": QUARTILES_WITHHELD}
    assert "smallest 25% of classes" not in paths[2].read_text()
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


def test_two_small_targets_get_two_runs_within_the_search_tolerance() -> None:
    """The demo's case (full batches, 30 steps): a target below 0.01 once got the first σ found below it (640 for
    ε 0.00965 gave 0.0086), since Opacus's absolute tolerance 0.01 accepted any."""
    import warnings

    from opacus.accountants import create_accountant

    from swagppm.evaluate.dpsgd import EPSILON_TOLERANCE, DPSGDSettings, Plan

    targets = (0.00965, 0.007)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the accountant's own numerical warnings at such σ
        plans = [Plan.of(240, DPSGDSettings(target_epsilon=target, epochs=30)) for target in targets]
        assert plans[0].noise_multiplier < plans[1].noise_multiplier
        for target, plan in zip(targets, plans, strict=True):
            accountant = create_accountant(mechanism="prv")
            accountant.history = [(plan.noise_multiplier, plan.sample_rate, 30 * plan.steps_per_epoch)]
            assert target * (1 - EPSILON_TOLERANCE) <= accountant.get_epsilon(delta=plan.delta) <= target


def test_the_table_says_what_was_asked_and_why_it_was_not_reached() -> None:
    from tuner.compare import ComparisonRow, _shortfall

    assert _shortfall(1.0, 0.995, 3.0, 30) == ""
    below = _shortfall(0.00965, 0.00476, 640.0, 30)
    assert "got 0.00476" in below and "stopped at 640 for 30 steps" in below and "more private" in below
    assert "not reached" in _shortfall(0.5, 0.7, 50.0, 30)
    row = ComparisonRow(method="DP-SGD", epsilon=0.00476, delta=0.004, f1_macro=0.1, f1_weighted=0.2,
                        f1_top_quartile=0.3, f1_bottom_quartile=0.0,
                        remark="asked for epsilon 0.00965" + below + "; asked for epsilon 0.00482 gave this same run "
                               "(one row)")
    table = comparison_table([row])
    assert table.splitlines()[-1] == f"  DP-SGD: {row.remark}" and table.count("DP-SGD") == 2


def test_the_accountants_warnings_at_large_noise_are_silenced_only_inside_a_comparison(
        recwarn: pytest.WarningsRecorder) -> None:
    import warnings

    from opacus.accountants import create_accountant

    from tuner.compare import understood_warnings

    def account() -> None:
        for mechanism in ("rdp", "prv"):
            accountant = create_accountant(mechanism=mechanism)
            accountant.history = [(2000.0, 1.0, 30)]
            accountant.get_epsilon(delta=1 / 240)

    with warnings.catch_warnings():
        warnings.simplefilter("always")
        with understood_warnings():
            account()
        assert [str(w.message) for w in recwarn] == []
        account()
    messages = " | ".join(str(w.message) for w in recwarn)
    assert "Optimal order is the largest alpha" in messages and "divide by zero" in messages


def test_quartile_figures_are_shown_only_when_each_quartile_holds_three_classes() -> None:
    from swagppm.utility import quartile_size
    from tuner.compare import MIN_QUARTILE_CLASSES, quartiles_shown

    assert MIN_QUARTILE_CLASSES == 3
    assert [quartile_size(n) for n in (2, 4, 8, 11, 12, 40)] == [1, 1, 2, 2, 3, 10]
    assert [quartiles_shown(n) for n in (2, 4, 8, 11, 12, 40)] == [False, False, False, False, True, True]


def test_withheld_quartiles_leave_no_figure_in_the_table_files_figure_or_report(tmp_path: Path) -> None:
    from tuner.compare import ComparisonRow, withhold_quartiles
    from tuner.report import _comparison_section

    rows = [withhold_quartiles(ComparisonRow(method=method, epsilon=epsilon, delta=None, f1_macro=0.7,
                                             f1_weighted=0.75, f1_top_quartile=0.812, f1_bottom_quartile=0.431))
            for method, epsilon in (("non-private (stage 1)", None), ("SWAG-PPM", 2.5))]
    table = comparison_table(rows)
    assert table.splitlines()[2].split()[-2:] == ["-", "-"] and table.splitlines()[-1] == f"  {QUARTILES_WITHHELD}"
    json_path, csv_path, figure_path = write_comparison(rows, tmp_path, about={})
    written = json_path.read_text() + csv_path.read_text() + figure_path.read_text()
    assert "0.812" not in written and "0.431" not in written
    document = json.loads(json_path.read_text())
    assert document["about"] == {"quartiles": QUARTILES_WITHHELD}
    assert {row["f1_bottom_quartile"] for row in document["rows"]} == {None}
    assert read_comparison(json_path) == rows
    section = _comparison_section(rows)
    assert "0.812" not in section and "0.431" not in section and "by quartile withheld" in section


def test_a_comparison_of_enough_classes_keeps_its_quartiles(tmp_path: Path) -> None:
    from tuner.compare import ComparisonRow

    row = ComparisonRow(method="SWAG-PPM", epsilon=2.5, delta=None, f1_macro=0.7, f1_weighted=0.75,
                        f1_top_quartile=0.812, f1_bottom_quartile=0.431)
    assert QUARTILES_WITHHELD not in comparison_table([row])
    json_path, _, figure_path = write_comparison([row], tmp_path, about={})
    assert json.loads(json_path.read_text())["about"] == {} and "smallest 25% of classes" in figure_path.read_text()
