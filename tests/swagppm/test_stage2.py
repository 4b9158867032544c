"""A fit of explicit parts: ``fit(resources, stage1, params)`` is what a session's fit computes."""

from __future__ import annotations

import pytest

import swagppm
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
    through_a_session = swagppm.run_fit(config, c=0.8, ft_epochs=2)
    assert through_a_session.stage1_cache_hit
    assert result.max_delta == through_a_session.max_delta and result.epsilon == through_a_session.epsilon
    assert result.f1_macro == through_a_session.f1_macro
    assert result.stage1_fingerprint == through_a_session.stage1_fingerprint == stage1.fingerprint


def test_the_draws_callback_sees_the_running_epsilon_and_stops_the_privacy_draws(
        config: swagppm.SWAGPPMConfig) -> None:
    """The running ε after d draws is 2·max of the full fit's first d draw maxima; a stop keeps those draws, ε is
    their lower bound and the utility draws are skipped; a callback that never stops changes nothing."""
    seen: list[tuple[int, float]] = []

    def watch(draws: int, epsilon: float) -> bool:
        seen.append((draws, epsilon))
        return False

    with swagppm.Session(config) as session:
        full = session.fit(c=0.8, ft_epochs=1, on_draws=watch).result
        cut = session.fit(c=0.8, ft_epochs=1, on_draws=lambda draws, epsilon: draws == 3).result
    plain = swagppm.run_fit(config, c=0.8, ft_epochs=1)
    assert full.max_delta == plain.max_delta and full.epsilon == plain.epsilon and full.f1_macro == plain.f1_macro
    assert seen == [(d, 2 * max(full.max_delta[:d])) for d in range(1, config.draws_privacy + 1)]
    assert cut.max_delta == full.max_delta[:3] and cut.epsilon == seen[2][1]
    assert cut.epsilon_is_lower_bound and cut.draws_skipped == config.draws_privacy - 3 and cut.f1_macro == []
