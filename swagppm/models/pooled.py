"""A pretrained encoder with mean (or first-token) pooling and a linear head.

Hugging Face's own sequence-classification heads pool the first token; sentence
encoders such as all-MiniLM-L6-v2 were trained for mean pooling, and a linear
head on their mean-pooled features suits them better. This module is
self-contained (it imports only torch and transformers) because a released model
directory carries a copy of it: ``from_pretrained(dir, trust_remote_code=True)`` loads
it without ``swagppm``, and plain ``AutoModelForSequenceClassification.from_pretrained(dir)``
(or ``pipeline``) loads it once ``register_auto_classes`` has run, which importing
``swagppm.models`` (or any module under it) does. A bare ``import swagppm`` does not:
it loads neither torch nor transformers, so that the command line starts fast.
Releases with first-token pooling over BERT, RoBERTa or DistilBERT are saved as those
architectures' standard classes instead (``swagppm.models.standard``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSequenceClassification, PretrainedConfig, PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput

POOLINGS = ("mean", "cls")


class PooledClassifierConfig(PretrainedConfig):
    """Configuration: the encoder's own config (as a dict), the pooling and the labels."""

    model_type = "swagppm_pooled"

    def __init__(
        self,
        encoder: dict | None = None,
        pooling: str = "mean",
        classifier_dropout: float = 0.0,
        **kwargs: Any,
    ) -> None:
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.encoder = dict(encoder or {})
        self.pooling = pooling
        self.classifier_dropout = classifier_dropout
        super().__init__(**kwargs)

    def encoder_config(self) -> PretrainedConfig:
        """The encoder's configuration object, rebuilt from the stored dict."""
        values = dict(self.encoder)
        return AutoConfig.for_model(values.pop("model_type"), **values)

    @property
    def hidden_size(self) -> int:
        return int(self.encoder["hidden_size"])


class PooledClassifier(PreTrainedModel):
    """Encoder → pooled features → dropout → linear ``classifier``."""

    config_class = PooledClassifierConfig
    base_model_prefix = "encoder"
    main_input_name = "input_ids"
    _keys_to_ignore_on_load_missing = [r"\.pooler\."]  # the encoder's own pooler is never used

    def __init__(self, config: PooledClassifierConfig, encoder: nn.Module | None = None) -> None:
        super().__init__(config)
        self.encoder = encoder if encoder is not None else AutoModel.from_config(config.encoder_config())
        self.dropout = nn.Dropout(config.classifier_dropout)
        assert config.num_labels is not None  # a config always has labels (2 by default)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def _init_weights(self, module: nn.Module) -> None:
        if module is getattr(self, "classifier", None):
            std = float(self.config.encoder.get("initializer_range", 0.02))
            nn.init.normal_(module.weight, mean=0.0, std=std)
            nn.init.zeros_(module.bias)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Pool token states [B, T, H] into [B, H], ignoring padding."""
        if self.config.pooling == "cls":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)

    def features(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """The classifier's input: pooled encoder states."""
        hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.pool(hidden, attention_mask)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **_: object,
    ) -> SequenceClassifierOutput:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        logits = self.classifier(self.dropout(self.features(input_ids, attention_mask)))
        loss = None
        if labels is not None:
            loss = nn.functional.cross_entropy(logits.float(), labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


def register_auto_classes() -> None:
    """Let ``AutoConfig`` and ``AutoModelForSequenceClassification`` (hence ``pipeline``) load a pooled release
    without remote code, in this process."""
    AutoConfig.register(PooledClassifierConfig.model_type, PooledClassifierConfig, exist_ok=True)
    AutoModelForSequenceClassification.register(PooledClassifierConfig, PooledClassifier, exist_ok=True)
