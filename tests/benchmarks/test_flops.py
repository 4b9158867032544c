"""The MFU's FLOPs: the non-embedding matrix multiplies that torch's own counter sees in a forward pass."""

from __future__ import annotations

import numpy as np
import torch
import transformers
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.gpu.flops import forward_flops, linear_weights, training_flops


def _model() -> transformers.RobertaForSequenceClassification:
    config = transformers.RobertaConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, max_position_embeddings=64, num_labels=3,
                                        pad_token_id=1)
    config._attn_implementation = "eager"  # attention as matrix multiplies torch's counter sees
    torch.manual_seed(0)
    return transformers.RobertaForSequenceClassification(config).eval()


def test_the_forward_flops_are_those_torch_counts_without_the_embeddings() -> None:
    model = _model()
    for length in (7, 20):
        ids = torch.randint(5, 300, (3, length), generator=torch.Generator().manual_seed(length))
        with FlopCounterMode(display=False) as counter, torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        assert forward_flops(model, np.full(3, length)) == counter.get_total_flops()
    per_token, per_record = linear_weights(model)
    assert per_record == 32 * 32 + 32 * 3 and per_token == 2 * (4 * 32 * 32 + 2 * 32 * 64)  # no embedding
    assert training_flops(model, np.array([5, 9])) == 3 * forward_flops(model, np.array([5, 9]))
