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

Mean pooling has no such form in a standard class as it stands: none of these
architectures' text classifiers averages the token states over the attention mask
(XLM's ``summary_type = "mean"`` averages the padding too; the masked means of
ModernBERT, EuroBERT and Cohere's classifiers sit on encoders of another
architecture). ``standard_model(model, mean=True)`` builds one anyway, exact to float
rounding, by appending one layer of the same architecture that computes the mean
(``averaging_layer``): its attention's query and key are zero, so every real token
gets the same weight and the first token's context is the masked mean of the values,
``z = W·m``; its output writes ``±S·z`` and a constant pair ``±S·C`` (``C`` far above
any ``|z|``, ``S`` far above any state the residual adds), so both LayerNorms divide by
a constant to float32 rounding and the first token carries ``z`` linearly; its
feed-forward part is zero. The first-token head above then reads ``z + b``. The
constants reach about ``2**50``: such a model is exact in float32 and wrong in half
precision, which is why a mean-pooled release stays a ``PooledClassifier``
(``swagppm.models.pooled``) unless asked. A model that is already standard (a native
head, merged LoRA of one) is returned as it is; so is a pooled one over an encoder not
listed here.
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


def standard_model(model: PreTrainedModel, *, mean: bool = False) -> PreTrainedModel:
    """``model`` as its encoder's standard ``*ForSequenceClassification`` (float32, on the CPU, eval mode) when it is a
    first-token ``PooledClassifier`` over an encoder of ``FIRST_TOKEN_HEADS``, or with ``mean`` a mean-pooled one
    (one averaging layer appended); otherwise ``model`` itself."""
    if not isinstance(model, PooledClassifier) or model.config.pooling not in (("cls", "mean") if mean else ("cls",)):
        return model
    encoder = cast(PreTrainedModel, model.encoder)
    spec = FIRST_TOKEN_HEADS.get(str(encoder.config.model_type))
    if spec is None:
        return model
    weight, bias = model.classifier.weight.detach().float().cpu(), model.classifier.bias.detach().float().cpu()
    state = {f"{spec.prefix}.{name}": value.detach().float().cpu() for name, value in encoder.state_dict().items()
             if not name.startswith("pooler.")}
    layers = int(encoder.config.num_hidden_layers)
    bound = layer_norm_bound(spec.last_norm(encoder))
    if model.config.pooling == "mean":
        averaging = averaging_layer(weight, spec.last_norm(encoder), intermediate=int(encoder.config.intermediate_size))
        if averaging is None:
            return model
        layer, weight, bound = averaging
        state.update({f"{spec.prefix}.encoder.layer.{layers}.{name}": value for name, value in layer.items()})
        layers += 1
    values = {**encoder.config.to_dict(), "num_hidden_layers": layers, "id2label": model.config.id2label,
              "label2id": model.config.label2id, "architectures": [spec.model_class.__name__]}
    standard = spec.model_class(type(encoder.config).from_dict(values))
    state.update(spec.head(weight, bias, bound))
    standard.load_state_dict(state, strict=True)
    return standard.eval()


def averaging_layer(weight: torch.Tensor, norm: nn.LayerNorm, *,
                    intermediate: int) -> tuple[dict[str, torch.Tensor], torch.Tensor, float] | None:
    """One BERT-style layer whose first token's output ``v`` carries ``z = W·m`` (``m`` the masked mean of its input,
    the states ``norm`` wrote) as ``W'·v = z`` to float32 rounding: (its parameters, ``W'``, the bound of ``v``); None
    when the hidden size leaves no room (``2·classes + 2`` dimensions) or the constants would overflow float32."""
    classes, width = weight.shape
    gamma = norm.weight.detach().float().cpu() if norm.weight is not None else torch.ones(width)
    beta = norm.bias.detach().float().cpu() if norm.bias is not None else torch.zeros(width)
    # |m_j| <= LayerNorm's bound; |z_i| <= sqrt(d)·|W_i ⊙ gamma| + |W_i · beta| (a standardised vector has norm sqrt(d))
    z_bound = float(((math.sqrt(width) * (weight * gamma).norm(dim=1) + (weight @ beta).abs()) ** 2).sum().sqrt())
    pad = 2.0 ** math.ceil(math.log2(2.0**12 * max(z_bound, 1.0)))  # |z|²/pad² <= 2**-24: sigma is constant
    scale = 2.0 ** math.ceil(math.log2(2.0**22 * layer_norm_bound(norm)))  # the residual moves z by <= 2**-22
    if 2 * classes + 2 > width or width * (scale * pad) ** 2 > 2.0**120:
        return None
    value, out, out_bias = torch.zeros(width, width), torch.zeros(width, width), torch.zeros(width)
    value[:classes] = weight
    rows = torch.arange(classes)
    out[rows, rows], out[rows + classes, rows] = scale, -scale
    out_bias[2 * classes], out_bias[2 * classes + 1] = scale * pad, -scale * pad
    zero, one = torch.zeros(width), torch.ones(width)
    layer = {"attention.self.query.weight": torch.zeros(width, width), "attention.self.query.bias": zero,
             "attention.self.key.weight": torch.zeros(width, width), "attention.self.key.bias": zero,
             "attention.self.value.weight": value, "attention.self.value.bias": zero,
             "attention.output.dense.weight": out, "attention.output.dense.bias": out_bias,
             "attention.output.LayerNorm.weight": one, "attention.output.LayerNorm.bias": zero,
             "intermediate.dense.weight": torch.zeros(intermediate, width),
             "intermediate.dense.bias": torch.zeros(intermediate),
             "output.dense.weight": torch.zeros(width, intermediate), "output.dense.bias": zero,
             "output.LayerNorm.weight": one, "output.LayerNorm.bias": zero}
    # both LayerNorms divide by sigma = scale·pad·sqrt(2/d), then by ~1: v_(+i) - v_(-i) = z_i·sqrt(2d)/pad
    reads = torch.zeros(classes, width)
    reads[rows, rows], reads[rows, rows + classes] = pad / math.sqrt(2 * width), -pad / math.sqrt(2 * width)
    return {name: tensor.clone() for name, tensor in layer.items()}, reads, math.sqrt(width - 1)


def layer_norm_bound(norm: nn.LayerNorm) -> float:
    """The largest ``|y_j|`` a LayerNorm can output for any input: ``|gamma_j|·sqrt(d-1) + |beta_j|`` (a coordinate
    of a standardised vector of ``d`` numbers lies within ``sqrt(d-1)``; epsilon only shrinks it)."""
    gamma = norm.weight.detach().float().abs() if norm.weight is not None else torch.ones(norm.normalized_shape)
    beta = norm.bias.detach().float().abs() if norm.bias is not None else torch.zeros_like(gamma)
    return float((gamma * math.sqrt(gamma.numel() - 1) + beta).max())
