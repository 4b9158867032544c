"""The SGLD posterior: a preconditioned Langevin chain on the pseudo posterior, summarised by SWAG's Gaussian.

In place of SWAG's constant-step SGD, ``swag_epochs`` epochs of stochastic-gradient
Langevin dynamics (Welling & Teh 2011) target ξ_w at temperature 1:

    θ ← θ − (ε/2) · M⁻¹ ∇Û(θ) + √ε · M^{-1/2} ξ,   ξ ~ N(0, I) from the seeded noise,

where Û = n · (the batch's mean of w_i · min(NLL_i, B)) + ‖θ − θ₀‖²/(2s²) estimates the
energy Σ_i w_i · min(NLL_i, B) + prior, and M⁻¹ is a fixed preconditioner taken where the
fine-tune left the parameters (so the chain is a valid Langevin chain, with no correction
term): the Laplace covariance (G + I/s²)⁻¹ of a linear head in K-FAC form, or for larger
private sets the diagonal (F + 1/s²)⁻¹ with F the batch gradients' squares summed over one
pass. ``sgld_lr`` is ε in these whitened units; the first ``sgld_burnin_epochs`` epochs move
the chain from the fine-tuned point into the posterior's bulk, and every later epoch's end
is a snapshot of SWAG's estimator (mean, diagonal, deviations), which the draws come from.
Approximate: a finite step and the minibatch noise widen it, and a Gaussian summarises it.
Written here because ``posteriors``' SGLD draws from torch's global random state and takes
no preconditioner.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from swagppm.posteriors.base import FitContext, PosteriorFit
from swagppm.posteriors.curvature import HeadProblem
from swagppm.posteriors.registry import register_posterior
from swagppm.posteriors.swag import SWAGPosterior, deviations_device
from swagppm.train import rng
from swagppm.train.rng import Noise, SeededNoise


@dataclass(frozen=True, kw_only=True, eq=False)
class Preconditioner:
    """M⁻¹ and a square root of it, on flat vectors in the view's order."""

    apply: Callable[[torch.Tensor], torch.Tensor]
    root: Callable[[torch.Tensor], torch.Tensor]


class Langevin(torch.optim.Optimizer):
    """One preconditioned SGLD step per ``step()`` over the view's parameters (their gradients hold the batch's mean
    loss and the prior's share, ``Prior.in_gradients``)."""

    def __init__(self, parameters: list[torch.Tensor], *, lr: float, records: int, preconditioner: Preconditioner,
                 noise: Noise) -> None:
        super().__init__(parameters, {"lr": lr})
        self.records, self.preconditioner, self.noise = records, preconditioner, noise

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> None:  # type: ignore[override]
        parameters = [p for group in self.param_groups for p in group["params"]]
        lr = float(self.param_groups[0]["lr"])
        gradient = torch.cat([p.grad.reshape(-1) if p.grad is not None else torch.zeros_like(p).reshape(-1)
                              for p in parameters])
        kick = self.noise.normal(gradient.numel(), dtype=gradient.dtype, device=gradient.device)
        move = self.preconditioner.apply(gradient).mul_(-0.5 * lr * self.records)
        move.add_(self.preconditioner.root(kick), alpha=math.sqrt(lr))
        offset = 0
        for parameter in parameters:
            count = parameter.numel()
            parameter.add_(move[offset : offset + count].view_as(parameter))
            offset += count


@dataclass(kw_only=True)
class SGLDFit(PosteriorFit):
    """``swag_epochs`` Langevin epochs (eager steps: the optimiser draws noise), snapshots after the burn-in."""

    posterior: SWAGPosterior = field(init=False)

    def __post_init__(self) -> None:
        context = self.context
        config = context.config
        self.epochs, self.graphs = config.swag_epochs, False
        self.posterior = SWAGPosterior(view=context.view, rank=config.swag_rank, kind="sgld",
                                       dtype=getattr(torch, config.swag_dtype), device=context.net.device,
                                       deviations_device=deviations_device(config, context.net, context.view.size))

    def optimizer(self) -> Langevin:
        context = self.context
        parameters = context.view.targets(context.net.model)
        return Langevin(parameters, lr=context.config.sgld_lr, records=len(context.split),
                        preconditioner=preconditioner(context),
                        noise=SeededNoise(rng.generator(context.seed, context.stage, "langevin",
                                                        device=context.net.device)))

    def after_epoch(self, epoch: int) -> None:
        if epoch > self.context.config.sgld_burnin_epochs:
            self.posterior.collect(self.context.net.model)

    def finish(self) -> SWAGPosterior:
        self.posterior.restore_mean(self.context.net.model)
        return self.posterior


def preconditioner(context: FitContext) -> Preconditioner:
    """The Laplace covariance in K-FAC form for a linear head; the inverse diagonal Fisher plus prior otherwise."""
    view, net = context.view, context.net
    if HeadProblem.applies(context):
        problem = HeadProblem.of(context)
        factors = problem.kronecker(problem.to_theta(view.read(net.model).float()))
        return Preconditioner(apply=lambda v: problem.to_flat(factors.covariance(problem.to_theta(v))),
                              root=lambda z: problem.to_flat(factors.colour(problem.to_theta(z))))
    inverse = 1.0 / (diagonal_fisher(context) + context.prior.precision).clamp(min=1e-12)
    root = inverse.sqrt()
    return Preconditioner(apply=lambda v: inverse * v, root=lambda z: root * z)


def diagonal_fisher(context: FitContext) -> torch.Tensor:
    """Σ over one pass of batches of (batch size · the batch's mean gradient)², per parameter: an estimate of the
    weighted loss's Fisher diagonal Σ_i w_i g_i² around the current parameters (for the preconditioner only)."""
    from swagppm.mechanism import weighted_nll

    net, split, view, config = context.net, context.split, context.view, context.config
    weights = context.likelihood.weights
    targets = view.targets(net.model)
    total = torch.zeros(view.size, device=net.device)
    net.train(False)
    order = torch.arange(len(split)).numpy()
    for start in range(0, len(split), config.batch_size):
        inputs, labels, index = split.batch(order[start : start + config.batch_size])
        logits = net.logits(inputs)
        batch_weights = torch.ones(len(index), device=net.device) if weights is None else weights[index]
        loss = weighted_nll(logits, labels, batch_weights, bound=context.likelihood.bound) * len(index)
        gradients = torch.autograd.grad(loss, targets, allow_unused=True)
        total += torch.cat([(g if g is not None else torch.zeros_like(p)).reshape(-1)
                            for g, p in zip(gradients, targets)]).square()
    return total


@register_posterior("sgld")
def sgld_fit(context: FitContext) -> SGLDFit:
    return SGLDFit(context=context)

