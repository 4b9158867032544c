"""Fine-tune, then SWAG: the training both stages run (METHOD.md steps 1-2 and 5-6)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from swagppm.config import StepScale, SWAGPPMConfig
from swagppm.progress import tracker
from swagppm.train import rng
from swagppm.train.engine import EpochCallback, EpochInfo, Net, Split, adamw, sgd, train
from swagppm.train.swag import SWAGPosterior
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


def fine_tune_and_swag(
    net: Net, split: Split, config: SWAGPPMConfig, *, stage: str, epochs: int, seed: int, timer: StageTimer,
    weights: torch.Tensor | None = None, majority_rate: float = 0.0, on_epoch: EpochCallback | None = None,
    progress: bool | None = False, after_finetune: Callable[[], None] | None = None,
) -> tuple[SWAGPosterior, list[EpochInfo]]:
    """AdamW fine-tune for ``epochs`` epochs, then SWAG by constant-lr SGD: (posterior, per-epoch history).

    Trains ``net`` in place from the parameters it holds, on the plain loss
    (``weights=None``: stage 1) or the weighted one (stage 2), with ``config``'s
    optimiser settings; on the weighted loss the AdamW learning rate is multiplied
    by ``step_scale`` (``config.stage2_step_scale``). Shuffling and dropout are seeded from (``seed``,
    ``stage``). ``after_finetune`` runs between the two (stage 1 records its
    non-private baseline there); ``timer`` gets "finetune" and "swag".
    """
    ft_lr, swag_lr = config.learning_rates
    ft_lr *= step_scale(config, weights)
    steps = epochs * math.ceil(len(split) / config.batch_size)
    run = functools.partial(train, net, split, batch_size=config.batch_size, weights=weights,
                            majority_rate=majority_rate, progress=progress,
                            generator=rng.generator(seed, stage, "shuffle"))
    with rng.seeded_global_rng(seed, stage, "dropout", device=net.device):
        with timer("finetune"), epoch_lines(f"{stage}: fine-tune epoch", epochs, on_epoch, progress) as each:
            optimizer, scheduler = adamw(net, lr=ft_lr, weight_decay=config.finetune_weight_decay, total_steps=steps)
            history = run(stage=f"{stage} fine-tune", epochs=epochs, optimizer=optimizer, scheduler=scheduler,
                          on_epoch=each)
            if after_finetune is not None:
                after_finetune()
        with timer("swag"), epoch_lines(f"{stage}: SWAG epoch", config.swag_epochs, on_epoch, progress) as each:
            posterior = SWAGPosterior(rank=config.swag_rank, dtype=getattr(torch, config.swag_dtype),
                                      device=net.device, modules=config.swag_modules,
                                      deviations_device=deviations_device(config, net))
            history += run(stage=f"{stage} SWAG", epochs=config.swag_epochs,
                           optimizer=sgd(net, lr=swag_lr, momentum=config.swag_momentum), collectors=[posterior],
                           on_epoch=each)
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


def deviations_device(config: SWAGPPMConfig, net: Net) -> str | None:
    """Where SWAG's deviation matrix lives: the host ("cpu", pinned) or the posterior's device (None)."""
    choice = config.swag_deviations_device
    if choice != "auto" or net.device.type != "cuda":
        return "cpu" if choice == "cpu" else None
    size = sum(p.numel() for p in net.model.parameters() if p.requires_grad)
    needed = size * config.swag_rank * torch.finfo(getattr(torch, config.swag_dtype)).bits // 8
    free, _ = torch.cuda.mem_get_info(net.device)
    return "cpu" if needed > free / 2 else None
