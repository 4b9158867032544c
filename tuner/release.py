"""A release from the command line's verbs: staged by swagppm, audited, decided and committed here, in one function.

``swagppm.releases.stage`` checks the claim, draws once with secret noise and writes
the model into a staging folder; this module audits the staged draw (and the
non-private baseline) with the family-wise membership-inference audit, decides, and
commits or discards it:

* the audit is held against the cap ε* the card claims: a bound that refutes it
  refuses the release (``AuditRefuted``, exit 7) unless forced, and the card says so;
* it is held against the measured ε too: a refuted measured ε is said on the terminal
  and in the owner report ("refuted: the audit shows epsilon >= ..."), never shown as
  the answer;
* every attempt (released, forced, refused, failed) is entered in the data set's
  privacy ledger (``tuner.ledger``), and an accounted card states the ledger's total:
  every accounted study and every release attempt on these records, composed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scorers
from scorers import PrivacyAudit
from swagppm.statement import MEASURED_SHORT
from tuner.audit import BASELINE, RELEASE, audit_document, audit_losses, refusal
from tuner.ledger import AUDIT_ENTRY, RELEASE_ENTRY, Ledger
from tuner.tuning import ACCOUNTED, accounted_statement, with_selection_cost

if TYPE_CHECKING:
    from swagppm.releases.staging import ReleaseTarget
    from swagppm.releases.writer import ReleaseSpec
    from swagppm.resources import Resources
    from swagppm.stage2 import Fit
    from swagppm.statement import AuditVerdict


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """What the tuner adds to swagppm's ``ReleaseSpec``: whether a refuting audit is overridden, δ of the totals
    (from the study's declared record bound, ``accounting_delta`` or ``--selection-delta``), and what is released
    (a study's name or an export's path, for the ledger)."""

    spec: ReleaseSpec
    force_audit: bool = False
    delta: float | None = None
    source: str = ""


@dataclass(frozen=True, kw_only=True)
class Released:
    """Where the draw was written, its audit (both columns), and whether that audit refutes the measured ε."""

    path: Path
    audit: dict[str, PrivacyAudit]
    measured_refuted: bool


def release(resources: Resources, fit: Fit, target: ReleaseTarget, request: ReleaseRequest) -> Released:
    """Stage one secret draw of ``fit``, audit it against the cap and the measured ε, decide, and commit it.

    Raises ``swagppm.releases.writer.AuditRefuted`` (nothing written, the attempt
    entered in the ledger) when the audit refutes ε* and ``force_audit`` is off, and
    ``swagppm.releases.selection.SelectionFailed`` when no candidate draw reaches the
    selection's threshold (entered too: its draws were made).
    """
    from swagppm.releases.writer import AuditRefuted, check_claim, stage

    ledger = Ledger.of(resources)
    spec = with_ledger_total(priced(request), ledger, request)
    cap, measured = spec.epsilon_cap, fit.result.epsilon
    check_claim(fit.result, cap)  # refused before any draw: not an attempt
    baseline = audit_losses(baseline_losses(resources))
    attempt = Attempt(ledger=ledger, request=request, spec=spec)
    with attempt, stage(resources, fit, target, spec) as staged:
        audits = {BASELINE: baseline, RELEASE: audit_losses(staged.losses())}
        attempt.audited = True
        refutation = audits[RELEASE].refutation(cap)
        if refutation is not None and not request.force_audit:
            attempt.outcome = "refused"
            raise AuditRefuted(refusal(refutation, epsilon_cap=cap),
                               epsilon_lower_bound=audits[RELEASE].epsilon_lower_bound)
        measured_refuted = audits[RELEASE].refutation(measured) is not None
        document = audit_document(audits, epsilon_cap=cap, audits_run=audit_count(ledger) + 1)
        verdict = audit_verdict(audits[RELEASE], cap=cap, forced=refutation is not None, spec=spec,
                                test_size=resources.config.data.test_size)
        path = staged.commit(audit=verdict, owner={
            "audit": {**document, "forced": refutation is not None, "measured_epsilon": measured,
                      "refutes_the_measured_epsilon": measured_refuted,
                      "measured_sentence": audits[RELEASE].sentence(measured),
                      "card_sentence": verdict.sentence(epsilon_cap=cap),
                      **against_baseline(audits)},
            "ledger": ledger.summary()})
        attempt.outcome = "released" if refutation is None else "forced"
    return Released(path=path, audit=audits, measured_refuted=measured_refuted)


def audit_verdict(audit: PrivacyAudit, *, cap: float, forced: bool, spec: ReleaseSpec,
                  test_size: float) -> AuditVerdict:
    """The card's words for the release's audit: passed, forced or untestable (the cap at or above the ceiling at
    this split), with the ceiling at the study's declared public record bound when it has one."""
    from swagppm.statement import AuditVerdict

    bound = spec.max_records
    ceiling = None if bound is None else public_ceiling(bound, test_size=test_size)
    return AuditVerdict(outcome="forced" if forced else "passed", testable=audit.testable(cap),
                        public_ceiling=ceiling, public_records=bound)


def public_ceiling(records: int, *, test_size: float) -> float:
    """The audit's ceiling at a public number of records split as the study splits them: at least the ceiling at
    any smaller split (it grows with the counts), so it may be published where the actual one may not."""
    non_members = max(1, math.ceil(records * test_size))
    return scorers.audit_ceiling(max(1, records - math.floor(records * test_size)), non_members)


def against_baseline(audits: Mapping[str, PrivacyAudit]) -> dict[str, Any]:
    """The released draw's and the non-private baseline's audit bounds side by side, and whether the release is below
    the baseline (if not, the release has not been shown to reduce membership leakage at all)."""
    released, baseline = audits[RELEASE].epsilon_lower_bound, audits[BASELINE].epsilon_lower_bound
    below = released < baseline
    return {"released_epsilon_lower_bound": released, "baseline_epsilon_lower_bound": baseline,
            "below_the_baseline": below, "ceiling_at_this_split": audits[RELEASE].ceiling,
            "baseline_sentence": baseline_sentence(released, baseline)}


def baseline_sentence(released: float, baseline: float) -> str:
    """One sentence comparing the release's audit bound with the non-private baseline's."""
    if released < baseline:
        return (f"the released draw's audit bound {released:.3g} is below the non-private baseline's {baseline:.3g}")
    return (f"the released draw's audit bound {released:.3g} is not below the non-private baseline's {baseline:.3g}: "
            "this release has not been shown to reduce membership leakage at all")


@dataclass(kw_only=True)
class Attempt:
    """One release attempt, entered in the ledger however it ends (released, forced, refused, or failed: a secret
    draw was made), with its audit when one ran."""

    ledger: Ledger
    request: ReleaseRequest
    spec: ReleaseSpec
    outcome: str = "failed"
    audited: bool = False

    def __enter__(self) -> Attempt:
        return self

    def __exit__(self, *exc: object) -> None:
        selection = self.spec.selection
        self.ledger.append({"kind": RELEASE_ENTRY, "outcome": self.outcome, "source": self.request.source,
                            "epsilon_cap": self.spec.epsilon_cap,
                            "selection_stop_probability": selection.stop_probability if selection else None})
        if self.audited:
            self.ledger.append({"kind": AUDIT_ENTRY, "outcome": self.outcome, "source": self.request.source})


def baseline_losses(resources: Resources) -> Any:
    """Every record's loss under the non-private stage-1 model (stage 1 from the private cache)."""
    from swagppm.evaluate.probes import record_losses
    from swagppm.stage1 import compute_or_load

    with resources.bundle.holding(compute_or_load(resources).model_state):
        return record_losses(resources.bundle, resources.train, resources.test, resources.data,
                             batch_size=resources.config.eval_batch_size, label="audit of the non-private baseline")


def priced(request: ReleaseRequest) -> ReleaseSpec:
    """The spec with its private selection priced at ε* per draw (Liu & Talwar), at the request's δ."""
    spec = request.spec
    if spec.selection is None:
        return spec
    if request.delta is None:
        raise ValueError("a private selection needs a delta (checked by the command line before any fit)")
    return dataclasses.replace(spec, selection=with_selection_cost(spec.selection, epsilon_per_draw=spec.epsilon_cap,
                                                                   delta=request.delta))


def with_ledger_total(spec: ReleaseSpec, ledger: Ledger, request: ReleaseRequest) -> ReleaseSpec:
    """An accounted release's tuning figures replaced by the ledger's total, this attempt included: every accounted
    study and every release attempt on these records (a private selection's cost composed into it)."""
    tuning = spec.tuning
    if not tuning or tuning.get("mode") != ACCOUNTED or request.delta is None:
        return spec
    stopping = spec.selection.stop_probability if spec.selection else None
    total = ledger.total(delta=request.delta, pending=(spec.epsilon_cap, stopping))
    assert total is not None  # this attempt is pending
    statement = accounted_statement(spec.epsilon_cap, total, request.delta, scope=(
        "every accounted study and every release attempt on these data, this one included, "
        + ("its private selection of the draw included, " if spec.selection else "")))
    if ledger.unaccounted_studies():
        statement += "; other studies on these data chose by private scores without an accounted total, and no " \
                     "figure here covers them"
    selection = spec.selection
    if selection is not None:
        selection = dataclasses.replace(selection, cost={**selection.cost, "composed_into_total": True})
    return dataclasses.replace(spec, selection=selection, tuning={
        **tuning, "total_epsilon": total, "delta": request.delta, "statement": statement, "ledger_total": True})


def audit_count(ledger: Ledger) -> int:
    """Audits run on the ledger's records so far."""
    return sum(entry.get("kind") == AUDIT_ENTRY for entry in ledger.entries())


def measured_line(released: Released, epsilon: float) -> str:
    """How the release's audit judges the fit's measured ε, for the terminal."""
    return measured_text(released.audit[RELEASE], epsilon) + (
        "; the card claims the cap, which the audit did not refute" if released.measured_refuted else "")


def measured_text(audit: PrivacyAudit, epsilon: float) -> str:
    """The measured ε beside what the audit shows of it: "refuted: the audit shows epsilon >= B", or not refuted."""
    if audit.refutation(epsilon) is None:
        return (f"measured epsilon {epsilon:.3g}: not refuted by the audit (its epsilon lower bound "
                f"{audit.epsilon_lower_bound:.3g})")
    return (f"measured epsilon {epsilon:.3g}, refuted: the audit shows epsilon >= {audit.epsilon_lower_bound:.3g} "
            f"(the measured epsilon is {MEASURED_SHORT})")


def selection_sentence(release_path: Path) -> str:
    """The selection's sentence of the privacy statement, as the release card states it."""
    statement = json.loads((release_path / "release_card.json").read_text())["privacy_statement"]
    return next(line for line in statement if line.startswith("Selection of the released draw"))
