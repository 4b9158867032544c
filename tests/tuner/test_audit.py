"""The audit that decides: both columns on the tiny preset, the family-wise audit on made-up losses, the sentence and
the refusal line, and the count of audits run on a study."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import swagppm
from scorers import PrivacyAudit
from swagppm import TrialParams
from swagppm.evaluate.probes import RecordLosses
from tests.swagppm.helpers import small_config
from tests.tuner.helpers import result, tight, with_a_feasible_trial
from tuner.audit import (
    BASELINE,
    RELEASE,
    audit_document,
    audit_fit,
    audit_losses,
    audit_text,
    refusal,
)
from tuner.cli import EXIT_AUDIT_REFUTED, main
from tuner.config import StudyConfig
from tuner.outcome import AUDIT_TARGET, DrawChecks, judge


def losses(members: np.ndarray, non_members: np.ndarray) -> RecordLosses:
    return RecordLosses(members=members, non_members=non_members, member_classes=np.zeros(len(members), int),
                        non_member_classes=np.zeros(len(non_members), int))


MEMORISED = losses(np.full(400, 0.01), np.random.default_rng(0).uniform(1, 3, 400))


@pytest.mark.fits
def test_the_audit_of_a_fit_has_both_columns_as_family_wise_audits(tmp_path: Path) -> None:
    with swagppm.Session(small_config(tmp_path / "cache")) as session:
        untrained = audit_losses(session.record_losses())
        assert abs(untrained.attacks[0].auc - 0.5) < 0.1 and untrained.members == len(session.train)
        fit = session.fit(TrialParams(c=1.0, ft_epochs=1))
        audit = audit_fit(session, fit)
    assert set(audit) == {BASELINE, RELEASE} and all(isinstance(a, PrivacyAudit) for a in audit.values())
    assert [a.attack for a in audit[RELEASE].attacks] == ["loss_threshold", "class_calibrated"]
    text = audit_text(audit, epsilon=50.0)
    assert "released_draw" in text and "95% (family-wise, Bonferroni); delta = 0 assumed" in text
    assert text.splitlines()[-1] == audit[RELEASE].sentence(50.0)
    json.dumps(audit_document(audit, epsilon_cap=50.0, audits_run=None))


def test_a_memorised_set_refutes_a_small_claim_in_one_line_with_the_reconciling_delta() -> None:
    audit = audit_losses(MEMORISED)
    assert audit.attacks[0].auc == 1.0 and audit.epsilon_lower_bound > 2
    refutation = audit.refutation(1.0)
    assert refutation is not None
    line = refusal(refutation, epsilon_cap=1.0)
    assert line.startswith(f"the audit refutes the claim epsilon <= 1: the released draw's epsilon lower bound is "
                           f"{refutation.epsilon_lower_bound:.3g} (")
    assert f"reconciling them would need delta >= {refutation.reconciling_delta:.2g}" in line
    assert "\n" not in line and "--force-audit" in line
    document = audit_document({BASELINE: audit, RELEASE: audit}, epsilon_cap=1.0, audits_run=4)
    assert document["refutes_the_cap"] is True and document["audits_run"] == 4
    assert document["columns"][RELEASE] == audit.to_dict()
    assert audit_document({RELEASE: audit}, epsilon_cap=100.0, audits_run=None)["refutes_the_cap"] is False


def test_tpr_at_a_rate_under_one_record_is_said_to_be_at_0_of_n_non_members() -> None:
    text = audit_text({RELEASE: audit_losses(MEMORISED)}, epsilon=1.0)
    assert "* TPR at 0 of 400 non-members (0.1% of them is under one record)" in text
    assert "so the audit refutes the stated epsilon" in text.splitlines()[-1]


@pytest.mark.fits
def test_the_audit_verb_exits_7_when_it_refutes_and_holds_the_measured_epsilon_against_it(
        study_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """A real fit of the study's start point, audited with a memorised set's losses (the audit's own statistics are
    tested above): the verb says the measured epsilon is refuted, and exits with its own code so scripts can act."""
    path = study_file(targets={"epsilon_cap": 3.0},  # below the memorised set's bound (about 4.9)
                      search={"c_min": 0.01, "c_max": 0.02, "ft_epochs_min": 1, "ft_epochs_max": 1,
                              "restart_epochs": 1, "start": [{"c": 0.015, "ft_epochs": 1}]})
    memorised = audit_losses(MEMORISED)
    monkeypatch.setattr("tuner.cli.fitting.audit_fit", lambda session, fit: {BASELINE: memorised, RELEASE: memorised})
    series = [value / 10 for value in tight()]  # made up, epsilon about 0.6; the audit refits the trial (c = 0.015)
    with_a_feasible_trial(path, max_delta=series, epsilon=2 * max(series))
    capsys.readouterr()
    assert main(["audit", str(path), "-q"]) == EXIT_AUDIT_REFUTED
    out, err = capsys.readouterr()
    assert f"refuted: the audit shows epsilon >= {memorised.epsilon_lower_bound:.3g}" in out
    assert "the audit refutes the claim epsilon <= 3 (exit 7)" in err and len(err.strip().splitlines()) == 1


def test_a_trial_line_names_the_audit_when_only_the_audit_misses_the_cap(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(targets={"require_audit": True}))
    refuted = judge(result(tight(3.0)), targets=config.targets, search=config.search,
                    checks=DrawChecks(audit_epsilon_bound=60.0))
    assert f"infeasible ({AUDIT_TARGET})" in refuted.line() and "refuted: the audit shows" in refuted.line()
    assert "every target met" not in refuted.recommendation.sentence
