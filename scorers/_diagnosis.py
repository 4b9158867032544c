"""From scores to a verdict, Optuna constraint values and the guide's next move.

The verdict follows the practical guide's reading of the max-delta plot, checked
in this order: catastrophic (utility collapsed, a non-finite value, or a reported
training failure) → underfit (the bulk of the series is wide) → overfit (a tight
bulk with spikes) → well fit. Thresholds are calibrated by
``benchmarks/scorers/calibrate_scorers.py`` (see ``docs/results/scorer-calibration.md``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from scorers._scores import MaxDeltaScores, UtilityScores

Label = Literal["underfit", "well_fit", "overfit", "catastrophic"]
Action = Literal["stop", "add_epochs", "lower_c", "restart_lower_lr", "revisit_targets"]

CONSTRAINT_CAP = 10.0  # constraint values are clipped here; NaN/inf become this (Optuna needs finite numbers)


@dataclass(frozen=True, kw_only=True)
class GuideSteps:
    """The practical guide's procedure: where it starts and how it moves.

    Start at (``start_c``, ``start_epochs``); when underfit add ``epochs_step``
    epochs; when overfit, or well fit but above the ε target, lower c by ``c_step``
    and restart at ``restart_epochs`` epochs.
    """

    start_c: float = 1.0
    start_epochs: int = 7
    epochs_step: int = 3
    c_step: float = 0.15
    restart_epochs: int = 7


GUIDE = GuideSteps()


def is_feasible(constraints: Mapping[str, float]) -> bool:
    """Every constraint met (Optuna's convention: a value ≤ 0 is met); no constraint at all is not feasible."""
    return bool(constraints) and all(value <= 0 for value in constraints.values())


@dataclass(frozen=True)
class DiagnosisThresholds:
    """Where the verdicts change.

    Attributes:
        max_bulk_spread: IQR/median of the bulk above which the fit is underfit. 7%: on real
            fine-tuned fits every band read as tight by hand was at most 6.7% wide and every
            band read as wide at least 7.9%; synthetic series leave 5-8% equally accurate.
        min_spikes: spikes (draws above ``spike_z`` robust SDs, see ``score_max_delta``)
            at which a tight fit is overfit.
    """

    max_bulk_spread: float = 0.07
    min_spikes: int = 1

    def __post_init__(self) -> None:
        if not self.max_bulk_spread > 0:
            raise ValueError(f"max_bulk_spread must be positive, got {self.max_bulk_spread}")
        if self.min_spikes < 1:
            raise ValueError(f"min_spikes must be at least 1, got {self.min_spikes}")


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """A verdict with the numbers behind it.

    ``margins`` holds signed distances to each threshold (positive = on the bad
    side): ``bulk_spread`` (IQR/median − threshold) and ``spikes`` (largest robust
    z − spike z) for the fit, ``epsilon`` (ε − target)
    and ``f1_macro``/``f1_weighted`` (threshold − value) when known. ``reasons``
    are sentences a person can act on.
    """

    label: Label
    margins: dict[str, float]
    reasons: tuple[str, ...]
    epsilon_ok: bool | None
    utility_ok: bool | None
    failure: str | None = None

    @property
    def feasible(self) -> bool:
        """Well fit, ε within target and utility within the allowed degradation."""
        return self.label == "well_fit" and self.epsilon_ok is not False and self.utility_ok is not False


def diagnose(
    max_delta: MaxDeltaScores,
    utility: UtilityScores | None = None,
    thresholds: DiagnosisThresholds = DiagnosisThresholds(),
    *,
    failure: str | None = None,
) -> Diagnosis:
    """Label a fit from its scores; ``failure`` is a training failure reported by the fit."""
    margins: dict[str, float] = {
        "bulk_spread": max_delta.bulk_spread - thresholds.max_bulk_spread,
        "spikes": max_delta.max_robust_z - max_delta.spike_z,
    }
    epsilon_ok = None
    if max_delta.epsilon_margin is not None:
        margins["epsilon"] = max_delta.epsilon_margin
        epsilon_ok = max_delta.epsilon_margin <= 0
    utility_ok = None
    if utility is not None:
        margins["f1_macro"] = -utility.margin_macro
        margins["f1_weighted"] = -utility.margin_weighted
        utility_ok = utility.meets_target

    label, reasons = _verdict(max_delta, thresholds, catastrophic=_catastrophes(max_delta, utility, failure))
    reasons += _target_reasons(max_delta, utility, epsilon_ok=epsilon_ok)
    return Diagnosis(label=label, margins=margins, reasons=tuple(reasons), epsilon_ok=epsilon_ok,
                     utility_ok=utility_ok, failure=failure)


def _catastrophes(max_delta: MaxDeltaScores, utility: UtilityScores | None, failure: str | None) -> list[str]:
    """What makes a fit catastrophic: a failed training, no or non-finite max-delta values, a collapsed utility."""
    found = []
    if failure:
        found.append(f"training failed ({failure})")
    if max_delta.num_draws == 0:
        found.append("no max-delta values (no privacy draw was evaluated)")
    elif not max_delta.finite:
        found.append(f"{max_delta.num_nonfinite} of {max_delta.num_draws} max-delta values are NaN or infinite")
    if utility is not None and utility.collapsed:
        floor = f" (majority-class level {utility.majority_weighted_f1:.3f})" if utility.majority_weighted_f1 else ""
        found.append(f"utility collapsed: weighted F1 {utility.weighted:.3f} against baseline "
                     f"{utility.baseline_weighted:.3f}{floor}")
    return found


def _verdict(max_delta: MaxDeltaScores, thresholds: DiagnosisThresholds, *,
             catastrophic: list[str]) -> tuple[Label, list[str]]:
    """The label of the series and the reasons that say why and what to do (the guide's flowchart)."""
    if catastrophic:
        return "catastrophic", [f"{c}: catastrophic; restart with a lower learning rate" for c in catastrophic]
    if max_delta.bulk_spread > thresholds.max_bulk_spread:
        reasons = [f"bulk spread {max_delta.bulk_spread:.1%} exceeds {thresholds.max_bulk_spread:.1%}: "
                   "underfit; add fine-tuning epochs"]
        if max_delta.spike_count:
            reasons.append(f"{max_delta.spike_count} draw(s) lie more than {max_delta.spike_z:g} robust SDs above "
                           f"the median (largest {max_delta.max_robust_z:.1f} SDs, {max_delta.max_over_median:.2f}× "
                           "it) and set epsilon: if they stand apart once the bulk is tight, they are spikes; "
                           "then lower c (more epochs at this c make spikes worse)")
        return "underfit", reasons
    if max_delta.spike_count >= thresholds.min_spikes:
        return "overfit", [f"{max_delta.spike_count} spike(s) above {max_delta.spike_z:g} robust SDs (largest "
                           f"{max_delta.max_robust_z:.1f} SDs, {max_delta.max_over_median:.2f}× the median) "
                           f"on a tight bulk ({max_delta.bulk_spread:.1%}): overfit; lower c and restart the epochs"]
    if math.isnan(max_delta.bulk_spread):
        return "well_fit", [f"only {max_delta.num_draws} draws: too few to judge the fit; taken as well fit"]
    return "well_fit", [f"bulk spread {max_delta.bulk_spread:.1%} within {thresholds.max_bulk_spread:.1%} and no "
                        f"spikes (largest {max_delta.max_robust_z:.1f} robust SDs): well fit"]


def _target_reasons(max_delta: MaxDeltaScores, utility: UtilityScores | None, *,
                    epsilon_ok: bool | None) -> list[str]:
    """How ε and each F1 stand against their targets, in words."""
    reasons = []
    if max_delta.epsilon_margin is not None and max_delta.epsilon_cap is not None:
        verb = "meets" if epsilon_ok else "exceeds"
        reasons.append(f"epsilon {max_delta.epsilon:.2f} {verb} the target {max_delta.epsilon_cap:.2f}")
    if utility is not None:
        for name, value, threshold in (("macro", utility.macro, utility.threshold_macro),
                                       ("weighted", utility.weighted, utility.threshold_weighted)):
            verb = "meets" if value >= threshold else "is below"
            reasons.append(f"{name} F1 {utility.statistic} {value:.3f} {verb} the threshold {threshold:.3f}")
    return reasons


def _cap(value: float) -> float:
    return CONSTRAINT_CAP if math.isnan(value) else max(-CONSTRAINT_CAP, min(CONSTRAINT_CAP, value))


def constraint_values(
    max_delta: MaxDeltaScores,
    utility: UtilityScores,
    thresholds: DiagnosisThresholds = DiagnosisThresholds(),
    *,
    catastrophic: bool = False,
) -> dict[str, float]:
    """Relative constraint values in Optuna's convention (≤ 0 satisfied), finite and capped.

    ``epsilon`` = ε/target − 1; ``f1_macro``/``f1_weighted`` = (threshold − value)/baseline;
    ``fit_spread`` = bulk spread/threshold − 1 (0 when too few draws to measure it, as
    ``diagnose`` then does not judge the fit); ``fit_spikes`` = largest robust z/spike z − 1.
    With ``catastrophic`` (or a non-finite input) every value is ``CONSTRAINT_CAP``.
    """
    if max_delta.epsilon_cap is None:
        raise ValueError("score_max_delta needs epsilon_cap for constraint values")
    values = {
        "epsilon": max_delta.epsilon / max_delta.epsilon_cap - 1.0,
        "f1_macro": -utility.margin_macro / utility.baseline_macro if utility.baseline_macro > 0 else math.nan,
        "f1_weighted": (-utility.margin_weighted / utility.baseline_weighted
                        if utility.baseline_weighted > 0 else math.nan),
        "fit_spread": (0.0 if math.isnan(max_delta.bulk_spread)
                       else max_delta.bulk_spread / thresholds.max_bulk_spread - 1.0),
        "fit_spikes": max_delta.max_robust_z / max_delta.spike_z - 1.0,
    }
    if catastrophic or not max_delta.finite or utility.collapsed:
        return {key: CONSTRAINT_CAP for key in values}
    return {key: _cap(value) for key, value in values.items()}


@dataclass(frozen=True)
class Recommendation:
    """The guide's next move: what to change, by how much, and why.

    ``epochs`` is the next fine-tuning epochs to try and ``c`` the next slope
    (``None`` = keep); ``restart_lower_lr`` asks for a lower learning rate.
    """

    action: Action
    sentence: str
    c: float | None = None
    epochs: int | None = None


def recommend(
    diagnosis: Diagnosis,
    *,
    c: float | None = None,
    epochs: int | None = None,
    epochs_step: int = GUIDE.epochs_step,
    c_step: float = GUIDE.c_step,
    restart_epochs: int = GUIDE.restart_epochs,
) -> Recommendation:
    """The flowchart of the practical guide, from the current (c, epochs) when given.

    Underfit → +``epochs_step`` epochs. Overfit, or a good fit whose ε is above
    target → c − ``c_step`` and epochs back to ``restart_epochs``. A good fit that
    meets ε but not utility → revisit the targets. Catastrophic → restart with a
    lower learning rate. Feasible → stop.
    """
    if diagnosis.label == "catastrophic":
        return Recommendation("restart_lower_lr", "the fit collapsed: restart with a lower learning rate", c, epochs)
    if diagnosis.label == "underfit":
        nxt = None if epochs is None else epochs + epochs_step
        return Recommendation("add_epochs", f"underfit: add {epochs_step} fine-tuning epochs", c, nxt)
    if diagnosis.label == "overfit":
        return recommend_lower_c("overfit", c=c, epochs=epochs, c_step=c_step, restart_epochs=restart_epochs)
    if diagnosis.epsilon_ok is False:
        return recommend_lower_c("well fit but epsilon above target", c=c, epochs=epochs, c_step=c_step,
                                 restart_epochs=restart_epochs)
    if diagnosis.utility_ok is False:
        return Recommendation("revisit_targets", "well fit and within epsilon, but utility misses its target: "
                              "the targets must be revisited", c, epochs)
    return Recommendation("stop", "well fit and every target met: stop here", c, epochs)


def recommend_lower_c(
    why: str, *, c: float | None, epochs: int | None, c_step: float = GUIDE.c_step,
    restart_epochs: int = GUIDE.restart_epochs,
) -> Recommendation:
    """The guide's "lower c and restart" move, or "revisit the targets" when c cannot be lowered and stay positive."""
    lower_c = None if c is None else round(c - c_step, 10)
    if c is not None and lower_c is not None and lower_c <= 0:
        return Recommendation("revisit_targets", f"c = {c:g} cannot be lowered by {c_step:g} (c must stay positive): "
                              "the targets look out of reach; revisit them", c, epochs)
    return Recommendation("lower_c", f"{why}: lower c by {c_step:g} and restart at {restart_epochs} epochs",
                          lower_c, restart_epochs)
