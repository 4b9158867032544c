"""The empirical privacy audit: membership inference against a release and against the non-private baseline.

Members are the training records, non-members the test records. The per-record
losses stay inside the session's process; only ``scorers.membership_audit``'s
aggregates (AUC, TPR at fixed FPRs, the empirical ε lower bound, each with its
interval) are returned, printed or written.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import scorers
import swagppm
from swagppm.statement import RELEASED_DRAW, audit_contradiction
from tuner.outputs import write_atomic

if TYPE_CHECKING:
    from swagppm.evaluate.probes import RecordLosses

BASELINE = "non_private_baseline"
RELEASE = RELEASED_DRAW


def audit_losses(losses: RecordLosses) -> dict[str, Any]:
    """The aggregates of the loss-threshold and class-calibrated attacks on one model's losses."""
    results = scorers.membership_audit(losses.members, losses.non_members, member_classes=losses.member_classes,
                                       non_member_classes=losses.non_member_classes)
    return {r.attack: {"auc": r.auc, "auc_interval": list(r.auc_interval),
                       "tpr_at_fpr": {f"{level:g}": list(values) for level, values in r.tpr_at_fpr.items()},
                       "epsilon_lower_bound": r.epsilon_lower_bound, "members": r.members,
                       "non_members": r.non_members} for r in results}


def audit_fit(session: swagppm.Session, fit: swagppm.Fit) -> dict[str, Any]:
    """Both columns: the non-private baseline and one release-like draw (secret noise) of ``fit``."""
    return {BASELINE: audit_losses(session.baseline_losses()), RELEASE: audit_losses(session.secret_draw_losses(fit))}


def audit_text(audit: dict[str, Any], *, epsilon: float | None, epsilon_is_lower_bound: bool = False) -> str:
    """The audit as a small table, one row per (model, attack), and a warning if it contradicts ``epsilon``.

    ``epsilon`` is the released draw's stated ε; ``swagppm.statement.audit_contradiction`` decides.
    """
    header = f"{'model':<22} {'attack':<17} {'AUC':>6} {'95% interval':>15} {'TPR@0.1%':>9} {'TPR@1%':>7} {'eps LB':>7}"
    lines = [header, "-" * len(header)]
    for model, attacks in audit.items():
        for attack, r in attacks.items():
            low, high = r["auc_interval"]
            tprs = r["tpr_at_fpr"]
            lines.append(f"{model:<22} {attack:<17} {r['auc']:>6.3f} {f'[{low:.3f}, {high:.3f}]':>15} "
                         f"{tprs['0.001'][0]:>9.3f} {tprs['0.01'][0]:>7.3f} {r['epsilon_lower_bound']:>7.3f}")
    contradiction = audit_contradiction(epsilon, audit, epsilon_is_lower_bound=epsilon_is_lower_bound)
    if contradiction:
        lines.append(f"warning: {contradiction}")
    return "\n".join(lines)


def write_audit(path: Path, audit: dict[str, Any], *, c: float, ft_epochs: int, g: float, epsilon: float) -> None:
    """The audit of the configuration (c, ft_epochs, g) as JSON: aggregates and the stated ε only."""
    write_atomic(path, json.dumps({"c": c, "ft_epochs": ft_epochs, "g": g, "epsilon": epsilon, "audit": audit},
                                  indent=2) + "\n")
