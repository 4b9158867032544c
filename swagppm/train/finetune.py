"""Fine-tune, then fit a posterior: the training both stages run (METHOD.md steps 1-2 and 5-6)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from swagppm.config import StepScale, SWAGPPMConfig
from swagppm.posteriors.base import FitContext, Likelihood, ParameterView, Posterior, Prior
from swagppm.posteriors.registry import posterior_fit
from swagppm.progress import tracker
from swagppm.train import rng
from swagppm.train.engine import EpochCallback, EpochInfo, Net, Split, adamw, train
from swagppm.train.timing import StageTimer

# What ``SWAGPPMConfig.stage2_step_scale`` multiplies stage 2's AdamW learning rate by, given the privacy weights.
# AdamW divides each step by the root of the gradients' second moment, so a constant factor on the loss (c, when
# the weights are unclipped and g = 0) leaves its steps unchanged; "largest_weight" puts that factor back into the
# step, as plain SGD (SWAG's optimiser) has it.
STEP_SCALES: dict[StepScale, Callable[[torch.Tensor], float]] = {
    "none": lambda weights: 1.0,
    "largest_weight": lambda weights: float(weights.max()) if weights.numel() else 1.0,
}


def step_scale(config: SWAGPPMConfig, weights: torch.Tensor | None) -> float:
    """The factor on the fine-tune's AdamW learning rate: 1 on the plain loss (stage 1), else the setting's."""
    return 1.0 if weights is None else STEP_SCALES[config.stage2_step_scale](weights)


@dataclass(frozen=True, kw_only=True)
class PosteriorSpec:
    """Which posterior a stage fits and what its pseudo posterior is: the kind, the prior's scale s (None: flat, the
    paper's SWAG) and centre (the public initial values of the private parameters), and the bound B on each record's
    NLL (None: unbounded). Stage 1 fits the paper's SWAG (``PAPER``) on the plain loss."""

    kind: str = "swag"
    prior_scale: float | None = None
    prior_centre: dict[str, torch.Tensor] | None = None
    nll_bound: float | None = None


PAPER = PosteriorSpec()


def fine_tune_and_fit(
    net: Net, split: Split, config: SWAGPPMConfig, *, stage: str, epochs: int, seed: int, timer: StageTimer,
    weights: torch.Tensor | None = None, majority_rate: float = 0.0, on_epoch: EpochCallback | None = None,
    progress: bool | None = False, after_finetune: Callable[[], None] | None = None, spec: PosteriorSpec = PAPER,
) -> tuple[Posterior, list[EpochInfo]]:
    """AdamW fine-tune for ``epochs`` epochs, then fit the posterior ``spec`` names: (posterior, per-epoch history).

    Trains ``net`` in place from the parameters it holds, on the plain loss
    (``weights=None``: stage 1) or the weighted one (stage 2, each record's NLL
    clipped at ``spec.nll_bound``), with ``config``'s optimiser settings; on the
    weighted loss the AdamW learning rate is multiplied by ``step_scale``
    (``config.stage2_step_scale``). Shuffling and dropout are seeded from (``seed``,
    ``stage``). ``after_finetune`` runs between the two (stage 1 records its
    non-private baseline there); ``timer`` gets "finetune" and the posterior's fit
    ("swag", "laplace", ...).
    """
    ft_lr = config.learning_rates[0] * step_scale(config, weights)
    steps = epochs * math.ceil(len(split) / config.batch_size)
    run = functools.partial(train, net, split, batch_size=config.batch_size, weights=weights,
                            majority_rate=majority_rate, progress=progress, nll_bound=spec.nll_bound,
                            generator=rng.generator(seed, stage, "shuffle"))
    with rng.seeded_global_rng(seed, stage, "dropout", device=net.device):
        with timer("finetune"), epoch_lines(f"{stage}: fine-tune epoch", epochs, on_epoch, progress) as each:
            optimizer, scheduler = adamw(net, lr=ft_lr, weight_decay=config.finetune_weight_decay, total_steps=steps)
            history = run(stage=f"{stage} fine-tune", epochs=epochs, optimizer=optimizer, scheduler=scheduler,
                          on_epoch=each)
            if after_finetune is not None:
                after_finetune()
        view = ParameterView.of(net.model, config.swag_modules)
        centre = view.flatten(spec.prior_centre) if spec.prior_centre is not None else view.read(net.model)
        context = FitContext(config=config, net=net, split=split, view=view, seed=seed, stage=stage, timer=timer,
                             likelihood=Likelihood(weights=weights, bound=spec.nll_bound),
                             prior=Prior(scale=spec.prior_scale, centre=centre), progress=progress)
        with timer(spec.kind):
            fitter = posterior_fit(spec.kind, context)
            stepper = fitter.optimizer()
            if stepper is not None and fitter.epochs:
                label = f"{stage}: {spec.kind.upper() if spec.kind == 'swag' else spec.kind} epoch"
                with epoch_lines(label, fitter.epochs, on_epoch, progress) as each, \
                        context.prior.in_gradients(net.model, view, records=len(split)):
                    history += run(stage=f"{stage} {spec.kind.upper() if spec.kind == 'swag' else spec.kind}",
                                   epochs=fitter.epochs, optimizer=stepper, after_epoch=fitter.after_epoch,
                                   on_epoch=each, graphs=fitter.graphs)
            posterior = fitter.finish()
    return posterior, history


@contextmanager
def epoch_lines(label: str, epochs: int, on_epoch: EpochCallback | None,
                progress: bool | None) -> Iterator[EpochCallback]:
    """``on_epoch`` that also reports each epoch as a line when progress is shown without bars."""
    reporter = tracker(label, total=epochs, progress=progress, lines_only=True)

    def each(info: EpochInfo) -> bool | str | None:
        reporter.advance(info.epoch)
        return on_epoch(info) if on_epoch is not None else None

    try:
        yield each
    finally:
        reporter.close()
