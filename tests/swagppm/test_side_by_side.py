"""Trials side by side in one process: each fit gives what it gives alone."""

from __future__ import annotations

import pytest

import swagppm
from swagppm.side_by_side import fit_side_by_side, replica, trials_that_fit
from swagppm.stage1 import compute_or_load
from swagppm.stage2 import fit

pytestmark = pytest.mark.fits


def test_fits_side_by_side_give_the_results_of_each_fit_alone(config: swagppm.SWAGPPMConfig) -> None:
    trials = [swagppm.TrialParams(c=0.8, ft_epochs=2), swagppm.TrialParams(c=0.5, ft_epochs=1, seed=3)]
    seen: list[int] = []
    with swagppm.Resources(config) as resources:
        stage1 = compute_or_load(resources)
        alone = [fit(resources, stage1, params).result for params in trials]
        twin = replica(resources)
        assert twin.train is resources.train and twin.data is resources.data
        assert twin.bundle.model is not resources.bundle.model and twin.net.model is twin.bundle.model
        assert trials_that_fit(resources) == 1  # a CPU runs one at a time by default
        together = fit_side_by_side(resources, stage1, trials,
                                    on_draws=[None, lambda draws, epsilon: seen.append(draws) is not None])
    for one, other in zip(alone, together, strict=True):
        assert other.result.max_delta == one.max_delta and other.result.epsilon == one.epsilon
        assert other.result.f1_macro == one.f1_macro and other.result.history == one.history
    assert seen == list(range(1, config.draws_privacy + 1))
    with pytest.raises(ValueError, match="1 on_draws callbacks for 2 trials"):
        fit_side_by_side(resources, stage1, trials, on_draws=[None])
