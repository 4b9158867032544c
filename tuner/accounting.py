"""What tuning and selection cost in ε, as dp-accounting's RDP accountant computes it.

Two procedures release one SWAG-PPM draw after several ε-DP runs:

* an accounted study (Papernot & Steinke 2022): random search over K trials, K drawn once
  from a truncated negative binomial, releasing the best trial (``tuning_epsilon``);
* private selection of the released draw (Liu & Talwar 2019): draw candidates until one
  reaches a utility threshold, stopping at random after each miss (``selection_epsilon``);
* both in turn, an accounted study then the release of its choice (``composed_epsilon``),
  composed in one accountant into one total;
* a data set's whole ledger, every accounted study and every release attempt on it
  (``ledger_epsilon``, ``tuner.ledger``).

Every ε here comes from ``dp_accounting.rdp.RdpAccountant`` over a ``RepeatAndSelectDpEvent``.
dp-accounting has no pure-DP event, so one ε-DP run is entered as its worst case: binary
randomized response with likelihood ratio e^ε. Every ε-DP pair of output distributions is a
post-processing of that one (Kairouz, Oh & Viswanath 2015), so its Rényi divergences bound
those of any ε-DP run at every order, and it is ε-DP itself (not weaker). The accountant's
``REPLACE_ONE`` relation only picks the library's formula for that pair: the figures hold for
whichever neighbouring relation the per-run ε was stated for.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from importlib.metadata import version
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from dp_accounting import RandomizedResponseDpEvent
    from dp_accounting.rdp import RdpAccountant

# dp-accounting and scipy are imported where they are used: together they take about a second,
# and the command line's read-only verbs (status, export, report) never compute an ε.


@dataclass(frozen=True)
class TrialCountDistribution:
    """How many trials an accounted study runs: K ~ TNB(η, γ), drawn once before the search.

    ``shape`` is η: 0 gives the logarithmic distribution, 1 the geometric, any η > 0 the negative
    binomial NB(η, γ) conditioned on K ≥ 1, and ``math.inf`` the Poisson with mean ``mean``
    (not truncated: K = 0 happens, and then nothing is released). ``mean`` is E[K], which
    fixes γ in (0, 1] (``gamma``):

        E[K] = η (1 - γ) / (γ (1 - γ^η))   for η > 0   (1/γ for the geometric),
        E[K] = (1 - γ) / (γ ln(1/γ))        for η = 0.

    The fields are dp-accounting's own (mean, shape); ``from_gamma`` builds one from (η, γ).
    The paper also allows η in (-1, 0), which dp-accounting refuses, and so does this.
    """

    shape: float
    mean: float

    def __post_init__(self) -> None:
        if math.isnan(self.shape) or self.shape < 0:
            raise ValueError(f"shape = {self.shape!r}: must be 0 (logarithmic), 1 (geometric), "
                             "any η > 0 (truncated negative binomial) or math.inf (Poisson)")
        if not (math.isfinite(self.mean) and self.mean >= 1):
            raise ValueError(f"mean = {self.mean!r}: the mean number of trials must be finite and at least 1")

    @classmethod
    def from_gamma(cls, *, shape: float, gamma: float) -> TrialCountDistribution:
        """The distribution TNB(η = ``shape``, γ = ``gamma``) of the paper, by its mean."""
        if math.isinf(shape):
            raise ValueError("the Poisson (shape = math.inf) has no γ: give its mean instead")
        if not 0 < gamma <= 1:
            raise ValueError(f"gamma = {gamma!r}: must be in (0, 1]")
        return cls(shape=shape, mean=_tnb_mean(shape, gamma))

    @cached_property
    def gamma(self) -> float:
        """γ of TNB(η, γ) with this mean (1 when the mean is 1: always one trial)."""
        if math.isinf(self.shape):
            raise ValueError("the Poisson (shape = math.inf) has no γ")
        return _tnb_gamma(self.shape, self.mean)

    def sample(self, rng: np.random.Generator) -> int:
        """Draw K: at least 1, except for the Poisson, where K = 0 means run and release nothing.

        Exact samplers from numpy: ``poisson(mean)``; ``logseries(1 - γ)`` for η = 0;
        ``geometric(γ)`` for η = 1; otherwise ``negative_binomial(η, γ)`` (real η allowed),
        drawn again while it is 0 (rejection, 1 / (1 - γ^η) draws on average).
        """
        if math.isinf(self.shape):
            return int(rng.poisson(self.mean))
        gamma = self.gamma
        if gamma == 1.0:
            return 1
        if self.shape == 0:
            return int(rng.logseries(1.0 - gamma))
        if self.shape == 1:
            return int(rng.geometric(gamma))
        while True:
            count = int(rng.negative_binomial(self.shape, gamma))
            if count >= 1:
                return count


@dataclass(frozen=True)
class GeometricStopping:
    """Liu & Talwar's random stopping: after each candidate that misses the threshold, stop with ``stop_probability``.

    Equivalently, draw a budget of K ~ Geometric(γ) rounds on {1, 2, ...} (``sample_rounds``,
    mean 1/γ), release the first candidate that reaches the threshold and nothing if none
    of the K does. This is TNB with η = 1, so it is accounted as ``RepeatAndSelectDpEvent``.
    """

    stop_probability: float

    def __post_init__(self) -> None:
        if not 0 < self.stop_probability <= 1:
            raise ValueError(f"stop_probability = {self.stop_probability!r}: must be in (0, 1]")

    @property
    def mean(self) -> float:
        """The mean number of rounds, 1/γ."""
        return 1.0 / self.stop_probability

    def sample_rounds(self, rng: np.random.Generator) -> int:
        """The round budget K ≥ 1."""
        return int(rng.geometric(self.stop_probability))


def tuning_epsilon(*, epsilon_per_trial: float, distribution: TrialCountDistribution, delta: float) -> float:
    """ε (at ``delta``) of releasing the best of K ~ ``distribution`` trials, each ``epsilon_per_trial``-DP.

    ``epsilon_per_trial`` must bound every trial a priori (the largest per-trial ε the search
    can reach). δ > 0 is needed to turn RDP into (ε, δ); callers take a power of ten at most
    1/N² for a declared public bound N on the training records (``tuner.tuning.default_delta``),
    never the private count itself; a smaller δ costs
    almost nothing here. For η ≥ 0 the figure tends to the paper's pure-DP (2 + η)ε as
    δ → 0, whatever the mean; the Poisson's grows with the mean.
    """
    return _repeat_and_select_epsilon(epsilon_per_trial, distribution.mean, distribution.shape, delta)


def selection_epsilon(*, epsilon_per_candidate: float, stop_probability: float, delta: float) -> float:
    """ε (at ``delta``) of Liu & Talwar's threshold selection with random stopping (``GeometricStopping``).

    ``epsilon_per_candidate`` must cover one draw and its utility check on the selection set.
    The known pure-DP bound is 3ε whatever γ (Liu & Talwar 2019; Papernot & Steinke's η = 1);
    the library's (ε, δ) figure tends to it as δ → 0. δ as for ``tuning_epsilon``.
    """
    stopping = GeometricStopping(stop_probability=stop_probability)
    return _repeat_and_select_epsilon(epsilon_per_candidate, stopping.mean, 1.0, delta)


def composed_epsilon(*, epsilon_per_run: float, trials: TrialCountDistribution, release: GeometricStopping | None,
                     delta: float) -> float:
    """ε (at ``delta``) of an accounted study and the release of its choice together, from one accountant.

    The study is a ``RepeatAndSelectDpEvent`` over K ~ ``trials`` runs; the release fits
    the chosen configuration again and draws once more: one more ε-DP run, or with a
    private selection (``release``) a second ``RepeatAndSelectDpEvent`` with geometric
    stopping. ``epsilon_per_run`` bounds every run a priori (the study's binding ε*).
    """
    _check_run(epsilon_per_run, delta)
    from dp_accounting.dp_event import RepeatAndSelectDpEvent

    run = _pure_dp_event(epsilon_per_run)
    accountant = _accountant()
    accountant.compose(RepeatAndSelectDpEvent(event=run, mean=trials.mean, shape=trials.shape))
    accountant.compose(run if release is None else RepeatAndSelectDpEvent(event=run, mean=release.mean, shape=1.0))
    return float(accountant.get_epsilon(delta))


def ledger_epsilon(*, studies: Sequence[tuple[float, TrialCountDistribution]],
                   releases: Sequence[tuple[float, GeometricStopping | None]], delta: float) -> float:
    """ε (at ``delta``) of a data set's whole ledger, from one accountant: every accounted study, as the best of its
    K ~ distribution runs at its cap, and every release attempt, one run at its cap or a private selection with
    geometric stopping (``composed_epsilon`` is the case of one study and one release)."""
    from dp_accounting.dp_event import RepeatAndSelectDpEvent

    accountant = _accountant()
    for cap, trials in studies:
        _check_run(cap, delta)
        accountant.compose(RepeatAndSelectDpEvent(event=_pure_dp_event(cap), mean=trials.mean, shape=trials.shape))
    for cap, stopping in releases:
        _check_run(cap, delta)
        run = _pure_dp_event(cap)
        accountant.compose(run if stopping is None else RepeatAndSelectDpEvent(event=run, mean=stopping.mean,
                                                                                shape=1.0))
    return float(accountant.get_epsilon(delta))


def accounting_versions() -> dict[str, str]:
    """The versions behind these figures (the accountant, and numpy for the samplers), for provenance."""
    return {"dp-accounting": version("dp-accounting"), "numpy": version("numpy")}


def _repeat_and_select_epsilon(epsilon: float, mean: float, shape: float, delta: float) -> float:
    """RdpAccountant's ε for RepeatAndSelectDpEvent over one ε-DP run."""
    _check_run(epsilon, delta)
    from dp_accounting.dp_event import RepeatAndSelectDpEvent

    accountant = _accountant()
    accountant.compose(RepeatAndSelectDpEvent(event=_pure_dp_event(epsilon), mean=mean, shape=shape))
    return float(accountant.get_epsilon(delta))


def _check_run(epsilon: float, delta: float) -> None:
    if not (math.isfinite(epsilon) and epsilon > 0):
        raise ValueError(f"per-run ε = {epsilon!r}: must be positive and finite")
    if not 0 < delta < 1:
        raise ValueError(f"delta = {delta!r}: must be in (0, 1) (RDP gives no ε at δ = 0)")


def _accountant() -> RdpAccountant:
    """An empty RDP accountant on ``rdp_orders()``."""
    from dp_accounting import NeighboringRelation
    from dp_accounting.rdp import RdpAccountant

    return RdpAccountant(rdp_orders(), NeighboringRelation.REPLACE_ONE)


def rdp_orders() -> tuple[float, ...]:
    """The library's default orders, which reach 1024, and 2^11 to 2^20.

    Pure-DP runs want far higher orders than the default; they take the figures to the
    pure-DP limits of the papers.
    """
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    return (*DEFAULT_RDP_ORDERS, *(float(2**k) for k in range(11, 21)))


def _pure_dp_event(epsilon: float) -> RandomizedResponseDpEvent:
    """Binary randomized response with likelihood ratio e^ε (noise p = 2 / (1 + e^ε)): the worst ε-DP run."""
    from dp_accounting import RandomizedResponseDpEvent
    from scipy.special import expit

    return RandomizedResponseDpEvent(noise_parameter=2.0 * float(expit(-epsilon)), num_buckets=2)


def _tnb_mean(shape: float, gamma: float) -> float:
    """E[K] for TNB(η, γ)."""
    return _tnb_mean_at(shape, math.log(gamma))


def _tnb_mean_at(shape: float, log_gamma: float) -> float:
    """E[K] = (1/γ - 1) / ((1 - γ^η)/η) from ln γ (with the η → 0 limit, and 1 at γ = 1), accurate near γ = 1."""
    if log_gamma == 0:
        return 1.0
    denominator = -log_gamma if shape == 0 else -math.expm1(shape * log_gamma) / shape
    return math.expm1(-log_gamma) / denominator


def _tnb_gamma(shape: float, mean: float) -> float:
    """γ with E[K] = ``mean``: ln E[K] falls from about 700 to 0 as ln γ rises from -700 to 0."""
    if mean == 1.0:
        return 1.0
    if shape == 1:
        return 1.0 / mean
    from scipy.optimize import brentq

    log_gamma = brentq(lambda t: math.log(_tnb_mean_at(shape, t) / mean), -700.0, 0.0, xtol=1e-15, maxiter=500)
    return math.exp(log_gamma)
