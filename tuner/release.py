"""A release from the command line's verbs: one secret draw of a fit, released only if its audit agrees.

``swagppm`` writes the folder, the card and the owner report, all or nothing; this
adds what only the tuner knows: the family-wise membership-inference audit of the
released draw and of the non-private baseline, run before the folder is moved
into place (a bound that refutes the claim ε ≤ ε* refuses the release unless
forced), the count of audits run, what choosing the configuration cost, and the
price of a private selection of the draw (at ε*, the claim, never the measured ε).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import swagppm
from scorers import PrivacyAudit
from tuner.audit import BASELINE, RELEASE, audit_document, audit_losses, refusal
from tuner.tuning import default_delta, with_selection_cost

if TYPE_CHECKING:
    from swagppm.evaluate.probes import RecordLosses
    from swagppm.releases.selection import Selection
    from swagppm.releases.staging import ReleaseTarget


@dataclass(frozen=True, kw_only=True)
class ReleaseOptions:
    """What a release claims and may publish: the cap ε*, whether class names are public, a public evaluation set,
    whether a refuting audit is overridden."""

    epsilon_cap: float
    public_labels: bool = False
    public_eval: str | None = None
    force_audit: bool = False


@dataclass(frozen=True, kw_only=True)
class Released:
    """Where the draw was written, and its audit (both columns)."""

    path: Path
    audit: dict[str, PrivacyAudit]


def release_draw(session: swagppm.Session, fit: swagppm.Fit, out: Path | ReleaseTarget, *, options: ReleaseOptions,
                 force: bool, overwrite: bool, trials_run: int | None, tuning: Mapping[str, Any] | None = None,
                 selection: Selection | None = None, selection_delta: float | None = None,
                 count_audit: Callable[[], int | None] = lambda: None) -> Released:
    """One secret draw of ``fit`` written to ``out`` once its audit does not refute ``options.epsilon_cap``.

    A ``selection`` is priced at ε* per draw; ``selection_delta`` defaults to ``default_delta`` (at most 1/n²).
    Raises ``swagppm.releases.writer.AuditRefuted`` (nothing written) when the audit
    refutes ε* and ``options.force_audit`` is off, and
    ``swagppm.releases.selection.SelectionFailed`` when no candidate draw reaches the threshold.
    """
    from swagppm.releases.writer import AuditRefuted

    cap = options.epsilon_cap
    baseline = audit_losses(session.baseline_losses())
    audits: dict[str, PrivacyAudit] = {}

    def audit(losses: RecordLosses) -> dict[str, Any]:
        audits.update({BASELINE: baseline, RELEASE: audit_losses(losses)})
        document = audit_document(audits, epsilon_cap=cap, audits_run=count_audit())
        refutation = audits[RELEASE].refutation(cap)
        if refutation is not None and not options.force_audit:
            raise AuditRefuted(refusal(refutation, epsilon_cap=cap))
        return document | {"forced": refutation is not None}

    if selection is not None:
        n = fit.result.num_train
        selection = with_selection_cost(selection, epsilon_per_draw=cap, delta=selection_delta or default_delta(n))
    path = session.release(fit, out, epsilon_cap=cap, force=force, overwrite=overwrite,
                           public_labels=options.public_labels, public_eval=options.public_eval,
                           trials_run=trials_run, audit=audit, tuning=tuning, selection=selection)
    return Released(path=path, audit=audits)


def selection_sentence(release: Path) -> str:
    """The selection's sentence of the privacy statement, as the release card states it."""
    statement = json.loads((release / "release_card.json").read_text())["privacy_statement"]
    return next(line for line in statement if line.startswith("Selection of the released draw"))
