"""The pseudo posterior of a linear head on cached features, in closed form: energy, gradient, mode and curvature.

With ``trainable = "head"`` the private parameters are one linear layer Θ = [W | b]
(K classes × d features + 1) on the frozen encoder's features x_i (ã_i = [x_i; 1]), and

    U(Θ) = Σ_i w_i · min(NLL_i(Θ), B) + ‖Θ − Θ₀‖² / (2s²)

is the pseudo posterior's energy (−log ξ_w up to a constant). Its generalised
Gauss–Newton matrix is G = Σ_i ω_i (Λ_i ⊗ ã_i ã_iᵀ), with Λ_i = diag(p_i) − p_i p_iᵀ and
ω_i = w_i where NLL_i < B (a clipped record's loss is flat: 0). ``full_ggn`` forms it
(K²(d+1)² numbers, one GEMM of n records); ``kronecker`` is the K-FAC factorisation
(Σ_i ω_i Λ_i) ⊗ (Σ_i ã_i ã_iᵀ / n), whose eigenbases whiten Θ cheaply. Written here
rather than taken from a library: laplace-torch needs torchvision (a newer torch), and
``posteriors``' dense GGN forms each record's full Jacobian (about 70× the work here).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from swagppm.posteriors.base import FitContext


@dataclass(frozen=True, kw_only=True, eq=False)
class HeadProblem:
    """The pseudo posterior of a linear head: features, labels, weights, bound and prior in the Θ = [W | b] layout.

    The view's parameters must be exactly the head's weight and bias (``trainable =
    "head"``); ``to_theta`` and ``to_flat`` move between the view's flat order and Θ.
    """

    features: torch.Tensor  # ã: n × (d + 1), the last column ones
    labels: torch.Tensor
    weights: torch.Tensor  # w_i (1 for every record without privacy weights)
    bound: float | None
    precision: float  # 1/s²
    centre: torch.Tensor  # Θ₀: K × (d + 1)
    weight_first: bool  # the view lists the weight before the bias

    @staticmethod
    def applies(context: FitContext) -> bool:
        """Whether the private parameters are exactly a linear head's weight and bias, run on cached features."""
        head = context.net.head
        if not isinstance(head, nn.Linear) or head.bias is None or context.split.is_tokens:
            return False
        targets = context.view.targets(context.net.model)
        return len(targets) == 2 and {id(t) for t in targets} == {id(head.weight), id(head.bias)}

    @classmethod
    def of(cls, context: FitContext) -> HeadProblem:
        view, split = context.view, context.split
        if not cls.applies(context):
            raise ValueError("this posterior needs trainable = 'head': a linear head on cached features")
        shapes = dict(zip(view.names, view.shapes))
        weight_name = next(name for name in view.names if len(shapes[name]) == 2)
        features = split.inputs.float()
        augmented = torch.cat([features, torch.ones(len(features), 1, device=features.device)], dim=1)
        likelihood = context.likelihood
        weights = torch.ones(len(split), device=features.device) if likelihood.weights is None else \
            likelihood.weights.float().to(features.device)
        weight_first = view.names[0] == weight_name
        centre = _as_theta(context.prior.centre.to(features.device).float(), width=augmented.shape[1],
                           weight_first=weight_first)
        return cls(features=augmented, labels=split.labels, weights=weights, bound=likelihood.bound,
                   precision=context.prior.precision, centre=centre, weight_first=weight_first)

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.centre.shape[0]), int(self.features.shape[1])

    def to_theta(self, flat: torch.Tensor) -> torch.Tensor:
        """The view's flat vector as Θ = [W | b] (K × (d + 1))."""
        return _as_theta(flat, width=self.features.shape[1], weight_first=self.weight_first)

    def to_flat(self, theta: torch.Tensor) -> torch.Tensor:
        """Θ as the view's flat vector."""
        weight, bias = theta[:, :-1].reshape(-1), theta[:, -1].reshape(-1)
        return torch.cat([weight, bias] if self.weight_first else [bias, weight])

    def nll(self, theta: torch.Tensor) -> torch.Tensor:
        """Every record's NLL under Θ (unclipped)."""
        return F.cross_entropy(self.features @ theta.T, self.labels, reduction="none")

    def energy(self, theta: torch.Tensor) -> torch.Tensor:
        """U(Θ) = Σ_i w_i · min(NLL_i, B) + ‖Θ − Θ₀‖² · precision / 2."""
        nll = self.nll(theta)
        if self.bound is not None:
            nll = nll.clamp(max=self.bound)
        data = torch.where(self.weights > 0, self.weights * nll, torch.zeros_like(nll)).sum()
        return data + 0.5 * self.precision * (theta - self.centre).square().sum()

    def privacy_statistic(self, theta: torch.Tensor) -> torch.Tensor:
        """max_i w_i · min(NLL_i, B): the max delta of one draw."""
        nll = self.nll(theta)
        if self.bound is not None:
            nll = nll.clamp(max=self.bound)
        return torch.where(self.weights > 0, self.weights * nll, torch.zeros_like(nll)).max()

    def mode(self, start: torch.Tensor, *, iterations: int = 500) -> torch.Tensor:
        """The maximum of ξ_w (minimum of U) by full-batch L-BFGS from ``start`` (a local one where B clips)."""
        theta = start.detach().clone().requires_grad_(True)
        optimizer = torch.optim.LBFGS([theta], lr=1.0, max_iter=iterations, tolerance_grad=1e-7,
                                      tolerance_change=1e-12, history_size=20, line_search_fn="strong_wolfe")

        def closure() -> torch.Tensor:
            optimizer.zero_grad()
            value = self.energy(theta)
            value.backward()
            return value

        with torch.enable_grad():
            optimizer.step(closure)
        return theta.detach()

    def curvature_weights(self, theta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(p_i, ω_i): each record's class probabilities under Θ, and its weight in the GGN (0 where B clips)."""
        with torch.no_grad():
            logits = self.features @ theta.T
            probabilities = logits.softmax(dim=1)
            omega = self.weights.clone()
            if self.bound is not None:
                omega = torch.where(F.cross_entropy(logits, self.labels, reduction="none") < self.bound, omega,
                                    torch.zeros_like(omega))
        return probabilities, omega

    def full_ggn(self, theta: torch.Tensor) -> torch.Tensor:
        """G + precision · I in Θ's row-major order ((k, a) with k the class): K(d+1) × K(d+1)."""
        probabilities, omega = self.curvature_weights(theta)
        classes, width = self.shape
        with torch.no_grad():
            lam = torch.diag_embed(probabilities) - probabilities[:, :, None] * probabilities[:, None, :]
            weighted = (omega[:, None, None] * lam).reshape(len(omega), classes * classes)  # n × K²
            products = (self.features[:, :, None] * self.features[:, None, :]).reshape(len(omega), width * width)
            ggn = (weighted.T @ products).view(classes, classes, width, width)  # [k, l, a, b]
            ggn = ggn.permute(0, 2, 1, 3).reshape(classes * width, classes * width)
            ggn.diagonal().add_(self.precision)
        return ggn

    def kronecker(self, theta: torch.Tensor) -> Kronecker:
        """The K-FAC factors of G at Θ, eigendecomposed, with the prior's precision added to their product."""
        probabilities, omega = self.curvature_weights(theta)
        with torch.no_grad():
            lam = torch.diag_embed(probabilities) - probabilities[:, :, None] * probabilities[:, None, :]
            classes_factor = (omega[:, None, None] * lam).sum(0)
            inputs_factor = self.features.T @ self.features / len(self.features)
            s_g, u_g = torch.linalg.eigh(classes_factor.double())
            s_a, u_a = torch.linalg.eigh(inputs_factor.double())
            eigenvalues = s_g.clamp(min=0)[:, None] * s_a.clamp(min=0)[None, :] + self.precision
        dtype = theta.dtype
        return Kronecker(left=u_g.to(dtype), right=u_a.to(dtype), scale=eigenvalues.rsqrt().to(dtype))


def _as_theta(flat: torch.Tensor, *, width: int, weight_first: bool) -> torch.Tensor:
    """A head's flat vector (weight K × (width − 1) and bias K, in either order) as Θ = [W | b]."""
    classes = flat.numel() // width
    weight_size = classes * (width - 1)
    weight, bias = (flat[:weight_size], flat[weight_size:]) if weight_first else (flat[classes:], flat[:classes])
    return torch.cat([weight.reshape(classes, width - 1), bias.reshape(classes, 1)], dim=1)


@dataclass(frozen=True, kw_only=True, eq=False)
class Kronecker:
    """A Gaussian precision (U_G ⊗ U_A) diag(λ) (U_G ⊗ U_A)ᵀ kept as its eigenbases and ``scale`` = λ^{-1/2}.

    ``colour(Z)`` maps standard-normal Z (K × (d + 1)) to a draw of N(0, precision⁻¹);
    ``whiten`` is its inverse; ``covariance(V)`` applies precision⁻¹ to a K × (d + 1) matrix.
    """

    left: torch.Tensor
    right: torch.Tensor
    scale: torch.Tensor

    def colour(self, z: torch.Tensor) -> torch.Tensor:
        return self.left @ (self.scale * z) @ self.right.T

    def whiten(self, theta: torch.Tensor) -> torch.Tensor:
        return (self.left.T @ theta @ self.right) / self.scale

    def covariance(self, matrix: torch.Tensor) -> torch.Tensor:
        return self.left @ (self.scale.square() * (self.left.T @ matrix @ self.right)) @ self.right.T
