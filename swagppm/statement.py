"""What every result and release says about its privacy, in one place (no torch: the command line reads it)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CAVEATS = (
    "epsilon is a local, data-dependent bound (asymptotic differential privacy); "
    "delta is not quantified for finite samples.",
    "Choosing hyperparameters by looking at epsilon and utility on the private data is itself data-dependent: "
    "the tuning mode says whether and how that was accounted; the owner-only report counts the trials.",
    "The measured epsilon is a local estimate (a maximum over finitely many draws of a Gaussian approximation); an "
    "empirical membership-inference audit can refute it, and then the release is refused unless forced.",
    "A tokenizer or vocabulary fitted on the private texts leaks them.",
)
RELEASE_NOISE = ("fresh operating-system entropy (128 bits from Python's secrets module) seeding the noise of this "
                 "one draw; the noise was never recorded and cannot be regenerated from anything stored")

MECHANISM = ("SWAG-PPM: records with a risky loss were down-weighted (w = clip(c·(1−f)+g, 0, 1)) before "
             "fine-tuning, and the released parameters are one draw from a SWAG Gaussian posterior fitted on the "
             "weighted loss")


RELEASE_NOISE_PENDING = "drawn at release time from fresh operating-system entropy and never recorded"

# what a card may carry of a tuning cost (the rest is private); "outside_the_total" lists the data-dependent steps
# that no total covers, in plain words
PUBLIC_TUNING_KEYS = ("mode", "total_epsilon", "delta", "statement", "outside_the_total")
PUBLIC_HYPERPARAMETERS = ("c", "g", "ft_epochs")  # chosen before the fit; a trial's seed is private
# what a card may say of a private selection of the released draw (its candidates and private score are not)
PUBLIC_SELECTION_KEYS = ("procedure", "metric", "threshold", "stop_probability", "selection_set",
                         "released_draw_score", "accounted", "unaccounted_because", "cost")
OWNER_REPORT = ("an owner-only report kept by the data owner outside this folder (not published) holds the measured "
                "epsilon, the private evaluation, the audit's figures and the tuning details")


def exact_number(value: float) -> str:
    """``value`` as short as ``:g`` writes it when that is exact, else every digit: a claimed cap is never rounded."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def release_statement(*, epsilon_cap: float, trainable: str, private_parameters: int,
                      tuning: Mapping[str, Any] | None, selection: Mapping[str, Any] | None, audit: str) -> list[str]:
    """The privacy statement of a published release, one sentence a line: nothing in it depends on the data.

    The claim is the cap ε* declared before any fit, never the measured ε (set by
    one record and reproducible bit for bit); ``tuning`` holds only
    ``PUBLIC_TUNING_KEYS``; ``audit`` is the sentence saying the audit was run and
    passed (or was forced past).
    """
    return [
        f"Mechanism: {MECHANISM}.",
        "Unit of privacy: one training record.",
        f"Claim: epsilon <= {exact_number(epsilon_cap)} for the release of one draw, a cap declared before any fit "
        "(the measured epsilon, a local, data-dependent estimate, was checked against it and stays private); delta "
        "is not quantified for finite samples.",
        f"Private parameters: {private_parameters} tensors (trainable = '{trainable}'), all drawn from the posterior; "
        "every other parameter is the public pretrained value (checked bit for bit before a release is written).",
        f"Release noise: {RELEASE_NOISE}.",
        f"Tuning: {_tuning(tuning)}.",
        f"Selection of the released draw: {_selection(selection)}.",
        f"Empirical audit: {audit}.",
        f"Owner report: {OWNER_REPORT}.",
    ] + [f"Caveat: {caveat}" for caveat in CAVEATS]


def _tuning(tuning: Mapping[str, Any] | None) -> str:
    """The tuning mode and its DP-accounted total, from the public keys only."""
    if not tuning:
        return "not reported"
    text = str(tuning.get("statement") or f"mode {tuning.get('mode') or 'not reported'}")
    total, delta = tuning.get("total_epsilon"), tuning.get("delta")
    if total is not None and str(total) not in text:
        text += f" (accounted total epsilon {_number(total)} at delta {_number(delta)})"
    outside = tuning.get("outside_the_total")
    if outside:
        text += "; outside that total, read from the private data without noise: " + "; ".join(outside)
    return text


def privacy_statement(*, epsilon: float | None, epsilon_is_lower_bound: bool = False, trainable: str,
                      private_parameters: int | None = None, release_noise: str | None = None,
                      tuning: Mapping[str, Any] | None = None, selection: Mapping[str, Any] | None = None) -> list[str]:
    """The privacy statement of a configuration for its owner (export, report): the measured ε, one sentence a line.

    Mechanism, unit of privacy, ε and what kind of bound it is, δ, which parameters
    were private, how the release noise is drawn, what tuning cost, selection and the
    caveats. A published release states ``release_statement`` instead.
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
    if cost.get("composed_into_total"):
        return f"{rule}; its cost is composed into the one total stated under Tuning ({cost['accountant']})"
    return (f"{rule}; selecting and releasing it cost epsilon {cost['epsilon']:.4g} at delta {cost['delta']:.3g} in "
            f"total ({cost['accountant']}), conditional on each draw's local epsilon")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"
