"""One SWAG-PPM fit end to end (METHOD.md steps 1-8), with stage 1 shared and cached.

A ``Session`` holds what does not depend on the trial (data, tokenisation, the
model, cached encoder features) for its explicit lifetime (``with Session(config)
as session``); every ``session.fit`` reads stage 1 from the private disk cache or
computes it once. ``run_fit`` is one fit in a session of its own.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from swagppm import _rng
from swagppm._cache import PrivateCache, cache_key
from swagppm._config import ConfigError, SWAGPPMConfig, check_value
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
from swagppm._partial import HiddenSplit, boundary_states
from swagppm._privacy import epsilon_from_series, normalise_risk, privacy_weights, reweight, series_failure
from swagppm._provenance import code_digest, cpu_kernels, stage1_fingerprint, versions
from swagppm._release import check_release_dir, write_release
from swagppm._selection import Selection
from swagppm._swag import SWAGPosterior
from swagppm._utility import class_report, f1_pair, summarise

# Settings that never change stage 1 (they act on stage 2, or on where things are kept).
_NOT_STAGE1 = ("draws_privacy", "draws_utility", "stage2_init", "reweight_k", "cache_dir", "device")
# Settings that change results only on CUDA (bf16 kernels, batch shapes, graphed steps, where D lives).
_CUDA_ONLY = ("amp", "cuda_graphs", "compile_eval", "eval_batch_size", "swag_deviations_device")


@dataclass(kw_only=True)
class SWAGPPMResult:
    """The public outcome of one fit: hyperparameters, ε, the max-delta series, F1 per draw.

    Nothing here is per record, so it may go into a study database. When
    ``epsilon_is_lower_bound`` is set, the privacy draws stopped early once ε
    exceeded the requested bound and the utility draws were skipped (their lists
    are empty). ``failure`` is set (and ε is inf) when stage-2 training diverged or
    was stopped, or a draw gave a non-finite max delta. ``threads`` is the CPU
    thread count the fit ran with: on a CPU it changes ε in the last digits.
    ``cpu_kernels`` is torch's CPU kernel level on a CPU (e.g. ``"AVX512"``; empty
    elsewhere): another level rounds differently, and stage 1 amplifies it.
    ``stage1_fingerprint`` identifies the stage 1 the fit used (see
    ``stage1_fingerprint``): fits compare only when it is the same.
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
    stage1_fingerprint: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)
    majority_rate: float = 0.0
    num_train: int = 0
    num_test: int = 0
    num_classes: int = 0
    data_hash: str = ""
    device: str = ""
    threads: int = 0
    cpu_kernels: str = ""

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


@dataclass(kw_only=True)
class Fit:
    """One fit held in memory: its public result and, private to this process, its posterior and weights.

    ``posterior`` (SWAG 2) is ``None`` when the fit failed; ``weights`` are the
    per-record privacy weights of the last round. Neither may be stored or
    published: they are for audits and releases inside the session that made them.
    """

    result: SWAGPPMResult
    posterior: SWAGPosterior | None
    weights: torch.Tensor


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


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"swagppm.device = {name!r}: not a device for fitting "
                          "(use 'auto', 'cpu', 'cuda' or 'cuda:N')")
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


class Session:
    """Trial-independent state of one configuration: prepared data, model, device splits, stage 1.

    Build it once and run many fits; ``close()`` (or leaving a ``with`` block)
    frees the model and the device tensors. Stage 1 lives in the private disk
    cache, keyed by the data, every setting that changes it, the model's weights,
    the library versions and (on a CPU) the thread count, so a stale entry is never
    reused.
    """

    def __init__(self, config: SWAGPPMConfig) -> None:
        start = time.perf_counter()
        self.config = config
        self.device = resolve_device(config.device)
        self.threads = torch.get_num_threads()
        self.cpu_kernels = cpu_kernels(self.device)
        self.data: PreparedData = prepare_data(config.data, seed=config.seed)
        self.cache = PrivateCache(config.cache_dir)
        self.bundle: ModelBundle = build_model(config, self.data, self.device)
        tokenizer, max_length = self.bundle.tokenizer, config.data.max_length
        self.tokens = (
            Split.from_texts(self.data.train_texts, self.data.train_labels, tokenizer, max_length=max_length,
                             device=self.device),
            Split.from_texts(self.data.test_texts, self.data.test_labels, tokenizer, max_length=max_length,
                             device=self.device),
        )
        self.train, self.test = self._splits()
        on_cuda = self.device.type == "cuda"
        self.net = Net(self.bundle.model, self.bundle.head, device=self.device, amp=config.amp and on_cuda,
                       graphs=config.cuda_graphs and on_cuda, compile_eval=config.compile_eval and on_cuda)
        self.train_counts = np.bincount(self.data.train_labels, minlength=self.data.num_classes)
        self._setup_seconds: float | None = time.perf_counter() - start  # reported by the first fit or prepare

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the model and every tensor (device memory is freed once nothing else refers to them)."""
        for name in ("bundle", "net", "tokens", "train", "test"):
            self.__dict__.pop(name, None)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    # --- cache keys --------------------------------------------------------------------------------

    def _result_settings(self) -> dict[str, Any]:
        """What changes a computed result on this device besides the data and the weights."""
        on_cpu = self.device.type == "cpu"
        return {"device": self.device.type, "threads": self.threads if on_cpu else None, "versions": versions(),
                "code": code_digest()}

    @property
    def stage1_key(self) -> str:
        config = self.config
        settings = {k: v for k, v in config.to_dict().items()
                    if k not in _NOT_STAGE1 and not (self.device.type == "cpu" and k in _CUDA_ONLY)}
        settings["data"] = {k: v for k, v in settings["data"].items() if k != "source"}
        settings["model"] = {k: v for k, v in settings["model"].items() if k != "name_or_path"}
        return cache_key("stage1", self.data.data_hash, self.bundle.fingerprint, settings, config.learning_rates,
                         self._result_settings())

    def _splits(self) -> tuple[Split, Split]:
        """What training and draws run on: tokens, or the frozen part's outputs computed once and cached."""
        if self.bundle.head is None:
            return self.tokens
        config, bundle = self.config, self.bundle
        model = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name_or_path"}
        kind = "features" if bundle.cached_layers is None else "hidden"
        key = cache_key(kind, self.data.data_hash, bundle.fingerprint, model, config.data.max_length,
                        self._result_settings())
        named = {"train": (self.tokens[0], self.data.train_labels), "test": (self.tokens[1], self.data.test_labels)}

        def compute() -> dict[str, Any]:
            if bundle.cached_layers is None:
                return {name: pooled_features(bundle.model, split, batch_size=config.eval_batch_size).cpu()
                        for name, (split, _) in named.items()}
            return {name: boundary_states(bundle.model, split, first=bundle.cached_layers,  # type: ignore[arg-type]
                                          batch_size=config.eval_batch_size) for name, (split, _) in named.items()}

        def valid(payload: dict[str, Any]) -> bool:
            if bundle.cached_layers is None:
                return all(payload[name].shape[0] == len(split) for name, (split, _) in named.items())
            return all(split.lengths is not None and np.array_equal(payload[name]["lengths"].numpy(), split.lengths)
                       for name, (split, _) in named.items())

        payload, _ = self.cache.get_or_compute(kind, key, compute, validate=valid)
        if bundle.cached_layers is None:
            return tuple(Split(payload[name], labels, None, self.device)  # type: ignore[return-value]
                         for name, (_, labels) in named.items())
        return tuple(HiddenSplit(payload[name]["states"], labels, payload[name]["lengths"].numpy(), self.device)  # type: ignore[return-value]
                     for name, (_, labels) in named.items())

    # --- stages ------------------------------------------------------------------------------------

    def _fine_tune_and_swag(
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
                optimizer, scheduler = adamw(self.net, lr=ft_lr, weight_decay=config.finetune_weight_decay,
                                             total_steps=steps)
                history = train(self.net, self.train, stage=f"{stage} fine-tune", epochs=epochs, optimizer=optimizer,
                                scheduler=scheduler, generator=shuffle, **common)  # type: ignore[arg-type]
                if after_finetune is not None:
                    after_finetune()
            with timer("swag"):
                posterior = SWAGPosterior(rank=config.swag_rank, dtype=getattr(torch, config.swag_dtype),
                                          device=self.device, modules=config.swag_modules,
                                          deviations_device=self._deviations_device())
                history += train(self.net, self.train, stage=f"{stage} SWAG", epochs=config.swag_epochs,
                                 optimizer=sgd(self.net, lr=swag_lr, momentum=config.swag_momentum),
                                 generator=shuffle, collectors=[posterior], **common)  # type: ignore[arg-type]
        return posterior, history

    def _deviations_device(self) -> str | None:
        """Where SWAG's deviation matrix lives: the host ("cpu", pinned) or the posterior's device (None)."""
        choice = self.config.swag_deviations_device
        if choice != "auto" or self.device.type != "cuda":
            return "cpu" if choice == "cpu" else None
        size = sum(p.numel() for p in self.bundle.model.parameters() if p.requires_grad)
        needed = size * self.config.swag_rank * torch.finfo(getattr(torch, self.config.swag_dtype)).bits // 8
        free, _ = torch.cuda.mem_get_info(self.device)
        return "cpu" if needed > free / 2 else None

    def _stage1(self, *, progress: bool, timer: _Timer) -> tuple[dict[str, Any], bool]:
        """Baseline F1, stage-1 trainable state and per-record risks, from the cache or computed.

        A stage 1 whose risks or baseline are NaN raises ``TrainingFailure`` and is
        not cached (an infinite risk is valid: the normalisation handles it).
        """
        config = self.config
        baseline: dict[str, Any] = {}

        def record_baseline() -> None:
            preds = self.net.predict(self.test, config.eval_batch_size).cpu().numpy()
            baseline["f1_macro"], baseline["f1_weighted"] = f1_pair(self.data.test_labels, preds, self.data.num_classes)
            baseline["state"] = {k: v.cpu() for k, v in self.bundle.trainable_state().items()}

        def compute() -> dict[str, Any]:
            self.bundle.reset()
            parts = _Timer(self.device)
            posterior, history = self._fine_tune_and_swag(
                stage="stage1", seed=config.seed, epochs=config.stage1_epochs, weights=None, on_epoch=None,
                progress=progress, timer=parts, after_finetune=record_baseline)
            with parts("risk"):
                sweep = sweep_draws(self.net, self.train, posterior, draws=config.draws_risk,
                                    generator=_rng.generator(config.seed, "risk", device=self.device),
                                    batch_size=config.eval_batch_size, desc="risk draws", progress=progress)
            risk = sweep.record_max.double().cpu()
            if torch.isnan(risk).any():
                raise TrainingFailure("stage1", config.stage1_epochs, "the risk draws gave NaN losses; the stage-1 "
                                      "fit is unusable (lower the learning rates or check the data)")
            return {"risk": risk, "baseline_f1_macro": baseline["f1_macro"],
                    "baseline_f1_weighted": baseline["f1_weighted"], "stage1_state": baseline["state"],
                    "fingerprint": stage1_fingerprint(risk, baseline["state"]),
                    "history": [dataclasses.asdict(h) for h in history], "timings": parts.seconds}

        def valid(payload: dict[str, Any]) -> bool:
            risk = payload.get("risk")
            return (isinstance(risk, torch.Tensor) and risk.shape == (len(self.train),)
                    and not bool(torch.isnan(risk).any()) and isinstance(payload.get("fingerprint"), str))

        with timer("stage1"):
            return self.cache.get_or_compute("stage1", self.stage1_key, compute, validate=valid)

    # --- public --------------------------------------------------------------------------------------

    def prepare(self, *, progress: bool = False) -> Preparation:
        """Compute (or read) stage 1 before any trial, so bad data or a diverging stage 1 fail once, here."""
        timer = self._new_timer()
        stage1, cache_hit = self._stage1(progress=progress, timer=timer)
        data = self.data
        return Preparation(
            num_train=len(data.train_texts), num_test=len(data.test_texts), num_classes=data.num_classes,
            majority_rate=data.majority_rate, data_hash=data.data_hash,
            baseline_f1_macro=float(stage1["baseline_f1_macro"]),
            baseline_f1_weighted=float(stage1["baseline_f1_weighted"]), stage1_cache_hit=cache_hit,
            stage1_fingerprint=stage1["fingerprint"], timings=timer.seconds)

    def fit(
        self, *, c: float, ft_epochs: int, g: float = 0.0, stop_above_epsilon: float | None = None,
        seed: int | None = None, on_epoch: EpochCallback | None = None, progress: bool = False,
    ) -> Fit:
        """One SWAG-PPM fit for (c, g, ft_epochs), kept in memory (see ``Fit``).

        ``seed`` (default ``config.seed``) seeds the trial's stage-2 training and
        draws; stage 1 always uses ``config.seed``. ``stop_above_epsilon`` stops the
        privacy draws once one draw shows ε above it (ε is then a lower bound).
        ``on_epoch`` sees every epoch's aggregates and may return True to stop (a
        catastrophic fit).
        """
        _check_trial(c=c, ft_epochs=ft_epochs, g=g, seed=seed)
        seed = self.config.seed if seed is None else seed
        timer = self._new_timer()
        start = time.perf_counter() - timer.seconds.get("setup", 0.0)
        stage1, cache_hit = self._stage1(progress=progress, timer=timer)
        if not cache_hit:  # the breakdown of a stage 1 computed in this call
            timer.seconds.update({f"stage1_{part}": seconds for part, seconds in stage1["timings"].items()})
        result = self._empty_result(stage1, c=c, g=g, ft_epochs=ft_epochs, seed=seed, cache_hit=cache_hit)
        weights = privacy_weights(normalise_risk(stage1["risk"]), c=c, g=g).float().to(self.device)
        init = stage1["stage1_state"] if self.config.stage2_init == "stage1" else None
        try:
            posterior, sweep, weights = self._stage2(result, weights, init=init, seed=seed, on_epoch=on_epoch,
                                                     stop_above_epsilon=stop_above_epsilon, progress=progress,
                                                     timer=timer)
        except TrainingFailure as failure:
            result.failure = str(failure)
            result.timings = {**timer.seconds, "total": time.perf_counter() - start}
            return Fit(result=result, posterior=None, weights=weights)
        self._record_privacy(result, sweep.draw_max, stopped_early=sweep.stopped_early)
        if self.net.amp:  # a count, not seconds: how many records per draw the bf16 screen sent to float32
            timer.seconds["privacy_confirmed_per_draw"] = sweep.confirmed / max(len(sweep.draw_max), 1)
        if result.failure is None and not sweep.stopped_early:
            with timer("utility"):
                self._utility(result, posterior, seed=seed, progress=progress)
        result.timings = {**timer.seconds, "total": time.perf_counter() - start}
        return Fit(result=result, posterior=None if result.failure else posterior, weights=weights)

    # --- evaluation for comparisons (class-level aggregates only) -------------------------------------

    def test_scores(self) -> dict[str, float]:
        """Macro/weighted F1 and the macro F1 of the top and bottom class-size quartiles, current parameters."""
        self.net.train(False)
        data = self.data
        preds = self.net.predict(self.test, self.config.eval_batch_size).cpu().numpy()
        macro, weighted = f1_pair(data.test_labels, preds, data.num_classes)
        report = class_report(data.test_labels, preds, class_names=data.label_names, train_counts=self.train_counts)
        return {"f1_macro": macro, "f1_weighted": weighted, "f1_top_quartile": float(report["f1_top_quartile"]),
                "f1_bottom_quartile": float(report["f1_bottom_quartile"])}

    @contextmanager
    def _holding(self, state: dict[str, torch.Tensor] | None = None) -> Iterator[None]:
        """Load ``state`` (or nothing) into the trainable parameters for a block and put the current ones back."""
        saved = self.bundle.trainable_state()
        try:
            if state is not None:
                self.bundle.reset(state)
            yield
        finally:
            self.bundle.reset(saved)

    @contextmanager
    def _holding_baseline(self) -> Iterator[None]:
        """The non-private stage-1 model (stage 1 from the cache) in place for a block."""
        stage1, _ = self._stage1(progress=False, timer=_Timer(self.device))
        with self._holding(stage1["stage1_state"]):
            yield

    def baseline_scores(self) -> dict[str, float]:
        """``test_scores`` of the non-private stage-1 model."""
        with self._holding_baseline():
            return self.test_scores()

    def non_private_scores(self, *, epochs: int, progress: bool = False) -> dict[str, float]:
        """``test_scores`` after a plain (unweighted) fine-tune of ``epochs`` epochs from the base model."""
        config = self.config
        steps = epochs * math.ceil(len(self.train) / config.batch_size)
        with self._holding(), _rng.seeded_global_rng(config.seed, "non-private", "dropout", device=self.device):
            self.bundle.reset()
            optimizer, scheduler = adamw(self.net, lr=config.learning_rates[0],
                                         weight_decay=config.finetune_weight_decay, total_steps=steps)
            train(self.net, self.train, stage="non-private fine-tune", epochs=epochs, optimizer=optimizer,
                  scheduler=scheduler, batch_size=config.batch_size,  # type: ignore[arg-type]
                  generator=_rng.generator(config.seed, "non-private", "shuffle"), progress=progress)
            return self.test_scores()

    @contextmanager
    def _secret_draw(self, fit: Fit) -> Iterator[None]:
        """One draw of ``fit`` with secret noise in the model for a block (as a release draws it); the mean after."""
        posterior = _posterior(fit)
        try:
            posterior.load_into(self.bundle.model, posterior.sample_secret())
            yield
        finally:
            posterior.restore_mean(self.bundle.model)

    def draw_scores(self, fit: Fit, *, draws: int, seed: int | None = None) -> list[dict[str, float]]:
        """``test_scores`` of ``draws`` seeded posterior draws of ``fit`` (its own stream, not the utility one)."""
        posterior = _posterior(fit)
        generator = _rng.generator(fit.result.seed if seed is None else seed, "compare", device=self.device)
        scores = []
        try:
            for _ in range(draws):
                posterior.load_into(self.bundle.model, posterior.sample(generator))
                scores.append(self.test_scores())
        finally:
            posterior.restore_mean(self.bundle.model)
        return scores

    def record_losses(self) -> RecordLosses:
        """Every training and test record's NLL under the current parameters, at float32 (see ``RecordLosses``)."""
        batch = self.config.eval_batch_size
        exact = Net(self.bundle.model, self.bundle.head, device=self.device, amp=False)
        exact.train(False)
        return RecordLosses(members=exact.per_record_nll(self.train, batch).cpu().numpy(),
                            non_members=exact.per_record_nll(self.test, batch).cpu().numpy(),
                            member_classes=self.data.train_labels, non_member_classes=self.data.test_labels)

    def baseline_losses(self) -> RecordLosses:
        """``record_losses`` of the non-private stage-1 model."""
        with self._holding_baseline():
            return self.record_losses()

    def secret_draw_losses(self, fit: Fit) -> RecordLosses:
        """``record_losses`` of one draw with secret noise, as a release draws it (and never records)."""
        with self._secret_draw(fit):
            return self.record_losses()

    def secret_draw_scores(self, fit: Fit) -> dict[str, float]:
        """``test_scores`` of one draw with secret noise, as a release draws it (and, like it, never recorded)."""
        with self._secret_draw(fit):
            return self.test_scores()

    def release(self, fit: Fit, out_dir: str | Path, *, force: bool = False, overwrite: bool = False,
                trials_run: int | None = None, audit: Callable[[RecordLosses], dict[str, Any]] | None = None,
                tuning: Mapping[str, Any] | None = None, selection: Selection | None = None) -> Path:
        """Draw once from the fit's SWAG 2 with secret noise and save it as a Hugging Face model directory.

        See ``write_release``; the noise comes from fresh OS entropy and is never recorded.
        ``selection`` chooses the released draw by its utility on a selection set.
        """
        return write_release(self, fit, out_dir, force=force, overwrite=overwrite, trials_run=trials_run, audit=audit,
                             tuning=tuning, selection=selection)

    # --- pieces of a fit ------------------------------------------------------------------------------

    def _new_timer(self) -> _Timer:
        """A stage timer; the session's first one carries the setup time (data, model, features)."""
        timer = _Timer(self.device)
        if self._setup_seconds is not None:
            timer.seconds["setup"], self._setup_seconds = self._setup_seconds, None
        return timer

    def _empty_result(self, stage1: dict[str, Any], *, c: float, g: float, ft_epochs: int, seed: int,
                      cache_hit: bool) -> SWAGPPMResult:
        data = self.data
        return SWAGPPMResult(
            c=c, g=g, ft_epochs=ft_epochs, seed=seed, epsilon=math.inf, max_delta=[], f1_macro=[], f1_weighted=[],
            baseline_f1_macro=float(stage1["baseline_f1_macro"]),
            baseline_f1_weighted=float(stage1["baseline_f1_weighted"]), stage1_cache_hit=cache_hit,
            stage1_fingerprint=stage1["fingerprint"], majority_rate=data.majority_rate,
            num_train=len(data.train_texts), num_test=len(data.test_texts),
            num_classes=data.num_classes, data_hash=data.data_hash, device=self.device.type, threads=self.threads,
            cpu_kernels=self.cpu_kernels)

    def _stage2(
        self, result: SWAGPPMResult, weights: torch.Tensor, *, init: dict[str, torch.Tensor] | None, seed: int,
        on_epoch: EpochCallback | None, stop_above_epsilon: float | None, progress: bool, timer: _Timer,
    ) -> tuple[SWAGPosterior, Any, torch.Tensor]:
        """Steps 5-7, twice with the reweighting variant: (posterior, privacy sweep, the weights it used)."""
        config = self.config
        rounds = 2 if config.reweight_k is not None else 1
        stop_above = None if stop_above_epsilon is None else stop_above_epsilon / 2
        for round_ in range(rounds):
            self.bundle.reset(init)
            posterior, history = self._fine_tune_and_swag(
                stage="stage2" if round_ == 0 else "reweighted", seed=seed, epochs=result.ft_epochs, weights=weights,
                on_epoch=on_epoch, progress=progress, timer=timer)
            result.history += [dataclasses.asdict(h) for h in history]
            with timer("privacy"):
                sweep = sweep_draws(self.net, self.train, posterior, draws=config.draws_privacy,
                                    generator=_rng.generator(seed, "privacy", round_, device=self.device),
                                    batch_size=config.eval_batch_size, weights=weights, stop_above=stop_above,
                                    desc="privacy draws", progress=progress)
            if sweep.stopped_early or round_ == rounds - 1:
                break
            weights = reweight(weights, sweep.record_max, k=config.reweight_k)  # type: ignore[arg-type]
        return posterior, sweep, weights

    def _record_privacy(self, result: SWAGPPMResult, series: list[float], *, stopped_early: bool) -> None:
        """ε from the max-delta series; a non-finite draw makes the fit a failure (never a NaN ε)."""
        result.epsilon_is_lower_bound = stopped_early
        result.draws_skipped = self.config.draws_privacy - len(series)
        result.failure = series_failure(series)
        result.max_delta = [v for v in series if math.isfinite(v)]
        if result.failure is None:
            result.epsilon = epsilon_from_series(torch.tensor(series))

    def _utility(self, result: SWAGPPMResult, posterior: SWAGPosterior, *, seed: int, progress: bool) -> None:
        data = self.data
        for preds in predict_draws(self.net, self.test, posterior, draws=self.config.draws_utility,
                                   generator=_rng.generator(seed, "utility", device=self.device),
                                   batch_size=self.config.eval_batch_size, progress=progress):
            macro, weighted = f1_pair(data.test_labels, preds, data.num_classes)
            result.f1_macro.append(macro)
            result.f1_weighted.append(weighted)


def _posterior(fit: Fit) -> SWAGPosterior:
    if fit.posterior is None:
        raise ValueError(f"the fit failed, it has no posterior: {fit.result.failure}")
    return fit.posterior


def _check_trial(*, c: float, ft_epochs: int, g: float, seed: int | None) -> None:
    if not (c > 0 and math.isfinite(c)):
        raise ValueError(f"c must be positive and finite, got {c}")
    if ft_epochs < 1:
        raise ValueError(f"ft_epochs must be at least 1, got {ft_epochs}")
    if not math.isfinite(g):
        raise ValueError(f"g must be finite, got {g}")
    if seed is not None:
        check_value(0 <= seed < 2**32, "seed", seed, "an integer in [0, 2**32)")


def _stop_in_epsilon(stop_above_epsilon: float | None, stop_above: float | None) -> float | None:
    """The early-stop bound in ε; the deprecated ``stop_above`` was in max-delta units (ε/2)."""
    if stop_above is None:
        return stop_above_epsilon
    if stop_above_epsilon is not None:
        raise TypeError("give stop_above_epsilon only (stop_above is deprecated)")
    warnings.warn("run_fit(stop_above=...) is in max-delta units (epsilon/2) and is deprecated; pass "
                  f"stop_above_epsilon={2 * stop_above:g} (epsilon units) instead", DeprecationWarning, stacklevel=3)
    return 2 * stop_above


def run_fit(
    config: SWAGPPMConfig,
    *,
    c: float,
    ft_epochs: int,
    g: float = 0.0,
    stop_above_epsilon: float | None = None,
    seed: int | None = None,
    on_epoch: EpochCallback | None = None,
    progress: bool = False,
    stop_above: float | None = None,
) -> SWAGPPMResult:
    """One SWAG-PPM fit in a session of its own (stage 1 from the cache when it can); see ``Session.fit``.

    Several fits of one configuration are faster in one ``Session``.
    """
    with Session(config) as session:
        return session.fit(c=c, ft_epochs=ft_epochs, g=g,
                           stop_above_epsilon=_stop_in_epsilon(stop_above_epsilon, stop_above),
                           seed=seed, on_epoch=on_epoch, progress=progress).result


def prepare(config: SWAGPPMConfig, *, progress: bool = False) -> Preparation:
    """Stage 1 of ``config`` computed (or read) in a session of its own; see ``Session.prepare``."""
    with Session(config) as session:
        return session.prepare(progress=progress)


def release(
    config: SWAGPPMConfig,
    *,
    c: float,
    ft_epochs: int,
    out_dir: str | Path,
    g: float = 0.0,
    seed: int | None = None,
    trials_run: int | None = None,
    force: bool = False,
    overwrite: bool = False,
    progress: bool = False,
) -> Path:
    """Fit (c, g, ft_epochs) and release one draw of it to ``out_dir`` (see ``write_release``).

    The output folder and a data-derived tokenizer are checked before the fit, so
    a refused release costs nothing.
    """
    check_release_dir(out_dir, overwrite=overwrite, data_derived=config.model.is_tiny, force=force)
    with Session(config) as session:
        fit = session.fit(c=c, ft_epochs=ft_epochs, g=g, seed=seed, progress=progress)
        return session.release(fit, out_dir, force=force, overwrite=overwrite, trials_run=trials_run)
