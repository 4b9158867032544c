"""What every result and release says about its privacy, in one place (no torch: the command line reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CAVEATS = (
    "epsilon is a local, data-dependent bound (asymptotic differential privacy); "
    "delta is not quantified for finite samples.",
    "Choosing hyperparameters by looking at epsilon and utility on the private data is itself data-dependent; "
    "report how many configurations were tried.",
    "A tokenizer or vocabulary fitted on the private texts leaks them.",
)
RELEASE_NOISE = ("fresh operating-system entropy (128 bits from Python's secrets module) seeding the noise of this "
                 "one draw; the noise was never recorded and cannot be regenerated from anything stored")

MECHANISM = ("SWAG-PPM: records with a risky loss were down-weighted (w = clip(c·(1−f)+g, 0, 1)) before "
             "fine-tuning, and the released parameters are one draw from a SWAG Gaussian posterior fitted on the "
             "weighted loss")


RELEASE_NOISE_PENDING = "drawn at release time from fresh operating-system entropy and never recorded"

RELEASED_DRAW = "released_draw"  # the audit's column for the released (or a release-like) draw


def audit_contradiction(epsilon: float | None, audit: Mapping[str, Any] | None, *,
                        epsilon_is_lower_bound: bool = False) -> str | None:
    """A warning when the released draw's empirical ε lower bound exceeds the stated ε, else None.

    An ε that is itself only a lower bound (the early stop) states nothing to contradict.

    The audit's bound holds with 95% confidence for any ε-DP mechanism, so a bound
    above the stated ε means the stated ε is not a valid bound for this model on
    these records: a review board must hear it wherever ε is stated.
    """
    attacks = (audit or {}).get(RELEASED_DRAW)
    if epsilon is None or epsilon_is_lower_bound or not attacks:
        return None
    attack, bound = max(((name, r["epsilon_lower_bound"]) for name, r in attacks.items()), key=lambda item: item[1])
    if bound <= epsilon:
        return None
    return (f"the released draw's empirical epsilon lower bound {bound:.3g} ({attack.replace('_', ' ')} attack, "
            f"95% confidence) exceeds the stated epsilon {epsilon:.4g}: on these records the stated epsilon is not a "
            "valid bound for this model; treat it as an optimistic estimate, not a guarantee")


def privacy_statement(*, epsilon: float | None, epsilon_is_lower_bound: bool = False, trainable: str,
                      private_parameters: int | None = None, release_noise: str | None = None,
                      tuning: Mapping[str, Any] | None = None, selection: Mapping[str, Any] | None = None,
                      audit: Mapping[str, Any] | None = None) -> list[str]:
    """The privacy statement of a configuration or a release, one sentence a line: the same wherever it appears.

    Used by the release card, the model's README, the export and the report, so a
    review board reads one text: mechanism, unit of privacy, ε and what kind of bound
    it is, δ, which parameters were private, how the release noise was drawn, what
    tuning cost, selection, the audit's figures and the caveats.
    """
    if epsilon is None:
        bound = "epsilon: not measured"
    else:
        bound = f"epsilon {'>=' if epsilon_is_lower_bound else '='} {epsilon:.4g} for the release of one draw"
    drawn = f"{private_parameters} tensors" if private_parameters is not None else "the trainable parameters"
    lines = [
        f"Mechanism: {MECHANISM}.",
        "Unit of privacy: one training record.",
        f"Bound: {bound}; a local, data-dependent bound (asymptotic differential privacy); delta is not quantified "
        "for finite samples.",
        f"Private parameters: {drawn} (trainable = '{trainable}'), all drawn from the posterior; every other "
        "parameter is the public pretrained value (checked bit for bit before a release is written).",
        f"Release noise: {release_noise or RELEASE_NOISE_PENDING}.",
        f"Tuning: {tuning['statement'] if tuning and tuning.get('statement') else 'not reported'}"
        + (f" ({tuning['trials_run']} trials run, largest trial epsilon {_number(tuning.get('max_trial_epsilon'))})"
           if tuning and tuning.get("trials_run") is not None else "") + ".",
        f"Selection of the released draw: {_selection(selection)}.",
    ]
    if audit:
        lines.append("Empirical audit (membership inference, members = training records, non-members = test records): "
                     + "; ".join(f"{model.replace('_', ' ')}: AUC {attacks['loss_threshold']['auc']:.3f}, empirical "
                                 f"epsilon lower bound {attacks['loss_threshold']['epsilon_lower_bound']:.3f}"
                                 for model, attacks in audit.items()) + ".")
    contradiction = audit_contradiction(epsilon, audit, epsilon_is_lower_bound=epsilon_is_lower_bound)
    if contradiction:
        lines.append(f"Audit warning: {contradiction}.")
    return lines + [f"Caveat: {caveat}" for caveat in CAVEATS]


def _selection(selection: Mapping[str, Any] | None) -> str:
    """How the released draw was chosen, and what choosing it cost (or why that is not accounted)."""
    if not selection:
        return "none (one draw, not chosen by its utility)"
    rule = (f"the first of a random number of secret draws (stop probability {selection['stop_probability']:g} after "
            f"each miss) to reach {selection['metric']} >= {selection['threshold']:g} on {selection['selection_set']}")
    cost = selection.get("cost")
    if not selection["accounted"] or not cost:
        return f"{rule}; unaccounted: {selection.get('unaccounted_because') or 'no cost was computed'}"
    return (f"{rule}; selecting and releasing it cost epsilon {cost['epsilon']:.4g} at delta {cost['delta']:.3g} in "
            f"total ({cost['accountant']}), conditional on each draw's local epsilon")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
