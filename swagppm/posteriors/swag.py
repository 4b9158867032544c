"""SWAG (Maddox et al., 2019): a Gaussian over the private parameters from the iterates of constant-step SGD.

Exactly METHOD.md's estimator: running mean μ of the snapshots, the diagonal
variance σ² = clamp(mean of (θ_k − μ)², 1e-30), and a deviation matrix D whose
column k is θ_k − μ_k (μ_k = the running mean just after snapshot k). The variance
is accumulated centred (Welford), never as s − μ²: with |θ| ≈ 1 and σ ≈ 1e-4 that
difference cancels to rounding noise in float32. A draw is

    θ = μ + σ ⊙ z₁ / √2 + D z₂ / √(2(K − 1)),

with z₁ ~ N(0, I_P), z₂ ~ N(0, I_K) from the ``Noise`` it is handed and K = the number
of columns kept (at most ``rank``; older columns are overwritten first). D Dᵀ is never
formed. ``swag`` is the paper's procedure; its draws are not draws of the pseudo
posterior (``kinds``), and the ``sgld`` posterior reuses this estimator on a Langevin
chain's snapshots.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from swagppm.posteriors.base import ParameterView, Posterior, PosteriorFit
from swagppm.posteriors.registry import register_posterior
from swagppm.train.rng import Noise


class SWAGPosterior(Posterior):
    """Running SWAG statistics over the parameters of ``view``.

    ``deviations_device="cpu"`` keeps D in host memory (pinned when CUDA is
    available) for models whose (2 + K)·P numbers do not fit on the device. ``kind``
    is "swag", or the name of the posterior whose chain the estimator summarises.
    """

    def __init__(
        self,
        *,
        view: ParameterView,
        rank: int = 20,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        deviations_device: torch.device | str | None = None,
        kind: str = "swag",
    ) -> None:
        if rank < 2:
            raise ValueError(f"rank must be at least 2, got {rank}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"SWAG accumulates in float32 or float64, not {dtype}")
        self.kind, self.view, self.rank, self.dtype = kind, view, rank, dtype
        self.diagnostics: dict[str, float] = {}
        self._device = torch.device(device) if device is not None else None
        self._deviations_device = torch.device(deviations_device) if deviations_device is not None else None
        self._mean: torch.Tensor | None = None
        self._m2: torch.Tensor | None = None  # Σ_k (θ_k − μ_{k−1})(θ_k − μ_k), Welford's centred sum
        self._deviations: torch.Tensor | None = None
        self.num_snapshots = 0
        self._factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None

    # --- collection ------------------------------------------------------------------------

    def collect(self, module: nn.Module) -> None:
        """Add the module's current parameters as one snapshot."""
        theta = self.view.read(module)
        if self._mean is None:
            device = self._device or theta.device
            dev_device = self._deviations_device or device
            size = theta.numel()
            self._mean = torch.zeros(size, dtype=self.dtype, device=device)
            self._m2 = torch.zeros(size, dtype=self.dtype, device=device)
            self._deviations = torch.zeros(
                size, self.rank, dtype=self.dtype, device=dev_device,
                pin_memory=dev_device.type == "cpu" and device.type == "cuda",
            )
        assert self._m2 is not None and self._deviations is not None
        theta = theta.to(device=self._mean.device, dtype=self.dtype)
        n = self.num_snapshots + 1
        before = theta - self._mean
        self._mean.add_(before, alpha=1.0 / n)
        after = theta - self._mean
        self._m2.addcmul_(before, after)
        column = (n - 1) % self.rank
        self._deviations[:, column].copy_(after, non_blocking=True)
        self.num_snapshots = n
        self._factors = None

    # --- the posterior ---------------------------------------------------------------------

    def _require(self, minimum: int = 1) -> None:
        if self.num_snapshots < minimum:
            raise ValueError(
                f"SWAG has {self.num_snapshots} snapshot(s); sampling needs at least {minimum} "
                "(collect one per SWAG epoch: use swag_epochs >= 2)"
            )

    @property
    def num_parameters(self) -> int:
        return self.view.size

    @property
    def num_columns(self) -> int:
        """K: deviation columns kept (min of snapshots and rank)."""
        return min(self.num_snapshots, self.rank)

    @property
    def mean(self) -> torch.Tensor:
        self._require()
        assert self._mean is not None
        return self._mean

    @property
    def centre(self) -> torch.Tensor:
        return self.mean

    @property
    def variance(self) -> torch.Tensor:
        """The diagonal σ² = clamp(mean of (θ_k − μ)², min=1e-30), from the centred (Welford) sum."""
        self._require()
        assert self._m2 is not None
        return (self._m2 / self.num_snapshots).clamp_(min=1e-30)

    @property
    def deviations(self) -> torch.Tensor:
        """D (P × K), columns in snapshot order."""
        self._require()
        assert self._deviations is not None
        return self._deviations[:, self._column_order()]

    def numbers_per_parameter(self) -> float:
        return 2.0 + self.rank

    def _column_order(self) -> list[int]:
        k = self.num_columns
        start = self.num_snapshots % self.rank if self.num_snapshots > self.rank else 0
        return [(start + j) % self.rank for j in range(k)]

    def _sampling_factors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(σ/√2, the K filled columns of D, the buffer position of each chronological column),
        computed once per set of snapshots rather than per draw."""
        if self._factors is None:
            assert self._deviations is not None
            k = self.num_columns
            columns = self._deviations[:, :k]  # a view: columns 0..K-1 are the filled ones
            position = torch.as_tensor(self._column_order(), device=self._deviations.device)
            self._factors = (self.variance.sqrt_().mul_(1.0 / math.sqrt(2.0)), columns, position)
        return self._factors

    def draw(self, noise: Noise) -> torch.Tensor:
        """One flat draw θ (length P, in the accumulation dtype): z₁ first, then z₂ (one value per column, in
        snapshot order), both from ``noise``."""
        self._require(2)
        z1 = noise.normal(self.num_parameters, dtype=self.dtype, device=self.mean.device)
        z2 = noise.normal(self.num_columns, dtype=self.dtype, device=self.mean.device)
        return self.draw_from(z1, z2)

    def draws(self, noise: Noise, count: int) -> torch.Tensor:
        """``count`` draws from one pass over D (one matrix product for all of them, where ``draw`` reads D once per
        draw): the noise is drawn in ``draw``'s order, so the rows equal ``count`` calls of ``draw`` to float
        rounding."""
        self._require(2)
        noises = [(noise.normal(self.num_parameters, dtype=self.dtype, device=self.mean.device),
                   noise.normal(self.num_columns, dtype=self.dtype, device=self.mean.device)) for _ in range(count)]
        scale, columns, position = self._sampling_factors()
        coefficients = torch.empty(self.num_columns, count, dtype=self.dtype, device=columns.device)
        coefficients[position] = torch.stack([z2 for _, z2 in noises], dim=1).to(columns.device)
        low_rank = (columns @ coefficients).T.to(self.mean.device)
        alpha = 1.0 / math.sqrt(2.0 * (self.num_columns - 1))
        z1 = torch.stack([z1 for z1, _ in noises])
        return torch.addcmul(self.mean, scale, z1).add_(low_rank, alpha=alpha)

    def draw_from(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """θ = μ + σ ⊙ z₁ / √2 + D z₂ / √(2(K − 1)) for given standard-normal noise (z₂ in snapshot order)."""
        self._require(2)
        if z1.shape != self.mean.shape or z2.shape != (self.num_columns,):
            raise ValueError(f"noise of shapes {tuple(z1.shape)} and {tuple(z2.shape)}; expected "
                             f"({self.num_parameters},) and ({self.num_columns},)")
        scale, columns, position = self._sampling_factors()
        mean = self.mean
        coefficients = torch.empty(self.num_columns, dtype=self.dtype, device=columns.device)
        coefficients[position] = z2.to(columns.device, self.dtype)
        low_rank = columns @ coefficients
        theta = torch.addcmul(mean, scale, z1.to(mean.device, self.dtype))
        alpha = 1.0 / math.sqrt(2.0 * (self.num_columns - 1))
        return theta.add_(low_rank.to(mean.device, non_blocking=True), alpha=alpha)

    # --- persistence -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        self._require()
        return {"kind": self.kind, "rank": self.rank, "dtype": str(self.dtype).removeprefix("torch."),
                "view": self.view.state_dict(), "num_snapshots": self.num_snapshots, "mean": self._mean,
                "m2": self._m2, "deviations": self._deviations}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore a state, on this posterior's devices when it was built with some, else on the state's."""
        self._device = getattr(self, "_device", None)
        self._deviations_device = getattr(self, "_deviations_device", None)
        device = self._device or state["mean"].device
        dev_device = self._deviations_device or device
        self.rank, self.dtype = int(state["rank"]), getattr(torch, str(state["dtype"]))
        self.kind, self.diagnostics = str(state["kind"]), {}
        self.view = ParameterView.from_state_dict(state["view"])
        self.num_snapshots = int(state["num_snapshots"])
        self._mean = state["mean"].to(device)
        self._m2 = state["m2"].to(device)
        self._deviations = state["deviations"].to(dev_device)
        self._factors = None


@dataclass(kw_only=True)
class SWAGFit(PosteriorFit):
    """SWAG's fit: ``swag_epochs`` of constant-step SGD on the weighted loss (the prior in its gradients), one
    snapshot at the end of each."""

    posterior: SWAGPosterior = field(init=False)

    def __post_init__(self) -> None:
        context = self.context
        config, net = context.config, context.net
        self.epochs = config.swag_epochs
        self.posterior = SWAGPosterior(view=context.view, rank=config.swag_rank,
                                       dtype=getattr(torch, config.swag_dtype), device=net.device,
                                       deviations_device=deviations_device(config, net, context.view.size))

    def optimizer(self) -> torch.optim.Optimizer:
        """Plain SGD at a constant learning rate, no weight decay (the prior comes through the gradients)."""
        from swagppm.train.engine import sgd

        config = self.context.config
        return sgd(self.context.net, lr=config.learning_rates[1], momentum=config.swag_momentum)

    def after_epoch(self, epoch: int) -> None:
        self.posterior.collect(self.context.net.model)

    def finish(self) -> SWAGPosterior:
        return self.posterior


@register_posterior("swag")
def swag_fit(context: Any) -> SWAGFit:
    return SWAGFit(context=context)


def deviations_device(config: Any, net: Any, size: int) -> str | None:
    """Where SWAG's deviation matrix lives: the host ("cpu", pinned) or the posterior's device (None)."""
    choice = config.swag_deviations_device
    if choice != "auto" or net.device.type != "cuda":
        return "cpu" if choice == "cpu" else None
    needed = size * config.swag_rank * torch.finfo(getattr(torch, config.swag_dtype)).bits // 8
    free, _ = torch.cuda.mem_get_info(net.device)
    return "cpu" if needed > free / 2 else None
