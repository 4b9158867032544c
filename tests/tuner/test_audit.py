"""The membership-inference audit: both columns on the tiny preset, the attacks on made-up losses, and the warning
when its bound contradicts the stated ε."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import swagppm
from swagppm.evaluate.probes import RecordLosses
from swagppm.statement import audit_contradiction, privacy_statement
from tests.swagppm.helpers import small_config
from tuner.audit import BASELINE, RELEASE, audit_fit, audit_losses, audit_text


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
    memorised = RecordLosses(members=np.full(400, 0.01), non_members=rng.uniform(1, 3, 400),
                                     member_classes=np.zeros(400, int), non_member_classes=np.zeros(400, int))
    chance = RecordLosses(members=rng.uniform(1, 3, 400), non_members=rng.uniform(1, 3, 400),
                                  member_classes=np.zeros(400, int), non_member_classes=np.zeros(400, int))
    assert audit_losses(memorised)["loss_threshold"]["auc"] == 1.0
    assert audit_losses(memorised)["loss_threshold"]["epsilon_lower_bound"] > 2
    assert abs(audit_losses(chance)["loss_threshold"]["auc"] - 0.5) < 0.06


def test_an_audit_bound_above_the_stated_epsilon_is_a_warning_wherever_epsilon_is_stated() -> None:
    members, non_members = np.full(400, 0.01), np.random.default_rng(0).uniform(1, 3, 400)
    memorised = audit_losses(RecordLosses(members=members, non_members=non_members,
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
        f"Audit warning: {audit_contradiction(1.0, audit)}."]
    baseline_only = {BASELINE: memorised}  # the non-private baseline is expected to leak: no warning
    assert audit_contradiction(1.0, baseline_only) is None
    assert not any(line.startswith("Audit warning") for line in
                   privacy_statement(epsilon=1.0, epsilon_is_lower_bound=True, trainable="head", audit=audit))
