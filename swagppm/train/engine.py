"""The stateful part: batches on the device, training loops, and sweeps over posterior draws.

Everything per batch stays on the device; the host synchronises once per epoch
(loss and accuracy) and, only when ``stop_above`` or ``on_draw`` is set, once per draw.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, cast

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F
from transformers import PreTrainedTokenizerBase

from swagppm.errors import TrainingFailure
from swagppm.mechanism import weighted_delta, weighted_nll
from swagppm.progress import steps
from swagppm.train.compiled import compiled_logits
from swagppm.train.graphs import GraphedSteps, widths
from swagppm.train.rng import Noise


@dataclass(frozen=True, kw_only=True)
class EpochInfo:
    """What a per-epoch callback sees (aggregates only, never per-record values)."""

    stage: str
    epoch: int
    epochs: int
    mean_loss: float
    train_accuracy: float
    majority_rate: float


EpochCallback = Callable[[EpochInfo], "bool | str | None"]  # True or a reason (str) stops the fit


class Drawable(Protocol):
    """What a sweep draws from (``swagppm.posteriors.base.Posterior``): draws into the model, its centre back."""

    def draw(self, noise: Noise) -> torch.Tensor: ...

    def draws(self, noise: Noise, count: int) -> torch.Tensor: ...

    def load_into(self, module: nn.Module, theta: torch.Tensor) -> None: ...

    def restore_mean(self, module: nn.Module) -> None: ...
DrawCallback = Callable[[int, float], bool]  # (draws done, running max of the draw maxima): True stops the sweep


class Split:
    """One side of the data on the device: padded token ids or cached features, plus labels.

    ``batch`` builds a dynamically padded training batch; ``eval_batches`` are
    length-sorted and built once, then reused by every draw.
    """

    def __init__(
        self, inputs: torch.Tensor, labels: np.ndarray, lengths: np.ndarray | None, device: torch.device
    ) -> None:
        self.inputs = inputs.to(device)
        self.labels = torch.as_tensor(labels, dtype=torch.long, device=device)
        self.lengths = lengths
        self._device_lengths = None if lengths is None else torch.as_tensor(lengths, device=device)
        self.device = device
        self._eval: dict[int, list[tuple[object, torch.Tensor, torch.Tensor]]] = {}

    @classmethod
    def from_texts(
        cls, texts: tuple[str, ...], labels: np.ndarray, tokenizer: PreTrainedTokenizerBase, *, max_length: int,
        device: torch.device,
    ) -> Split:
        ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        lengths = np.asarray([len(x) for x in ids], dtype=np.int64)
        padded = torch.full((len(ids), int(lengths.max())), int(tokenizer.pad_token_id), dtype=torch.long)
        for row, seq in enumerate(ids):
            padded[row, : len(seq)] = torch.as_tensor(seq)
        return cls(padded, labels, lengths, device)

    def __len__(self) -> int:
        return len(self.labels)

    @property
    def is_tokens(self) -> bool:
        return self.lengths is not None

    @property
    def device_lengths(self) -> torch.Tensor:
        """Record lengths on the device (token splits only)."""
        assert self._device_lengths is not None
        return self._device_lengths

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum()) if self.lengths is not None else 0

    def order(self, *, sort: bool) -> np.ndarray:
        """Record indices for evaluation batches: by length (less padding) or in record order."""
        return np.argsort(self.lengths, kind="stable") if sort and self.lengths is not None else np.arange(len(self))

    def width(self, index: np.ndarray) -> int:
        """Token columns of a batch: its longest record (dynamic padding)."""
        assert self.lengths is not None
        return int(self.lengths[index].max())

    def batch(self, index: np.ndarray) -> tuple[object, torch.Tensor, torch.Tensor]:
        """(model inputs, labels, record indices) for the records in ``index``."""
        idx = torch.as_tensor(index, device=self.device)
        if self.lengths is None:
            return self.inputs[idx], self.labels[idx], idx
        width = self.width(index)
        ids = self.inputs[idx, :width]
        mask = torch.arange(width, device=self.device)[None, :] < self.device_lengths[idx][:, None]
        return {"input_ids": ids, "attention_mask": mask.long()}, self.labels[idx], idx

    def eval_batches(self, batch_size: int) -> list[tuple[object, torch.Tensor, torch.Tensor]]:
        if batch_size not in self._eval:
            order = self.order(sort=True)
            self._eval[batch_size] = [self.batch(order[i : i + batch_size]) for i in range(0, len(order), batch_size)]
        return self._eval[batch_size]

    def padded_tokens(self, batch_size: int, *, sort: bool) -> int:
        """Token slots (real + padding) of evaluation batches, length-sorted or in record order."""
        assert self.lengths is not None
        order = self.order(sort=sort)
        return sum(int(self.lengths[order[i : i + batch_size]].max()) * len(order[i : i + batch_size])
                   for i in range(0, len(order), batch_size))


class Net:
    """How logits are computed: the whole model on tokens, or the head alone on cached features.

    With ``amp`` the forward passes run under bf16 autocast (the caller enables it
    on CUDA only); ``exact=True`` runs one at the parameters' own precision
    (float32), which is what ε must be computed at. With ``graphs`` (CUDA only)
    training steps on tokens are replayed from CUDA graphs (``GraphedSteps``), and
    with ``compile_train`` too their forward and backward passes run through
    ``torch.compile`` inside the captured graphs. With ``compile_eval`` the screening
    and prediction passes of a token model run through ``torch.compile``; the exact
    float32 passes stay eager. Both use the process's one compilation per model
    shape (``swagppm.train.compiled``: dynamic shapes, every batch width); ``backend``
    is the compiler's (tests run ``"aot_eager"`` on a CPU).
    """

    def __init__(self, model: nn.Module, head: nn.Module | None, *, device: torch.device, amp: bool,
                 graphs: bool = False, compile_eval: bool = False, compile_train: bool = False,
                 backend: str = "inductor") -> None:
        self.model, self.head, self.device = model, head, device
        self.amp, self.graphs = amp, graphs
        self.compile_train, self.backend = compile_train and head is None, backend
        self._evaluator: Callable[[dict[str, torch.Tensor]], torch.Tensor] | None = None
        if compile_eval and head is None:
            self._evaluator = compiled_logits(model, training=False, backend=backend)

    def on(self, model: nn.Module, head: nn.Module | None) -> Net:
        """A ``Net`` with these settings on another copy of the model (a compiled pass is shared, not recompiled)."""
        return Net(model, head, device=self.device, amp=self.amp, graphs=self.graphs,
                   compile_eval=self._evaluator is not None, compile_train=self.compile_train, backend=self.backend)

    def autocast(self, *, exact: bool = False) -> contextlib.AbstractContextManager:
        # No cast cache: a forward casts each weight once anyway, and CUDA graphs capture these passes.
        if self.amp and not exact:
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def logits(self, inputs: object, *, exact: bool = False, evaluating: bool = False) -> torch.Tensor:
        """Logits of a batch; ``evaluating`` passes go through the compiled model when there is one."""
        with self.autocast(exact=exact):
            if self.head is not None:
                return self.head(inputs)
            if evaluating and not exact and self._evaluator is not None:
                try:
                    return self._evaluator(cast("dict[str, torch.Tensor]", inputs))
                except Exception as error:  # noqa: BLE001 - a model the compiler cannot handle runs eagerly
                    self._evaluator = None
                    first_line = (str(error).splitlines() or [""])[0]
                    warnings.warn(f"torch.compile: the evaluation pass could not be compiled ({type(error).__name__}: "
                                  f"{first_line}); it runs eagerly", RuntimeWarning, stacklevel=2)
            return self.model(**inputs).logits  # type: ignore[arg-type]

    def train(self, mode: bool = True) -> None:
        self.model.train(mode)

    @torch.inference_mode()
    def per_record_nll(self, split: Split, batch_size: int, out: torch.Tensor | None = None, *,
                       progress: bool | None = False, label: str = "records' losses") -> torch.Tensor:
        """NLL_i of every record under the current parameters, in record order (at the screening precision);
        ``progress``: report each batch as a stage (off by default: the privacy draws report per draw)."""
        nll = out if out is not None else torch.empty(len(split), device=self.device)
        batches = split.eval_batches(batch_size)
        for inputs, labels, idx in steps(batches, label=label, total=len(batches), progress=progress):
            nll[idx] = F.cross_entropy(self.logits(inputs, evaluating=True).float(), labels, reduction="none")
        return nll

    @torch.inference_mode()
    def exact_nll(self, split: Split, index: torch.Tensor, batch_size: int) -> torch.Tensor:
        """NLL at float32 of the records in ``index`` (the records a low-precision pass must confirm)."""
        order = index.cpu().numpy()
        parts = []
        for start in range(0, len(order), batch_size):
            inputs, labels, _ = split.batch(order[start : start + batch_size])
            parts.append(F.cross_entropy(self.logits(inputs, exact=True).float(), labels, reduction="none"))
        return torch.cat(parts) if parts else torch.empty(0, device=self.device)

    @torch.inference_mode()
    def predict(self, split: Split, batch_size: int) -> torch.Tensor:
        preds = torch.empty(len(split), dtype=torch.long, device=self.device)
        for inputs, _, idx in split.eval_batches(batch_size):
            preds[idx] = self.logits(inputs, evaluating=True).argmax(dim=-1)
        return preds


@torch.inference_mode()
def pooled_features(model: nn.Module, split: Split, *, batch_size: int, progress: bool | None = None,
                    label: str = "encoding the records (frozen layers, once)") -> torch.Tensor:
    """Frozen-encoder features (the head's input) of every record, computed once at float32, each batch reported as
    a stage named ``label`` (minutes of silence on a large corpus otherwise).

    Never under autocast: the head's NLL, and so ε, must be what the released
    float32 model computes.
    """
    model.eval()
    features = None
    batches = split.eval_batches(batch_size)
    for inputs, _, idx in steps(batches, label=label, total=len(batches), progress=progress):
        batch = model.features(**cast("dict[str, torch.Tensor]", inputs)).float()  # type: ignore[operator]
        if features is None:
            features = torch.empty(len(split), batch.shape[-1], device=split.device)
        features[idx] = batch
    assert features is not None
    return features


def train(
    net: Net,
    split: Split,
    *,
    stage: str,
    epochs: int,
    optimizer: torch.optim.Optimizer,
    batch_size: int,
    generator: torch.Generator,
    weights: torch.Tensor | None = None,
    scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    after_epoch: Callable[[int], None] | None = None,
    on_epoch: EpochCallback | None = None,
    majority_rate: float = 0.0,
    progress: bool | None = False,
    nll_bound: float | None = None,
    graphs: bool = True,
) -> list[EpochInfo]:
    """Run ``epochs`` epochs; ``after_epoch(epoch)`` runs at the end of each (a posterior's snapshot).

    The loss is mean(w_i · min(NLL_i, B)) when ``weights`` are given (not normalised
    by Σw; B the public ``nll_bound``, none by default), else the plain mean NLL.
    ``graphs=False`` keeps every step eager (an optimiser that draws noise cannot be
    captured). Raises ``TrainingFailure`` on a non-finite epoch loss or when
    ``on_epoch`` returns True.
    """
    n = len(split)
    history = []
    net.train(True)
    graphed = graphed_steps(net, split, optimizer, batch_size=batch_size, nll_bound=nll_bound) if graphs else None
    for epoch in range(1, epochs + 1):
        net.train(True)
        order = torch.randperm(n, generator=generator).numpy()
        rows = None if graphed is None else torch.as_tensor(order, device=net.device)  # one copy per epoch
        loss_sum = torch.zeros((), device=net.device)
        correct = torch.zeros((), dtype=torch.long, device=net.device)
        batches = range(0, n, batch_size)
        for start in steps(batches, label=f"{stage} {epoch}/{epochs}", total=len(batches), progress=progress,
                           bars_only=True):  # the epoch's line comes from the caller's on_epoch
            index = order[start : start + batch_size]
            if graphed is None or rows is None:
                loss, batch_correct = eager_step(net, split, index, optimizer, weights, nll_bound)
            else:
                loss, batch_correct = graphed.step(rows[start : start + batch_size], split.width(index), weights)
            if scheduler is not None:
                scheduler.step()
            loss_sum += loss * len(index)
            correct += batch_correct
        if after_epoch is not None:
            after_epoch(epoch)
        info = EpochInfo(stage=stage, epoch=epoch, epochs=epochs, mean_loss=float(loss_sum) / n,
                         train_accuracy=float(correct) / n, majority_rate=majority_rate)
        history.append(info)
        if not math.isfinite(info.mean_loss):
            raise TrainingFailure(stage, epoch, f"non-finite training loss ({info.mean_loss})")
        verdict = on_epoch(info) if on_epoch is not None else None
        if verdict:
            why = verdict if isinstance(verdict, str) else "stopped by the epoch callback"
            raise TrainingFailure(stage, epoch, f"{why} (loss {info.mean_loss:.4g}, "
                                                f"training accuracy {info.train_accuracy:.3f})")
    net.train(False)
    return history


def eager_step(net: Net, split: Split, index: np.ndarray, optimizer: torch.optim.Optimizer,
               weights: torch.Tensor | None, nll_bound: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One training step launched op by op: (mean loss, correct count) of the batch, on the device."""
    inputs, labels, idx = split.batch(index)
    logits = net.logits(inputs)
    loss = F.cross_entropy(logits.float(), labels) if weights is None else \
        weighted_nll(logits, labels, weights[idx], bound=nll_bound)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach(), (logits.detach().argmax(dim=-1) == labels).sum()


def graphed_steps(net: Net, split: Split, optimizer: torch.optim.Optimizer, *, batch_size: int,
                  nll_bound: float | None = None) -> GraphedSteps | None:
    """Captured training steps for a token model on CUDA with ``net.graphs``, else None (eager steps)."""
    if not (net.graphs and net.device.type == "cuda" and net.head is None and split.is_tokens):
        return None
    lengths = split.lengths
    assert lengths is not None
    limit = int(split.inputs.shape[1])

    def capture(forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> GraphedSteps:
        return GraphedSteps(forward=forward, parameters=[p for p in net.model.parameters() if p.requires_grad],
                            optimizer=optimizer, batch_size=batch_size, inputs=split.inputs,
                            lengths=split.device_lengths, labels=split.labels, widths=widths(lengths, limit),
                            nll_bound=nll_bound)

    def eager(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return net.logits({"input_ids": ids, "attention_mask": mask})

    if net.compile_train:
        try:
            return capture(fused_forward(net))
        except Exception as error:  # noqa: BLE001 - any compiler failure: the step is captured uncompiled
            _warn("the compiled training step could not be captured", error, "the step is captured uncompiled")
    try:
        return capture(eager)
    except RuntimeError as error:  # a model whose step cannot be captured still trains, launched op by op
        _warn("the training step could not be captured", error, "training steps run eagerly")
        return None


def fused_forward(net: Net) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The training forward pass through the process's compilation (its backward compiled with it), under the
    net's autocast; dropout draws from torch's own random kernels (``fallback_random``), as the eager step's do."""
    options = {"fallback_random": True} if net.backend == "inductor" else None
    compiled = compiled_logits(net.model, training=True, backend=net.backend, options=options)

    def forward(ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with net.autocast():
            return compiled({"input_ids": ids, "attention_mask": mask})

    return forward


def _warn(what: str, error: BaseException, instead: str) -> None:
    first_line = (str(error).splitlines() or [""])[0]
    warnings.warn(f"CUDA graphs: {what} ({type(error).__name__}: {first_line}); {instead}", RuntimeWarning,
                  stacklevel=3)


def adamw(net: Net, *, lr: float, weight_decay: float, total_steps: int,
          ) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """The fine-tuning optimiser: AdamW with a linear decay to zero, no warm-up.

    Fused on CUDA and on a CPU (one kernel over all parameters: on two CPU cores about
    60 times faster per step than the per-tensor loop on the demo's layer); with CUDA
    graphs also capturable, its learning rate a device tensor that the scheduler
    updates in place between replays.
    """
    params = [p for p in net.model.parameters() if p.requires_grad]
    rate = torch.tensor(lr, device=net.device) if net.graphs else lr
    optimizer = torch.optim.AdamW(params, lr=rate, weight_decay=weight_decay, fused=True, capturable=net.graphs)
    return optimizer, linear_decay(optimizer, max(total_steps, 1))


def linear_decay(optimizer: torch.optim.Optimizer, total_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    """The learning rate times (total − step) / total, down to 0: transformers' linear schedule without warm-up,
    written here because importing that one loads its trainer utilities (and peft with them) on every run."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: max(0.0, (total_steps - step) / total_steps))


def sgd(net: Net, *, lr: float, momentum: float) -> torch.optim.Optimizer:
    """The SWAG optimiser: plain SGD at a constant learning rate, no weight decay (fused on CUDA; a prior comes
    through the gradients, ``Prior.in_gradients``)."""
    params = [p for p in net.model.parameters() if p.requires_grad]
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=0.0, fused=net.device.type == "cuda")


DRAW_CHUNK_BYTES = 256 * 2**20  # draws computed together in one pass over the posterior take at most this memory


def each_draw(posterior: Drawable, noise: Noise, count: int, *, size: int) -> Iterator[torch.Tensor]:
    """``count`` draws of ``size`` parameters one by one, computed in chunks of at most ``DRAW_CHUNK_BYTES`` (one pass
    over a SWAG deviation matrix per chunk, not per draw)."""
    chunk = max(1, min(count, DRAW_CHUNK_BYTES // (4 * max(size, 1))))
    done = 0
    while done < count:
        batch = posterior.draws(noise, min(chunk, count - done))
        done += len(batch)
        yield from batch


@dataclass
class Sweep:
    """What a sweep over draws leaves: per-record maxima (private) and per-draw maxima (public).

    ``confirmed`` counts the records recomputed at float32 over all draws (0 when
    there was no low-precision screening).
    """

    record_max: torch.Tensor
    draw_max: list[float]
    stopped_early: bool
    confirmed: int = 0


@dataclass(kw_only=True)
class ScreenBound:
    """The measured bound on a low-precision (bf16) screen's error, carried across the draws of one sweep.

    ``error`` is the largest |float32 − screened| NLL seen on any record confirmed
    so far. A record is recomputed at float32 when its screened value plus
    ``safety`` × ``error`` × its weight could reach the largest confirmed value; the
    ``top`` highest screened records of every draw are always confirmed, and the
    first draw also confirms ``calibration`` records spread over the screened
    ranks, so the bound is measured below the top as well. The bound only grows:
    a draw whose recomputed records show a larger error widens the band at once
    and recomputes again until no record outside it could reach the maximum.
    """

    safety: float = 2.0
    top: int = 8
    calibration: int = 32
    error: float = 0.0
    confirmed: int = 0
    draws: int = 0

    def __post_init__(self) -> None:
        if not (self.safety >= 1.0 and self.top >= 1 and self.calibration >= 0):
            raise ValueError("ScreenBound needs safety >= 1, top >= 1 and calibration >= 0")


def confirm_maximum(
    screened: torch.Tensor, exact: Callable[[torch.Tensor], torch.Tensor], *, bound: ScreenBound,
    scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """``screened`` with enough records replaced by their exact values that its maximum is the exact one.

    ``exact`` maps record indices to their exact values; ``scale`` (default 1) is
    each record's factor on the NLL error (its privacy weight), so the band of a
    record is ``bound.safety · bound.error · scale_i``. A non-finite screened value
    is always recomputed. Updates ``bound`` (error seen, records confirmed, draws).
    """
    values = screened.clone()
    confirmed = torch.zeros_like(screened, dtype=torch.bool)
    factor = torch.ones_like(screened) if scale is None else scale
    n = screened.numel()

    def confirm(index: torch.Tensor) -> None:
        index = index[~confirmed[index]]
        if not index.numel():
            return
        values[index] = exact(index)
        confirmed[index] = True
        seen = ((values[index] - screened[index]).abs() / factor[index].clamp(min=1e-12))
        bound.error = max(bound.error, float(seen.nan_to_num(nan=math.inf).max()))
        bound.confirmed += int(index.numel())

    order = torch.argsort(screened.nan_to_num(nan=math.inf), descending=True)
    confirm(order[: bound.top])
    if bound.draws == 0 and bound.calibration:
        confirm(order[torch.linspace(0, n - 1, min(bound.calibration, n), device=order.device).long()])
    confirm(torch.nonzero(~torch.isfinite(screened)).squeeze(1))
    while True:
        top = values[confirmed].max()
        reach = screened + bound.safety * bound.error * factor
        chosen = torch.nonzero(~confirmed & ((reach >= top) | ~torch.isfinite(reach))).squeeze(1)
        if not chosen.numel() or not bool(torch.isfinite(top)):
            break
        confirm(chosen)
    bound.draws += 1
    return values


def sweep_draws(
    net: Net,
    split: Split,
    posterior: Drawable,
    *,
    draws: int,
    noise: Noise,
    batch_size: int,
    weights: torch.Tensor | None = None,
    nll_bound: float | None = None,
    stop_above: float | None = None,
    on_draw: DrawCallback | None = None,
    desc: str = "draws",
    progress: bool | None = False,
) -> Sweep:
    """For each draw θ_d: m_d = max_i w_i·min(NLL_i(θ_d), B), and the running max over draws per record.

    With ``weights=None`` this is the risk sweep (r_i = max_d NLL_i). ``nll_bound`` is
    the public B of a bounded likelihood (None: unbounded). Draws come from
    ``posterior.draw(noise)``. Streams in O(n) memory; puts the posterior's centre
    back into the model afterwards. With
    ``stop_above`` it stops after the first draw whose max delta exceeds it;
    ``on_draw(d, running)`` is called after every draw d (1-based) with the running
    max of the draw maxima so far and stops the sweep when it returns True.
    Records of weight 0 contribute exactly 0. Under ``net.amp`` the bf16 pass only
    screens: each draw's maximum is confirmed at float32 (``confirm_maximum`` with
    one ``ScreenBound`` for the whole sweep), so m_d is what the released precision
    gives.
    """
    net.train(False)
    record_max = torch.full((len(split),), -math.inf, device=net.device)
    nll = torch.empty(len(split), device=net.device)
    draw_max: list[torch.Tensor] = []
    stopped = False
    bound = ScreenBound()
    running = -math.inf

    def exact(index: torch.Tensor) -> torch.Tensor:
        values = net.exact_nll(split, index, batch_size)
        if nll_bound is not None:
            values = values.clamp(max=nll_bound)
        return values if weights is None else weighted_delta(values, weights[index])

    size = sum(p.numel() for p in net.model.parameters() if p.requires_grad)
    try:
        for theta in steps(each_draw(posterior, noise, draws, size=size), label=desc, total=draws,
                           progress=progress):
            posterior.load_into(net.model, theta)
            delta = net.per_record_nll(split, batch_size, out=nll)
            if nll_bound is not None:
                delta = delta.clamp(max=nll_bound)
            if weights is not None:
                delta = weighted_delta(delta, weights)
            if net.amp:
                delta = confirm_maximum(delta, exact, bound=bound, scale=weights)
            torch.maximum(record_max, delta, out=record_max)
            draw_max.append(delta.max())
            if on_draw is not None:
                latest = float(draw_max[-1])
                running = latest if math.isnan(latest) or latest > running else running  # a NaN draw sticks
                if on_draw(len(draw_max), running):
                    stopped = True
                    break
            if stop_above is not None and float(draw_max[-1]) > stop_above:
                stopped = True
                break
    finally:
        posterior.restore_mean(net.model)
    return Sweep(record_max, torch.stack(draw_max).double().cpu().tolist(), stopped, confirmed=bound.confirmed)


def predict_draws(
    net: Net, split: Split, posterior: Drawable, *, draws: int, noise: Noise, batch_size: int,
    progress: bool | None = False, desc: str = "utility draws",
) -> Iterator[np.ndarray]:
    """Test-set predictions of each of ``draws`` draws; puts the posterior's centre back afterwards."""
    net.train(False)
    size = sum(p.numel() for p in net.model.parameters() if p.requires_grad)
    try:
        for theta in steps(each_draw(posterior, noise, draws, size=size), label=desc, total=draws,
                           progress=progress):
            posterior.load_into(net.model, theta)
            yield net.predict(split, batch_size).cpu().numpy()
    finally:
        posterior.restore_mean(net.model)
