"""Partial fine-tuning on cached layer-boundary states: the same logits, frozen layers public, a loadable release."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification

import swagppm
from swagppm import TrialParams
from swagppm.models.partial import HiddenSplit
from swagppm.provenance import tensor_digest
from swagppm.train.engine import Net
from tests.swagppm.helpers import release_now

pytestmark = pytest.mark.fits

MakeConfig = Callable[..., swagppm.SWAGPPMConfig]


@pytest.fixture
def partial_config(local_pretrained: Path, make_config: MakeConfig) -> swagppm.SWAGPPMConfig:
    return make_config(model={"name_or_path": str(local_pretrained), "trainable": "last_n_layers", "n_layers": 1},
                       finetune_lr=1e-3, swag_lr=0.01)


def test_cached_path_gives_the_full_models_logits(partial_config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    with swagppm.Session(partial_config) as session:
        assert isinstance(session.train, HiddenSplit) and session.bundle.cached_layers == 1
        assert list((tmp_path / "cache").glob("hidden-*.pt"))
        full = Net(session.bundle.model, None, device=session.device, amp=False)
        session.bundle.model.eval()
        index = np.arange(0, len(session.train), 7)
        with torch.no_grad():
            cached = session.net.logits(session.train.batch(index)[0])
            direct = full.logits(session.tokens[0].batch(index)[0])
        torch.testing.assert_close(cached, direct, rtol=1e-5, atol=1e-5)


def test_a_fit_trains_only_the_top_and_keeps_the_rest_public(partial_config: swagppm.SWAGPPMConfig,
                                                             tmp_path: Path) -> None:
    with swagppm.Session(partial_config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=2))
        assert fit.result.failure is None and np.isfinite(fit.result.epsilon)
        private = set(session.bundle.private_parameters)
        assert any(".layer.1." in n for n in private) and not any(".layer.0." in n for n in private)
        for name, parameter in session.bundle.model.named_parameters():
            if name not in private:
                assert tensor_digest(parameter) == session.bundle.public_digests[name], name
        out = release_now(session, fit, tmp_path / "released", epsilon_cap=1e6)
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.num_labels == fit.result.num_classes


def test_lora_trains_adapters_only_and_releases_a_merged_model(local_pretrained: Path, make_config: MakeConfig,
                                                               tmp_path: Path) -> None:
    config = make_config(model={"name_or_path": str(local_pretrained), "trainable": "lora", "lora_rank": 2,
                                "lora_targets": ["query", "value"]})
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=2))
        assert fit.result.failure is None and np.isfinite(fit.result.epsilon)
        private = session.bundle.private_parameters
        assert private and all("lora_" in n or "classifier" in n for n in private)
        for name, parameter in session.bundle.model.named_parameters():
            if name not in private:
                assert tensor_digest(parameter) == session.bundle.public_digests[name], name
        out = release_now(session, fit, tmp_path / "released", epsilon_cap=1e6)
        assert not any("lora_" in n for n, _ in session.bundle.model.named_parameters() if n not in private)
    model, info = AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert not info["missing_keys"] and not any("lora" in n for n, _ in model.named_parameters())
    public = AutoModelForSequenceClassification.from_pretrained(local_pretrained, num_labels=fit.result.num_classes)
    released, original = model.state_dict(), public.state_dict()
    query, dense = "bert.encoder.layer.0.attention.self.query.weight", "bert.encoder.layer.0.output.dense.weight"
    assert not torch.equal(released[query], original[query])  # the drawn adapter merged in
    assert torch.equal(released[dense], original[dense])  # no adapter there: the public value


def test_the_packed_top_layer_gives_the_padded_layers_logits_and_gradients(
        partial_config: swagppm.SWAGPPMConfig) -> None:
    """The linear layers on the real tokens only: the same logits and the same gradients as the padded forward, to
    float32 rounding, in training mode without dropout (what stage 2 optimises)."""
    with swagppm.Session(partial_config) as session:
        top = session.bundle.head
        assert top is not None and top.packed
        batch, labels, _ = session.train.batch(np.arange(0, len(session.train), 3))
        assert bool((batch["attention_mask"] == 0).any())  # a padded batch
        session.bundle.model.eval()
        results = []
        for packed in (True, False):
            top.packed = packed
            top.zero_grad()
            logits = top(batch)
            torch.nn.functional.cross_entropy(logits, labels).backward()
            results.append((logits.detach(), [p.grad.clone() for p in top.parameters() if p.grad is not None]))
        torch.testing.assert_close(results[0][0], results[1][0], rtol=1e-5, atol=1e-5)
        for packed_grad, padded_grad in zip(results[0][1], results[1][1], strict=True):
            torch.testing.assert_close(packed_grad, padded_grad, rtol=1e-4, atol=1e-6)
