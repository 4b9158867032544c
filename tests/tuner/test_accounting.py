"""Tuning and selection ε from dp-accounting: golden figures, the papers' pure-DP limits, and the samplers.

The golden values were taken from dp-accounting 0.6.0 with ``rdp_orders()``: a change of library
or of order grid shows up here first.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from importlib.metadata import version

import numpy as np
import pytest
from dp_accounting import NeighboringRelation
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import rdp_privacy_accountant

from tuner.accounting import (
    GeometricStopping,
    TrialCountDistribution,
    _pure_dp_event,
    accounting_versions,
    composed_epsilon,
    rdp_orders,
    selection_epsilon,
    tuning_epsilon,
)
from tuner.tuning import default_delta

SHAPES = (0.0, 0.5, 1.0, 2.0, math.inf)


def _tuning(epsilon: float, shape: float, mean: float, delta: float = 1e-5) -> float:
    return tuning_epsilon(epsilon_per_trial=epsilon, distribution=TrialCountDistribution(shape=shape, mean=mean),
                          delta=delta)


@pytest.mark.parametrize(
    ("epsilon", "shape", "mean", "delta", "golden"),
    [
        (1.0, 1.0, 10.0, 1e-5, 2.999994090378041),  # geometric
        (1.0, 0.5, 10.0, 1e-5, 2.4999942909774653),
        (1.0, 0.0, 10.0, 1e-5, 1.9999943984548318),  # logarithmic
        (1.0, 2.0, 10.0, 1e-5, 3.999993501957121),
        (1.0, math.inf, 10.0, 1e-5, 6.075423639019405),  # Poisson
        (0.3, 1.0, 3.0, 1e-6, 0.8999999860173001),
        (2.0, 0.5, 20.0, 1e-4, 4.999907013675836),
        (0.5, math.inf, 4.0, 1e-5, 1.5842469878098064),
    ],
)
def test_tuning_epsilon_golden(epsilon: float, shape: float, mean: float, delta: float, golden: float) -> None:
    assert _tuning(epsilon, shape, mean, delta) == pytest.approx(golden, rel=1e-6)


@pytest.mark.parametrize(
    ("epsilon", "stop_probability", "delta", "golden"),
    [(0.5, 0.1, 1e-6, 1.50000327882051), (2.0, 0.05, 1e-5, 5.999994699245123)],
)
def test_selection_epsilon_golden(epsilon: float, stop_probability: float, delta: float, golden: float) -> None:
    figure = selection_epsilon(epsilon_per_candidate=epsilon, stop_probability=stop_probability, delta=delta)
    assert figure == pytest.approx(golden, rel=1e-6)
    assert figure == _tuning(epsilon, 1.0, 1 / stop_probability, delta)  # the geometric TNB, mean 1/γ


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 3.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-10, 1e-20])
def test_selection_is_consistent_with_liu_talwar_three_epsilon(epsilon: float, delta: float) -> None:
    for stop_probability in (0.5, 0.1, 0.01):  # never above 3ε, but for the order grid's slack
        figure = selection_epsilon(epsilon_per_candidate=epsilon, stop_probability=stop_probability, delta=delta)
        assert figure <= 3 * epsilon * (1 + 1e-3)
    tight = selection_epsilon(epsilon_per_candidate=epsilon, stop_probability=1e-3, delta=delta)
    assert tight == pytest.approx(3 * epsilon, rel=1e-3)  # reached once ln(1/γ) dwarfs ε


@pytest.mark.parametrize("shape", [0.0, 0.5, 1.0, 2.0])
def test_tuning_is_consistent_with_papernot_steinke_pure_dp_bound(shape: float) -> None:
    for mean in (1.5, 2.0, 5.0, 50.0):  # (2 + η)ε bounds it ...
        assert _tuning(1.0, shape, mean, 1e-10) <= (2 + shape) * (1 + 1e-3)
    assert _tuning(1.0, shape, 1000.0, 1e-10) == pytest.approx(2 + shape, rel=1e-3)  # ... and is reached


def test_the_worst_case_event_is_exactly_epsilon_dp() -> None:
    for epsilon in (0.1, 1.0, 5.0):
        accountant = PLDAccountant(NeighboringRelation.REPLACE_ONE)
        accountant.compose(_pure_dp_event(epsilon))
        assert accountant.get_epsilon(0.0) == pytest.approx(epsilon, abs=1e-3)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.slow
def test_monotone_in_epsilon_and_mean_and_above_one_trial(shape: float) -> None:
    by_epsilon = [_tuning(epsilon, shape, 10.0) for epsilon in (0.1, 0.5, 1.0, 2.0, 5.0)]
    assert by_epsilon == sorted(by_epsilon) and len(set(by_epsilon)) == len(by_epsilon)
    by_mean = [_tuning(1.0, shape, mean) for mean in (1.0, 1.5, 2.0, 10.0, 100.0, 1000.0)]
    assert by_mean == sorted(by_mean)
    assert all(figure > 1.0 for figure in by_mean)  # more than the single trial's ε = 1


@pytest.mark.parametrize(
    ("shape", "mean", "gamma"),
    [(1.0, 10.0, 0.1), (0.5, 10.0, 1 / 16), (2.0, 10.0, (math.sqrt(1.8) - 1) / 2), (0.0, 10.0, 0.02691825960068022),
     (3.0, 1.0, 1.0)],
)
def test_gamma_from_the_mean(shape: float, mean: float, gamma: float) -> None:
    distribution = TrialCountDistribution(shape=shape, mean=mean)
    assert distribution.gamma == pytest.approx(gamma, rel=1e-12)
    assert TrialCountDistribution.from_gamma(shape=shape, gamma=gamma).mean == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize("shape", [0.0, 1e-6, 0.5, 2.0, 7.3])
def test_gamma_agrees_with_the_library_and_it_stays_conservative(shape: float) -> None:
    for mean in (1 + 1e-9, 1.01, 2.0, 10.0, 1e3, 1e9):
        ours = TrialCountDistribution(shape=shape, mean=mean).gamma
        library = rdp_privacy_accountant._gamma_truncated_negative_binomial(shape, mean)
        assert library <= ours <= library * (1 + 1e-8)  # it accounts for a mean at least ours
        assert rdp_privacy_accountant._truncated_negative_binomial_mean(ours, shape) == pytest.approx(mean, rel=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_sample_mean_matches(shape: float) -> None:
    distribution = TrialCountDistribution(shape=shape, mean=10.0)
    rng = np.random.default_rng(7)
    draws = np.array([distribution.sample(rng) for _ in range(40_000)])
    assert draws.mean() == pytest.approx(10.0, rel=0.03)
    assert draws.min() >= (0 if math.isinf(shape) else 1)


@pytest.mark.slow
def test_sample_support() -> None:
    rng = np.random.default_rng(1)
    assert {TrialCountDistribution(shape=2.0, mean=1.0).sample(rng) for _ in range(100)} == {1}
    assert 0 in {TrialCountDistribution(shape=math.inf, mean=1.0).sample(rng) for _ in range(100)}  # ⊥ happens
    near_one = [TrialCountDistribution(shape=0.5, mean=1.01).sample(rng) for _ in range(2000)]
    assert min(near_one) == 1 and np.mean(near_one) == pytest.approx(1.01, abs=0.01)


def test_geometric_stopping() -> None:
    stopping = GeometricStopping(stop_probability=0.2)
    assert stopping.mean == 5.0
    rng = np.random.default_rng(3)
    rounds = np.array([stopping.sample_rounds(rng) for _ in range(40_000)])
    assert rounds.min() == 1 and rounds.mean() == pytest.approx(5.0, rel=0.03)
    assert GeometricStopping(stop_probability=1.0).sample_rounds(rng) == 1


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TrialCountDistribution(shape=-0.5, mean=10.0), "shape = -0.5"),
        (lambda: TrialCountDistribution(shape=math.nan, mean=10.0), "shape = nan"),
        (lambda: TrialCountDistribution(shape=1.0, mean=0.5), "mean = 0.5"),
        (lambda: TrialCountDistribution(shape=1.0, mean=math.inf), "mean = inf"),
        (lambda: TrialCountDistribution.from_gamma(shape=1.0, gamma=0.0), "gamma = 0.0"),
        (lambda: TrialCountDistribution.from_gamma(shape=1.0, gamma=1.5), "gamma = 1.5"),
        (lambda: TrialCountDistribution.from_gamma(shape=math.inf, gamma=0.5), "Poisson"),
        (lambda: TrialCountDistribution(shape=math.inf, mean=3.0).gamma, "Poisson"),
        (lambda: GeometricStopping(stop_probability=0.0), "stop_probability = 0.0"),
        (lambda: GeometricStopping(stop_probability=1.5), "stop_probability = 1.5"),
        (lambda: _tuning(0.0, 1.0, 10.0), "per-run ε = 0.0"),
        (lambda: _tuning(math.inf, 1.0, 10.0), "per-run ε = inf"),
        (lambda: _tuning(1.0, 1.0, 10.0, delta=0.0), "delta = 0.0"),
        (lambda: selection_epsilon(epsilon_per_candidate=1.0, stop_probability=0.1, delta=1.0), "delta = 1.0"),
    ],
)
def test_bad_values_are_refused(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        build()


def test_accounting_versions() -> None:
    versions = accounting_versions()
    assert versions["dp-accounting"] == version("dp-accounting")
    assert set(versions) == {"dp-accounting", "numpy"}


def test_a_release_selection_is_priced_by_the_library_at_the_fits_epsilon() -> None:
    from tuner.tuning import private_selection, with_selection_cost

    selection = private_selection(source="private-test", threshold=0.4, metric="f1_weighted", stop_probability=0.25)
    assert selection.rounds >= 1 and (selection.threshold, selection.metric) == (0.4, "f1_weighted")
    priced = with_selection_cost(selection, epsilon_per_draw=1.5, delta=1e-3)
    assert priced.rounds == selection.rounds and priced.cost["epsilon_per_draw"] == 1.5
    assert priced.cost["epsilon"] == selection_epsilon(epsilon_per_candidate=1.5, stop_probability=0.25, delta=1e-3)
    assert priced.cost["accountant"].startswith(f"dp-accounting {version('dp-accounting')}")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.slow
def test_tuning_and_release_compose_in_one_accountant(shape: float) -> None:
    from dp_accounting import RandomizedResponseDpEvent
    from dp_accounting.dp_event import RepeatAndSelectDpEvent
    from dp_accounting.rdp import RdpAccountant

    epsilon, delta, trials = 0.5, 1e-8, TrialCountDistribution(shape=shape, mean=10.0)
    run = RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2)
    for release, event in ((None, run), (GeometricStopping(stop_probability=0.1),
                                         RepeatAndSelectDpEvent(event=run, mean=10.0, shape=1.0))):
        accountant = RdpAccountant(rdp_orders(), NeighboringRelation.REPLACE_ONE)
        accountant.compose(RepeatAndSelectDpEvent(event=run, mean=10.0, shape=shape))
        accountant.compose(event)
        total = composed_epsilon(epsilon_per_run=epsilon, trials=trials, release=release, delta=delta)
        assert total == pytest.approx(accountant.get_epsilon(delta), rel=1e-12)
        tuning = tuning_epsilon(epsilon_per_trial=epsilon, distribution=trials, delta=delta)
        alone = epsilon if release is None else selection_epsilon(epsilon_per_candidate=epsilon,
                                                                  stop_probability=0.1, delta=delta)
        assert max(tuning, alone) < total <= tuning + alone + 1e-9  # one accountant: never worse than the sum


@pytest.mark.parametrize(("records", "delta"), [(1, 1e-6), (500, 1e-6), (1_000, 1e-6), (1_001, 1e-9), (5_346, 1e-9),
                                                (31_622, 1e-9), (31_623, 1e-12), (1_000_000, 1e-12),
                                                (1_000_001, 1e-15)])
def test_the_default_delta_is_a_coarse_power_of_ten_at_most_one_over_n_squared(records: int, delta: float) -> None:
    """A published δ tells the record count only to within a factor of about 30, never the count itself."""
    assert default_delta(records) == delta and delta * records**2 <= 1.0
