"""A fit of explicit parts: ``fit(resources, stage1, params)`` is what a session's fit computes."""

from __future__ import annotations

import typing
from collections.abc import Callable

import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.config import StepScale
from swagppm.stage1 import compute_or_load
from swagppm.train.finetune import STEP_SCALES, step_scale

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


def _moved(session: swagppm.Session, c: float) -> float:
    """How far stage 2's SWAG mean lies from the parameters it starts from, after a fit at ``c`` (g = 0)."""
    session.fit(TrialParams(c=c, ft_epochs=2))
    start, end = session.bundle.initial_state, session.bundle.trainable_state()
    return float(torch.cat([(end[name] - start[name]).flatten() for name in sorted(start)]).norm())


def test_the_stage2_step_follows_c_and_without_the_step_scale_adamw_ignores_it(
        make_config: Callable[..., swagppm.SWAGPPMConfig]) -> None:
    """Issue 40.4: AdamW is invariant to a constant factor on the loss, so unscaled it trains the same model at
    c = 0.02 as at c = 1 while ε shrinks 50×; the default scales its step by the largest weight (c here)."""
    config = make_config()
    assert config.stage2_step_scale == "largest_weight"
    with swagppm.Session(config) as session:
        small, large = _moved(session, 0.02), _moved(session, 1.0)
        session.config = config.replace(stage2_step_scale="none")
        small_unscaled, large_unscaled = _moved(session, 0.02), _moved(session, 1.0)
    assert small < 0.2 * large  # the model follows c
    assert large_unscaled == pytest.approx(large, rel=1e-6)  # largest weight 1: the step scale changes nothing
    assert small_unscaled > 0.5 * large_unscaled  # unscaled: nearly the same model whatever c


def test_step_scales_cover_the_settings_choices_and_leave_stage1_alone(
        make_config: Callable[..., swagppm.SWAGPPMConfig]) -> None:
    config = make_config()
    assert set(STEP_SCALES) == set(typing.get_args(StepScale))
    weights = torch.tensor([0.004, 0.02, 0.0])
    assert step_scale(config, None) == 1.0  # stage 1: the plain loss
    assert step_scale(config, weights) == pytest.approx(0.02)
    assert step_scale(config.replace(stage2_step_scale="none"), weights) == 1.0
def test_the_draws_callback_sees_the_running_epsilon_and_stops_the_privacy_draws(
        config: swagppm.SWAGPPMConfig) -> None:
    """The running ε after d draws is 2·max of the full fit's first d draw maxima; a stop keeps those draws, ε is
    their lower bound and the utility draws are skipped; a callback that never stops changes nothing."""
    seen: list[tuple[int, float]] = []

    def watch(draws: int, epsilon: float) -> bool:
        seen.append((draws, epsilon))
        return False

    with swagppm.Session(config) as session:
        full = session.fit(TrialParams(c=0.8, ft_epochs=1), on_draws=watch).result
        cut = session.fit(TrialParams(c=0.8, ft_epochs=1), on_draws=lambda draws, epsilon: draws == 3).result
    plain = swagppm.run_fit(config, TrialParams(c=0.8, ft_epochs=1))
    assert full.max_delta == plain.max_delta and full.epsilon == plain.epsilon and full.f1_macro == plain.f1_macro
    assert seen == [(d, 2 * max(full.max_delta[:d])) for d in range(1, config.draws_privacy + 1)]
    assert cut.max_delta == full.max_delta[:3] and cut.epsilon == seen[2][1]
    assert cut.epsilon_is_lower_bound and cut.draws_skipped == config.draws_privacy - 3 and cut.f1_macro == []
