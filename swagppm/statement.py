"""What every result and release says about its privacy, in one place (no torch: the command line reads it).

Every ε a user sees says its kind, in the same words wherever it appears (CLI, status,
report, dashboard, card, owner report, ``explain``):

* **proven**: one draw of the pseudo posterior by an exact sampler whose diagnostics
  passed, with each record's NLL bounded by a public B and risks from public
  information only. Then ε ≤ 2 · clip(c + g, 0, 1) · B is a theorem about the release,
  known from c, g and B before any fit (``proven_epsilon``).
* **estimate**: anything else. The measured ε is 2 · max over finitely many draws of
  max_i w_i · NLL_i: an order statistic of the draws (it grows with their number; for a
  softmax the supremum is infinite), not a bound; "no differential-privacy guarantee is
  proven for this release". The audit then says what it could check, with its ceiling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from swagppm.claim import ACCOUNTED, PUBLIC_PROXY, StudyClaim
from swagppm.posteriors.kinds import posterior_kind

if TYPE_CHECKING:
    from swagppm.config import SWAGPPMConfig
    from swagppm.trial import TrialParams

ClaimKind = Literal["proven", "estimate"]
PROVEN, ESTIMATE = "proven", "estimate"
NOT_PROVEN = "no differential-privacy guarantee is proven for this release"
# the measured ε, wherever it is shown (in full, and in a line's few words)
MEASURED = ("an estimate (2 x the largest weighted loss over finitely many posterior draws: an order statistic, "
            "which grows with the number of draws), not a bound")
MEASURED_SHORT = "an estimate from finitely many posterior draws, not a bound"
# a proven ε in a line's few words
PROVEN_SHORT = ("proven before the fit: 2 x clip(c + g, 0, 1) x B (exact sampler, diagnostics passed, NLL bounded by "
                "B, public risks)")

CAVEATS = (
    "Only a release drawn by an exact sampler (diagnostics passed) of the pseudo posterior, with each record's loss "
    "bounded by a public B and risks from public information, has a proven epsilon; every other epsilon is an "
    "estimate, and the card's first words say which this release has.",
    "The measured epsilon is an estimate (a maximum over finitely many posterior draws), not a bound: an empirical "
    "membership-inference audit can refute it, and then the release is refused unless forced. With the paper's SWAG "
    "the audit has refuted it at c < 1. Delta is not quantified for finite samples.",
    "The audit has a ceiling set by the numbers of members and non-members: above it no model could be refuted, so "
    "a cap above the ceiling is untestable and 'not refuted' is no evidence there. A release whose audit bound is "
    "not below the non-private baseline's has not been shown to reduce membership leakage at all.",
    "Choosing hyperparameters by looking at epsilon and utility on the private data is itself data-dependent: "
    "the tuning mode says whether and how that was accounted; the owner-only report counts the trials.",
)
# stated only where it applies: a model whose tokenizer was built from the private texts (the tiny preset)
TOKENIZER_CAVEAT = ("The tokenizer's vocabulary was fitted on the private texts and lists words from them: this model "
                    "is for demonstrations only.")


def caveats(*, data_derived_tokenizer: bool) -> tuple[str, ...]:
    """The caveats a statement gives: every general one, and the tokenizer's only for a data-derived tokenizer."""
    return CAVEATS + ((TOKENIZER_CAVEAT,) if data_derived_tokenizer else ())
RELEASE_NOISE = ("fresh operating-system entropy (128 bits from Python's secrets module) seeding the noise of this "
                 "one draw; the noise was never recorded and cannot be regenerated from anything stored")
RELEASE_NOISE_PENDING = "drawn at release time from fresh operating-system entropy and never recorded"

# what a card may carry of a tuning cost (the rest is private); "outside_the_total" lists the data-dependent steps
# that no total covers, in plain words
PUBLIC_TUNING_KEYS = ("mode", "total_epsilon", "delta", "statement", "outside_the_total")
CONDITIONAL = ("conditional on each trial's local epsilon being a valid bound; the number of trials is part of the "
               "accounted randomness and is not published")
# What an accounted study reads of the private data outside the accounted draws, for the card.
OUTSIDE_THE_TOTAL = (
    "the feasibility test compares each trial's measured epsilon, a function of the private data, with epsilon* "
    "without noise",
    "a fit whose training collapsed to the majority class is pruned, judged on the private training data without "
    "noise",
    "the release's membership-inference audit gate reads every record's loss under the drawn release without noise "
    "and refuses a release it refutes; a refused attempt publishes nothing and is not counted in the total (the "
    "owner-only report counts them)",
)
PUBLIC_PROXY_STATEMENT = ("public-proxy: tuned on data declared public, tuning cost 0; the chosen configuration is "
                          "fitted once on the private data")
PUBLIC_HYPERPARAMETERS = ("c", "g", "ft_epochs", "prior_scale")  # chosen before the fit; a trial's seed is private
# what a card may say of a private selection of the released draw (its candidates and private score are not)
PUBLIC_SELECTION_KEYS = ("procedure", "metric", "threshold", "stop_probability", "selection_set",
                         "released_draw_score", "accounted", "unaccounted_because", "cost")
OWNER_REPORT = ("an owner-only report kept by the data owner outside this folder (not published) holds the measured "
                "epsilon, the private evaluation, the audit's figures and the tuning details")


def mechanism(posterior: str) -> str:
    """The mechanism in one sentence, naming what the released parameters are a draw of."""
    return ("SWAG-PPM: records with a risky loss were down-weighted (w = clip(c·(1−f)+g, 0, 1)) before "
            f"fine-tuning, and the released parameters are one draw from {posterior_kind(posterior).drawn_from}")


def largest_weight(*, c: float, g: float) -> float:
    """max over f in [0, 1] of clip(c · (1 − f) + g, 0, 1) = clip(c + g, 0, 1): known from c and g alone."""
    return min(1.0, max(0.0, c + g))


def proven_epsilon(*, c: float, g: float, nll_bound: float) -> float:
    """2 · max_i w_i · B ≤ 2 · clip(c + g, 0, 1) · B: the ε of one exact draw of the pseudo posterior with each
    record's NLL bounded by B, when the weights depend on public information only (METHOD.md, "The pseudo posterior
    the draw must come from"). Each record's likelihood term lies in [0, w_i·B], so one posterior's density ratio
    between neighbours is within e^{±w·B} for adding or removing a record and e^{±2w·B} for replacing one: the
    factor 2 covers both."""
    return 2.0 * largest_weight(c=c, g=g) * nll_bound


def claim_kind(*, posterior: str, nll_bound: float | None, public_risks: bool) -> ClaimKind:
    """``"proven"`` for an exact sampler with a bounded likelihood and public risks, ``"estimate"`` otherwise (the
    exact sampler's gate is checked on every fit: a fit whose chains do not mix fails and releases nothing)."""
    exact = posterior_kind(posterior).targets_pseudo_posterior
    return "proven" if exact and nll_bound is not None and public_risks else "estimate"


def proven_bound(config: SWAGPPMConfig, params: TrialParams) -> float | None:
    """The trial's proven ε, 2 · clip(c + g, 0, 1) · B, when its configuration's claim is proven; else None."""
    kind = claim_kind(posterior=config.posterior, nll_bound=config.nll_bound, public_risks=config.public_risks)
    if kind != PROVEN or config.nll_bound is None:
        return None
    return proven_epsilon(c=params.c, g=params.g, nll_bound=config.nll_bound)


def kind_words(kind: ClaimKind, *, nll_bound: float | None) -> str:
    """The first words of a claim: what kind of statement it is."""
    if kind == PROVEN:
        return (f"proven under: exact sampler (diagnostics passed), NLL bounded by B = {exact_number(nll_bound or 0)}, "
                "public risks")
    return NOT_PROVEN


def epsilon_words(*, epsilon: float | None, lower_bound: bool = False, proven: float | None = None) -> str:
    """A trial's or fit's ε as every output writes it: the proven bound, or the measured ε said to be an estimate."""
    if proven is not None:
        return f"epsilon <= {proven:.4g} (proven)"
    if epsilon is None:
        return "epsilon not measured"
    return f"epsilon {'>=' if lower_bound else '='} {epsilon:.4g} (estimate)"


AuditOutcome = Literal["passed", "forced"]


@dataclass(frozen=True, kw_only=True)
class AuditVerdict:
    """What a release's audit may say in public: its outcome and whether the cap was testable at all.

    ``outcome``: "passed" (no test refuted the cap), "forced" (it refuted the cap and the
    owner released anyway), None (no audit was run). ``testable``: the cap lies below the
    audit's ceiling at this split (above it nothing could be refuted: "untestable", never
    "passed"). ``public_ceiling``: the ceiling at ``public_records``, a declared public
    bound on the record count (the ceiling grows with the count, so it bounds the actual
    one; the actual one would publish the count). Published as words, never figures of the audit.
    """

    outcome: AuditOutcome | None
    testable: bool = True
    public_ceiling: float | None = None
    public_records: int | None = None

    def sentence(self, *, epsilon_cap: float) -> str:
        if self.outcome is None:
            return "none was run before this release"
        ceiling = (f"; at up to {self.public_records} records the audit cannot show an epsilon above "
                   f"{self.public_ceiling:.2f}" if self.public_ceiling is not None else
                   "; the largest epsilon it could show at this split depends on the record count and is in the "
                   "owner-only report")
        if self.outcome == "forced":
            return ("a membership-inference audit of the released draw refuted the claim, and the data owner released "
                    "it anyway (forced)" + ceiling)
        if not self.testable:
            return (f"untestable: a membership-inference audit of the released draw was run, but the cap "
                    f"{exact_number(epsilon_cap)} is above the largest epsilon any audit could show at this split, so "
                    "it could not have refuted it and its result is no evidence" + ceiling)
        return ("a membership-inference audit of the released draw (training records against held-out records) was "
                "run before release and did not refute the cap" + ceiling)


@dataclass(frozen=True, kw_only=True)
class PrivacyClaim:
    """The claim a release makes, all public: its kind, the cap ε* declared before any fit, and the pseudo posterior
    it was drawn from (posterior, prior scale, NLL bound, whether the risks are public). ``proven_epsilon`` is the
    theorem's bound for a proven claim (within the cap)."""

    epsilon_cap: float
    posterior: str
    prior_scale: float
    nll_bound: float | None
    public_risks: bool
    proven_epsilon: float | None = None

    @property
    def kind(self) -> ClaimKind:
        kind = claim_kind(posterior=self.posterior, nll_bound=self.nll_bound, public_risks=self.public_risks)
        return kind if self.proven_epsilon is not None else "estimate"

    def sentence(self) -> str:
        """The claim as the card states it: its kind first, then the cap."""
        head = kind_words(self.kind, nll_bound=self.nll_bound)
        cap = exact_number(self.epsilon_cap)
        if self.kind == PROVEN:
            return (f"{head}: epsilon <= {exact_number(self.proven_epsilon or 0)} = 2 x clip(c + g, 0, 1) x B for the "
                    f"release of one draw, within the cap epsilon <= {cap} declared before any fit.")
        return (f"{head}. Cap: epsilon <= {cap} for the release of one draw, declared before any fit; the measured "
                f"epsilon ({MEASURED}) was within it and stays private; delta is not quantified for finite samples.")

    def pseudo_posterior(self) -> str:
        """The pseudo posterior the draw targets, in words."""
        prior = ("a flat (improper) prior" if self.prior_scale == float("inf") else
                 f"prior N(theta_0, {exact_number(self.prior_scale)}^2 I) centred on the public initial or pretrained "
                 "values")
        bound = "unbounded NLL" if self.nll_bound is None else f"each record's NLL bounded by B = " \
            f"{exact_number(self.nll_bound)}"
        risks = "risks from public information" if self.public_risks else "risks from the private records"
        return (f"xi_w(theta) proportional to pi(theta) prod_i p(y_i | x_i, theta)^(w_i), {prior}, {bound}, {risks}; "
                f"drawn with posterior = '{self.posterior}'")

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "statement": self.sentence(), "epsilon_at_most": self.epsilon_cap,
                "proven_epsilon": self.proven_epsilon, "posterior": self.posterior, "prior_scale": self.prior_scale,
                "nll_bound": self.nll_bound, "public_risks": self.public_risks,
                "pseudo_posterior": self.pseudo_posterior()}


def exact_number(value: float) -> str:
    """``value`` as short as ``:g`` writes it when that is exact, else every digit: a claimed cap is never rounded."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def release_statement(*, claim: PrivacyClaim, trainable: str, private_parameters: int,
                      tuning: Mapping[str, Any] | None, selection: Mapping[str, Any] | None,
                      audit: AuditVerdict, data_derived_tokenizer: bool = False) -> list[str]:
    """The privacy statement of a published release, one sentence a line: nothing in it depends on the data beyond
    the audit's verdict.

    The claim starts with its kind, then the cap ε* declared before any fit (never the
    measured ε, set by one record and reproducible bit for bit); ``tuning`` holds only
    ``PUBLIC_TUNING_KEYS``; ``audit`` is the audit's verdict with its ceiling.
    """
    return [
        f"Claim: {claim.sentence()}",
        f"Mechanism: {mechanism(claim.posterior)}.",
        f"Pseudo posterior: {claim.pseudo_posterior()}.",
        "Unit of privacy: one training record.",
        f"Private parameters: {private_parameters} tensors (trainable = '{trainable}'), all drawn from the posterior; "
        "every other parameter is the public pretrained value (checked bit for bit before a release is written).",
        f"Release noise: {RELEASE_NOISE}.",
        f"Tuning: {_tuning(tuning)}.",
        f"Selection of the released draw: {_selection(selection)}.",
        f"Empirical audit: {audit.sentence(epsilon_cap=claim.epsilon_cap)}.",
        f"Owner report: {OWNER_REPORT}.",
    ] + [f"Caveat: {caveat}" for caveat in caveats(data_derived_tokenizer=data_derived_tokenizer)]


@dataclass(frozen=True, kw_only=True)
class AccountedTotal:
    """An accounted total for a card: ``epsilon`` at ``delta``, what it covers (``scope``), the library that composed
    it (``accountant``) and whether other studies on the same data chose by private scores outside it
    (``uncovered``)."""

    epsilon: float
    delta: float
    accountant: str
    scope: str = "tuning and the release of one draw"
    uncovered: bool = False


def unaccounted_statement(sampler: str | None = None) -> str:
    """The tuning sentence of an unaccounted study (the owner's names its sampler; a card never does: a resumed study
    may have changed it)."""
    searched = f"the {sampler} sampler" if sampler else "an adaptive search"
    return (f"unaccounted: {searched} chose among configurations by their epsilon and F1 on the private data; what "
            "that choice reveals is not counted in any total epsilon")


def accounted_statement(cap: float, total: AccountedTotal) -> str:
    """The public sentence of an accounted total (no K, no count, no measured ε)."""
    text = (f"accounted: random search from secret randomness over a random, hidden number of trials, each capped at "
            f"epsilon* = {cap:g} (binding) and scored by one secret draw on public evaluation data; {total.scope} cost "
            f"epsilon {total.epsilon:.4g} at delta {total.delta:.3g} in total ({total.accountant}), " + CONDITIONAL)
    if total.uncovered:
        text += ("; other studies on these data chose by private scores without an accounted total, and no figure "
                 "here covers them")
    return text


def tuning_section(claim: StudyClaim, total: AccountedTotal | None) -> dict[str, Any]:
    """What a card says of how its configuration was chosen (``PUBLIC_TUNING_KEYS``), from the verified claim's mode
    and, for an accounted claim, its ledger's total."""
    if claim.mode == PUBLIC_PROXY:
        return {"mode": claim.mode, "total_epsilon": 0.0, "delta": claim.delta, "statement": PUBLIC_PROXY_STATEMENT,
                "outside_the_total": None}
    if claim.mode != ACCOUNTED:
        return {"mode": claim.mode, "total_epsilon": None, "delta": claim.delta,
                "statement": unaccounted_statement(), "outside_the_total": None}
    if total is None:
        raise ValueError("an accounted claim's card states its ledger's total")
    return {"mode": claim.mode, "total_epsilon": total.epsilon, "delta": total.delta,
            "statement": accounted_statement(claim.epsilon_cap, total), "outside_the_total": list(OUTSIDE_THE_TOTAL)}


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
                      posterior: str = "swag", proven: float | None = None,
                      private_parameters: int | None = None, release_noise: str | None = None,
                      tuning: Mapping[str, Any] | None = None, selection: Mapping[str, Any] | None = None) -> list[str]:
    """The privacy statement of a configuration for its owner (export, report): its kind and its ε, one sentence a
    line.

    Kind first (proven, or no guarantee proven), the ε in the same words as every
    output (``epsilon_words``), the mechanism, the unit of privacy, which parameters
    were private, how the release noise is drawn, what tuning cost and selection (the
    export and the report list the caveats once, beside it). A published release
    states ``release_statement`` instead.
    """
    kind = f"proven: {epsilon_words(epsilon=epsilon, proven=proven)}" if proven is not None else \
        f"{NOT_PROVEN}; measured {epsilon_words(epsilon=epsilon, lower_bound=epsilon_is_lower_bound)}, {MEASURED}"
    drawn = f"{private_parameters} tensors" if private_parameters is not None else "the trainable parameters"
    lines = [
        f"Claim: {kind}; for the release of one draw; delta is not quantified for finite samples.",
        f"Mechanism: {mechanism(posterior)}.",
        "Unit of privacy: one training record.",
        f"Private parameters: {drawn} (trainable = '{trainable}'), all drawn from the posterior; every other "
        "parameter is the public pretrained value (checked bit for bit before a release is written).",
        f"Release noise: {release_noise or RELEASE_NOISE_PENDING}.",
        f"Tuning: {tuning['statement'] if tuning and tuning.get('statement') else 'not reported'}"
        + (f" ({tuning['trials_run']} trials run, largest trial epsilon {_number(tuning.get('max_trial_epsilon'))})"
           if tuning and tuning.get("trials_run") is not None else "") + ".",
        f"Selection of the released draw: {_selection(selection)}.",
    ]
    return lines


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
