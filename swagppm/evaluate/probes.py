"""Probes of a model on explicit splits: class-level scores (public) and per-record losses (private).

Scores are aggregates (F1 overall and of the class-size quartiles) and may be
reported; ``RecordLosses`` are per record and stay in memory. A probe that loads
posterior draws into the model puts the posterior's centre back afterwards.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
from torch import nn

from swagppm.data.prepare import PreparedData
from swagppm.models.build import ModelBundle
from swagppm.posteriors.base import Posterior
from swagppm.resources import Resources
from swagppm.train import engine, rng
from swagppm.train.engine import Net, Split
from swagppm.train.finetune import epoch_lines
from swagppm.train.rng import SeededNoise, secret_noise
from swagppm.utility import class_report, f1_pair


@dataclass(frozen=True, kw_only=True)
class RecordLosses:
    """Per-record losses for a membership-inference audit: PRIVATE, in memory only, never stored or printed.

    ``members``: NLL of each training record; ``non_members``: of each test record;
    the classes alongside (for a per-class calibrated attack). Only aggregates
    computed from them (``scorers.membership_audit``) may leave the process.
    """

    members: np.ndarray
    non_members: np.ndarray
    member_classes: np.ndarray
    non_member_classes: np.ndarray


def f1_scores(net: Net, test: Split, data: PreparedData, *, batch_size: int) -> dict[str, float]:
    """Macro/weighted F1 and the macro F1 of the top and bottom class-size quartiles on the test split.

    ``test`` holds ``data``'s test records (tokens or cached inputs, as ``net``
    takes them); the model is scored at its current parameters.
    """
    net.train(False)
    preds = net.predict(test, batch_size).cpu().numpy()
    macro, weighted = f1_pair(data.test_labels, preds, data.num_classes)
    report = class_report(data.test_labels, preds, class_names=data.label_names, train_counts=data.train_counts)
    return {"f1_macro": macro, "f1_weighted": weighted, "f1_top_quartile": float(report["f1_top_quartile"]),
            "f1_bottom_quartile": float(report["f1_bottom_quartile"])}


def record_losses(bundle: ModelBundle, train: Split, test: Split, data: PreparedData, *, batch_size: int,
                  progress: bool | None = None, label: str = "audit") -> RecordLosses:
    """Every training and test record's NLL under the model's current parameters, at float32 (each split reported
    as a stage named ``label``: on a large split this is minutes of silence otherwise)."""
    exact = Net(bundle.model, bundle.head, device=train.device, amp=False)
    exact.train(False)
    return RecordLosses(members=exact.per_record_nll(train, batch_size, progress=progress,
                                                     label=f"{label}: training records' losses").cpu().numpy(),
                        non_members=exact.per_record_nll(test, batch_size, progress=progress,
                                                         label=f"{label}: test records' losses").cpu().numpy(),
                        member_classes=data.train_labels, non_member_classes=data.test_labels)


def draw_scores(net: Net, test: Split, data: PreparedData, posterior: Posterior, *, draws: int, seed: int,
                batch_size: int) -> list[dict[str, float]]:
    """``f1_scores`` of ``draws`` posterior draws seeded from ``seed`` (a stream of their own, not the utility one)."""
    noise = SeededNoise(rng.generator(seed, "compare", device=net.device))
    scores = []
    try:
        for _ in range(draws):
            posterior.load_into(net.model, posterior.draw(noise))
            scores.append(f1_scores(net, test, data, batch_size=batch_size))
    finally:
        posterior.restore_mean(net.model)
    return scores


@contextmanager
def secret_draw(posterior: Posterior, model: nn.Module) -> Iterator[None]:
    """One draw with secret noise in ``model`` for a block (as a release draws it, never recorded); the centre
    after."""
    try:
        posterior.load_into(model, posterior.draw(secret_noise()))
        yield
    finally:
        posterior.restore_mean(model)


def non_private_scores(resources: Resources, *, epochs: int, progress: bool | None = None) -> dict[str, float]:
    """``f1_scores`` after a plain (unweighted) fine-tune of ``epochs`` epochs from the base model.

    The trainable parameters are put back afterwards.
    """
    config, bundle, net = resources.config, resources.bundle, resources.net
    steps = epochs * math.ceil(len(resources.train) / config.batch_size)
    with bundle.holding(), rng.seeded_global_rng(config.seed, "non-private", "dropout", device=resources.device):
        bundle.reset()
        optimizer, scheduler = engine.adamw(net, lr=config.learning_rates[0],
                                            weight_decay=config.finetune_weight_decay, total_steps=steps)
        with epoch_lines("non-private: fine-tune epoch", epochs, None, progress) as each:
            engine.train(net, resources.train, stage="non-private fine-tune", epochs=epochs, optimizer=optimizer,
                         scheduler=scheduler, batch_size=config.batch_size, on_epoch=each,
                         generator=rng.generator(config.seed, "non-private", "shuffle"), progress=progress)
        return f1_scores(net, resources.test, resources.data, batch_size=config.eval_batch_size)
