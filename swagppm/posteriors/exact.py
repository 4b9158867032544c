"""The exact posterior: the pseudo posterior itself, sampled by NUTS (pyro), with a convergence gate.

For a linear head on cached features (``trainable = "head"``), ξ_w's energy is
``curvature.HeadProblem.energy``. The sampler runs in whitened coordinates u, Θ = Θ̂ +
colour(u), with the K-FAC Laplace factors at the mode Θ̂ (a Kronecker mass matrix, so
the target is close to N(0, I) there and NUTS needs few leapfrog steps), and pyro's
NUTS adapts its step size and a diagonal mass matrix on top. ``exact_chains`` chains
start over-dispersed (u ~ N(0, 4I)), warm up for ``exact_warmup`` steps and keep
``exact_samples`` each. The gate: split-R̂ ≤ ``exact_max_rhat`` and effective sample
size ≥ ``exact_min_ess`` for the energy, the privacy statistic (max_i w_i·min(NLL_i, B))
and four random projections of u; a fit that misses it fails in one line naming the
diagnostic (``MixingFailure``), and nothing is released from it.

Seeded draws (privacy, utility) are kept samples chosen by the noise. A secret draw (a
release) is never a kept sample, which is a function of the data and the recorded
seeds: it is the end of a fresh chain, started over-dispersed and driven entirely by
the secret noise, as long as a fit's warm-up (``exact_release_steps``), which the gate
showed is enough for chains from over-dispersed starts to agree. pyro draws from
torch's global random state; each chain runs in ``Noise.global_rng``, so the noise it
was handed is still its only source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from swagppm.errors import MixingFailure
from swagppm.posteriors.base import FitContext, ParameterView, Posterior, PosteriorFit
from swagppm.posteriors.curvature import HeadProblem, Kronecker
from swagppm.posteriors.registry import register_posterior
from swagppm.progress import steps
from swagppm.train import rng
from swagppm.train.rng import Noise, SeededNoise

OVERDISPERSION = 2.0  # chains start at u ~ N(0, OVERDISPERSION² I): wider than the whitened target N(0, I)
PROJECTIONS = 4  # random directions whose chains the gate compares


@dataclass(frozen=True, kw_only=True, eq=False)
class Sampler:
    """One head's pseudo posterior in whitened coordinates and the NUTS settings that sample it."""

    problem: HeadProblem
    mode: torch.Tensor  # Θ̂
    whitening: Kronecker
    max_tree_depth: int

    def theta(self, u: torch.Tensor) -> torch.Tensor:
        return self.mode + self.whitening.colour(u)

    def potential(self, params: Mapping[str, torch.Tensor]) -> torch.Tensor:
        return self.problem.energy(self.theta(params["u"]))

    def chain(self, noise: Noise, *, warmup: int, samples: int, label: str, progress: bool | None,
              ) -> tuple[torch.Tensor, dict[str, Any]]:
        """One chain from an over-dispersed start drawn from ``noise``: (its kept u's, samples × K × (d+1); pyro's
        diagnostics)."""
        from pyro.infer.mcmc import NUTS

        start = OVERDISPERSION * noise.normal(self.mode.numel(), dtype=self.mode.dtype, device=self.mode.device)
        kernel = NUTS(potential_fn=self.potential, adapt_step_size=True, adapt_mass_matrix=True,
                      max_tree_depth=self.max_tree_depth, target_accept_prob=0.8)
        kernel.initial_params = {"u": start.view_as(self.mode)}
        kept = []
        with noise.global_rng(self.mode.device):
            kernel.setup(warmup)
            params = kernel.initial_params
            for step in steps(range(warmup + samples), label=label, total=warmup + samples, progress=progress):
                params = kernel.sample(params)
                if step >= warmup:
                    kept.append(params["u"].detach().clone())
            diagnostics = kernel.diagnostics()
            kernel.cleanup()
        return torch.stack(kept), diagnostics


class ExactPosterior(Posterior):
    """The kept samples of the exact sampler (``samples``: draws × P, in the view's order) and the sampler a release
    draw runs a fresh chain of (``sampler``; None after ``load_state_dict`` until ``bind``)."""

    kind = "exact"

    def __init__(self, *, view: ParameterView, samples: torch.Tensor, diagnostics: dict[str, float],
                 sampler: Sampler | None, release_steps: int) -> None:
        self.view, self.samples, self.diagnostics = view, samples, diagnostics
        self.sampler, self.release_steps = sampler, release_steps

    @property
    def centre(self) -> torch.Tensor:
        return self.samples.mean(dim=0)

    def draw(self, noise: Noise) -> torch.Tensor:
        """A kept sample chosen by seeded noise; for secret noise, the end of a fresh chain driven by it alone."""
        if not noise.secret:
            return self.samples[noise.index(len(self.samples))]
        if self.sampler is None:
            raise ValueError("this exact posterior was loaded without its sampler: bind it to its data first")
        u, _ = self.sampler.chain(noise, warmup=self.release_steps, samples=1, label="release: exact sampler",
                                  progress=False)
        return self.sampler.problem.to_flat(self.sampler.theta(u[-1]))

    def bind(self, sampler: Sampler) -> None:
        """Attach the sampler (the data and the whitening) a loaded posterior's secret draws run on."""
        self.sampler = sampler

    def numbers_per_parameter(self) -> float:
        return float(len(self.samples))

    def state_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "view": self.view.state_dict(), "samples": self.samples,
                "diagnostics": dict(self.diagnostics), "release_steps": self.release_steps}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.view = ParameterView.from_state_dict(state["view"])
        self.samples, self.diagnostics = state["samples"], dict(state["diagnostics"])
        self.release_steps = int(state["release_steps"])


@dataclass(kw_only=True)
class ExactFit(PosteriorFit):
    """No epochs: the mode, the whitening at it, then the chains and the gate."""

    problem: HeadProblem = field(init=False)

    def __post_init__(self) -> None:
        self.problem = HeadProblem.of(self.context)

    def finish(self) -> ExactPosterior:
        context, problem = self.context, self.problem
        config, view, model = context.config, context.view, context.net.model
        mode = problem.mode(problem.to_theta(view.read(model).float()))
        sampler = Sampler(problem=problem, mode=mode, whitening=problem.kronecker(mode),
                          max_tree_depth=config.exact_max_tree_depth)
        chains = config.exact_chains
        kept = config.exact_samples or math.ceil(max(config.draws_privacy, config.draws_utility) / chains)
        runs = [sampler.chain(SeededNoise(rng.generator(context.seed, context.stage, "exact", chain,
                                                        device=mode.device)),
                              warmup=config.exact_warmup, samples=kept, progress=context.progress,
                              label=f"{context.stage}: exact sampler chain {chain + 1}/{chains}")
                for chain in range(chains)]
        u = torch.stack([samples for samples, _ in runs])  # chains × kept × K × (d+1)
        diagnostics = gate(sampler, u, context=context, divergences=sum(len(d["divergences"]) for _, d in runs))
        thetas = torch.stack([problem.to_flat(sampler.theta(one)) for one in u.reshape(-1, *mode.shape)])
        posterior = ExactPosterior(view=view, samples=thetas, diagnostics=diagnostics, sampler=sampler,
                                   release_steps=config.exact_release_steps or config.exact_warmup)
        posterior.restore_mean(model)
        return posterior


def gate(sampler: Sampler, u: torch.Tensor, *, context: FitContext, divergences: int) -> dict[str, float]:
    """Split-R̂ and effective sample size of the energy, the privacy statistic and random projections across the
    chains; ``MixingFailure`` naming the worst one when a value misses the gate, else the diagnostics."""
    from pyro.ops.stats import effective_sample_size, split_gelman_rubin

    config, problem = context.config, sampler.problem
    chains, kept = u.shape[:2]
    flat_u = u.reshape(chains, kept, -1)
    with torch.no_grad():
        thetas = [[sampler.theta(flat_u[c, s].view_as(sampler.mode)) for s in range(kept)] for c in range(chains)]
        quantities = {
            "energy": torch.tensor([[float(problem.energy(t)) for t in row] for row in thetas]),
            "privacy statistic": torch.tensor([[float(problem.privacy_statistic(t)) for t in row] for row in thetas]),
        }
        generator = rng.generator(context.seed, context.stage, "exact", "projections")
        directions = torch.randn(flat_u.shape[-1], PROJECTIONS, generator=generator).to(flat_u)
        directions /= directions.norm(dim=0, keepdim=True)
        for j, values in enumerate((flat_u @ directions).unbind(-1)):
            quantities[f"projection {j + 1}"] = values.double().cpu()
    rhat = {name: float(split_gelman_rubin(values.double(), chain_dim=0, sample_dim=1))
            for name, values in quantities.items()}
    ess = {name: float(effective_sample_size(values.double(), chain_dim=0, sample_dim=1))
           for name, values in quantities.items()}
    worst_rhat = max(rhat, key=lambda name: rhat[name] if math.isfinite(rhat[name]) else math.inf)
    worst_ess = min(ess, key=lambda name: ess[name] if math.isfinite(ess[name]) else -math.inf)
    if not rhat[worst_rhat] <= config.exact_max_rhat:
        raise MixingFailure(context.stage, f"the chains did not mix: split-R-hat of the {worst_rhat} is "
                            f"{rhat[worst_rhat]:.3f}, above swagppm.exact_max_rhat = {config.exact_max_rhat:g} "
                            f"({chains} chains of {kept} kept samples after {config.exact_warmup} warm-up steps); "
                            "raise exact_warmup or exact_samples, or use a larger prior_scale or nll_bound")
    if not ess[worst_ess] >= config.exact_min_ess:
        raise MixingFailure(context.stage, f"too few effective samples: the {worst_ess}'s effective sample size is "
                            f"{ess[worst_ess]:.1f}, below swagppm.exact_min_ess = {config.exact_min_ess:g}; raise "
                            "exact_samples")
    return {"exact_max_split_rhat": rhat[worst_rhat], "exact_min_ess": ess[worst_ess],
            "exact_divergences": float(divergences), "exact_chains": float(chains), "exact_kept": float(kept),
            **{f"exact_split_rhat_{name.replace(' ', '_')}": value for name, value in rhat.items()
               if not name.startswith("projection")}}


@register_posterior("exact")
def exact_fit(context: FitContext) -> ExactFit:
    return ExactFit(context=context)
