"""A fit of explicit parts: ``fit(resources, stage1, params)`` is what a session's fit computes."""

from __future__ import annotations

import pytest

import swagppm
from swagppm import TrialParams
from swagppm.stage1 import compute_or_load

pytestmark = pytest.mark.fits


def test_a_fit_of_explicit_parts_is_the_sessions_fit(config: swagppm.SWAGPPMConfig) -> None:
    with swagppm.Resources(config) as resources:
        stage1 = compute_or_load(resources)
        again = compute_or_load(resources)
        direct = swagppm.fit(resources, stage1, swagppm.TrialParams(c=0.8, ft_epochs=2))
    assert not stage1.cached and again.cached
    assert direct.posterior is not None and direct.weights.shape == (direct.result.num_train,)
    result = direct.result
    assert result.failure is None and not result.stage1_cache_hit and result.seed == config.seed
    assert set(result.timings) == {"finetune", "swag", "privacy", "utility", "total"}
    through_a_session = swagppm.run_fit(config, TrialParams(c=0.8, ft_epochs=2))
    assert through_a_session.stage1_cache_hit
    assert result.max_delta == through_a_session.max_delta and result.epsilon == through_a_session.epsilon
    assert result.f1_macro == through_a_session.f1_macro
    assert result.stage1_fingerprint == through_a_session.stage1_fingerprint == stage1.fingerprint
