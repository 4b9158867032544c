"""The privacy statement: one text wherever a configuration states its privacy, its kind first, and the release's
own; the proven bound and the audit's verdict with its ceiling."""

from __future__ import annotations

import pytest

from swagppm.statement import (
    NOT_PROVEN,
    AuditVerdict,
    PrivacyClaim,
    claim_kind,
    epsilon_words,
    privacy_statement,
    proven_epsilon,
    release_statement,
)

ESTIMATE = PrivacyClaim(epsilon_cap=2.0, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False)


def test_a_fit_outside_a_study_states_no_tuning_figures() -> None:
    statement = privacy_statement(epsilon=1.0, trainable="head", tuning={"statement": None, "trials_run": None})
    assert "Tuning: not reported." in statement
    assert statement[0].startswith(f"Claim: {NOT_PROVEN}; measured epsilon = 1 (estimate), an estimate")


def test_the_release_statement_claims_the_cap_and_states_nothing_measured() -> None:
    tuning = {"mode": "accounted", "total_epsilon": 4.5, "delta": 1e-6, "statement": "accounted"}
    lines = release_statement(claim=ESTIMATE, trainable="head", private_parameters=2, tuning=tuning,
                              selection=None, audit=AuditVerdict(outcome="passed"))
    assert lines[0].startswith(f"Claim: {NOT_PROVEN}. Cap: epsilon <= 2 for the release of one draw, declared before "
                               "any fit")
    assert "Tuning: accounted (accounted total epsilon 4.5 at delta 1e-06)." in lines
    assert lines[8].startswith("Empirical audit: a membership-inference audit of the released draw") and \
        "did not refute the cap" in lines[8]
    assert any(line.startswith("Owner report: an owner-only report") for line in lines)
    assert release_statement(claim=ESTIMATE, trainable="head", private_parameters=2, tuning=None, selection=None,
                             audit=AuditVerdict(outcome=None))[6] == "Tuning: not reported."


@pytest.mark.parametrize("posterior, bound, public, kind", [
    ("exact", 4.0, True, "proven"), ("exact", None, True, "estimate"), ("exact", 4.0, False, "estimate"),
    ("laplace", 4.0, True, "estimate"), ("sgld", 4.0, True, "estimate"), ("swag", 4.0, True, "estimate")])
def test_only_an_exact_sampler_with_a_bounded_likelihood_and_public_risks_is_proven(
        posterior: str, bound: float | None, public: bool, kind: str) -> None:
    assert claim_kind(posterior=posterior, nll_bound=bound, public_risks=public) == kind


def test_a_proven_claim_states_its_assumptions_first_and_its_bound_from_c_g_and_b() -> None:
    bound = proven_epsilon(c=0.3, g=0.1, nll_bound=5.0)
    assert bound == pytest.approx(4.0) and proven_epsilon(c=2.0, g=0.5, nll_bound=5.0) == 10.0  # the weight clips
    claim = PrivacyClaim(epsilon_cap=6.0, posterior="exact", prior_scale=0.1, nll_bound=5.0, public_risks=True,
                         proven_epsilon=bound)
    assert claim.kind == "proven"
    assert claim.sentence().startswith("proven under: exact sampler (diagnostics passed), NLL bounded by B = 5, public "
                                       "risks: epsilon <= 4 = 2 x clip(c + g, 0, 1) x B")
    assert epsilon_words(epsilon=0.3, proven=bound) == "epsilon <= 4 (proven)"
    assert epsilon_words(epsilon=0.3) == "epsilon = 0.3 (estimate)"
    unproven = PrivacyClaim(epsilon_cap=6.0, posterior="exact", prior_scale=0.1, nll_bound=5.0, public_risks=True)
    assert unproven.kind == "estimate" and unproven.sentence().startswith(NOT_PROVEN)


def test_a_cap_above_the_audits_ceiling_is_never_called_passed() -> None:
    untestable = AuditVerdict(outcome="passed", testable=False).sentence(epsilon_cap=10.0)
    assert untestable.startswith("untestable:") and "did not refute" not in untestable and "passed" not in untestable
    public = AuditVerdict(outcome="passed", public_ceiling=5.53, public_records=1500).sentence(epsilon_cap=1.0)
    assert "did not refute the cap" in public and "at up to 1500 records the audit cannot show an epsilon above " \
        "5.53" in public
    assert "depends on the record count" in AuditVerdict(outcome="passed").sentence(epsilon_cap=1.0)


def test_the_tokenizer_caveat_is_stated_only_for_a_tokenizer_fitted_on_the_private_texts() -> None:
    from swagppm.statement import CAVEATS, TOKENIZER_CAVEAT, caveats

    assert caveats(data_derived_tokenizer=False) == CAVEATS and TOKENIZER_CAVEAT not in CAVEATS
    assert caveats(data_derived_tokenizer=True) == (*CAVEATS, TOKENIZER_CAVEAT)
    public = release_statement(claim=ESTIMATE, trainable="head", private_parameters=2, tuning=None, selection=None,
                               audit=AuditVerdict(outcome=None))
    assert not any("tokenizer" in line for line in public)


def test_the_owner_statement_lists_no_caveat_the_export_and_report_list_them_once_beside_it() -> None:
    assert not any(line.startswith("Caveat:") for line in privacy_statement(epsilon=1.0, trainable="head"))
