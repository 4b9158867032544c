"""Stage 1 (METHOD.md steps 1-3): the non-private fine-tune, SWAG 1 and the per-record risks.

Stage 1 does not depend on the trial's (c, g, E). It is computed once per key
(the data, every setting that changes it, the model's weights, the library
versions, the code and, on a CPU, the thread count) and kept in the private disk
cache, so every trial of a study, in any process, reads the same one and a stale
entry is never reused.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch

from swagppm.cache import cache_key
from swagppm.config import stage1_settings
from swagppm.data.prepare import PreparedData
from swagppm.errors import TrainingFailure
from swagppm.provenance import stage1_fingerprint
from swagppm.resources import Resources
from swagppm.train import rng
from swagppm.train.engine import sweep_draws
from swagppm.train.finetune import fine_tune_and_fit
from swagppm.train.rng import SeededNoise
from swagppm.train.timing import StageTimer
from swagppm.utility import f1_pair


@dataclass(frozen=True, kw_only=True, eq=False)
class Stage1:
    """What stage 1 leaves every trial: per-record risks, the non-private baseline and its trained parameters.

    ``risk`` is PRIVATE (one value per training record): it lives in memory and
    in the owner-only cache only. ``model_state`` holds the stage-1 model's
    trainable parameters (the non-private baseline, and stage 2's start with
    ``stage2_init = "stage1"``); ``fingerprint`` identifies this stage 1 (see
    ``provenance.stage1_fingerprint``). ``history`` and ``timings`` are its
    per-epoch aggregates and the seconds of its parts. ``cached`` says that it was
    read from the cache rather than computed here; it is not part of the state.
    """

    risk: torch.Tensor
    baseline_f1_macro: float
    baseline_f1_weighted: float
    model_state: dict[str, torch.Tensor]
    fingerprint: str
    history: list[dict[str, Any]]
    timings: dict[str, float]
    cached: bool = field(default=False, repr=False)

    def state_dict(self) -> dict[str, Any]:
        """The state the cache stores (tensors and plain values, loadable with ``weights_only``)."""
        return {"risk": self.risk, "baseline_f1_macro": self.baseline_f1_macro,
                "baseline_f1_weighted": self.baseline_f1_weighted, "stage1_state": self.model_state,
                "fingerprint": self.fingerprint, "history": self.history, "timings": self.timings}

    @classmethod
    def from_state_dict(cls, state: dict[str, Any], *, cached: bool = False) -> Stage1:
        """The ``Stage1`` whose ``state_dict()`` is ``state`` (other keys, such as the cache's format, ignored)."""
        return cls(risk=state["risk"], baseline_f1_macro=float(state["baseline_f1_macro"]),
                   baseline_f1_weighted=float(state["baseline_f1_weighted"]), model_state=state["stage1_state"],
                   fingerprint=state["fingerprint"], history=state["history"], timings=state["timings"],
                   cached=cached)


@dataclass(frozen=True, kw_only=True)
class Preparation:
    """What every fit of a configuration shares: the data's shape, the baseline and stage 1's cost."""

    num_train: int
    num_test: int
    num_classes: int
    majority_rate: float
    data_hash: str
    baseline_f1_macro: float
    baseline_f1_weighted: float
    stage1_cache_hit: bool
    stage1_fingerprint: str
    timings: dict[str, float]
    stage1_timings: dict[str, float]  # stage 1's seconds by step when it was computed (kept in the cache with it)

    @classmethod
    def of(cls, data: PreparedData, stage1: Stage1, *, timings: dict[str, float]) -> Preparation:
        return cls(num_train=len(data.train_texts), num_test=len(data.test_texts), num_classes=data.num_classes,
                   majority_rate=data.majority_rate, data_hash=data.data_hash,
                   baseline_f1_macro=stage1.baseline_f1_macro, baseline_f1_weighted=stage1.baseline_f1_weighted,
                   stage1_cache_hit=stage1.cached, stage1_fingerprint=stage1.fingerprint, timings=timings,
                   stage1_timings=dict(stage1.timings))


def stage1_key(resources: Resources) -> str:
    """The cache key of ``resources``' stage 1: the data, the settings that change it, weights, versions, code."""
    config = resources.config
    settings = stage1_settings(config, on_cpu=resources.device.type == "cpu")  # each field says (swagppm.config)
    source = resources.stage1_source_digest
    return cache_key("stage1", resources.data.data_hash, resources.bundle.fingerprint, settings,
                     config.learning_rates, resources.result_settings(), *([source] if source else []))


def compute_or_load(resources: Resources, *, progress: bool | None = None) -> Stage1:
    """``resources``' stage 1 from the private cache, or computed (leaving the SWAG 1 mean in the model) and stored.

    ``progress``: see ``swagppm.progress`` (None: shown when stderr is a terminal).

    A stage 1 whose risks are NaN raises ``TrainingFailure`` and is not cached (an
    infinite risk is valid: the normalisation handles it).
    """
    num_train = len(resources.train)
    payload, hit = resources.cache.get_or_compute(
        "stage1", stage1_key(resources), lambda: _compute(resources, progress=progress).state_dict(),
        validate=lambda state: _valid(state, num_train=num_train))
    return Stage1.from_state_dict(payload, cached=hit)


def _compute(resources: Resources, *, progress: bool | None) -> Stage1:
    """Steps 1-3 from the base model: fine-tune (the baseline is taken here), SWAG 1, then the risk draws of the
    private training records. With ``[data] risk_source`` the fine-tune and SWAG 1 run on those public records
    instead, so each private record's risk depends on that record alone."""
    config, bundle, net, data = resources.config, resources.bundle, resources.net, resources.data
    baseline: dict[str, Any] = {}

    def record_baseline() -> None:
        preds = net.predict(resources.test, config.eval_batch_size).cpu().numpy()
        baseline["f1"] = f1_pair(data.test_labels, preds, data.num_classes)
        baseline["state"] = {k: v.cpu() for k, v in bundle.trainable_state().items()}

    bundle.reset()
    timer = StageTimer(resources.device)
    posterior, history = fine_tune_and_fit(
        net, resources.stage1_split, config, stage="stage1", epochs=config.stage1_epochs, seed=config.seed,
        timer=timer,
        majority_rate=data.majority_rate, progress=progress, after_finetune=record_baseline)
    with timer("risk"):
        sweep = sweep_draws(net, resources.train, posterior, draws=config.draws_risk,
                            noise=SeededNoise(rng.generator(config.seed, "risk", device=resources.device)),
                            batch_size=config.eval_batch_size, desc="stage1: risk draws", progress=progress)
    risk = sweep.record_max.double().cpu()
    if torch.isnan(risk).any():
        raise TrainingFailure("stage1", config.stage1_epochs, "the risk draws gave NaN losses; the stage-1 "
                              "fit is unusable (lower the learning rates or check the data)")
    macro, weighted = baseline["f1"]
    return Stage1(risk=risk, baseline_f1_macro=macro, baseline_f1_weighted=weighted, model_state=baseline["state"],
                  fingerprint=stage1_fingerprint(risk, baseline["state"], key=resources.fingerprint_key),
                  history=[dataclasses.asdict(h) for h in history], timings=timer.seconds)


def _valid(state: dict[str, Any], *, num_train: int) -> bool:
    risk = state.get("risk")
    return (isinstance(risk, torch.Tensor) and risk.shape == (num_train,) and not bool(torch.isnan(risk).any())
            and isinstance(state.get("fingerprint"), str))
