"""The posterior seam: one parameter view, one prior, one protocol for a posterior and one for fitting it.

Every posterior covers the same private parameters (``ParameterView``: the trainable
parameters under ``swag_modules``, as one flat vector), uses the same public prior
(``Prior``: N(θ₀, s²I) centred on the public initial or pretrained values) and the same
likelihood (``Likelihood``: Σ_i w_i · min(NLL_i, B)), and draws only through the ``Noise``
it is handed (``swagppm.train.rng``): seeded for the privacy and utility draws, the one
secret source for a release. ``PosteriorFit`` is how one is fitted after the fine-tune:
an optimiser or sampler stepping the parameters for some epochs, what it does after
each epoch, and how it finishes.
"""

from __future__ import annotations

import weakref
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import torch
from torch import nn
from torch.nn import functional as F

from swagppm.train.rng import Noise

if TYPE_CHECKING:
    from swagppm.config import SWAGPPMConfig
    from swagppm.train.engine import Net, Split
    from swagppm.train.timing import StageTimer


def in_modules(name: str, modules: Sequence[str]) -> bool:
    """Whether parameter ``name`` lies in one of the named submodules (or is one of them)."""
    return any(name == m or name.startswith(m + ".") for m in modules)


class ParameterView:
    """The private parameters a posterior covers, in a fixed order, as one flat vector.

    ``of(module, modules)`` takes every parameter with ``requires_grad`` whose name lies
    under one of ``modules`` (all when None). ``read`` and ``write`` move a flat vector out
    of and into a module in place (the module's parameters are looked up once per module).
    """

    def __init__(self, *, names: Sequence[str], shapes: Sequence[torch.Size]) -> None:
        if not names:
            raise ValueError("a parameter view needs at least one parameter")
        self.names = tuple(names)
        self.shapes = tuple(torch.Size(shape) for shape in shapes)
        self.size = sum(shape.numel() for shape in self.shapes)
        self._bound: tuple[weakref.ref[nn.Module], list[torch.Tensor]] | None = None

    @classmethod
    def of(cls, module: nn.Module, modules: Sequence[str] | None = None) -> ParameterView:
        chosen = [(name, p) for name, p in module.named_parameters()
                  if p.requires_grad and (modules is None or in_modules(name, modules))]
        if not chosen:
            where = f" under {list(modules)}" if modules is not None else ""
            raise ValueError(f"no trainable parameters{where} to cover")
        return cls(names=[name for name, _ in chosen], shapes=[p.shape for _, p in chosen])

    def targets(self, module: nn.Module) -> list[torch.Tensor]:
        """The module's covered parameters in view order."""
        if self._bound is None or self._bound[0]() is not module:
            parameters = dict(module.named_parameters())
            missing = [name for name in self.names if name not in parameters]
            if missing:
                raise ValueError(f"the module has no parameter(s) {missing[:3]} covered by this posterior")
            self._bound = (weakref.ref(module), [parameters[name] for name in self.names])
        return self._bound[1]

    def read(self, module: nn.Module) -> torch.Tensor:
        """The module's covered parameters as one detached flat vector."""
        with torch.no_grad():
            return torch.cat([p.detach().reshape(-1) for p in self.targets(module)])

    def write(self, module: nn.Module, theta: torch.Tensor) -> None:
        """Write a flat vector into the module's covered parameters, in place."""
        if theta.numel() != self.size:
            raise ValueError(f"expected a vector of {self.size} values, got {theta.numel()}")
        offset = 0
        with torch.no_grad():
            for target, shape in zip(self.targets(module), self.shapes):
                count = shape.numel()
                target.copy_(theta[offset : offset + count].view(shape), non_blocking=True)
                offset += count

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """A flat vector as named tensors (views), for ``torch.func.functional_call``."""
        return {name: part.view(shape) for name, part, shape in
                zip(self.names, theta.split([s.numel() for s in self.shapes]), self.shapes)}

    def flatten(self, values: Mapping[str, torch.Tensor]) -> torch.Tensor:
        """Named tensors (a state of the covered parameters) as one flat vector in view order."""
        return torch.cat([values[name].reshape(-1) for name in self.names])

    def state_dict(self) -> dict[str, Any]:
        return {"names": list(self.names), "shapes": [tuple(shape) for shape in self.shapes]}

    @classmethod
    def from_state_dict(cls, state: Mapping[str, Any]) -> ParameterView:
        return cls(names=state["names"], shapes=[torch.Size(shape) for shape in state["shapes"]])


@dataclass(frozen=True, kw_only=True, eq=False)
class Prior:
    """π(θ) = N(θ₀, s²I) over the private parameters, with a public scale ``scale`` (s) and centre ``centre`` (θ₀,
    flat in view order: the public pretrained values, or a new head's initial values, never values learned from the
    data). ``scale=None`` is the flat, improper prior of the paper's SWAG (no posterior but ``swag`` accepts it)."""

    scale: float | None
    centre: torch.Tensor

    @property
    def precision(self) -> float:
        """1/s² (0 for the flat prior)."""
        return 0.0 if self.scale is None else 1.0 / self.scale**2

    def energy(self, theta: torch.Tensor) -> torch.Tensor:
        """−log π(θ) up to a constant: ‖θ − θ₀‖² / (2s²)."""
        return 0.5 * self.precision * (theta - self.centre.to(theta)).square().sum()

    @contextmanager
    def in_gradients(self, module: nn.Module, view: ParameterView, *, records: int) -> Iterator[None]:
        """For a block, every covered parameter's gradient gets the prior's share of a mean-per-record loss:
        (θ − θ₀) / (s² n). Gradient hooks, so captured training steps (CUDA graphs) carry it too."""
        if self.precision == 0.0:
            yield
            return
        weight = self.precision / records
        handles = []
        offset = 0
        for parameter, shape in zip(view.targets(module), view.shapes):
            count = shape.numel()
            centre = self.centre[offset : offset + count].view(shape).to(parameter.device, parameter.dtype)
            offset += count

            def hook(grad: torch.Tensor, parameter: torch.Tensor = parameter, centre: torch.Tensor = centre,
                     ) -> torch.Tensor:
                return grad + weight * (parameter.detach() - centre)

            handles.append(parameter.register_hook(hook))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()


def bounded_nll(logits: torch.Tensor, labels: torch.Tensor, bound: float | None) -> torch.Tensor:
    """NLL_i per record, clipped at the public bound B (``nll_bound``) when there is one: min(NLL_i, B)."""
    nll = F.cross_entropy(logits.float(), labels, reduction="none")
    return nll if bound is None else nll.clamp(max=bound)


@dataclass(frozen=True, kw_only=True, eq=False)
class Likelihood:
    """The tempered, bounded log-likelihood of the pseudo posterior: −Σ_i w_i · min(NLL_i(θ), B), on one split.

    ``weights`` are the privacy weights (None: 1 for every record, stage 1); ``bound``
    is the public ``nll_bound`` B (None: unbounded).
    """

    weights: torch.Tensor | None
    bound: float | None

    def energy(self, logits: torch.Tensor, labels: torch.Tensor, index: torch.Tensor | None = None) -> torch.Tensor:
        """Σ_i w_i · min(NLL_i, B) over the records of a batch (``index``: their positions in the split)."""
        nll = bounded_nll(logits, labels, self.bound)
        if self.weights is None:
            return nll.sum()
        weights = self.weights if index is None else self.weights[index]
        return torch.where(weights > 0, weights * nll, torch.zeros_like(nll)).sum()


_P = TypeVar("_P", bound="Posterior")


class Posterior(ABC):
    """A distribution over the private parameters that the privacy, utility and release draws come from.

    ``kind`` is its registry name (``swagppm.posteriors.kinds``); ``view`` the parameters
    it covers. ``draw(noise)`` is one flat draw from the ``Noise`` it is handed (a
    posterior never makes its own randomness); ``centre`` is what the model holds
    between draws (a mean or a mode). ``diagnostics`` are aggregates of its fit (no
    per-record value) that outputs may show.
    """

    kind: str
    view: ParameterView
    diagnostics: dict[str, float]

    @abstractmethod
    def draw(self, noise: Noise) -> torch.Tensor:
        """One flat draw of the covered parameters."""

    def draws(self, noise: Noise, count: int) -> torch.Tensor:
        """``count`` draws as rows (count × P), the same as ``count`` calls of ``draw`` on ``noise`` (a posterior may
        compute them in one pass, as SWAG does with its deviation matrix)."""
        return torch.stack([self.draw(noise) for _ in range(count)])

    @property
    @abstractmethod
    def centre(self) -> torch.Tensor:
        """The flat vector the model holds between draws."""

    @abstractmethod
    def numbers_per_parameter(self) -> float:
        """Numbers the posterior keeps per covered parameter (its memory, in units of one parameter)."""

    @abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Its state (tensors and plain values), to save and load."""

    @abstractmethod
    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()`` (every attribute: a posterior can be made from its state alone)."""

    @classmethod
    def from_state_dict(cls: type[_P], state: Mapping[str, Any]) -> _P:
        """The posterior whose ``state_dict()`` is ``state``."""
        posterior = cls.__new__(cls)
        posterior.load_state_dict(state)
        return posterior

    def load_into(self, module: nn.Module, theta: torch.Tensor) -> None:
        """Write a flat vector (a draw, the centre) into the module's covered parameters, in place."""
        self.view.write(module, theta)

    def restore_mean(self, module: nn.Module) -> None:
        """Put the centre back into the module (after draws)."""
        self.view.write(module, self.centre)


@dataclass(frozen=True, kw_only=True, eq=False)
class FitContext:
    """What fitting a posterior reads: the configuration, the net and split it trains on, the likelihood (weights,
    bound), the prior, the seed and stage its randomness derives from, and the stage timer."""

    config: SWAGPPMConfig
    net: Net
    split: Split
    likelihood: Likelihood
    prior: Prior
    view: ParameterView
    seed: int
    stage: str
    timer: StageTimer
    progress: bool | None = False


@dataclass(kw_only=True)
class PosteriorFit(ABC):
    """How a posterior is fitted after the fine-tune: ``epochs`` passes over the training split stepping
    ``optimizer`` (0: none, e.g. a sampler that runs in ``finish``), ``after_epoch`` after each, then ``finish``."""

    context: FitContext
    epochs: int = 0
    graphs: bool = True  # whether its steps may be captured as CUDA graphs (not when the optimiser draws noise)

    def optimizer(self) -> torch.optim.Optimizer | None:
        """What steps the parameters during the epochs (None when ``epochs`` is 0)."""
        return None

    def after_epoch(self, epoch: int) -> None:  # noqa: B027 - most fits do nothing here
        """Called at the end of each epoch (1-based), e.g. to take a snapshot."""

    @abstractmethod
    def finish(self) -> Posterior:
        """The fitted posterior (the model then holds its centre)."""
