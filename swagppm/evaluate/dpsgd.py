"""DP-SGD with Opacus on a configuration's own data and model: the paper's baseline at a similar ε.

``dpsgd_fit`` trains what the configuration's SWAG-PPM fits train, the way they
run it (the resources' ``Net`` on their training split: the head on cached
features with ``trainable = "head"``, the top layers on cached states with a
pooled ``"last_n_layers"``, else the model on tokens, frozen parts frozen and
LoRA adapters trained with ``"lora"``), from the same public starting values,
with per-record gradient clipping, Gaussian noise and Poisson sampling (Opacus).
It reports ε from Opacus's accountant for the steps actually taken, and test-set
utility. The resources are left as they were: parameters back at the values they
held before the fit, gradients, ``requires_grad`` flags and training modes
restored, every Opacus hook and attribute removed.

Reproducibility: Poisson sampling, the gradient noise and dropout come from
generators derived from ``settings.seed`` (``secure_mode=False``), so a run
repeats exactly on the same device, thread count and library versions. That is
right for a comparison and wrong for a release: the model trained here is never
released, and whoever knows the seed can regenerate the noise.

Opacus is an optional dependency (the ``compare`` extra); it is imported when a
fit starts.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from tqdm.auto import tqdm

from swagppm.config import check_choice, check_value
from swagppm.errors import TrainingFailure
from swagppm.evaluate.probes import f1_scores
from swagppm.models.partial import TopLayers
from swagppm.progress import mode, tracker
from swagppm.resources import Resources
from swagppm.train import rng
from swagppm.train.engine import Net, Split

GradSampleMode = Literal["auto", "hooks", "functorch", "ghost"]
Accountant = Literal["rdp", "prv"]

# Attributes Opacus sets on parameters and modules; all are removed after a fit.
_PARAM_ATTRS = ("grad_sample", "_forward_counter", "_current_grad_sample", "_norm_sample", "summed_grad")
_MODULE_ATTRS = ("activations", "max_batch_len", "ft_compute_sample_grad", "autograd_grad_sample_hooks")
# Harmless warnings of per-record gradients: an embedding's integer input has no gradient, and Opacus's
# functorch path asks CPU autocast for that input's integer dtype (and so leaves autocast off).
# σ is searched until ε is within this fraction below the target, or Opacus's absolute 0.01 where that is tighter
# (the absolute 0.01 alone accepts any σ for a target below 0.01: two small targets then got one and the same run).
EPSILON_TOLERANCE = 0.01
_BENIGN_WARNINGS = ("Full backward hook is firing when gradients are computed with respect to module outputs",
                    "In CPU autocast, but the target dtype is not supported")


@dataclass(frozen=True, kw_only=True)
class DPSGDSettings:
    """One DP-SGD run: the privacy target and the paper's recipe (Adam, lr 1e-3, batch 512, 30 epochs).

    ``delta=None`` means 1/n (n training records). ``batch_size`` is the expected
    Poisson batch size, capped at n (a tiny data set then trains on full batches:
    sample rate 1, no amplification by sampling); see ``Plan`` for the sample rate
    and the steps. Adam at a constant learning rate, as in the paper: the noisy
    gradient is averaged over the expected batch size, and Adam, unlike SGD,
    needs no learning rate retuned to its scale.

    ``grad_sample_mode``: "hooks" (Opacus's per-record gradients of Linear,
    LayerNorm and Embedding), "functorch" (every per-record gradient by vmap),
    "ghost" (ghost clipping: per-record gradient norms of Linear and Embedding
    without per-record gradients, two backward passes; LayerNorm through its
    per-record gradients). All three clip exactly alike (the tests check them
    against per-record gradients computed one by one). "auto" is "ghost" unless
    the model ties a trainable parameter across modules (ghost clipping cannot),
    then "hooks": ghost clipping needs far less memory at real sizes (no
    B×vocab×hidden embedding gradients), though on the tiny preset "hooks" is
    faster.

    ``accountant``: Opacus's PRV accountant by default, the tighter one (least
    noise at the target: the strongest baseline); "rdp" is faster to search.
    ``max_physical_batch_size`` splits each Poisson batch into pieces of at most
    that many records (Opacus's ``BatchMemoryManager``): less memory, same result.
    """

    target_epsilon: float
    delta: float | None = None
    batch_size: int = 512
    learning_rate: float = 1e-3
    max_grad_norm: float = 1.0
    epochs: int = 30
    grad_sample_mode: GradSampleMode = "auto"
    accountant: Accountant = "prv"
    max_physical_batch_size: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        eps, delta = self.target_epsilon, self.delta
        check_value(eps > 0 and math.isfinite(eps), "dpsgd.target_epsilon", eps, "positive and finite")
        check_value(delta is None or 0 < delta < 1, "dpsgd.delta", delta, "in (0, 1), or None for 1/n")
        check_value(self.batch_size >= 1, "dpsgd.batch_size", self.batch_size, "at least 1")
        check_value(self.learning_rate > 0, "dpsgd.learning_rate", self.learning_rate, "positive")
        check_value(self.max_grad_norm > 0, "dpsgd.max_grad_norm", self.max_grad_norm, "positive")
        check_value(self.epochs >= 1, "dpsgd.epochs", self.epochs, "at least 1")
        check_choice("dpsgd.grad_sample_mode", self.grad_sample_mode, GradSampleMode)
        check_choice("dpsgd.accountant", self.accountant, Accountant)
        physical = self.max_physical_batch_size
        check_value(physical is None or physical >= 1, "dpsgd.max_physical_batch_size", physical, "at least 1, or None")
        check_value(0 <= self.seed < 2**32, "dpsgd.seed", self.seed, "an integer in [0, 2**32)")


@dataclass(frozen=True, kw_only=True)
class DPSGDResult:
    """The public outcome of one DP-SGD run: its (ε, δ), how it was trained, and test-set F1.

    ``epsilon`` is Opacus's accountant's value for the noise multiplier, sample
    rate and steps actually taken. Class-level aggregates only: nothing is per record.
    """

    epsilon: float
    delta: float
    target_epsilon: float
    noise_multiplier: float
    sample_rate: float
    expected_batch_size: float
    steps: int
    epochs: int
    f1_macro: float
    f1_weighted: float
    f1_top_quartile: float
    f1_bottom_quartile: float
    seconds: float
    accountant: str
    grad_sample_mode: str
    num_train: int
    seed: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class _Private:
    """What Opacus made private: its engine, the hooks on the model, the optimizer, the loss and the sampler."""

    engine: Any
    hooks: Any
    optimizer: Any
    criterion: Callable[[torch.Tensor, torch.Tensor], Any]
    loader: DataLoader
    mode: str


def dpsgd_fit(resources: Resources, settings: DPSGDSettings, *, progress: bool | None = None) -> DPSGDResult:
    """Train the trainable parameters with DP-SGD from their public start; evaluate on the test split.

    Raises ``TrainingFailure`` on a non-finite epoch loss. Afterwards (also on
    failure) the model's parameters hold exactly the values they held before, so
    SWAG-PPM fits and releases on the same resources are unaffected.
    """
    start = time.perf_counter()
    bundle, net, split = resources.bundle, resources.net, resources.train
    plan = Plan.of(len(split), settings)
    model, values = bundle.model, bundle.trainable_state()
    saved = _Snapshot.take(model)
    try:
        bundle.reset()
        freeze_unused(net, split, model)
        model.train(True)  # Opacus records activations only in training mode
        private = make_private(model, settings=settings, plan=plan, device=resources.device)
        with rng.seeded_global_rng(settings.seed, "dpsgd", "dropout", device=resources.device):
            _train(net, split, private, settings=settings, model=model, progress=progress)
        _remove_opacus(model, private)
        steps = sum(count for _, _, count in private.engine.accountant.history)
        epsilon = float(private.engine.get_epsilon(plan.delta))
        utility = f1_scores(net, resources.test, resources.data, batch_size=resources.config.eval_batch_size)
    finally:
        _remove_opacus(model, None)
        bundle.reset(values)
        saved.restore(model)
    return DPSGDResult(
        epsilon=epsilon, delta=plan.delta, target_epsilon=settings.target_epsilon,
        noise_multiplier=plan.noise_multiplier, sample_rate=plan.sample_rate,
        expected_batch_size=plan.n * plan.sample_rate, steps=steps, epochs=settings.epochs, **utility,
        seconds=time.perf_counter() - start, accountant=settings.accountant, grad_sample_mode=private.mode,
        num_train=plan.n, seed=settings.seed)


@dataclass(frozen=True, kw_only=True)
class Plan:
    """Sampling, step count and noise of a run on n records, as Opacus will carry them out.

    The sample rate is Opacus's 1/ceil(n/batch_size) and an epoch is its sampler's
    int(1/sample_rate) steps, which floating point makes ceil(n/batch_size) − 1 for
    some sizes (93, 99, 105, ... batches). σ is Opacus's search at exactly
    ``epochs`` such epochs: ``make_private_with_epsilon`` searches at
    int(epochs/sample_rate) steps instead, which can be one short of the steps its
    own sampler takes (ε would then end above the target).
    """

    n: int
    batch_size: int
    delta: float
    sample_rate: float
    steps_per_epoch: int
    noise_multiplier: float

    @classmethod
    def of(cls, n: int, settings: DPSGDSettings) -> Plan:
        from opacus.accountants.utils import get_noise_multiplier

        batch_size = min(settings.batch_size, n)
        delta = 1.0 / n if settings.delta is None else settings.delta
        sample_rate = 1 / -(-n // batch_size)
        steps_per_epoch = int(1 / sample_rate)
        with warnings.catch_warnings():  # the search tries extreme σ, where RDP's default orders are too few
            warnings.filterwarnings("ignore", message="Optimal order is the largest alpha")
            sigma = get_noise_multiplier(target_epsilon=settings.target_epsilon, target_delta=delta,
                                         sample_rate=sample_rate, steps=settings.epochs * steps_per_epoch,
                                         accountant=settings.accountant,
                                         epsilon_tolerance=min(0.01, settings.target_epsilon * EPSILON_TOLERANCE))
        return cls(n=n, batch_size=batch_size, delta=delta, sample_rate=sample_rate, steps_per_epoch=steps_per_epoch,
                   noise_multiplier=float(sigma))


def resolve_mode(mode: str, model: nn.Module) -> str:
    """"auto" is ghost clipping unless a trainable parameter is shared by two modules (then "hooks")."""
    if mode != "auto":
        return mode
    owners = [id(p) for m in model.modules() for p in m.parameters(recurse=False) if p.requires_grad]
    return "ghost" if len(owners) == len(set(owners)) else "hooks"


def _check_single_paths(model: nn.Module) -> None:
    """Refuse a model in which a trainable module is reachable twice: Opacus would hook it twice.

    (Its per-record gradients would then be counted twice, or ghost clipping would
    fail.) This is why the hooks go on the model itself, never on a head that
    refers back to it, such as the top layers of ``trainable = "last_n_layers"``.
    """
    paths = Counter(id(m) for _, m in model.named_modules(remove_duplicate=False)
                    if any(p.requires_grad for p in m.parameters(recurse=False)))
    if paths and max(paths.values()) > 1:
        raise ValueError("DP-SGD: a trainable module is reachable by two paths in the model; Opacus would hook it "
                         "twice and count its per-record gradients twice")


def make_private(model: nn.Module, *, settings: DPSGDSettings, plan: Plan, device: torch.device) -> _Private:
    """Opacus's private optimizer, per-record hooks on ``model`` (not wrapped) and Poisson sampler of indices.

    The hooks go on the model's trainable modules whichever path runs them (the
    whole model on tokens, or the ``Net``'s head on cached inputs), so the
    ``Net`` trains unchanged; frozen modules get none. The sampler
    draws record indices (the split builds the batches); it and the noise use
    generators derived from ``settings.seed``.
    """
    from opacus import PrivacyEngine

    _check_single_paths(model)
    mode = resolve_mode(settings.grad_sample_mode, model)
    indices = DataLoader(TensorDataset(torch.arange(plan.n)), batch_size=plan.batch_size,
                         generator=rng.generator(settings.seed, "dpsgd", "sampling"))
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        engine = PrivacyEngine(accountant=settings.accountant, secure_mode=False)
    parts = engine.make_private(
        module=model, optimizer=optimizer, criterion=nn.CrossEntropyLoss(), data_loader=indices,
        noise_multiplier=plan.noise_multiplier, max_grad_norm=settings.max_grad_norm, poisson_sampling=True,
        noise_generator=rng.generator(settings.seed, "dpsgd", "noise", device=device), grad_sample_mode=mode,
        wrap_model=False)
    if mode == "ghost":
        hooks, dp_optimizer, criterion, loader = parts
    else:
        (hooks, dp_optimizer, loader), criterion = parts, nn.CrossEntropyLoss()
    if loader.sample_rate != plan.sample_rate or len(loader) != plan.steps_per_epoch:  # the caller removes the hooks
        raise RuntimeError(f"Opacus samples at {loader.sample_rate} for {len(loader)} steps an epoch, not at "
                           f"{plan.sample_rate} for {plan.steps_per_epoch} as planned (an Opacus version change?)")
    return _Private(engine=engine, hooks=hooks, optimizer=dp_optimizer, criterion=criterion, loader=loader, mode=mode)


def freeze_unused(net: Net, split: Split, model: nn.Module) -> int:
    """Freeze (for the fit) trainable parameters the forward never uses; returns how many.

    A pooled model's unused BERT pooler is trainable under ``last_n_layers``:
    it gets no gradient, so Opacus has no per-record gradient for it and fails.
    The probe runs one batch shaped like the first record's but holding no data
    (zeros, attention mask all ones), so no record's values enter it.
    """
    trainable = [p for p in model.parameters() if p.requires_grad]
    model.train(False)  # no dropout: the probe must not draw from the global RNG
    with torch.enable_grad():
        total = net.logits(_blank(split.batch(np.array([0]))[0]), exact=True).float().sum()
        grads = torch.autograd.grad(total, trainable, allow_unused=True)
    unused = [p for p, g in zip(trainable, grads) if g is None]
    for p in unused:
        p.requires_grad_(False)
    return len(unused)


def _blank(inputs: object) -> object:
    """Model inputs of the same shape holding no data: zeros, with every position attended."""
    if isinstance(inputs, dict):
        return {k: torch.ones_like(v) if k == "attention_mask" else torch.zeros_like(v) for k, v in inputs.items()}
    assert isinstance(inputs, torch.Tensor)
    return torch.zeros_like(inputs)


class BroadcastEmbeddings:
    """Expands a trainable embedding's batch-of-one input (BERT's position ids) to the batch's rows.

    BERT looks up position embeddings for ids of shape [1, T] and broadcasts them
    over the batch, so Opacus would see one "sample" and fail (or misattribute
    the per-record gradients). Expanding the ids to [B, T] gives the same
    forward values and a per-record gradient for every row; the ids are also
    made contiguous (BERT's token-type ids are an expanded view, which ghost
    clipping's embedding norms cannot read). Set ``rows`` before each forward.
    """

    def __init__(self, module: nn.Module) -> None:
        self.rows = 1
        self.handles = [m.register_forward_pre_hook(self._expand) for m in module.modules()
                        if isinstance(m, nn.Embedding) and m.weight.requires_grad]

    def _expand(self, _module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        ids = args[0]
        if ids.dim() >= 1 and ids.shape[0] == 1 and self.rows != 1:
            ids = ids.expand(self.rows, *ids.shape[1:])
        return (ids.contiguous(), *args[1:])  # ghost clipping's embedding norms need contiguous ids

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def backward(net: Net, split: Split, private: _Private, index: np.ndarray, expand: BroadcastEmbeddings) -> torch.Tensor:
    """Forward and backward of the records in ``index`` at float32; returns their summed loss (detached).

    Float32 (never autocast) so per-record norms, and so the clipping, are exact; the top layers of cached states
    run padded (Opacus's per-record gradients need the batch first in every linear layer).
    """
    inputs, labels, _ = split.batch(index)
    expand.rows = len(index)
    padded = net.head.padded() if isinstance(net.head, TopLayers) else contextlib.nullcontext()
    with padded:
        loss = private.criterion(net.logits(inputs, exact=True).float(), labels)
    loss.backward()
    return loss.detach() * len(index)


def noise_only_step(private: _Private) -> None:
    """An empty Poisson batch still takes a step of noise alone, as the accountant assumes."""
    for p in private.optimizer.params:
        p.grad = torch.zeros_like(p)
        p.grad_sample = p.new_zeros((0, *p.shape))
    private.optimizer.step()
    private.optimizer.zero_grad(set_to_none=True)


def _train(net: Net, split: Split, private: _Private, *, settings: DPSGDSettings, model: nn.Module,
           progress: bool | None) -> None:
    """``settings.epochs`` passes of Poisson-sampled private steps; raises on a non-finite epoch loss."""
    expand = BroadcastEmbeddings(model)
    epochs = tracker("DP-SGD: epoch", total=settings.epochs, progress=progress, lines_only=True)
    try:
        with warnings.catch_warnings():
            for pattern in _BENIGN_WARNINGS:
                warnings.filterwarnings("ignore", message=pattern)
            for epoch in range(1, settings.epochs + 1):
                desc = f"DP-SGD {epoch}/{settings.epochs}"
                mean_loss = float(_epoch(net, split, private, expand, settings=settings, desc=desc,
                                         progress=progress)) / len(split)
                if not math.isfinite(mean_loss):
                    raise TrainingFailure("DP-SGD", epoch, f"non-finite training loss ({mean_loss})")
                epochs.advance(epoch)
    finally:
        epochs.close()
        expand.remove()


def _epoch(net: Net, split: Split, private: _Private, expand: BroadcastEmbeddings, *, settings: DPSGDSettings,
           desc: str, progress: bool | None) -> torch.Tensor:
    """One pass of the Poisson sampler (each step one logical batch); returns the summed loss (on the device)."""
    loss_sum = torch.zeros((), device=net.device)
    with _physical_batches(private, settings.max_physical_batch_size) as batches:
        for (index,) in tqdm(batches, desc=desc, leave=False, disable=mode(progress) != "bars"):
            if len(index) == 0:
                noise_only_step(private)
                continue
            loss_sum += backward(net, split, private, index.numpy(), expand)
            private.optimizer.step()  # only accumulates until a logical batch's last piece
            private.optimizer.zero_grad(set_to_none=True)
    return loss_sum


@contextlib.contextmanager
def _physical_batches(private: _Private, limit: int | None) -> Iterator[DataLoader]:
    """The Poisson batches, split by Opacus's ``BatchMemoryManager`` when ``limit`` is set."""
    if limit is None:
        yield private.loader
        return
    from opacus.utils.batch_memory_manager import BatchMemoryManager

    with BatchMemoryManager(data_loader=private.loader, max_physical_batch_size=limit,
                            optimizer=private.optimizer) as loader:
        yield loader


def _remove_opacus(model: nn.Module, private: _Private | None) -> None:
    """Remove Opacus's hooks and every attribute it left on parameters and modules (idempotent).

    ``private.hooks.cleanup()`` is Opacus's own way; the sweep after it also
    catches what a failure half-way through ``make_private`` or training left.
    """
    if private is not None:
        private.hooks.cleanup()
    for m in model.modules():
        for handle in m.__dict__.get("autograd_grad_sample_hooks", ()):
            handle.remove()
        for name in _MODULE_ATTRS:
            m.__dict__.pop(name, None)
    for p in model.parameters():
        for name in _PARAM_ATTRS:
            if hasattr(p, name):
                delattr(p, name)
        p.grad = None


@dataclass
class _Snapshot:
    """Every parameter's gradient and ``requires_grad`` flag and every module's training mode, to put back.

    Taking the gradients also clears them, so nothing stale enters the private
    backward passes (and Opacus's in-place zeroing cannot touch the saved ones).
    """

    grads: list[torch.Tensor | None]
    requires_grad: list[bool]
    training: list[bool]

    @classmethod
    def take(cls, model: nn.Module) -> _Snapshot:
        parameters = list(model.parameters())
        snapshot = cls([p.grad for p in parameters], [p.requires_grad for p in parameters],
                       [m.training for m in model.modules()])
        for p in parameters:
            p.grad = None
        return snapshot

    def restore(self, model: nn.Module) -> None:
        for p, grad, flag in zip(model.parameters(), self.grads, self.requires_grad):
            p.requires_grad_(flag)
            p.grad = grad
        for m, flag in zip(model.modules(), self.training):
            m.training = flag
