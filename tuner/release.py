"""Every release goes through here: staged by swagppm, audited, decided, committed and entered in the ledger.

``release`` is the one gate, for the command line's verbs and the library alike
(``release_chosen`` fits a chosen configuration and calls it):

* the claim is the study's, sealed when the study was created and verified since
  (``ReleaseSpec.claim``); ``swagppm.releases.stage`` refuses a fit it does not cover,
  draws once with secret noise and writes the model into a staging folder;
* every attempt is entered in its data set's privacy ledger (``tuner.ledger``) before
  its first secret draw and again with how it ended; a ledger the study was entered in
  and that is gone or another is refused first; an accounted card states the ledger's
  total (every accounted study and every published attempt on these records);
* the staged draw (and the non-private baseline) is audited with the family-wise
  membership-inference audit, held against the cap ε* the card claims: a bound that
  refutes it refuses the release (``AuditRefuted``, exit 7) unless forced, and the card
  says so; held against the measured ε too, said on the terminal and in the owner
  report ("refuted: the audit shows epsilon >= ..."), never shown as the answer. A
  release asked for without an audit (``audit=False``) is committed with ``NO_AUDIT``,
  and its card says that none was run.

Putting the folder in place is never cut short: Ctrl-C or SIGTERM arriving then is
held until the folder and the ledger's entry are written (``Released.interrupted``).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scorers
from scorers import PrivacyAudit
from swagppm import ConfigError, ReleaseRefused
from swagppm.claim import PUBLIC_PROXY
from swagppm.statement import MEASURED_SHORT
from tuner.audit import BASELINE, RELEASE, audit_document, audit_losses, refusal
from tuner.faults import held_signals
from tuner.keys import owner_key
from tuner.ledger import AUDIT_ENTRY, RELEASE_ENTRY, STARTED, Ledger
from tuner.tuning import ACCOUNTED, accounted_total, with_selection_cost

if TYPE_CHECKING:
    from swagppm.claim import VerifiedClaim
    from swagppm.releases.card import ReleaseCard
    from swagppm.releases.selection import Selection
    from swagppm.releases.staging import ReleaseTarget
    from swagppm.releases.writer import ReleaseSpec
    from swagppm.resources import Resources
    from swagppm.session import Session
    from swagppm.stage2 import Fit, SWAGPPMResult
    from swagppm.statement import AuditVerdict
    from tuner.export import Chosen


@dataclass(frozen=True, kw_only=True)
class ReleaseRequest:
    """What the tuner adds to swagppm's ``ReleaseSpec`` (which holds the verified claim): whether the draw is audited
    (``audit``; False commits it with ``NO_AUDIT``, said on the card) and a refuting audit overridden, δ of a private
    selection's total (default: the claim's), what is released (a study's name or an export's path, for the ledger),
    whether the claim's study was entered in its data set's ledger (``entered``: then that ledger must hold it), and
    the owner-side tuning cost for the owner report."""

    spec: ReleaseSpec
    audit: bool = True
    force_audit: bool = False
    selection_delta: float | None = None
    source: str = ""
    entered: bool = False
    tuning: Mapping[str, Any] | None = None

    @property
    def delta(self) -> float | None:
        """δ of the totals: ``selection_delta``, else the claim's (from its declared public record bound)."""
        return self.selection_delta or self.spec.claim.claim.delta

    @classmethod
    def of(cls, chosen: Chosen, *, audit: bool = True, force_audit: bool = False, public_labels: bool = False,
           public_eval: str | None = None, selection: Selection | None = None, force: bool = False,
           overwrite: bool = False, selection_delta: float | None = None) -> ReleaseRequest:
        """The request to release ``chosen`` (an export read back, or a study's choice) under its verified claim."""
        from swagppm.releases.writer import ReleaseSpec

        spec = ReleaseSpec(claim=chosen.claim, public_labels=public_labels, public_eval=public_eval,
                           selection=selection, force=force, overwrite=overwrite, by_study=chosen.by_study)
        return cls(spec=spec, audit=audit, force_audit=force_audit, selection_delta=selection_delta,
                   source=chosen.source, entered=chosen.entered, tuning=chosen.tuning)


class FitFailed(ReleaseRefused):
    """The fit to release failed (its loss or a draw turned NaN/inf): nothing was drawn or entered."""


@dataclass(frozen=True, kw_only=True)
class Released:
    """Where the draw was written, its card, the fit's result, its audit (both columns; None when released without
    one), whether that audit refutes the measured ε, and the signal (Ctrl-C, SIGTERM) held while the folder was put
    in place."""

    path: Path
    card: ReleaseCard
    result: SWAGPPMResult
    audit: dict[str, PrivacyAudit] | None
    measured_refuted: bool | None
    interrupted: str | None = None


def release_chosen(chosen: Chosen, out_dir: str | Path, request: ReleaseRequest | None = None, *,
                   report: Path | None = None, progress: bool | None = None) -> Released:
    """Fit ``chosen`` and release one draw of it to ``out_dir`` through the gate (``release``): every input and the
    folder checked, and the folder locked, before the fit, so a refused release costs nothing. ``request`` defaults to
    an audited release with nothing published beyond the data-independent facts (``ReleaseRequest.of``); ``report``
    is where the owner-only report goes (default: beside the folder)."""
    import swagppm
    from swagppm.releases.selection import check_public_set, check_selection
    from swagppm.releases.staging import claim
    from swagppm.releases.writer import check_covered, check_release

    request = ReleaseRequest.of(chosen) if request is None else request
    spec = request.spec
    check_release(out_dir, spec, chosen.config, report=report)
    check_covered(chosen.config, chosen.params.resolved_prior_scale(chosen.config.prior_scale), spec.claim.claim)
    with claim(out_dir, overwrite=spec.overwrite, report=report) as target, swagppm.Session(chosen.config) as session:
        check_ledger(session, request)
        if spec.selection is not None:
            check_selection(session, spec.selection)
        if spec.public_eval is not None:
            check_public_set(session, spec.public_eval)
        fit = session.fit(chosen.params, progress=progress)
        return release(session, fit, target, request)


def release(session: Session, fit: Fit, target: ReleaseTarget, request: ReleaseRequest) -> Released:
    """Stage one secret draw of ``fit``, audit it against the cap and the measured ε, decide, and commit it.

    Raises ``swagppm.releases.writer.AuditRefuted`` (nothing written, the attempt
    entered in the ledger) when the audit refutes ε* and ``force_audit`` is off, and
    ``swagppm.releases.selection.SelectionFailed`` when no candidate draw reaches the
    selection's threshold (entered too: its draws were made).
    """
    from swagppm.releases.writer import NO_AUDIT, AuditRefuted, check_claim, stage

    if fit.result.failure:
        raise FitFailed(f"nothing released: the fit failed ({fit.result.failure})")
    claim = request.spec.claim.claim
    ledger = check_ledger(session, request)
    spec = with_ledger_total(priced(request), ledger, request)
    cap, measured = spec.epsilon_cap, fit.result.epsilon
    check_claim(fit.result, claim, session.config)  # refused before any draw: not an attempt
    baseline = audit_losses(session.baseline_losses()) if request.audit else None
    attempt = Attempt(ledger=ledger, request=request, spec=spec)
    with attempt, stage(session, fit, target, spec) as staged:
        audits, verdict, owner = None, NO_AUDIT, {"ledger": ledger.summary()}
        refutation, measured_refuted = None, None
        if baseline is not None:
            audits = {BASELINE: baseline, RELEASE: audit_losses(staged.losses())}
            attempt.audited = True
            refutation = audits[RELEASE].refutation(cap)
            if refutation is not None and not request.force_audit:
                attempt.finish("refused")
                raise AuditRefuted(refusal(refutation, epsilon_cap=cap),
                                   epsilon_lower_bound=audits[RELEASE].epsilon_lower_bound)
            measured_refuted = audits[RELEASE].refutation(measured) is not None
            verdict = audit_verdict(audits[RELEASE], cap=cap, forced=refutation is not None, spec=spec,
                                    test_size=session.config.data.test_size)
            owner["audit"] = audit_record(audits, verdict, cap=cap, measured=measured, forced=refutation is not None,
                                          audits_run=audit_count(ledger) + 1)
        with held_signals() as held:  # the folder goes in place whole, and its attempt is entered as such
            path = staged.commit(audit=verdict, tuning=request.tuning, owner=owner)
            finished(attempt, "released" if refutation is None else "forced")
    assert staged.card is not None  # written by the commit
    return Released(path=path, card=staged.card, result=fit.result, audit=audits, measured_refuted=measured_refuted,
                    interrupted=held.caught)


def finished(attempt: Attempt, outcome: str) -> None:
    """Enter a committed attempt's end; a ledger that refuses it now is said in one warning (the release is in place,
    and its ``started`` entry, with no end, counts as released)."""
    try:
        attempt.finish(outcome)
    except ConfigError as error:
        attempt.outcome = outcome
        print(f"warning: {error}; the release is in place, and its attempt stays entered as started, which the total "
              "counts as released", file=sys.stderr)


def check_ledger(resources: Resources, request: ReleaseRequest) -> Ledger:
    """The release's ledger, refused before any fit or draw when it cannot be written, when the claim's study was
    entered in it and it does not hold that study (gone, or another ledger), or when a public-proxy choice is about
    to be released on the very records its study declared public (``check_not_public``)."""
    ledger = checked_ledger(resources, request.spec.claim, entered=request.entered, source=request.source)
    check_not_public(ledger, request.spec.claim)
    return ledger


def check_not_public(ledger: Ledger, claim: VerifiedClaim) -> None:
    """A public-proxy choice is fitted once on other records, the private ones: refused on records a public-proxy
    study tuned on (in any file or order: the ledger's version is order-independent), found in any ledger here."""
    if claim.claim.mode != PUBLIC_PROXY:
        return
    found = ledger.public_proxy_study()
    if found is not None:
        study, path = found
        raise ConfigError(f"these records are the ones public-proxy study {study!r} tuned on (declared public there; "
                          f"its entry is in the privacy ledger {path}): a public-proxy choice is released on other "
                          "records, the private ones; name them with --data")


def checked_ledger(resources: Resources, claim: VerifiedClaim, *, entered: bool, source: str) -> Ledger:
    """The ledger of ``claim``'s data set, writable, and holding the claim's study when it was ``entered`` in it (an
    attempt or audit never starts a ledger anew where its study was entered)."""
    ledger = ledger_of(resources, claim)
    if entered and claim.claim.study_id is not None:
        ledger.require_study(claim.claim.study_id, f"the study of {source}")  # before anything is made there
    ledger.check_writable()
    return ledger


def ledger_of(resources: Resources, claim: VerifiedClaim) -> Ledger:
    """The ledger of the claim's data set, for the records ``resources`` read, under the owner key that sealed the
    claim."""
    return Ledger.of(claim.claim.data_set, resources, key=owner_key(sealed=claim.key, what="the claim of this release"))


def audit_record(audits: Mapping[str, PrivacyAudit], verdict: AuditVerdict, *, cap: float, measured: float,
                 forced: bool, audits_run: int) -> dict[str, Any]:
    """The owner report's audit section: both columns, what the card says of it, and the measured ε against it."""
    document = audit_document(audits, epsilon_cap=cap, audits_run=audits_run)
    return {**document, "forced": forced, "measured_epsilon": measured,
            "refutes_the_measured_epsilon": audits[RELEASE].refutation(measured) is not None,
            "measured_sentence": audits[RELEASE].sentence(measured),
            "card_sentence": verdict.sentence(epsilon_cap=cap), **against_baseline(audits)}


def audit_verdict(audit: PrivacyAudit, *, cap: float, forced: bool, spec: ReleaseSpec,
                  test_size: float) -> AuditVerdict:
    """The card's words for the release's audit: passed, forced or untestable (the cap at or above the ceiling at
    this split), with the ceiling at the study's declared public record bound when it has one."""
    from swagppm.statement import AuditVerdict

    bound = spec.claim.claim.max_records
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
    """One release attempt, entered in the ledger before its first secret draw (``started``) and again however it
    ends (released, forced, refused, not selected, failed, interrupted), with its audit when one ran."""

    ledger: Ledger
    request: ReleaseRequest
    spec: ReleaseSpec
    audited: bool = False
    outcome: str | None = None  # its end, once entered
    number: str = dataclasses.field(default_factory=lambda: secrets.token_hex(8))

    def __enter__(self) -> Attempt:
        self._enter(STARTED)
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, *rest: object) -> None:
        from swagppm.releases.selection import SelectionFailed

        if self.outcome is None:
            self.finish("not selected" if isinstance(error, SelectionFailed) else
                        "interrupted" if isinstance(error, KeyboardInterrupt) else "failed")

    def finish(self, outcome: str) -> None:
        """Enter how the attempt ended (and its audit, when one ran)."""
        self.outcome = outcome
        self._enter(outcome)
        if self.audited:
            self.ledger.append({"kind": AUDIT_ENTRY, "outcome": outcome, "source": self.request.source})

    def _enter(self, outcome: str) -> None:
        selection = self.spec.selection
        self.ledger.append({"kind": RELEASE_ENTRY, "attempt": self.number, "outcome": outcome,
                            "source": self.request.source, "epsilon_cap": self.spec.epsilon_cap,
                            "selection_stop_probability": selection.stop_probability if selection else None})


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
    """An accounted study's release with the ledger's total, this attempt included: every accounted study and every
    published attempt on these records (a private selection's cost composed into it); refused attempts published
    nothing and are not in it."""
    if spec.claim.claim.mode != ACCOUNTED or not spec.by_study or request.delta is None:
        return spec
    stopping = spec.selection.stop_probability if spec.selection else None
    total = ledger.total(delta=request.delta, pending=(spec.epsilon_cap, stopping))
    assert total is not None  # this attempt is pending
    scope = ("every accounted study and every published release attempt on these data, this one included, "
             + ("its private selection of the draw included, " if spec.selection else ""))
    selection = spec.selection
    if selection is not None:
        selection = dataclasses.replace(selection, cost={**selection.cost, "composed_into_total": True})
    return dataclasses.replace(spec, selection=selection, total=accounted_total(
        total, request.delta, scope=scope, uncovered=ledger.unaccounted_studies()))


def audit_count(ledger: Ledger) -> int:
    """Audits run on the ledger's records so far."""
    return sum(entry.get("kind") == AUDIT_ENTRY for entry in ledger.entries())


def measured_line(released: Released, epsilon: float) -> str:
    """How the release's audit judges the fit's measured ε, for the terminal."""
    if released.audit is None:
        return "measured epsilon not audited: the release was made without an audit (its card says so)"
    return measured_text(released.audit[RELEASE], epsilon) + (
        "; the card claims the cap, which the audit did not refute" if released.measured_refuted else "")


def measured_text(audit: PrivacyAudit, epsilon: float) -> str:
    """The measured ε beside what the audit shows of it: "refuted: the audit shows epsilon >= B", or not refuted."""
    if audit.refutation(epsilon) is None:
        return (f"measured epsilon {epsilon:.3g}: not refuted by the audit (its epsilon lower bound "
                f"{audit.epsilon_lower_bound:.3g})")
    return (f"measured epsilon {epsilon:.3g}, refuted: the audit shows epsilon >= {audit.epsilon_lower_bound:.3g} "
            f"(the measured epsilon is {MEASURED_SHORT})")


def selection_sentence(released: Released) -> str:
    """The selection's sentence of the privacy statement, as the release card states it."""
    return next(line for line in released.card.privacy_statement if line.startswith("Selection of the released draw"))
