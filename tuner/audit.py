"""The empirical privacy audit that decides: membership inference against a release and the non-private baseline.

Members are the training records, non-members the test records. The per-record
losses stay inside the session's process; ``scorers.privacy_audit`` turns them
into one family-wise (Bonferroni) audit per model: threshold, AUC and one-run
tests of both attacks, δ = 0 stated, and for a refuted ε the δ that would
reconcile it. A release whose audit refutes its claim ε ≤ ε* is refused
(``refusal``). Only aggregates are printed or written, and they go to the owner,
never to the public card. Every audit run on a study's private data is counted in
the study's ``audits_run`` attribute.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scorers
import swagppm
from scorers import PrivacyAudit, Refutation
from tuner.outputs import write_atomic

if TYPE_CHECKING:
    from swagppm import TrialParams
    from swagppm.evaluate.probes import RecordLosses

BASELINE = "non_private_baseline"
RELEASE = "released_draw"


def audit_losses(losses: RecordLosses) -> PrivacyAudit:
    """The family-wise audit of one model's per-record losses (aggregates only leave it)."""
    return scorers.privacy_audit(losses.members, losses.non_members, member_classes=losses.member_classes,
                                 non_member_classes=losses.non_member_classes)


def audit_fit(session: swagppm.Session, fit: swagppm.Fit) -> dict[str, PrivacyAudit]:
    """Both columns: the non-private baseline and one release-like draw (secret noise) of ``fit``."""
    return {BASELINE: audit_losses(session.baseline_losses()), RELEASE: audit_losses(session.secret_draw_losses(fit))}


def refusal(refutation: Refutation, *, epsilon_cap: float) -> str:
    """The one line of a release its audit refutes: the bound, the claim ε*, and the δ that would reconcile them."""
    delta = refutation.reconciling_delta
    reconcile = "" if delta is None else f"; reconciling them would need delta >= {delta:.2g}"
    return (f"the audit refutes the claim epsilon <= {epsilon_cap:g}: the released draw's epsilon lower bound is "
            f"{refutation.epsilon_lower_bound:.3g} ({refutation.test} test, {refutation.attack.replace('_', '-')} "
            f"attack, {refutation.confidence * 100:g}% family-wise, delta = 0){reconcile}; nothing was released "
            "(--force-audit releases it anyway)")


def audit_text(audits: Mapping[str, PrivacyAudit], *, epsilon: float) -> str:
    """A table of both columns (one row per model and attack) and the sentence judging ``epsilon`` on the draw."""
    header = (f"{'model':<22} {'attack':<17} {'AUC':>6} {'interval':>15} {'TPR@0.1%':>9} {'TPR@1%':>7} "
              f"{'eps LB':>7}")
    lines, footnotes = [header, "-" * len(header)], set()
    for model, audit in audits.items():
        for attack in audit.attacks:
            low, high = attack.auc_interval
            cells = []
            for level in (0.001, 0.01):
                mark = "*" if attack.false_positives_allowed[level] == 0 else ""
                if mark:
                    footnotes.add(f"* TPR at 0 of {audit.non_members} non-members ({level:.1%} of them is under one "
                                  "record)")
                cells.append(f"{attack.tpr_at_fpr[level][0]:.3f}{mark}")
            lines.append(f"{model:<22} {attack.attack:<17} {attack.auc:>6.3f} {f'[{low:.3f}, {high:.3f}]':>15} "
                         f"{cells[0]:>9} {cells[1]:>7} {attack.epsilon_lower_bound:>7.3f}")
    first = next(iter(audits.values()))
    lines += sorted(footnotes)
    lines.append(f"intervals and bounds hold together at {first.confidence * 100:g}% (family-wise, Bonferroni); "
                 f"delta = {first.delta:g} assumed")
    if RELEASE in audits:
        lines.append(audits[RELEASE].sentence(epsilon))
    return "\n".join(lines)


def audit_document(audits: Mapping[str, PrivacyAudit], *, epsilon_cap: float,
                   audits_run: int | None) -> dict[str, Any]:
    """The audit for the owner: each column's ``to_dict``, the claim it judged, its sentence, the audits run."""
    released = audits.get(RELEASE)
    return {"columns": {model: audit.to_dict() for model, audit in audits.items()},
            "epsilon_cap": epsilon_cap, "refutes_the_cap": bool(released and released.refutation(epsilon_cap)),
            "sentence": released.sentence(epsilon_cap) if released else None, "audits_run": audits_run}


def write_audit(path: Path, document: Mapping[str, Any], params: TrialParams) -> None:
    """The audit of the configuration ``params`` as JSON: aggregates only (the seed, owner-side, is not written)."""
    write_atomic(path, json.dumps({**params.as_params(), **document}, indent=2) + "\n")
