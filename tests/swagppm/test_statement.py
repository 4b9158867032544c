"""The privacy statement: one text wherever a configuration or a release states its privacy."""

from __future__ import annotations

from swagppm.statement import privacy_statement


def test_a_fit_outside_a_study_states_no_tuning_figures() -> None:
    statement = privacy_statement(epsilon=1.0, trainable="head", tuning={"statement": None, "trials_run": None})
    assert "Tuning: not reported." in statement
