"""What each posterior is, in words and traits, without torch (the configuration and the command line read it).

The pseudo posterior a release must be drawn from is ξ_w(θ) ∝ π(θ) · ∏_i p(y_i | x_i, θ)^{w_i}
with a proper public prior π (METHOD.md, "The pseudo posterior the draw must come from").
Each kind says whether its draws come from ξ_w itself (an exact sampler whose
diagnostics passed) or from an approximation of it, and on which private parameter
sets it runs. The implementations register themselves under the same names
(``swagppm.posteriors.registry``); a test keeps the two lists equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

PosteriorName = Literal["swag", "laplace", "exact", "sgld"]


@dataclass(frozen=True, kw_only=True)
class PosteriorKind:
    """One posterior's public description.

    ``targets_pseudo_posterior``: its draws are draws of ξ_w (checked by a gate on
    every fit), so a bound can be proven for them; otherwise they come from an
    approximation and every output says so. ``trainable``: the ``model.trainable``
    modes it runs on (None: every mode). ``drawn_from`` completes "the released
    parameters are one draw from ..." on a card.
    """

    name: PosteriorName
    targets_pseudo_posterior: bool
    trainable: tuple[str, ...] | None
    drawn_from: str
    approximate_because: str | None = None


KINDS: dict[str, PosteriorKind] = {kind.name: kind for kind in (
    PosteriorKind(
        name="swag", targets_pseudo_posterior=False, trainable=None,
        drawn_from="a SWAG Gaussian fitted to the iterates of constant-step SGD on the weighted loss (the paper's "
                   "procedure)",
        approximate_because="SWAG's spread is SGD's minibatch noise, not the pseudo posterior's; measured 30-100 "
                            "times too narrow, more so the smaller c"),
    PosteriorKind(
        name="laplace", targets_pseudo_posterior=False, trainable=("head",),
        drawn_from="the Laplace Gaussian of the pseudo posterior (its generalised Gauss-Newton curvature at its "
                   "maximum)",
        approximate_because="a Gaussian fitted at the pseudo posterior's maximum, checked against the exact sampler "
                            "at small prior scales only"),
    PosteriorKind(
        name="exact", targets_pseudo_posterior=True, trainable=("head",),
        drawn_from="the pseudo posterior itself, sampled by Hamiltonian Monte Carlo (NUTS) whose chains passed the "
                   "convergence gate"),
    PosteriorKind(
        name="sgld", targets_pseudo_posterior=False, trainable=None,
        drawn_from="a Gaussian summary of a preconditioned Langevin chain (SGLD) on the tempered pseudo posterior",
        approximate_because="a stochastic-gradient chain with a finite step and minibatch noise, summarised by a "
                            "Gaussian"),
)}


def posterior_kind(name: str) -> PosteriorKind:
    """The kind called ``name`` (the configuration has checked it)."""
    return KINDS[name]
