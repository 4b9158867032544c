"""Training steps replayed from CUDA graphs: a whole step (forward, backward, optimiser) per launch.

A transformer step at batch size 8 runs hundreds of small kernels; launched one by one
from Python they cost more than they compute. Here each step is captured once per
padded batch width and replayed: the batch is padded to a bucket of ``BUCKET`` tokens
(the attention mask hides the extra columns) and to ``batch_size`` rows by repeating
its first record with weight 0, so the loss and the gradient are those of the real
rows. Capture needs a few warm-up steps; the parameters and the optimiser state are
restored afterwards, so the training itself starts from where it would have.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch.nn import functional as F

BUCKET = 16  # batch widths are rounded up to a multiple of this: at most max_length / 16 graphs
WARMUP_STEPS = 3  # eager steps on a side stream before a capture (cuBLAS handles, autograd buffers)


def bucket_width(width: int, limit: int) -> int:
    """``width`` rounded up to the next bucket, never past ``limit`` (the split's padded width)."""
    return min(-(-width // BUCKET) * BUCKET, limit)


def widths(lengths: np.ndarray, limit: int) -> list[int]:
    """Every bucket width a batch of these records can need (from the shortest record's to the longest's)."""
    low, high = bucket_width(int(lengths.min()), limit), bucket_width(int(lengths.max()), limit)
    return sorted({bucket_width(w, limit) for w in range(low, high + 1, BUCKET)} | {high})


def padded_rows(rows: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``rows`` padded to ``batch_size`` by repeating its first record, and the mask of the real ones."""
    real = rows.numel()
    padded = torch.cat([rows, rows[:1].expand(batch_size - real)]) if real < batch_size else rows
    valid = torch.arange(batch_size, device=rows.device) < real
    return padded, valid


def masked_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor, real: torch.Tensor, *,
                bound: float | None = None) -> torch.Tensor:
    """Σ_i w_i·min(NLL_i, B) / n_real: ``weighted_nll`` of the real rows when padding rows have weight 0."""
    nll = F.cross_entropy(logits.float(), labels, reduction="none")
    if bound is not None:
        nll = nll.clamp(max=bound)
    return (weights * nll).sum() / real


@dataclass
class _Static:
    """The tensors one captured step reads and writes (fixed addresses for every replay)."""

    ids: torch.Tensor
    mask: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor
    valid: torch.Tensor
    real: torch.Tensor
    positions: torch.Tensor  # 0 .. width-1, for the attention mask
    loss: torch.Tensor | None = None
    correct: torch.Tensor | None = None


class GraphedSteps:
    """One optimiser's training steps on one split of token ids, captured per bucket width and replayed.

    ``forward`` maps (input ids, attention mask) to logits under the caller's
    autocast; ``optimizer`` must be capturable (a tensor learning rate for AdamW,
    so its scheduler can change it between replays). ``inputs`` (padded ids),
    ``lengths`` and ``labels`` are the split's device tensors that batches are cut
    from; the padded width of ``inputs`` caps the buckets. ``nll_bound`` clips each
    record's NLL in the weighted loss (the public B; None: unbounded).
    """

    def __init__(self, *, forward: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 parameters: list[torch.nn.Parameter], optimizer: torch.optim.Optimizer, batch_size: int,
                 inputs: torch.Tensor, lengths: torch.Tensor, labels: torch.Tensor, widths: list[int],
                 nll_bound: float | None = None) -> None:
        self.forward, self.parameters, self.optimizer = forward, parameters, optimizer
        self.nll_bound = nll_bound
        self.inputs, self.lengths, self.labels = inputs, lengths, labels
        self.batch_size, self.device, self.limit = batch_size, inputs.device, int(inputs.shape[1])
        self.graphs: dict[int, tuple[torch.cuda.CUDAGraph, _Static]] = {}
        saved = [p.detach().clone() for p in parameters]
        try:
            for width in widths:
                self.graphs[width] = self._capture(width)
        finally:
            self._restore(saved)

    def _restore(self, saved: list[torch.Tensor]) -> None:
        """The parameters as they were before the warm-up steps, and a fresh optimiser's state."""
        with torch.no_grad():
            for parameter, value in zip(self.parameters, saved):
                parameter.copy_(value)
            for state in self.optimizer.state.values():  # a fresh optimiser's state: zero moments, step 0
                for value in state.values():
                    if isinstance(value, torch.Tensor):
                        value.zero_()

    def _static(self, width: int) -> _Static:
        n, device = self.batch_size, self.device
        return _Static(ids=torch.zeros(n, width, dtype=torch.long, device=device),
                       mask=torch.ones(n, width, dtype=torch.long, device=device),
                       labels=torch.zeros(n, dtype=torch.long, device=device),
                       weights=torch.ones(n, device=device), valid=torch.ones(n, dtype=torch.bool, device=device),
                       real=torch.full((), float(n), device=device),
                       positions=torch.arange(width, device=device))

    def _body(self, static: _Static) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self.forward(static.ids, static.mask)
        loss = masked_loss(logits, static.labels, static.weights, static.real, bound=self.nll_bound)
        loss.backward()
        self.optimizer.step()
        correct = ((logits.detach().argmax(dim=-1) == static.labels) & static.valid).sum()
        return loss.detach(), correct

    def _capture(self, width: int) -> tuple[torch.cuda.CUDAGraph, _Static]:
        static = self._static(width)
        side = torch.cuda.Stream(device=self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(WARMUP_STEPS):
                self.optimizer.zero_grad(set_to_none=True)
                self._body(static)
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        # thread_local: fits side by side (swagppm.side_by_side) may launch work on their own streams meanwhile
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            static.loss, static.correct = self._body(static)
        return graph, static

    def step(self, rows: torch.Tensor, width: int, weights: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Replay one step on ``rows`` (device indices, ``width`` their longest record): (mean loss, correct)."""
        width = bucket_width(width, self.limit)
        graph, static = self.graphs[width]
        padded, valid = padded_rows(rows, self.batch_size)
        static.ids.copy_(self.inputs[padded, :width])
        static.mask.copy_(static.positions[None, :] < self.lengths[padded][:, None])
        static.labels.copy_(self.labels[padded])
        static.valid.copy_(valid)
        static.weights.copy_(valid.float() if weights is None else weights[padded] * valid)
        static.real.fill_(rows.numel())
        graph.replay()
        assert static.loss is not None and static.correct is not None
        return static.loss, static.correct
