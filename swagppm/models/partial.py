"""Partial fine-tuning at the cost of its trainable layers (``trainable = "last_n_layers"``, pooled head).

The states that enter the first trainable layer depend only on the frozen, public
lower layers, so they are computed once per record (eval mode, float32) and kept in
the private cache; fine-tuning, SWAG and every posterior draw then run only the top
``n`` layers, the pooling and the classifier (``TopLayers``).

Dropout: the lower layers run once in eval mode, so their activations are never
dropped; the trainable top applies its own dropout in training as usual. (A full
forward in training mode would also drop activations inside the frozen layers.)
Draws and evaluation are in eval mode in both paths, so the cached path's logits
equal the full model's to float32 rounding.

Memory and disk: the states are stored unpadded, one row per real token (float32,
``tokens × hidden`` numbers: about 90 MB per 1,000 records of 60 tokens for a
384-wide model), and read back memory-mapped from the cache file, so a large corpus
costs page cache rather than process memory; batches are padded on the fly to their
own longest record (length-sorted for evaluation).
"""

from __future__ import annotations

from typing import cast

import numpy as np
import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.masking_utils import create_bidirectional_mask

from swagppm.models.pooled import PooledClassifier
from swagppm.train.engine import Split


class HiddenSplit(Split):
    """A split whose inputs are cached layer-boundary states: a flat [tokens, hidden] table and per-record lengths."""

    def __init__(self, states: torch.Tensor, labels: np.ndarray, lengths: np.ndarray, device: torch.device) -> None:
        super().__init__(states, labels, lengths, device)
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        self._starts = torch.as_tensor(starts, dtype=torch.long, device=device)

    @property
    def is_tokens(self) -> bool:
        return False

    def batch(self, index: np.ndarray) -> tuple[object, torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(index, device=self.device)
        width = self.width(index)
        offsets = torch.arange(width, device=self.device)
        mask = offsets[None, :] < self.device_lengths[idx][:, None]
        rows = (self._starts[idx][:, None] + offsets[None, :]).clamp_(max=self.inputs.shape[0] - 1)
        hidden = self.inputs[rows].float() * mask[..., None]
        return {"hidden": hidden, "attention_mask": mask.long()}, self.labels[idx], idx


class TopLayers(nn.Module):
    """The trainable top of a pooled classifier: layers ``first..`` of its encoder, pooling and classifier.

    Shares its parameters with ``model`` (nothing is copied), so training it trains
    the model that is released.
    """

    def __init__(self, model: PooledClassifier, layers: nn.ModuleList, first: int) -> None:
        super().__init__()
        self.model, self.layers, self.first = model, layers, first

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden, mask = inputs["hidden"], inputs["attention_mask"]
        config = cast(PretrainedConfig, self.model.encoder.config)
        extended = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=mask)
        for layer in self.layers[self.first:]:
            output = layer(hidden, extended)
            hidden = output[0] if isinstance(output, tuple) else output
        return self.model.classifier(self.model.dropout(self.model.pool(hidden, mask)))


@torch.inference_mode()
def boundary_states(model: PooledClassifier, split: Split, *, first: int, batch_size: int) -> dict[str, torch.Tensor]:
    """The input of layer ``first`` for every real token of every record: {"states": [tokens, H], "lengths": [n]}.

    Computed in eval mode at float32; records are stored back to back in record order.
    """
    model.eval()
    assert split.lengths is not None
    lengths = torch.as_tensor(split.lengths)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    states: torch.Tensor | None = None
    for inputs, _, idx in split.eval_batches(batch_size):
        hidden = model.encoder(**inputs, output_hidden_states=True).hidden_states[first].float().cpu()  # type: ignore[arg-type]
        if states is None:
            states = torch.empty(int(lengths.sum()), hidden.shape[-1])
        for row, record in enumerate(idx.cpu().tolist()):
            length = int(lengths[record])
            states[starts[record] : starts[record] + length] = hidden[row, :length]
    assert states is not None
    return {"states": states, "lengths": lengths}
