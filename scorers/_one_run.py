"""The one-run privacy test of Steinke, Nasr & Jagielski (2023), "Privacy auditing with one (1) training run".

The game: every audited record's membership is an independent coin, member
with probability π (the *prior*); the mechanism trains on the members. From the
released model and the records (never from their memberships) an attacker
guesses "member" for some records and "non-member" for others, abstaining on
the rest. If the mechanism is ε-DP, each guess is right with probability at most
its posterior bound, whatever was revealed about the others:

    member guess:      p₊ = π·e^ε / (π·e^ε + 1 − π)
    non-member guess:  p₋ = (1 − π)·e^ε / ((1 − π)·e^ε + π)

(the prior odds times a likelihood ratio of at most e^ε), so the number of right
guesses is stochastically at most Binomial(r₊, p₊) + Binomial(r₋, p₋), independent.
With π = ½ both are e^ε / (1 + e^ε), the paper's Binomial(r, e^ε / (1 + e^ε)).
A count of right guesses that this sum rarely reaches rejects ε; the ε bound is
the largest ε so rejected.

Here the memberships come from a random split of the records into training
(members) and test (non-members) records, so π is the split's member share, and
the guess counts are fractions of the split's sizes. A split of fixed size is
close to independent coins but not the same: at ε = 0 its right guesses vary
less than the null allows, except when every record is guessed and the sides are
equal, where they vary N / (N − 1) times as much (N records), a negligible excess.
A split by time, source or class breaks the assumption.
"""

from __future__ import annotations

import math

import numpy as np

from scorers._audit import _binomial_at_least, _crossing, _special, _Sweep


def _posteriors(epsilon: float, prior: float) -> tuple[float, float]:
    """(p₊, p₋): the most a member guess and a non-member guess can be right under ε-DP (see the module docstring)."""
    log_odds = math.log(prior) - math.log1p(-prior)
    expit = _special().expit
    return float(expit(epsilon + log_odds)), float(expit(epsilon - log_odds))


def _binomial_pmf(values: np.ndarray, trials: int, p: float) -> np.ndarray:
    special = _special()
    return np.exp(special.gammaln(trials + 1) - special.gammaln(values + 1) - special.gammaln(trials - values + 1)
                  + special.xlogy(values, p) + special.xlog1py(trials - values, -p))


def _p_value(member_guesses: int, non_member_guesses: int, correct: int, epsilon: float, prior: float) -> float:
    """P[Binomial(r₊, p₊) + Binomial(r₋, p₋) ≥ correct], summing over the smaller binomial's values."""
    if correct <= 0:
        return 1.0
    p_member, p_non_member = _posteriors(epsilon, prior)
    (large, p_large), (small, p_small) = sorted(
        ((member_guesses, p_member), (non_member_guesses, p_non_member)), key=lambda side: side[0], reverse=True)
    values = np.arange(small + 1)
    at_least = _binomial_at_least(correct - values, large, p_large)
    return float(min(1.0, np.dot(_binomial_pmf(values, small, p_small), at_least)))


def one_run_p_value(*, member_guesses: int, non_member_guesses: int, correct: int, epsilon: float,
                    prior: float = 0.5, delta: float = 0.0, records: int | None = None) -> float:
    """P-value of ``correct`` right guesses under the null "the mechanism is (ε, δ)-DP".

    With δ = 0 it is P[Binomial(r₊, p₊) + Binomial(r₋, p₋) ≥ correct] (module
    docstring), exact. With δ > 0 it is the paper's bound, derived for fair coins
    (``prior`` ½) over ``records`` audited records: with X ~ Binomial(r, e^ε / (1 + e^ε))
    and r = r₊ + r₋, β = P[X ≥ v] and p = β + 2 · records · δ · max over 1 ≤ i ≤ v of
    (P[X ≥ v − i] − β) / i, for v = ``correct``, capped at 1.

    Raises ValueError on negative counts, more right guesses than guesses, a
    ``prior`` outside (0, 1), a ``delta`` outside [0, 1], or δ > 0 without fair
    coins or without ``records`` (at least the guesses).
    """
    guesses = member_guesses + non_member_guesses
    if min(member_guesses, non_member_guesses, correct) < 0 or correct > guesses:
        raise ValueError(f"need 0 <= correct <= guesses, got {correct} right of {member_guesses} member and "
                         f"{non_member_guesses} non-member guesses")
    if not 0.0 < prior < 1.0:
        raise ValueError(f"prior must be in (0, 1), got {prior}")
    if not 0.0 <= delta <= 1.0:
        raise ValueError(f"delta must be in [0, 1], got {delta}")
    if delta == 0.0:
        return _p_value(member_guesses, non_member_guesses, correct, epsilon, prior)
    if prior != 0.5:
        raise ValueError("the delta term of Steinke, Nasr & Jagielski is derived for fair coins: prior must be 0.5")
    if records is None or records < guesses:
        raise ValueError(f"delta > 0 needs records >= the {guesses} guesses, got {records}")
    tail = _binomial_at_least(correct - np.arange(correct + 1), guesses, _posteriors(epsilon, prior)[0])
    beta = float(tail[0])
    spread = max(((tail[1:] - beta) / np.arange(1, correct + 1)).max(initial=0.0), 0.0)
    return min(1.0, beta + 2.0 * records * delta * float(spread))


def one_run_epsilon(*, member_guesses: int, non_member_guesses: int, correct: int, prior: float,
                    alpha: float) -> float:
    """The largest ε (δ = 0) that ``correct`` right guesses reject at level ``alpha``; 0 when none is.

    The p-value grows with ε (both posteriors do), so the rejected ε form an
    interval from 0; its end is found by Brent's method.
    """
    log_alpha = math.log(alpha)

    def excess(epsilon: float) -> float:  # ≤ 0 where rejected; floored so that Brent's method sees finite values
        return math.log(max(_p_value(member_guesses, non_member_guesses, correct, epsilon, prior), 1e-300)) - log_alpha

    if excess(0.0) > 0.0:
        return 0.0
    high = 1.0
    while excess(high) <= 0.0:
        high *= 2.0
    return _crossing(excess, high / 2 if high > 1.0 else 0.0, high)


# Fixed before any audit, never tuned on audited records: a small fraction for a signal in the tails (a few
# memorised records), half for a signal spread over the bulk, all for coarse scores whose ties leave no other cut.
ONE_RUN_FRACTIONS = (0.05, 0.5, 1.0)


def one_run_guesses(sweep: _Sweep, fraction: float) -> tuple[int, int, int]:
    """(r₊, r₋, right guesses) of the rule "member for the ⌊fraction · members⌋ lowest scores, non-member for the
    ⌊fraction · non-members⌋ highest", taking whole tie groups only.

    The rule reads the scores and the split's sizes, never who is a member; a tie
    group that the count would cut is abstained on, so that the choice inside it
    cannot depend on the order in which the records were given.
    """
    m, n = sweep.members, sweep.non_members
    total = np.concatenate([[0], sweep.true_positives + sweep.false_positives])  # records with score ≤ each threshold
    true_positives = np.concatenate([[0], sweep.true_positives])
    false_positives = np.concatenate([[0], sweep.false_positives])
    below = int(np.searchsorted(total, math.floor(fraction * m), side="right")) - 1  # the last whole group that fits
    above = int(np.searchsorted(total, m + n - math.floor(fraction * n), side="left"))  # the first, from the top
    member_guesses, non_member_guesses = int(total[below]), int(m + n - total[above])
    correct = int(true_positives[below]) + int(n - false_positives[above])
    return member_guesses, non_member_guesses, correct
