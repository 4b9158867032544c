"""From one fit's result to what a study records: scores, verdict, constraints and the guide's next move.

Pure bookkeeping (no Optuna): ``judge`` is shared by the study's trials and the
command line's single ``fit``, so both print and store the same numbers.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import scorers
from scorers import MIN_DRAWS
from tuner.config import Targets
from tuner.record import CONSTRAINT_KEYS, TrialRecord, measured_violations, refuted_note
from tuner.search import SearchSpace

if TYPE_CHECKING:
    from swagppm import SWAGPPMResult

AUDIT_TARGET = "epsilon (the audit)"  # a violated ε target that only the audit's bound violates
NOT_JUDGED = "not_judged"  # the label of a fit whose series was not judged: an early stop, or too few draws
# The constraint value of a required target an ε early stop did not measure: missed by a whole target (an F1 of
# about zero, a band twice the spread threshold), not by the cap, which would distort the constraint models of GP.
UNMEASURED = 1.0
GLOSSARY = "swagppm-tune explain WORD"  # what a wheel user has: no docs/ folder comes with it


def counted(number: int, noun: str) -> str:
    """``1 epoch``, ``7 epochs``: a count as a sentence says it."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


# Printed once before a run's first trial line: what each part of ``Outcome.line`` means.
TRIAL_LEGEND = f"""\
How to read the trial lines; every word is explained by {GLOSSARY}:
  c=, epochs=     the trial's weight slope c (lower: records weigh less, more private) and fine-tuning epochs E
  eps=            epsilon, smaller is more private: an estimate from this trial's finitely many privacy draws,
                  not a bound (no differential-privacy guarantee is proven for it); the membership-inference audit
                  (`swagppm-tune audit`) is its check
  eps<= (proven)  epsilon proven before the fit: 2 x clip(c + g, 0, 1) x B (exact sampler, NLL bounded by B,
                  public risks)
  eps>=           the privacy draws stopped once epsilon passed the target (or the best feasible trial's, which
                  it then cannot beat): at least this; F1 was not measured
  F1 macro ...    F1 on the test split over the utility draws, against the non-private baseline's
  well_fit        the max-delta series (one value per privacy draw) is low and stable; underfit: it wanders
                  (add epochs); overfit: it spikes (lower c); not_judged: stopped early or too few draws to tell
  FEASIBLE        meets every [targets] entry; infeasible (...) names the targets it misses"""


@dataclass(frozen=True, kw_only=True)
class DrawChecks:
    """What one secret draw of a fit showed besides its ε: aggregates only.

    ``public_score``: macro-F1 of the draw on public evaluation data (an accounted
    study's only score). ``audit_epsilon_bound``: the largest ε lower bound of the
    family-wise membership audit of the draw (``scorers.privacy_audit``; δ = 0).
    """

    public_score: float | None = None
    audit_epsilon_bound: float | None = None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """A judged fit. ``label`` is the diagnosis, or ``"not_judged"`` after an ε early stop or for a series too
    short to judge.

    ``constraints`` follow Optuna's convention (≤ 0 met) and always carry the same
    keys, ``CONSTRAINT_KEYS``: the fit constraints are 0 when the study does not
    require a good fit. After an ε early stop the required targets the fit did not
    measure are named in ``unmeasured`` and set to ``UNMEASURED`` (violated): a sampler
    must not read the region as meeting them (counted as met, they draw TPE back to
    early-stopped regions), while lines and reports say "not measured", never
    "missed". A series too short to judge violates the fit constraints when a good
    fit is required. ``catastrophic`` fits violate every constraint.
    """

    result: SWAGPPMResult
    max_delta: scorers.MaxDeltaScores
    utility: scorers.UtilityScores | None
    label: str
    reasons: tuple[str, ...]
    constraints: dict[str, float]
    recommendation: scorers.Recommendation
    unmeasured: tuple[str, ...] = ()
    checks: DrawChecks = DrawChecks()
    cap: float = math.inf  # the ε target it was judged against

    @property
    def catastrophic(self) -> bool:
        return self.label == "catastrophic"

    @property
    def audit_refutes_the_cap(self) -> bool:
        """Whether the ε target is violated by the audit's bound while the measured ε meets it."""
        bound = self.checks.audit_epsilon_bound
        return bound is not None and self.constraints["epsilon"] > 0 and self.result.epsilon <= self.cap

    @property
    def feasible(self) -> bool:
        return scorers.is_feasible(self.constraints)

    def objective_values(self, objective: str) -> float | tuple[float, float]:
        """ε (minimised: the larger of the measured ε and the audit's bound when an audit ran) and, for
        ``"pareto"``, the macro-F1 statistic (maximised; 0 when not measured)."""
        epsilon = min(max(self.result.epsilon, self.checks.audit_epsilon_bound or 0.0), 1e12)
        if objective == "epsilon":
            return epsilon
        macro = self.utility.macro if self.utility is not None and math.isfinite(self.utility.macro) else 0.0
        return epsilon, macro

    def record(self) -> TrialRecord:
        """What a study stores about this fit (aggregates only, nothing per record)."""
        result, md = self.result, self.max_delta
        measured = bool(result.f1_macro)
        return TrialRecord(
            feasible=self.feasible, diagnosis=self.label, reasons=self.reasons,
            recommendation=self.recommendation.sentence, next_action=self.recommendation.action,
            next_c=self.recommendation.c, next_ft_epochs=self.recommendation.epochs,
            epsilon=_finite_or_none(result.epsilon), epsilon_is_lower_bound=result.epsilon_is_lower_bound,
            draws_privacy=len(result.max_delta), draws_skipped=result.draws_skipped, failure=result.failure,
            max_delta_median=_finite_or_none(md.median), bulk_spread=_finite_or_none(md.bulk_spread),
            max_robust_z=_finite_or_none(md.max_robust_z), spike_count=md.spike_count,
            baseline_f1_macro=result.baseline_f1_macro, baseline_f1_weighted=result.baseline_f1_weighted,
            f1_macro_median=_finite_or_none(result.f1_macro_median) if measured else None,
            f1_macro_q10=_finite_or_none(result.f1_macro_q10) if measured else None,
            f1_weighted_median=_finite_or_none(result.f1_weighted_median) if measured else None,
            f1_weighted_q10=_finite_or_none(result.f1_weighted_q10) if measured else None,
            stage1_cache_hit=result.stage1_cache_hit, data_hash=result.data_hash, seed=result.seed,
            device=result.device, threads=result.threads, cpu_kernels=result.cpu_kernels,
            stage1_fingerprint=result.stage1_fingerprint, majority_rate=result.majority_rate,
            timings={stage: round(seconds, 3) for stage, seconds in result.timings.items()},
            max_delta_series=tuple(float(x) for x in result.max_delta), f1_macro_draws=tuple(result.f1_macro),
            f1_weighted_draws=tuple(result.f1_weighted), constraints=dict(self.constraints),
            unmeasured=self.unmeasured, public_score=self.checks.public_score,
            audit_epsilon_bound=self.checks.audit_epsilon_bound, posterior=result.posterior,
            prior_scale=result.prior_scale if math.isfinite(result.prior_scale) else None, nll_bound=result.nll_bound,
            proven_epsilon=result.proven_epsilon,
            diagnostics=dict(result.diagnostics),
        )

    def attributes(self) -> dict[str, Any]:
        """The record as Optuna user attributes (``TrialRecord.attrs``)."""
        return self.record().attrs()

    def line(self) -> str:
        """The one-line progress summary: c, epochs, ε, F1s, verdict, feasibility, time."""
        result = self.result
        head = f"c={result.c:.3f} epochs={result.ft_epochs:>2}"
        if result.g:
            head += f" g={result.g:.3f}"
        if result.failure:
            return f"{head}  catastrophic: {result.failure}  {result.timings.get('total', 0.0):.1f}s"
        if result.proven_epsilon is not None:
            text = f"{head}  eps<={result.proven_epsilon:7.3f} (proven)"
        else:
            bound = ">=" if result.epsilon_is_lower_bound else "="
            text = f"{head}  eps{bound}{result.epsilon:7.3f}"
            text += refuted_note(result.epsilon, self.checks.audit_epsilon_bound)
        if self.utility is not None and result.f1_macro:
            text += (f"  F1 macro {self.utility.statistic} {self.utility.macro:.3f} (baseline "
                     f"{result.baseline_f1_macro:.3f}), weighted {self.utility.weighted:.3f} (baseline "
                     f"{result.baseline_f1_weighted:.3f})")
        else:
            text += f"  F1 not measured ({result.draws_skipped} privacy draws skipped)"
        missed = [AUDIT_TARGET if key == "epsilon" and self.audit_refutes_the_cap else key
                  for key in measured_violations(self.constraints, self.unmeasured)]
        missed = missed or [f"{key} unmeasured" for key in self.unmeasured]  # stopped below the cap (tuner.pruning)
        text += f"  {self.label:<12}  " + ("FEASIBLE" if self.feasible else f"infeasible ({', '.join(missed)})")
        return text + f"  {result.timings.get('total', 0.0):.1f}s"  # the run said once where stage 1 came from


def result_line(result: SWAGPPMResult) -> str:
    """One line for a fit judged against no targets: c, epochs, ε, F1 medians against the baseline, time."""
    if result.failure:
        return f"c={result.c:.3f} epochs={result.ft_epochs:>2}  FAILED: {result.failure}"
    bound = ">=" if result.epsilon_is_lower_bound else "="
    return (
        f"c={result.c:.3f} epochs={result.ft_epochs:>2}  eps{bound}{result.epsilon:.3f}  "
        f"F1 macro {result.f1_macro_median:.3f} (baseline {result.baseline_f1_macro:.3f})  "
        f"F1 weighted {result.f1_weighted_median:.3f} (baseline {result.baseline_f1_weighted:.3f})  "
        f"{result.timings.get('total', 0.0):.1f}s{'  [stage 1 cached]' if result.stage1_cache_hit else ''}"
    )


def _finite_or_none(value: float | None) -> float | None:
    return float(value) if value is not None and math.isfinite(value) else None


def judge(result: SWAGPPMResult, *, targets: Targets, search: SearchSpace, accounted: bool = False,
          checks: DrawChecks = DrawChecks()) -> Outcome:
    """Score, diagnose and constrain one fit against the study's targets.

    An ``accounted`` study judges by ε ≤ ε* and ``checks.public_score`` only; an
    ``checks.audit_epsilon_bound`` above ε* violates the ε constraint (the audit refutes ε*).
    """
    outcome = _judged(result, targets=targets, search=search)
    if result.proven_epsilon is not None and not outcome.catastrophic:
        outcome = _proven(outcome, result.proven_epsilon, targets)
    if accounted and not outcome.catastrophic:
        outcome = _accounted(outcome)
    if checks.audit_epsilon_bound is not None:
        outcome = _audited(outcome, checks.audit_epsilon_bound, targets.epsilon_cap, search)
    return dataclasses.replace(outcome, checks=checks, cap=targets.epsilon_cap)


def _proven(outcome: Outcome, proven: float, targets: Targets) -> Outcome:
    """A proven ε judges the trial's privacy without the data: ε* against the theorem's bound, and no test on the
    measured max-delta series (its verdict is shown, never used to decide)."""
    constraints = {**outcome.constraints, "fit_spread": 0.0, "fit_spikes": 0.0,
                   "epsilon": min(scorers.CONSTRAINT_CAP, proven / targets.epsilon_cap - 1.0)}
    why = (f"proven epsilon <= {proven:.4g} (2 x clip(c + g, 0, 1) x B, known before the fit) judged against "
           f"epsilon* = {targets.epsilon_cap:g}; the measured series is not a test here")
    return dataclasses.replace(outcome, constraints=constraints, reasons=(*outcome.reasons, why))


def _accounted(outcome: Outcome) -> Outcome:
    """Only ε ≤ ε* constrains an accounted trial: F1 on the private test split and the fit diagnosis read the
    private data beyond the accounted draw, so they are shown, never used to choose."""
    waived = {key: 0.0 for key in CONSTRAINT_KEYS if key != "epsilon"}
    why = ("accounted study: judged by epsilon <= epsilon* alone and chosen by its score on public evaluation data; "
           "F1 on the private test split and the fit diagnosis are shown, not used")
    return dataclasses.replace(outcome, constraints={**outcome.constraints, **waived}, reasons=(*outcome.reasons, why))


def _audited(outcome: Outcome, bound: float, epsilon_cap: float, search: SearchSpace) -> Outcome:
    """The audit as a constraint: the trial is judged by the larger of its measured ε and the audit's ε lower bound,
    so a bound above ε* violates the ε constraint, and the guide's next move says so (never "every target met")."""
    refuted = bound / epsilon_cap - 1.0
    constraints = {**outcome.constraints,
                   "epsilon": min(scorers.CONSTRAINT_CAP, max(outcome.constraints["epsilon"], refuted))}
    verdict = "refutes" if refuted > 0 else "does not refute"
    why = (f"membership audit of one secret draw: epsilon lower bound {bound:.3g} (95% family-wise, delta = 0) "
           f"{verdict} epsilon* = {epsilon_cap:g}")
    recommendation = outcome.recommendation
    if refuted > 0 and not outcome.catastrophic:
        recommendation = scorers.recommend_lower_c(
            f"the audit shows epsilon >= {bound:.3g}, above the target", c=outcome.result.c,
            epochs=outcome.result.ft_epochs, c_step=search.c_step, restart_epochs=search.restart_epochs)
    return dataclasses.replace(outcome, constraints=constraints, reasons=(*outcome.reasons, why),
                               recommendation=recommendation)


def _judged(result: SWAGPPMResult, *, targets: Targets, search: SearchSpace) -> Outcome:
    """Score, diagnose and constrain one fit against the study's targets (its ε and private-split F1)."""
    thresholds = scorers.DiagnosisThresholds(max_bulk_spread=targets.max_bulk_spread, min_spikes=targets.min_spikes)
    md = scorers.score_max_delta(result.max_delta, epsilon_cap=targets.epsilon_cap, spike_z=targets.spike_z)
    steps: dict[str, Any] = dict(epochs_step=search.epochs_step, c_step=search.c_step,
                                 restart_epochs=search.restart_epochs)
    if result.epsilon_is_lower_bound:
        return _stopped_early(result, md, targets, steps)
    utility = None
    if result.failure is None:
        utility = scorers.score_utility(
            result.f1_macro, result.f1_weighted, baseline_macro=result.baseline_f1_macro,
            baseline_weighted=result.baseline_f1_weighted, max_degradation=targets.max_f1_degradation,
            statistic=targets.statistic, majority_rate=result.majority_rate)
    diagnosis = scorers.diagnose(md, utility, thresholds, failure=result.failure)
    catastrophic = diagnosis.label == "catastrophic"
    if utility is None:  # a training failure: nothing else was measured
        constraints = {key: scorers.CONSTRAINT_CAP for key in CONSTRAINT_KEYS}
    else:
        constraints = scorers.constraint_values(md, utility, thresholds, catastrophic=catastrophic)
    if not targets.require_well_fit and not catastrophic:
        constraints.update(fit_spread=0.0, fit_spikes=0.0)
    if targets.require_well_fit and not catastrophic and md.num_draws < MIN_DRAWS:
        return _too_short(result, md, utility, diagnosis.reasons, constraints)
    recommendation = scorers.recommend(diagnosis, c=result.c, epochs=result.ft_epochs, **steps)
    if not targets.require_well_fit and not catastrophic and diagnosis.label != "well_fit" \
            and all(v <= 0 for v in constraints.values()):
        recommendation = scorers.Recommendation(
            "stop", f"{diagnosis.label.replace('_', ' ')} but every required target met: stop here",
            result.c, result.ft_epochs)
    return Outcome(result=result, max_delta=md, utility=utility, label=diagnosis.label, reasons=diagnosis.reasons,
                   constraints=constraints, recommendation=recommendation)


def _stopped_early(result: SWAGPPMResult, md: scorers.MaxDeltaScores, targets: Targets,
                   steps: dict[str, Any]) -> Outcome:
    """ε already above target after a few draws: only the ε constraint is known (and violated); the other
    required targets are unmeasured (violated by ``UNMEASURED``, see ``Outcome``)."""
    unmeasured = ("f1_macro", "f1_weighted") + (("fit_spread", "fit_spikes") if targets.require_well_fit else ())
    constraints = dict.fromkeys(CONSTRAINT_KEYS, 0.0) | dict.fromkeys(unmeasured, UNMEASURED)
    constraints["epsilon"] = min(scorers.CONSTRAINT_CAP, result.epsilon / targets.epsilon_cap - 1.0)
    drawn = len(result.max_delta)
    reasons = (f"privacy draws stopped after {drawn} of {drawn + result.draws_skipped}: epsilon >= "
               f"{result.epsilon:.2f} already exceeds the target {targets.epsilon_cap:.2f}; fit and utility not "
               "measured",)
    recommendation = scorers.recommend_lower_c("epsilon above target", c=result.c, epochs=result.ft_epochs,
                                               c_step=steps["c_step"], restart_epochs=steps["restart_epochs"])
    return Outcome(result=result, max_delta=md, utility=None, label=NOT_JUDGED, reasons=reasons,
                   constraints=constraints, recommendation=recommendation, unmeasured=unmeasured)


def _too_short(result: SWAGPPMResult, md: scorers.MaxDeltaScores, utility: scorers.UtilityScores | None,
               reasons: tuple[str, ...], constraints: dict[str, float]) -> Outcome:
    """A series too short to judge while a good fit is required: the fit constraints are violated, not waived."""
    constraints = {**constraints, "fit_spread": scorers.CONSTRAINT_CAP, "fit_spikes": scorers.CONSTRAINT_CAP}
    why = (f"only {md.num_draws} privacy draws, fewer than {MIN_DRAWS}: the fit cannot be judged, and the study "
           "requires a well-fit series (require_well_fit = true): infeasible")
    kept = reasons[1:]  # the first is the scorers' verdict on the series, which they could not judge
    recommendation = scorers.Recommendation(
        "revisit_targets", f"raise [swagppm] draws_privacy to at least {MIN_DRAWS}, or set require_well_fit = false",
        result.c, result.ft_epochs)
    return Outcome(result=result, max_delta=md, utility=utility, label=NOT_JUDGED, reasons=(why, *kept),
                   constraints=constraints, recommendation=recommendation)
