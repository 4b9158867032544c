"""Model FLOPs of a transformer classifier's passes: its non-embedding matrix multiplies over the real tokens.

MFU divides these by the seconds and the GPU's peak. An embedding is a lookup, not a
matrix multiply, and padding is work no model needs, so neither counts: a forward
pass over records of lengths ``s_r`` costs

    2·P_token·Σ s_r + 2·P_head·R + 4·L·d·Σ s_r²

where P_token counts the weights of the linear layers applied to every token (the
attention projections and the feed-forward layers), P_head those of the
classification head (applied once per record), L the layers and d the hidden size
(the last term: QKᵀ and the attention-weighted sum of V). A training step is three
forward passes' worth (the backward pass is two).
"""

from __future__ import annotations

import numpy as np
from torch import nn

HEAD_MODULES = ("classifier", "pre_classifier", "score")  # Hugging Face's per-record heads


def linear_weights(model: nn.Module) -> tuple[int, int]:
    """(weights of the linear layers applied to every token, weights of those of the per-record head)."""
    per_token = per_record = 0
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            if name.split(".")[0] in HEAD_MODULES:
                per_record += module.weight.numel()
            else:
                per_token += module.weight.numel()
    return per_token, per_record


def forward_flops(model: nn.Module, lengths: np.ndarray) -> int:
    """Matrix-multiply FLOPs of one forward pass of a Hugging Face encoder classifier over records of ``lengths``."""
    per_token, per_record = linear_weights(model)
    config = model.config  # type: ignore[union-attr]
    tokens = lengths.astype(np.int64)
    attention = 4 * int(config.num_hidden_layers) * int(config.hidden_size) * int((tokens**2).sum())
    return 2 * per_token * int(tokens.sum()) + 2 * per_record * len(tokens) + attention


def training_flops(model: nn.Module, lengths: np.ndarray) -> int:
    """FLOPs of one training epoch over records of ``lengths``: three forward passes' worth."""
    return 3 * forward_flops(model, lengths)
