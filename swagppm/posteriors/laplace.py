"""The Laplace posterior: the Gaussian of the pseudo posterior at its mode, with its GGN curvature.

For a linear head on cached features (``trainable = "head"``): the mode Θ̂ of ξ_w by
full-batch L-BFGS, then N(Θ̂, (G + I/s²)⁻¹) with G the generalised Gauss–Newton matrix
at Θ̂ (``curvature.HeadProblem``). ``laplace_structure = "full"`` keeps the Cholesky
factor of the whole precision (P² numbers), ``"kron"`` its K-FAC factorisation, and
``"auto"`` the full one up to ``LAPLACE_FULL_LIMIT`` parameters. Measured on the OSHA head
(26,180 parameters, docs/results/posteriors.md): the full precision took 110-390 s a fit on
two CPU cores against 0.6 s for K-FAC, for the same ε within 15% and the same F1 within
0.02; its draws are an approximation either way, and every output says so.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from swagppm.posteriors.base import FitContext, ParameterView, Posterior, PosteriorFit
from swagppm.posteriors.curvature import HeadProblem, Kronecker
from swagppm.posteriors.registry import register_posterior
from swagppm.train.rng import Noise

LAPLACE_FULL_LIMIT = 4_096  # parameters: a full precision of this size is 64 MiB, its Cholesky factor a second


class LaplacePosterior(Posterior):
    """N(mode, precision⁻¹) over a head's parameters: ``factor`` is the precision's lower Cholesky factor in Θ's
    row-major order (``structure = "full"``), or ``kronecker`` its K-FAC eigenbases (``"kron"``)."""

    kind = "laplace"

    def __init__(self, *, view: ParameterView, mode: torch.Tensor, shape: tuple[int, int], weight_first: bool,
                 factor: torch.Tensor | None = None, kronecker: Kronecker | None = None) -> None:
        if (factor is None) == (kronecker is None):
            raise ValueError("a Laplace posterior is full (a Cholesky factor) or Kronecker-factored, one of the two")
        self.view, self.mode, self.shape, self.weight_first = view, mode, shape, weight_first
        self.factor, self.kronecker = factor, kronecker
        self.diagnostics: dict[str, float] = {"laplace_full": float(factor is not None)}

    @property
    def structure(self) -> str:
        return "full" if self.factor is not None else "kron"

    @property
    def centre(self) -> torch.Tensor:
        return self.mode

    def draw(self, noise: Noise) -> torch.Tensor:
        """mode + precision^{-1/2} z for z ~ N(0, I) from ``noise``."""
        return self.draws(noise, 1)[0]

    def draws(self, noise: Noise, count: int) -> torch.Tensor:
        """``count`` draws (rows), the noise drawn in ``draw``'s order; a full precision's factor is solved against all
        of them at once (one triangular solve with ``count`` right-hand sides)."""
        classes, width = self.shape
        z = torch.stack([noise.normal(classes * width, dtype=self.mode.dtype, device=self.mode.device)
                         for _ in range(count)])
        if self.factor is not None:
            offsets = torch.linalg.solve_triangular(self.factor.T, z.T, upper=True).T.reshape(count, classes, width)
        else:
            assert self.kronecker is not None
            offsets = torch.stack([self.kronecker.colour(row.view(classes, width)) for row in z])
        weight, bias = offsets[:, :, :-1].reshape(count, -1), offsets[:, :, -1]
        return self.mode + torch.cat([weight, bias] if self.weight_first else [bias, weight], dim=1)

    def numbers_per_parameter(self) -> float:
        if self.factor is not None:
            return 1.0 + self.factor.numel() / self.view.size
        assert self.kronecker is not None
        return 1.0 + (self.kronecker.left.numel() + self.kronecker.right.numel() + self.kronecker.scale.numel()) \
            / self.view.size

    def state_dict(self) -> dict[str, Any]:
        kron = self.kronecker
        return {"kind": self.kind, "view": self.view.state_dict(), "mode": self.mode, "shape": list(self.shape),
                "weight_first": self.weight_first, "factor": self.factor,
                "kronecker": None if kron is None else {"left": kron.left, "right": kron.right, "scale": kron.scale}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        kron = state["kronecker"]
        self.view = ParameterView.from_state_dict(state["view"])
        self.mode, self.shape = state["mode"], (int(state["shape"][0]), int(state["shape"][1]))
        self.weight_first, self.factor = bool(state["weight_first"]), state["factor"]
        self.kronecker = None if kron is None else Kronecker(left=kron["left"], right=kron["right"],
                                                            scale=kron["scale"])


@dataclass(kw_only=True)
class LaplaceFit(PosteriorFit):
    """No epochs: the mode of ξ_w from where the fine-tune left the head, then its curvature there."""

    problem: HeadProblem = field(init=False)

    def __post_init__(self) -> None:
        self.problem = HeadProblem.of(self.context)

    def finish(self) -> LaplacePosterior:
        context, problem = self.context, self.problem
        model, view = context.net.model, context.view
        mode = problem.mode(problem.to_theta(view.read(model).float()))
        structure = context.config.laplace_structure
        if structure == "auto":
            structure = "full" if view.size <= LAPLACE_FULL_LIMIT else "kron"
        factor = torch.linalg.cholesky(problem.full_ggn(mode)) if structure == "full" else None
        kronecker = problem.kronecker(mode) if structure == "kron" else None
        posterior = LaplacePosterior(view=view, mode=problem.to_flat(mode), shape=problem.shape,
                                     weight_first=problem.weight_first, factor=factor, kronecker=kronecker)
        posterior.restore_mean(model)
        return posterior


@register_posterior("laplace")
def laplace_fit(context: FitContext) -> LaplaceFit:
    return LaplaceFit(context=context)
