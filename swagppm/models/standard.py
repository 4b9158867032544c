"""A released classifier as a standard transformers class where its pooling allows (``standard_model``).

A ``PooledClassifier`` with first-token pooling (``"cls"``) over a post-LayerNorm
encoder computes ``W·x + b`` on the first token's state ``x``. The standard
``*ForSequenceClassification`` of the encoder's own architecture puts a small head
between that state and its classifier; set as below, the head computes the same map,
so the release loads with plain ``from_pretrained`` and ``pipeline`` (no remote code):

* BERT (MiniLM and the ``tiny`` preset are BERTs) and RoBERTa put
  ``classifier(tanh(dense(x)))`` there. With ``dense = s·I`` (bias 0) and the
  classifier's weight divided by ``s``, the logits are ``W·tanh(s·x)/s + b``. ``x`` is a
  LayerNorm output, so ``|x_j| <= |gamma_j|·sqrt(d-1) + |beta_j|`` for every input;
  ``s`` is the power of two that keeps ``|s·x_j| <= 2**-12``, where ``tanh(y)`` differs
  from ``y`` by a relative ``y²/3 < 2**-25`` (below float32's rounding), and scaling by
  a power of two is exact. In half precision these scaled values lose digits: the
  release is float32.

Mean pooling has no such form: no standard text-classification class of these
architectures averages the token states over the attention mask (XLM's
``summary_type = "mean"`` averages the padding too; the masked means of ModernBERT,
EuroBERT and Cohere's classifiers sit on encoders of another architecture), so a
mean-pooled release stays a ``PooledClassifier`` (``swagppm.models.pooled``). A model
that is already standard (a native head, merged LoRA of one) is returned as it is; so
is a pooled one over an encoder not listed here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import nn
from transformers import (
    BertForSequenceClassification,
    PreTrainedModel,
    RobertaForSequenceClassification,
)

from swagppm.models.pooled import PooledClassifier

TANH_LINEAR = 2.0**-12  # |y| below this: float32's tanh(y) is y to rounding


@dataclass(frozen=True, kw_only=True)
class FirstTokenHead:
    """How one architecture's standard class reads the first token: its class, the encoder's prefix in it, the
    encoder's last LayerNorm (its output is the first token's state) and the head's weights for ``W·x + b``."""

    model_class: type[PreTrainedModel]
    prefix: str
    last_norm: Callable[[nn.Module], nn.LayerNorm]
    head: Callable[[torch.Tensor, torch.Tensor, float], dict[str, torch.Tensor]]


def _bert_norm(encoder: nn.Module) -> nn.LayerNorm:
    return encoder.encoder.layer[-1].output.LayerNorm  # type: ignore[index, union-attr]


def _tanh_head(dense: str, out: str) -> Callable[[torch.Tensor, torch.Tensor, float], dict[str, torch.Tensor]]:
    """``out(tanh(dense(x))) = W·x + b`` to float32 rounding, for states bounded by ``bound``."""

    def head(weight: torch.Tensor, bias: torch.Tensor, bound: float) -> dict[str, torch.Tensor]:
        scale = 2.0 ** math.floor(math.log2(TANH_LINEAR / max(bound, TANH_LINEAR)))
        width = weight.shape[1]
        return {f"{dense}.weight": scale * torch.eye(width), f"{dense}.bias": torch.zeros(width),
                f"{out}.weight": weight / scale, f"{out}.bias": bias.clone()}

    return head


# The encoders (by model_type) whose first-token pooling has a standard class; one entry per architecture.
FIRST_TOKEN_HEADS: dict[str, FirstTokenHead] = {
    "bert": FirstTokenHead(model_class=BertForSequenceClassification, prefix="bert", last_norm=_bert_norm,
                           head=_tanh_head("bert.pooler.dense", "classifier")),
    "roberta": FirstTokenHead(model_class=RobertaForSequenceClassification, prefix="roberta",
                              last_norm=_bert_norm, head=_tanh_head("classifier.dense", "classifier.out_proj")),
}


def standard_model(model: PreTrainedModel) -> PreTrainedModel:
    """``model`` as its encoder's standard ``*ForSequenceClassification`` (float32, on the CPU, eval mode) when it is a
    first-token ``PooledClassifier`` over an encoder of ``FIRST_TOKEN_HEADS``; otherwise ``model`` itself."""
    if not isinstance(model, PooledClassifier) or model.config.pooling != "cls":
        return model
    encoder = cast(PreTrainedModel, model.encoder)
    spec = FIRST_TOKEN_HEADS.get(str(encoder.config.model_type))
    if spec is None:
        return model
    weight, bias = model.classifier.weight.detach().float().cpu(), model.classifier.bias.detach().float().cpu()
    values = {**encoder.config.to_dict(), "id2label": model.config.id2label, "label2id": model.config.label2id,
              "architectures": [spec.model_class.__name__]}
    config = type(encoder.config).from_dict(values)
    standard = spec.model_class(config)
    state = {f"{spec.prefix}.{name}": value.detach().float().cpu() for name, value in encoder.state_dict().items()
             if not name.startswith("pooler.")}
    state.update(spec.head(weight, bias, layer_norm_bound(spec.last_norm(encoder))))
    standard.load_state_dict(state, strict=True)
    return standard.eval()


def layer_norm_bound(norm: nn.LayerNorm) -> float:
    """The largest ``|y_j|`` a LayerNorm can output for any input: ``|gamma_j|·sqrt(d-1) + |beta_j|`` (a coordinate
    of a standardised vector of ``d`` numbers lies within ``sqrt(d-1)``; epsilon only shrinks it)."""
    gamma = norm.weight.detach().float().abs() if norm.weight is not None else torch.ones(norm.normalized_shape)
    beta = norm.bias.detach().float().abs() if norm.bias is not None else torch.zeros_like(gamma)
    return float((gamma * math.sqrt(gamma.numel() - 1) + beta).max())
