"""A release from the command line's verbs: one secret draw of a fit, its card carrying the audit and the costs.

``swagppm`` writes the folder and the card; this adds what only the tuner knows:
the membership-inference audit of the released draw and of the non-private
baseline (aggregates), what choosing the configuration cost, and the price of a
private selection of the draw.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import swagppm
from tuner.audit import BASELINE, RELEASE, audit_losses
from tuner.tuning import with_selection_cost

if TYPE_CHECKING:
    from swagppm.evaluate.probes import RecordLosses
    from swagppm.releases.selection import Selection


@dataclass(frozen=True, kw_only=True)
class Released:
    """Where the draw was written, and the audit its card carries (both columns)."""

    path: Path
    audit: dict[str, Any]


def release_draw(session: swagppm.Session, fit: swagppm.Fit, out: Path, *, force: bool, overwrite: bool,
                 trials_run: int | None, tuning: dict[str, Any] | None = None,
                 selection: Selection | None = None, selection_delta: float | None = None) -> Released:
    """One secret draw of ``fit`` written to ``out``; a ``selection`` is priced at the fit's ε first.

    ``selection_delta`` defaults to 1/n for n training records. Raises
    ``swagppm.releases.selection.SelectionFailed`` when no candidate draw reaches the threshold.
    """
    baseline = audit_losses(session.baseline_losses())
    audits: dict[str, Any] = {}

    def audit(losses: RecordLosses) -> dict[str, Any]:
        audits.update({BASELINE: baseline, RELEASE: audit_losses(losses)})
        return audits

    if selection is not None:
        selection = with_selection_cost(selection, epsilon_per_draw=fit.result.epsilon,
                                        delta=selection_delta or 1.0 / fit.result.num_train)
    path = session.release(fit, out, force=force, overwrite=overwrite, trials_run=trials_run, audit=audit,
                           tuning=tuning, selection=selection)
    return Released(path=path, audit=audits)


def selection_sentence(release: Path) -> str:
    """The selection's sentence of the privacy statement, as the release card states it."""
    statement = json.loads((release / "release_card.json").read_text())["privacy_statement"]
    return next(line for line in statement if line.startswith("Selection of the released draw"))
