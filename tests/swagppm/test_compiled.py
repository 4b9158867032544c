"""The process's compiled forward passes, checked on the CPU with the ``aot_eager`` backend (Dynamo's tracing and
AOTAutograd without code generation): one compilation per model shape and mode, the eager model's numbers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import transformers

import swagppm
from swagppm.train import compiled
from swagppm.train.engine import Net, Split, fused_forward

pytestmark = pytest.mark.slow  # Dynamo traces a model: tens of seconds on a busy CPU


def _model(seed: int) -> transformers.RobertaForSequenceClassification:
    config = transformers.RobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                                        pad_token_id=1)
    torch.manual_seed(seed)
    return transformers.RobertaForSequenceClassification(config)


def _split(records: int, generator: torch.Generator) -> Split:
    lengths = torch.randint(3, 20, (records,), generator=generator).numpy()
    ids = torch.randint(5, 300, (records, int(lengths.max())), generator=generator)
    return Split(ids, np.arange(records) % 3, lengths, torch.device("cpu"))


def test_models_of_one_shape_share_one_compilation_and_give_the_eager_numbers() -> None:
    """Two models, batches of several widths: one more compilation for evaluation, one for training; the screened
    NLLs, the training loss and every gradient equal the eager model's (the same dropout draws included)."""
    before = compiled.compilations()
    first, second = _model(0).eval(), _model(1).eval()
    split = _split(40, torch.Generator().manual_seed(0))
    for model in (first, second):
        eager = Net(model, None, device=torch.device("cpu"), amp=False)
        fast = Net(model, None, device=torch.device("cpu"), amp=False, compile_eval=True, backend="aot_eager")
        torch.testing.assert_close(fast.per_record_nll(split, 16), eager.per_record_nll(split, 16), rtol=0, atol=0)
    assert compiled.compilations() == before + 1

    model = first.train()
    net = Net(model, None, device=torch.device("cpu"), amp=False, graphs=True, compile_train=True,
              backend="aot_eager")
    inputs, labels, _ = split.batch(np.arange(8))
    losses, grads = [], []
    for forward in (fused_forward(net), lambda ids, mask: model(input_ids=ids, attention_mask=mask).logits):
        torch.manual_seed(7)
        loss = torch.nn.functional.cross_entropy(forward(inputs["input_ids"], inputs["attention_mask"]), labels)
        model.zero_grad(set_to_none=True)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
    torch.testing.assert_close(losses[0], losses[1], rtol=0, atol=0)
    assert len(grads[0]) == len(grads[1]) > 0
    for fused, plain in zip(*grads, strict=True):
        torch.testing.assert_close(fused, plain, rtol=1e-6, atol=1e-7)
    assert compiled.compilations() == before + 2


def test_compiling_stays_off_on_a_cpu(tmp_path: Path) -> None:
    from tests.swagppm.helpers import small_config

    config = small_config(tmp_path / "cache")
    assert config.compile_eval and config.compile_train  # on by default, for CUDA
    with swagppm.Resources(config) as resources:
        assert resources.net._evaluator is None and not resources.net.compile_train
