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

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, cast

import numpy as np
import torch
from torch import nn
from transformers import PretrainedConfig
from transformers.masking_utils import create_bidirectional_mask

from swagppm.models.pooled import PooledClassifier
from swagppm.progress import steps
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
    the model that is released. Layers shaped like BERT's (query, key and value
    projections, an output projection with its LayerNorm, a feed-forward block: BERT,
    RoBERTa, MiniLM) run their linear layers on the real tokens only, packed, and only
    the attention on the padded batch (``packed_layer``); other layers run as they are.
    """

    def __init__(self, model: PooledClassifier, layers: nn.ModuleList, first: int) -> None:
        super().__init__()
        self.model, self.layers, self.first = model, layers, first
        self.packed = all(packable(layer) for layer in layers[first:])

    @contextmanager
    def padded(self) -> Iterator[None]:
        """Every layer on the padded batch for a block: per-record gradients (Opacus's hooks) need the batch
        dimension first in every linear layer."""
        packed, self.packed = self.packed, False
        try:
            yield
        finally:
            self.packed = packed

    def forward(self, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
        hidden, mask = inputs["hidden"], inputs["attention_mask"]
        config = cast(PretrainedConfig, self.model.encoder.config)
        extended = create_bidirectional_mask(config=config, inputs_embeds=hidden, attention_mask=mask)
        if self.packed:
            return self._packed(hidden, mask, extended)
        for layer in self.layers[self.first:]:
            output = layer(hidden, extended)
            hidden = output[0] if isinstance(output, tuple) else output
        return self.model.classifier(self.model.dropout(self.model.pool(hidden, mask)))

    def _packed(self, hidden: torch.Tensor, mask: torch.Tensor, extended: torch.Tensor | None) -> torch.Tensor:
        """The layers on the real tokens (rows of the flattened batch), then the pooling of those tokens."""
        batch, width, size = hidden.shape
        rows = torch.nonzero(mask.reshape(-1), as_tuple=True)[0]
        tokens = hidden.reshape(-1, size)[rows]
        for layer in self.layers[self.first:]:
            tokens = packed_layer(layer, tokens, rows, batch=batch, width=width, mask=extended)
        if self.model.config.pooling == "cls":
            pooled = tokens[torch.cumsum(mask.sum(1), 0) - mask.sum(1)]  # each record's first token
        else:
            record = torch.div(rows, width, rounding_mode="floor")
            pooled = torch.zeros(batch, size, dtype=tokens.dtype, device=tokens.device).index_add_(0, record, tokens)
            pooled = pooled / mask.sum(1, keepdim=True).to(tokens.dtype).clamp(min=1.0)
        return self.model.classifier(self.model.dropout(pooled))


def packable(layer: nn.Module) -> bool:
    """Whether ``layer`` has BERT's layer structure, so that ``packed_layer`` computes what its forward does."""
    attention = getattr(layer, "attention", None)
    own = getattr(attention, "self", None)
    return (all(isinstance(getattr(own, name, None), nn.Linear) for name in ("query", "key", "value"))
            and hasattr(getattr(attention, "output", None), "dense") and hasattr(layer, "intermediate")
            and hasattr(layer, "output") and not getattr(layer, "add_cross_attention", False))


def packed_layer(layer: Any, tokens: torch.Tensor, rows: torch.Tensor, *, batch: int, width: int,
                 mask: torch.Tensor | None) -> torch.Tensor:
    """One BERT-shaped layer on packed tokens ([real tokens, H]; ``rows`` their places in the flattened batch): its
    projections, output block and feed-forward block on the real tokens only, the attention on the padded batch
    through the layer's own attention function, so the result is the layer's forward on the real tokens."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.bert.modeling_bert import eager_attention_forward

    attention = layer.attention
    own = attention.self

    def heads(projection: nn.Module) -> torch.Tensor:
        projected = projection(tokens)
        padded = projected.new_zeros(batch * width, projected.shape[-1]).index_copy_(0, rows, projected)
        return padded.view(batch, width, -1, own.attention_head_size).transpose(1, 2)

    interface = ALL_ATTENTION_FUNCTIONS.get_interface(own.config._attn_implementation, eager_attention_forward)
    context, _ = interface(own, heads(own.query), heads(own.key), heads(own.value), mask,
                           dropout=0.0 if not own.training else own.dropout.p, scaling=own.scaling)
    context = context.reshape(batch * width, -1)[rows]
    attended = attention.output(context, tokens)
    return layer.output(layer.intermediate(attended), attended)


@torch.inference_mode()
def boundary_states(model: PooledClassifier, split: Split, *, first: int, batch_size: int,
                    progress: bool | None = None,
                    label: str = "encoding the records (frozen layers, once)") -> dict[str, torch.Tensor]:
    """The input of layer ``first`` for every real token of every record: {"states": [tokens, H], "lengths": [n]}.

    Computed in eval mode at float32; records are stored back to back in record order; each batch reported as a
    stage named ``label``.
    """
    model.eval()
    assert split.lengths is not None
    lengths = torch.as_tensor(split.lengths)
    starts = torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)[:-1]])
    states: torch.Tensor | None = None
    batches = split.eval_batches(batch_size)
    for inputs, _, idx in steps(batches, label=label, total=len(batches), progress=progress):
        hidden = model.encoder(**inputs, output_hidden_states=True).hidden_states[first].float().cpu()  # type: ignore[arg-type]
        if states is None:
            states = torch.empty(int(lengths.sum()), hidden.shape[-1])
        for row, record in enumerate(idx.cpu().tolist()):
            length = int(lengths[record])
            states[starts[record] : starts[record] + length] = hidden[row, :length]
    assert states is not None
    return {"states": states, "lengths": lengths}
