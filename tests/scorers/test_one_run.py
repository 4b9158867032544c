"""Tests of ``scorers._one_run``: the one-run test of Steinke, Nasr & Jagielski (2023).

``brute_p_value`` re-implements the p-value by summing the joint probabilities of
every outcome of the two binomials, and ``brute_p_value_delta`` the paper's δ term
by plain loops; golden numbers are worked out in the comments.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scorers import one_run_p_value
from scorers._audit import _sweep
from scorers._one_run import ONE_RUN_FRACTIONS, one_run_epsilon, one_run_guesses


def posterior(epsilon: float, prior: float) -> float:
    """P(right) of a member guess at most, under ε-DP: prior odds times e^ε, as a probability."""
    odds = prior / (1 - prior) * math.exp(epsilon)
    return odds / (1 + odds)


def binomial_pmf(k: int, n: int, p: float) -> float:
    return math.comb(n, k) * p ** k * (1 - p) ** (n - k)


def brute_p_value(member_guesses: int, non_member_guesses: int, correct: int, epsilon: float, prior: float) -> float:
    p, q = posterior(epsilon, prior), posterior(epsilon, 1 - prior)
    return sum(binomial_pmf(x, member_guesses, p) * binomial_pmf(y, non_member_guesses, q)
               for x in range(member_guesses + 1) for y in range(non_member_guesses + 1) if x + y >= correct)


def brute_p_value_delta(guesses: int, correct: int, epsilon: float, delta: float, records: int) -> float:
    p = posterior(epsilon, 0.5)

    def at_least(v: int) -> float:
        return sum(binomial_pmf(x, guesses, p) for x in range(max(v, 0), guesses + 1))

    beta = at_least(correct)
    spread = max([(at_least(correct - i) - beta) / i for i in range(1, correct + 1)], default=0.0)
    return min(1.0, beta + 2 * records * delta * spread)


# --------------------------------------------------------------------------- the p-value


def test_golden_fair_coin_at_epsilon_zero() -> None:
    # 9 or 10 right of 10 fair coins: (C(10, 9) + 1) / 2^10
    assert one_run_p_value(member_guesses=10, non_member_guesses=0, correct=9, epsilon=0.0) == pytest.approx(11 / 1024)


def test_golden_fair_coin_at_ln3() -> None:
    # p = e^ε / (1 + e^ε) = 3/4: P[Bin(10, 3/4) ≥ 9] = 10 (3/4)^9 (1/4) + (3/4)^10 = (3/4)^9 · 13/4
    value = one_run_p_value(member_guesses=6, non_member_guesses=4, correct=9, epsilon=math.log(3))
    assert value == pytest.approx(0.75 ** 9 * 13 / 4, rel=1e-12)


def test_golden_unequal_prior() -> None:
    # prior 0.2, ε = ln 2: a member guess is right with 0.2·2 / (0.4 + 0.8) = 1/3, a non-member guess with 8/9
    # 1 member guess and 1 non-member guess, both right: 1/3 · 8/9 = 8/27
    value = one_run_p_value(member_guesses=1, non_member_guesses=1, correct=2, epsilon=math.log(2), prior=0.2)
    assert value == pytest.approx(8 / 27, rel=1e-12)


@pytest.mark.parametrize(("member_guesses", "non_member_guesses", "correct", "epsilon", "prior"), [
    (12, 7, 15, 0.0, 0.5), (12, 7, 15, 0.7, 0.5), (3, 25, 20, 0.3, 0.17), (25, 3, 20, 1.5, 0.83),
    (0, 30, 28, 2.0, 0.4), (30, 0, 1, 0.1, 0.4), (40, 40, 60, 1.0, 0.3), (5, 5, 0, 3.0, 0.5), (8, 9, 17, 4.0, 0.5),
])
def test_p_value_agrees_with_brute_force(member_guesses: int, non_member_guesses: int, correct: int,
                                         epsilon: float, prior: float) -> None:
    value = one_run_p_value(member_guesses=member_guesses, non_member_guesses=non_member_guesses, correct=correct,
                            epsilon=epsilon, prior=prior)
    assert value == pytest.approx(brute_p_value(member_guesses, non_member_guesses, correct, epsilon, prior),
                                  rel=1e-10, abs=1e-300)


@pytest.mark.parametrize(("guesses", "correct", "epsilon", "delta", "records"), [
    (20, 17, 0.5, 1e-4, 100), (20, 17, 0.5, 0.0, 100), (50, 40, 1.0, 1e-5, 1000), (10, 10, 0.2, 1e-3, 10),
    (30, 12, 0.1, 1e-2, 60),
])
def test_p_value_with_delta_is_the_papers_formula(guesses: int, correct: int, epsilon: float, delta: float,
                                                  records: int) -> None:
    value = one_run_p_value(member_guesses=guesses // 2, non_member_guesses=guesses - guesses // 2, correct=correct,
                            epsilon=epsilon, delta=delta, records=records)
    assert value == pytest.approx(brute_p_value_delta(guesses, correct, epsilon, delta, records), rel=1e-10)


def test_p_value_grows_with_epsilon_and_delta() -> None:
    values = [one_run_p_value(member_guesses=30, non_member_guesses=10, correct=33, epsilon=e, prior=0.3)
              for e in (0.0, 0.5, 1.0, 2.0, 4.0)]
    assert values == sorted(values) and values[0] < 1e-3 < values[-1]
    with_delta = [one_run_p_value(member_guesses=20, non_member_guesses=20, correct=33, epsilon=1.0, delta=d,
                                  records=100) for d in (0.0, 1e-4, 1e-3)]
    assert with_delta == sorted(with_delta) and with_delta[0] < with_delta[-1]


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 6, "epsilon": 1.0}, "correct"),
    ({"member_guesses": -1, "non_member_guesses": 2, "correct": 0, "epsilon": 1.0}, "correct"),
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 2, "epsilon": 1.0, "prior": 1.0}, "prior"),
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 2, "epsilon": 1.0, "delta": -0.1}, "delta"),
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 2, "epsilon": 1.0, "delta": 1e-3, "prior": 0.3,
      "records": 10}, "fair coins"),
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 2, "epsilon": 1.0, "delta": 1e-3}, "records"),
    ({"member_guesses": 3, "non_member_guesses": 2, "correct": 2, "epsilon": 1.0, "delta": 1e-3, "records": 4},
     "records"),
])
def test_bad_arguments(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        one_run_p_value(**kwargs)


# --------------------------------------------------------------------------- the ε bound


def test_golden_epsilon_all_guesses_right() -> None:
    # 20 right of 20 fair coins: p^20 ≤ α ⟺ p ≤ α^(1/20), so ε = logit(α^(1/20))
    root = 0.05 ** (1 / 20)
    bound = one_run_epsilon(member_guesses=12, non_member_guesses=8, correct=20, prior=0.5, alpha=0.05)
    assert bound == pytest.approx(math.log(root / (1 - root)), abs=1e-9)
    assert bound == pytest.approx(1.8227, abs=1e-4)


@pytest.mark.parametrize(("member_guesses", "non_member_guesses", "correct", "prior"), [
    (100, 300, 330, 0.25), (500, 500, 800, 0.5), (40, 0, 30, 0.4), (0, 60, 58, 0.6),
])
def test_epsilon_is_where_the_p_value_reaches_alpha(member_guesses: int, non_member_guesses: int, correct: int,
                                                    prior: float) -> None:
    alpha = 0.01
    bound = one_run_epsilon(member_guesses=member_guesses, non_member_guesses=non_member_guesses, correct=correct,
                            prior=prior, alpha=alpha)
    assert bound > 0

    def p(epsilon: float) -> float:
        return brute_p_value(member_guesses, non_member_guesses, correct, epsilon, prior)

    assert p(bound) == pytest.approx(alpha, rel=1e-6)
    assert p(bound - 1e-3) < alpha < p(bound + 1e-3)


def test_epsilon_is_zero_when_nothing_is_rejected() -> None:
    # 6 right of 10 fair coins is no evidence at all
    assert one_run_epsilon(member_guesses=5, non_member_guesses=5, correct=6, prior=0.5, alpha=0.05) == 0.0
    assert one_run_epsilon(member_guesses=0, non_member_guesses=0, correct=0, prior=0.5, alpha=0.05) == 0.0


# --------------------------------------------------------------------------- the guesses


def test_golden_guesses() -> None:
    # sorted: 0.1 M, 0.2 M, 0.3 N, 0.5 M, 0.5 N, 0.7 N, 0.8 N, 0.9 M, 1.0 N, 1.1 N (4 members, 6 non-members)
    sweep = _sweep(np.array([0.1, 0.2, 0.5, 0.9]), np.array([0.3, 0.5, 0.7, 0.8, 1.0, 1.1]))
    # fraction ½: "member" for the 2 lowest (both right), "non-member" for the 3 highest (1.1, 1.0 right; 0.9 wrong)
    assert one_run_guesses(sweep, 0.5) == (2, 3, 4)
    # fraction 1: 4 lowest would cut the tie at 0.5, so 3 (0.1, 0.2 right); 6 highest would cut it too, so 5
    # (0.7, 0.8, 1.0, 1.1 right; 0.9 wrong)
    assert one_run_guesses(sweep, 1.0) == (3, 5, 6)
    # fraction 0.05: ⌊0.2⌋ = 0 and ⌊0.3⌋ = 0 guesses
    assert one_run_guesses(sweep, 0.05) == (0, 0, 0)


def test_guesses_never_overlap_and_never_split_a_tie() -> None:
    rng = np.random.default_rng(4)
    for _ in range(50):
        members, non_members = rng.integers(0, 6, 30).astype(float), rng.integers(1, 7, 45).astype(float)
        sweep = _sweep(members, non_members)
        scores = np.concatenate([members, non_members])
        for fraction in ONE_RUN_FRACTIONS:
            member_guesses, non_member_guesses, correct = one_run_guesses(sweep, fraction)
            assert member_guesses <= math.floor(fraction * 30) and non_member_guesses <= math.floor(fraction * 45)
            low, high = np.sort(scores)[:member_guesses], np.sort(scores)[::-1][:non_member_guesses]
            assert member_guesses == 0 or (scores == low[-1]).sum() == (low == low[-1]).sum()
            assert non_member_guesses == 0 or (scores == high[-1]).sum() == (high == high[-1]).sum()
            assert member_guesses + non_member_guesses <= 75
            right = (members <= (low[-1] if member_guesses else -np.inf)).sum() + (
                non_members >= (high[-1] if non_member_guesses else np.inf)).sum()
            assert correct == right
