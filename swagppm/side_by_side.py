"""Trials side by side in one process: N fits at once, each in a thread with its own model copy and CUDA stream.

Everything a configuration's trials share stays shared: the prepared data, the
token splits (and cached features), stage 1 and the compiled passes
(``swagppm.train.compiled``). Each fit gets a ``replica``: the resources with its
own copy of the model and its own ``Net``. On CUDA each thread issues its work on
its own stream, so one trial's kernels fill the gaps another's leave.

Each fit gives the ε and F1 it gives alone: the draws come from the fit's own
seeded generators, and the blocks that draw from torch's global random state
(training: dropout) hold ``rng.GLOBAL_RNG`` while they run, so the trials train
one at a time while the others' privacy and utility draws run beside them.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import threading
from collections.abc import Sequence
from typing import TypeVar

import torch

from swagppm.resources import Resources
from swagppm.stage1 import Stage1
from swagppm.stage2 import DrawsCallback, Fit, fit
from swagppm.trial import TrialParams

ACTIVATIONS_BYTES = 2 * 2**30  # a trial's activations, buffers and CUDA graphs besides its weights and states
HEADROOM = 0.9  # share of the free device memory the trials may take

_R = TypeVar("_R", bound=Resources)


def replica(resources: _R) -> _R:
    """``resources`` with its own copy of the model (and head) and its own ``Net``; the rest shared.

    A replica is never closed (that would release the shared cache): drop it.
    """
    twin = copy.copy(resources)
    bundle = resources.bundle
    model, head = copy.deepcopy((bundle.model, bundle.head))  # together: a head may hold the model's layers
    twin.bundle = dataclasses.replace(bundle, model=model, head=head)
    twin.net = resources.net.on(model, head)
    return twin


def trials_that_fit(resources: Resources) -> int:
    """How many trials side by side fit in the device's free memory (1 on a CPU): per trial its weights, gradients
    and AdamW moments, SWAG's mean, second moment and ``swag_rank`` deviations, and ``ACTIVATIONS_BYTES``."""
    if resources.device.type != "cuda":
        return 1
    model, config = resources.bundle.model, resources.config
    everything = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    state_bytes = torch.finfo(getattr(torch, config.swag_dtype)).bits // 8
    per_trial = 4 * everything + 12 * trainable + (config.swag_rank + 2) * state_bytes * trainable + ACTIVATIONS_BYTES
    free, _ = torch.cuda.mem_get_info(resources.device)
    return max(1, int(HEADROOM * free // per_trial))


def fit_side_by_side(resources: Resources, stage1: Stage1, trials: Sequence[TrialParams], *,
                     on_draws: Sequence[DrawsCallback | None] | None = None) -> list[Fit]:
    """``stage2.fit`` of every trial at once, one thread each (the first on ``resources`` itself, the others on
    replicas); the fits in the order of ``trials``. An exception in one fit is raised after all have ended."""
    callbacks = list(on_draws) if on_draws is not None else [None] * len(trials)
    if len(callbacks) != len(trials):
        raise ValueError(f"{len(callbacks)} on_draws callbacks for {len(trials)} trials")
    parts = [resources, *(replica(resources) for _ in trials[1:])]
    outcomes: list[Fit | BaseException | None] = [None] * len(trials)

    def run(index: int) -> None:
        own = parts[index]
        stream = torch.cuda.Stream(own.device) if own.device.type == "cuda" else None
        try:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                outcomes[index] = fit(own, stage1, trials[index], on_draws=callbacks[index])
            if stream is not None:
                stream.synchronize()
        except BaseException as error:  # noqa: BLE001 - handed to the caller's thread
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(index,), name=f"trial-{index}") for index in range(len(trials))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for outcome in outcomes:
        if isinstance(outcome, BaseException):
            raise outcome
    return [outcome for outcome in outcomes if isinstance(outcome, Fit)]
