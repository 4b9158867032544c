"""The privacy statement: one text wherever a configuration states its privacy, and the release's own."""

from __future__ import annotations

from swagppm.statement import privacy_statement, release_statement


def test_a_fit_outside_a_study_states_no_tuning_figures() -> None:
    statement = privacy_statement(epsilon=1.0, trainable="head", tuning={"statement": None, "trials_run": None})
    assert "Tuning: not reported." in statement


def test_the_release_statement_claims_the_cap_and_states_nothing_measured() -> None:
    tuning = {"mode": "accounted", "total_epsilon": 4.5, "delta": 1e-6, "statement": "accounted"}
    lines = release_statement(epsilon_cap=2.0, trainable="head", private_parameters=2, tuning=tuning,
                              selection=None, audit="run and passed")
    assert lines[2].startswith("Claim: epsilon <= 2 for the release of one draw, a cap declared before any fit")
    assert "Tuning: accounted (accounted total epsilon 4.5 at delta 1e-06)." in lines
    assert "Empirical audit: run and passed." in lines
    assert any(line.startswith("Owner report: an owner-only report") for line in lines)
    assert release_statement(epsilon_cap=2.0, trainable="head", private_parameters=2, tuning=None, selection=None,
                             audit="x")[5] == "Tuning: not reported."
