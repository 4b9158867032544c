"""SWAG (Maddox et al., 2019): a Gaussian over a module's trainable parameters.

Exactly METHOD.md's estimator: running mean μ of the snapshots, the diagonal
variance σ² = clamp(mean of (θ_k − μ)², 1e-30), and a deviation matrix D whose
column k is θ_k − μ_k (μ_k = the running mean just after snapshot k). The variance
is accumulated centred (Welford), never as s − μ²: with |θ| ≈ 1 and σ ≈ 1e-4 that
difference cancels to rounding noise in float32. A draw is

    θ = μ + σ ⊙ z₁ / √2 + D z₂ / √(2(K − 1)),

with z₁ ~ N(0, I_P), z₂ ~ N(0, I_K) and K = the number of columns kept (at most
``rank``; older columns are overwritten first). D Dᵀ is never formed.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from swagppm.train.rng import secret_normal


def in_modules(name: str, modules: Sequence[str]) -> bool:
    """Whether parameter ``name`` lies in one of the named submodules (or is one of them)."""
    return any(name == m or name.startswith(m + ".") for m in modules)


class SWAGPosterior:
    """Running SWAG statistics over the trainable parameters of a module.

    The parameter set is fixed at the first ``collect``: every parameter with
    ``requires_grad`` whose name lies under one of ``modules`` (all when ``None``).
    ``deviations_device="cpu"`` keeps D in host memory (pinned when CUDA is
    available) for models whose (2 + K)·P numbers do not fit on the device.
    """

    def __init__(
        self,
        *,
        rank: int = 20,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
        deviations_device: torch.device | str | None = None,
        modules: Sequence[str] | None = None,
    ) -> None:
        if rank < 2:
            raise ValueError(f"rank must be at least 2, got {rank}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError(f"SWAG accumulates in float32 or float64, not {dtype}")
        self.rank = rank
        self.dtype = dtype
        self._device = torch.device(device) if device is not None else None
        self._deviations_device = torch.device(deviations_device) if deviations_device is not None else None
        self.modules = tuple(modules) if modules is not None else None
        self.parameter_names: tuple[str, ...] = ()
        self._shapes: tuple[torch.Size, ...] = ()
        self._mean: torch.Tensor | None = None
        self._m2: torch.Tensor | None = None  # Σ_k (θ_k − μ_{k−1})(θ_k − μ_k), Welford's centred sum
        self._deviations: torch.Tensor | None = None
        self.num_snapshots = 0
        self._factors: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
        self._bound: tuple[weakref.ref[nn.Module], list[torch.Tensor]] | None = None

    # --- collection ------------------------------------------------------------------------

    def _select(self, module: nn.Module) -> list[tuple[str, nn.Parameter]]:
        chosen = []
        for name, parameter in module.named_parameters():
            if not parameter.requires_grad:
                continue
            if self.modules is not None and not in_modules(name, self.modules):
                continue
            chosen.append((name, parameter))
        if not chosen:
            where = f" under {list(self.modules)}" if self.modules is not None else ""
            raise ValueError(f"no trainable parameters{where} to collect")
        return chosen

    def collect(self, module: nn.Module) -> None:
        """Add the module's current parameters as one snapshot."""
        selected = self._select(module)
        names = tuple(name for name, _ in selected)
        with torch.no_grad():
            theta = torch.cat([p.detach().reshape(-1) for _, p in selected])
        if self._mean is None:
            self.parameter_names = names
            self._shapes = tuple(p.shape for _, p in selected)
            device = self._device or theta.device
            dev_device = self._deviations_device or device
            size = theta.numel()
            self._mean = torch.zeros(size, dtype=self.dtype, device=device)
            self._m2 = torch.zeros(size, dtype=self.dtype, device=device)
            self._deviations = torch.zeros(
                size, self.rank, dtype=self.dtype, device=dev_device,
                pin_memory=dev_device.type == "cpu" and device.type == "cuda",
            )
        elif names != self.parameter_names:
            raise ValueError("the module's trainable parameters changed since the first snapshot")
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
        return 0 if self._mean is None else self._mean.numel()

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

    def sample(self, generator: torch.Generator) -> torch.Tensor:
        """One flat draw θ (length P, in the accumulation dtype) from the explicit generator.

        z₁ is drawn first, then z₂ (one value per column, in snapshot order), both on
        the generator's device.
        """
        self._require(2)
        z1 = torch.randn(self.mean.shape, generator=generator, device=generator.device, dtype=self.dtype)
        z2 = torch.randn(self.num_columns, generator=generator, device=generator.device, dtype=self.dtype)
        return self.draw(z1, z2)

    def sample_secret(self) -> torch.Tensor:
        """One draw whose noise comes from fresh OS entropy (``rng.secret_normal``): nothing can regenerate it."""
        return self.draw(secret_normal(self.num_parameters, dtype=self.dtype),
                         secret_normal(self.num_columns, dtype=self.dtype))

    def draw(self, z1: torch.Tensor, z2: torch.Tensor) -> torch.Tensor:
        """θ = μ + σ ⊙ z₁ / √2 + D z₂ / √(2(K − 1)) for given standard-normal noise (z₂ in snapshot order).

        ``sample`` feeds it seeded noise; a release feeds it secret noise that is
        never stored.
        """
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

    # --- writing into a module -------------------------------------------------------------

    def load_into(self, module: nn.Module, theta: torch.Tensor) -> None:
        """Write a flat vector (a draw or the mean) into the module's parameters, in place."""
        self._require()
        if theta.numel() != self.num_parameters:
            raise ValueError(f"expected a vector of {self.num_parameters} values, got {theta.numel()}")
        offset = 0
        with torch.no_grad():
            for target, shape in zip(self._targets(module), self._shapes):
                count = target.numel()
                target.copy_(theta[offset : offset + count].view(shape), non_blocking=True)
                offset += count

    def _targets(self, module: nn.Module) -> list[torch.Tensor]:
        """The module's covered parameters in collection order, looked up once per module."""
        if self._bound is None or self._bound[0]() is not module:
            parameters = dict(module.named_parameters())
            missing = [name for name in self.parameter_names if name not in parameters]
            if missing:
                raise ValueError(f"the module has no parameter(s) {missing[:3]} covered by this posterior")
            self._bound = (weakref.ref(module), [parameters[name] for name in self.parameter_names])
        return self._bound[1]

    def restore_mean(self, module: nn.Module) -> None:
        """Put the SWAG mean back into the module (e.g. after evaluating draws)."""
        self.load_into(module, self.mean)

    # --- persistence -----------------------------------------------------------------------

    def state_dict(self) -> dict[str, object]:
        self._require()
        return {
            "rank": self.rank,
            "dtype": str(self.dtype).removeprefix("torch."),
            "modules": self.modules,
            "parameter_names": self.parameter_names,
            "shapes": [tuple(s) for s in self._shapes],
            "num_snapshots": self.num_snapshots,
            "mean": self._mean,
            "m2": self._m2,
            "deviations": self._deviations,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["rank"]) != self.rank or getattr(torch, str(state["dtype"])) != self.dtype:
            raise ValueError("state was saved with a different rank or dtype")
        device = self._device or state["mean"].device
        dev_device = self._deviations_device or device
        self.modules = state["modules"]
        self.parameter_names = tuple(state["parameter_names"])
        self._shapes = tuple(torch.Size(s) for s in state["shapes"])
        self.num_snapshots = int(state["num_snapshots"])
        self._mean = state["mean"].to(device)
        self._m2 = state["m2"].to(device)
        self._deviations = state["deviations"].to(dev_device)
        self._factors = None
        self._bound = None
