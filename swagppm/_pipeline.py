"""One SWAG-PPM fit end to end (METHOD.md steps 1-8), with stage 1 shared and cached.

A ``_Session`` holds what does not depend on the trial (data, tokenisation, the
model, cached encoder features) and is reused by every ``run_fit`` in a process
with the same configuration; stage 1 is read from the private disk cache.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from swagppm import _rng
from swagppm._cache import PrivateCache, cache_key
from swagppm._config import ConfigError, SWAGPPMConfig
from swagppm._data import PreparedData, prepare_data
from swagppm._engine import (
    EpochCallback,
    EpochInfo,
    Net,
    Split,
    TrainingFailure,
    adamw,
    pooled_features,
    predict_draws,
    sgd,
    sweep_draws,
    train,
)
from swagppm._models import ModelBundle, build_model
from swagppm._privacy import epsilon_from_series, normalise_risk, privacy_weights, reweight
from swagppm._swag import RunningMean, SWAGPosterior, in_modules
from swagppm._utility import f1_pair, summarise


@dataclass
class SWAGPPMResult:
    """The public outcome of one fit: hyperparameters, ε, the max-delta series, F1 per draw.

    Nothing here is per record, so it may go into a study database. When
    ``epsilon_is_lower_bound`` is set, the privacy draws stopped early at
    ``stop_above`` and the utility draws were skipped (their lists are empty).
    ``failure`` is set (and ε is inf) when stage-2 training diverged or was stopped.
    """

    c: float
    g: float
    ft_epochs: int
    seed: int
    epsilon: float
    max_delta: list[float]
    f1_macro: list[float]
    f1_weighted: list[float]
    baseline_f1_macro: float
    baseline_f1_weighted: float
    epsilon_is_lower_bound: bool = False
    draws_skipped: int = 0
    failure: str | None = None
    stage1_cache_hit: bool = False
    timings: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    majority_rate: float = 0.0
    num_train: int = 0
    num_test: int = 0
    num_classes: int = 0
    data_hash: str = ""
    device: str = ""

    @property
    def f1_macro_median(self) -> float:
        return summarise(self.f1_macro)["median"]

    @property
    def f1_macro_q10(self) -> float:
        return summarise(self.f1_macro)["q10"]

    @property
    def f1_weighted_median(self) -> float:
        return summarise(self.f1_weighted)["median"]

    @property
    def f1_weighted_q10(self) -> float:
        return summarise(self.f1_weighted)["q10"]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise ConfigError(f"swagppm.device = {name!r}: not a device (use 'auto', 'cpu', 'cuda' or 'cuda:N')") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"swagppm.device = {name!r}, but CUDA is not available on this machine; "
                          "use device = 'auto' or 'cpu'")
    return device


class _Timer:
    """Wall time per stage; synchronises CUDA at stage boundaries so times are honest."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            if self.device.type == "cuda":
                torch.cuda.synchronize(self.device)
            self.seconds[stage] = self.seconds.get(stage, 0.0) + time.perf_counter() - start


class _Session:
    """Trial-independent state: prepared data, model, device splits, stage 1."""

    def __init__(self, config: SWAGPPMConfig) -> None:
        self.config = config
        self.device = resolve_device(config.device)
        self.data: PreparedData = prepare_data(config.data, seed=config.seed)
        self.bundle: ModelBundle = build_model(config, self.data, self.device)
        self.cache = PrivateCache(config.cache_dir)
        tokenizer, max_length = self.bundle.tokenizer, config.data.max_length
        self.train = Split.from_texts(self.data.train_texts, self.data.train_labels, tokenizer,
                                      max_length=max_length, device=self.device)
        self.test = Split.from_texts(self.data.test_texts, self.data.test_labels, tokenizer,
                                     max_length=max_length, device=self.device)
        self.token_splits = (self.train, self.test)
        if self.bundle.head is not None:
            self.train, self.test = self._feature_splits()
        self.net = Net(self.bundle.model, self.bundle.head, device=self.device, amp=config.amp)
        self.train_counts = np.bincount(self.data.train_labels, minlength=self.data.num_classes)

    def _feature_splits(self) -> tuple[Split, Split]:
        """Frozen-encoder features of both splits, computed once and kept in the private cache."""
        config = self.config
        key = cache_key("features", self.data.data_hash, dataclasses.asdict(config.model), config.data.max_length,
                        config.seed, self.device.type, config.amp and self.device.type == "cuda")

        def compute() -> dict[str, Any]:
            return {
                name: pooled_features(self.bundle.model, split, batch_size=config.eval_batch_size, amp=config.amp).cpu()
                for name, split in (("train", self.train), ("test", self.test))
            }

        def valid(payload: dict[str, Any]) -> bool:
            return all(payload[s].shape[0] == len(split) for s, split in (("train", self.train), ("test", self.test)))

        payload, _ = self.cache.get_or_compute("features", key, compute, validate=valid)
        return (Split(payload["train"], self.data.train_labels, None, self.device),
                Split(payload["test"], self.data.test_labels, None, self.device))

    @property
    def stage1_key(self) -> str:
        config = self.config
        settings = {k: v for k, v in config.to_dict().items()
                    if k not in ("draws_privacy", "draws_utility", "stage2_init", "reweight_k", "cache_dir", "device")}
        return cache_key("stage1", self.data.data_hash, settings, config.learning_rates, self.device.type)

    def new_posterior(self) -> tuple[SWAGPosterior, RunningMean | None]:
        config = self.config
        dev_device = "cpu" if config.swag_deviations_device == "cpu" else None
        posterior = SWAGPosterior(rank=config.swag_rank, dtype=getattr(torch, config.swag_dtype),
                                  device=self.device, deviations_device=dev_device, modules=config.swag_modules)
        if config.swag_modules is None:
            return posterior, None
        modules = config.swag_modules
        rest = [n for n in self.bundle.private_parameters if not in_modules(n, modules)]
        return posterior, RunningMean(rest)

    def fine_tune_and_swag(
        self, *, stage: str, seed: int, epochs: int, weights: torch.Tensor | None, on_epoch: EpochCallback | None,
        progress: bool, timer: _Timer, after_finetune: Callable[[], None] | None = None,
    ) -> tuple[SWAGPosterior, list[EpochInfo]]:
        """Steps 1-2 (``weights=None``) or 5-6: AdamW fine-tune, then SWAG by constant-lr SGD.

        ``after_finetune`` runs between the two (stage 1 records the baseline there).
        """
        config = self.config
        ft_lr, swag_lr = config.learning_rates
        steps = epochs * math.ceil(len(self.train) / config.batch_size)
        common = dict(batch_size=config.batch_size, weights=weights, on_epoch=on_epoch,
                      majority_rate=self.data.majority_rate, progress=progress)
        shuffle = _rng.generator(seed, stage, "shuffle")
        with _rng.seeded_global_rng(seed, stage, "dropout", device=self.device):
            with timer("finetune"):
                optimizer, scheduler = adamw(self.net, lr=ft_lr, weight_decay=config.finetune_weight_decay, total_steps=steps)
                history = train(self.net, self.train, stage=f"{stage} fine-tune", epochs=epochs, optimizer=optimizer,
                                scheduler=scheduler, generator=shuffle, **common)  # type: ignore[arg-type]
                if after_finetune is not None:
                    after_finetune()
            with timer("swag"):
                posterior, rest = self.new_posterior()
                collectors = [posterior] + ([rest] if rest is not None else [])
                history += train(self.net, self.train, stage=f"{stage} SWAG", epochs=config.swag_epochs,
                                 optimizer=sgd(self.net, lr=swag_lr, momentum=config.swag_momentum),
                                 generator=shuffle, collectors=collectors, **common)  # type: ignore[arg-type]
                if rest is not None:
                    rest.load_into(self.bundle.model)
        return posterior, history

    def stage1(self, *, progress: bool, timer: _Timer) -> tuple[dict[str, Any], bool]:
        """Baseline F1, stage-1 trainable state and per-record risks, from the cache or computed."""
        config = self.config
        baseline: dict[str, Any] = {}

        def record_baseline() -> None:
            preds = self.net.predict(self.test, config.eval_batch_size).cpu().numpy()
            baseline["f1_macro"], baseline["f1_weighted"] = f1_pair(self.data.test_labels, preds, self.data.num_classes)
            baseline["state"] = {k: v.cpu() for k, v in self.bundle.trainable_state().items()}

        def compute() -> dict[str, Any]:
            self.bundle.reset()
            parts = _Timer(self.device)
            posterior, history = self.fine_tune_and_swag(stage="stage1", seed=config.seed, epochs=config.stage1_epochs,
                                                         weights=None, on_epoch=None, progress=progress, timer=parts,
                                                         after_finetune=record_baseline)
            with parts("risk"):
                sweep = sweep_draws(self.net, self.train, posterior, draws=config.draws_risk,
                                    generator=_rng.generator(config.seed, "risk", device=self.device),
                                    batch_size=config.eval_batch_size, desc="risk draws", progress=progress)
            return {
                "risk": sweep.record_max.double().cpu(),
                "baseline_f1_macro": baseline["f1_macro"],
                "baseline_f1_weighted": baseline["f1_weighted"],
                "stage1_state": baseline["state"],
                "history": [dataclasses.asdict(h) for h in history],
                "timings": parts.seconds,
            }

        def valid(payload: dict[str, Any]) -> bool:
            risk = payload.get("risk")
            return isinstance(risk, torch.Tensor) and risk.shape == (len(self.train),) and bool(torch.isfinite(risk).all())

        with timer("stage1"):
            return self.cache.get_or_compute("stage1", self.stage1_key, compute, validate=valid)


_SESSION: dict[str, _Session] = {}


def _session(config: SWAGPPMConfig) -> tuple[_Session, bool]:
    """The process's session for ``config`` (only the latest is kept, to bound memory)."""
    key = cache_key(config.to_dict())
    if key not in _SESSION:
        _SESSION.clear()
        _SESSION[key] = _Session(config)
        return _SESSION[key], True
    return _SESSION[key], False


@dataclass(frozen=True)
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
    timings: dict[str, float]


def prepare(config: SWAGPPMConfig, *, progress: bool = False) -> Preparation:
    """Load the data and model and compute (or read) stage 1 before any trial.

    Bad data, an unloadable model or a diverging stage 1 then fail here, once, with
    their own error, and the first trial starts warm.
    """
    start = time.perf_counter()
    session, _ = _session(config)
    timer = _Timer(session.device)
    timer.seconds["setup"] = time.perf_counter() - start
    stage1, cache_hit = session.stage1(progress=progress, timer=timer)
    data = session.data
    return Preparation(
        num_train=len(data.train_texts), num_test=len(data.test_texts), num_classes=data.num_classes,
        majority_rate=data.majority_rate, data_hash=data.data_hash,
        baseline_f1_macro=float(stage1["baseline_f1_macro"]), baseline_f1_weighted=float(stage1["baseline_f1_weighted"]),
        stage1_cache_hit=cache_hit, timings=timer.seconds,
    )


@dataclass
class _Fit:
    result: SWAGPPMResult
    session: _Session
    posterior: SWAGPosterior | None


def _fit(
    config: SWAGPPMConfig, *, c: float, ft_epochs: int, g: float, stop_above: float | None, seed: int | None,
    on_epoch: EpochCallback | None, progress: bool,
) -> _Fit:
    if c <= 0:
        raise ValueError(f"c must be positive, got {c}")
    if ft_epochs < 1:
        raise ValueError(f"ft_epochs must be at least 1, got {ft_epochs}")
    seed = config.seed if seed is None else seed
    start = time.perf_counter()
    session, created = _session(config)
    timer = _Timer(session.device)
    if created:
        timer.seconds["setup"] = time.perf_counter() - start
    stage1, cache_hit = session.stage1(progress=progress, timer=timer)
    if not cache_hit:  # the breakdown of a stage 1 computed in this call
        timer.seconds.update({f"stage1_{part}": seconds for part, seconds in stage1["timings"].items()})
    data = session.data
    result = SWAGPPMResult(
        c=c, g=g, ft_epochs=ft_epochs, seed=seed, epsilon=math.inf, max_delta=[], f1_macro=[], f1_weighted=[],
        baseline_f1_macro=float(stage1["baseline_f1_macro"]), baseline_f1_weighted=float(stage1["baseline_f1_weighted"]),
        stage1_cache_hit=cache_hit, majority_rate=data.majority_rate, num_train=len(data.train_texts),
        num_test=len(data.test_texts), num_classes=data.num_classes, data_hash=data.data_hash,
        device=session.device.type,
    )
    weights = privacy_weights(normalise_risk(stage1["risk"]), c=c, g=g).float().to(session.device)
    init = stage1["stage1_state"] if config.stage2_init == "stage1" else None
    posterior = None
    rounds = 2 if config.reweight_k is not None else 1
    try:
        for round_ in range(rounds):
            session.bundle.reset(init)
            posterior, history = session.fine_tune_and_swag(
                stage="stage2" if round_ == 0 else "reweighted", seed=seed, epochs=ft_epochs, weights=weights,
                on_epoch=on_epoch, progress=progress, timer=timer)
            result.history += [dataclasses.asdict(h) for h in history]
            with timer("privacy"):
                sweep = sweep_draws(session.net, session.train, posterior, draws=config.draws_privacy,
                                    generator=_rng.generator(seed, "privacy", round_, device=session.device),
                                    batch_size=config.eval_batch_size, weights=weights, stop_above=stop_above,
                                    desc="privacy draws", progress=progress)
            if sweep.stopped_early or round_ == rounds - 1:
                break
            weights = reweight(weights, sweep.record_max, k=config.reweight_k)  # type: ignore[arg-type]
    except TrainingFailure as failure:
        result.failure = str(failure)
        result.timings = {**timer.seconds, "total": time.perf_counter() - start}
        return _Fit(result, session, None)
    result.max_delta = sweep.draw_max
    result.epsilon = epsilon_from_series(torch.tensor(sweep.draw_max))
    result.epsilon_is_lower_bound = sweep.stopped_early
    result.draws_skipped = config.draws_privacy - len(sweep.draw_max)
    if not sweep.stopped_early:
        with timer("utility"):
            for preds in predict_draws(session.net, session.test, posterior, draws=config.draws_utility,
                                       generator=_rng.generator(seed, "utility", device=session.device),
                                       batch_size=config.eval_batch_size, progress=progress):
                macro, weighted = f1_pair(data.test_labels, preds, data.num_classes)
                result.f1_macro.append(macro)
                result.f1_weighted.append(weighted)
    result.timings = {**timer.seconds, "total": time.perf_counter() - start}
    return _Fit(result, session, posterior)


def run_fit(
    config: SWAGPPMConfig,
    *,
    c: float,
    ft_epochs: int,
    g: float = 0.0,
    stop_above: float | None = None,
    seed: int | None = None,
    on_epoch: EpochCallback | None = None,
    progress: bool = False,
) -> SWAGPPMResult:
    """Run one SWAG-PPM fit for (c, g, ft_epochs); stage 1 comes from the cache when it can.

    ``seed`` (default ``config.seed``) seeds the trial's stage-2 training and draws;
    stage 1 always uses ``config.seed``. ``stop_above`` stops the privacy draws once
    one draw's max delta exceeds it (ε is then a lower bound). ``on_epoch`` sees
    every epoch's aggregates and may return True to stop (a catastrophic fit).
    """
    return _fit(config, c=c, ft_epochs=ft_epochs, g=g, stop_above=stop_above, seed=seed, on_epoch=on_epoch,
                progress=progress).result
