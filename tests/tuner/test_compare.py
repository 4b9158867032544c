"""The comparison table and the audit on the tiny preset: every method runs, numbers are aggregates in range."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import swagppm
from swagppm._statement import privacy_statement
from tests.swagppm.conftest import small_config
from tuner.audit import BASELINE, RELEASE, audit_fit, audit_losses, audit_text
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


def test_the_audit_of_an_untrained_model_is_near_chance_and_has_both_columns(tmp_path: Path) -> None:
    with swagppm.Session(small_config(tmp_path / "cache")) as session:
        untrained = audit_losses(session.record_losses())
        assert abs(untrained["loss_threshold"]["auc"] - 0.5) < 0.1
        assert untrained["loss_threshold"]["members"] == len(session.train)
        fit = session.fit(c=1.0, ft_epochs=1)
        audit = audit_fit(session, fit)
    assert set(audit) == {BASELINE, RELEASE} and set(audit[RELEASE]) == {"loss_threshold", "class_calibrated"}
    for attacks in audit.values():
        for result in attacks.values():
            assert 0.0 <= result["auc"] <= 1.0 and result["epsilon_lower_bound"] >= 0.0
            assert math.isfinite(result["tpr_at_fpr"]["0.01"][0])
    assert "released_draw" in audit_text(audit, epsilon=fit.result.epsilon)
    json.dumps(audit)


def test_audit_losses_separate_a_memorised_set_from_chance() -> None:
    rng = np.random.default_rng(0)
    memorised = swagppm.RecordLosses(members=np.full(400, 0.01), non_members=rng.uniform(1, 3, 400),
                                     member_classes=np.zeros(400, int), non_member_classes=np.zeros(400, int))
    chance = swagppm.RecordLosses(members=rng.uniform(1, 3, 400), non_members=rng.uniform(1, 3, 400),
                                  member_classes=np.zeros(400, int), non_member_classes=np.zeros(400, int))
    assert audit_losses(memorised)["loss_threshold"]["auc"] == 1.0
    assert audit_losses(memorised)["loss_threshold"]["epsilon_lower_bound"] > 2
    assert abs(audit_losses(chance)["loss_threshold"]["auc"] - 0.5) < 0.06


def test_an_audit_bound_above_the_stated_epsilon_is_a_warning_wherever_epsilon_is_stated() -> None:
    members, non_members = np.full(400, 0.01), np.random.default_rng(0).uniform(1, 3, 400)
    memorised = audit_losses(swagppm.RecordLosses(members=members, non_members=non_members,
                                                  member_classes=np.zeros(400, int),
                                                  non_member_classes=np.zeros(400, int)))
    bound = memorised["loss_threshold"]["epsilon_lower_bound"]
    audit = {BASELINE: memorised, RELEASE: memorised}
    assert "warning" not in audit_text(audit, epsilon=bound + 0.01)
    assert "warning" not in audit_text(audit, epsilon=None)  # an epsilon that is only a lower bound is not contradicted
    text = audit_text(audit, epsilon=1.0)
    assert text.splitlines()[-1].startswith(f"warning: the released draw's empirical epsilon lower bound {bound:.3g} "
                                            "(loss threshold attack, 95% confidence) exceeds the stated epsilon 1")
    statement = privacy_statement(epsilon=1.0, trainable="head", audit=audit)
    assert [line for line in statement if line.startswith("Audit warning: ")] == [
        f"Audit warning: {swagppm.audit_contradiction(1.0, audit)}."]
    baseline_only = {BASELINE: memorised}  # the non-private baseline is expected to leak: no warning
    assert swagppm.audit_contradiction(1.0, baseline_only) is None
    assert not any(line.startswith("Audit warning") for line in
                   privacy_statement(epsilon=1.0, epsilon_is_lower_bound=True, trainable="head", audit=audit))


def test_compare_from_the_command_line_into_the_report(study_file: Any, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from tuner._cli import main

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
