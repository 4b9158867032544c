"""One trial (METHOD.md steps 4-8): weights from stage 1's risks, the weighted fine-tune, SWAG 2, ε and utility.

``fit(resources, stage1, params)`` is a function of explicit parts: the shared
resources of a configuration, its stage 1 and the trial's parameters. It trains
the resources' model in place (afterwards the model holds the SWAG 2 mean).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from swagppm.errors import TrainingFailure
from swagppm.mechanism import epsilon_from_series, normalise_risk, privacy_weights, reweight, series_failure
from swagppm.posteriors.base import Posterior
from swagppm.resources import Resources
from swagppm.stage1 import Stage1
from swagppm.statement import proven_bound
from swagppm.train import rng
from swagppm.train.engine import DrawCallback, EpochCallback, Sweep, predict_draws, sweep_draws
from swagppm.train.finetune import PosteriorSpec, fine_tune_and_fit
from swagppm.train.rng import SeededNoise
from swagppm.train.timing import StageTimer
from swagppm.trial import TrialParams
from swagppm.utility import f1_pair, summarise


@dataclass(kw_only=True)
class SWAGPPMResult:
    """The public outcome of one fit: hyperparameters, ε, the max-delta series, F1 per draw.

    ``epsilon`` is the measured ε, 2·max over the privacy draws of max_i w_i·min(NLL_i,
    B): an order statistic of the draws, an estimate. ``proven_epsilon`` is the bound
    2·clip(c + g, 0, 1)·B, set only when it is a theorem about this release (an exact
    sampler whose gate passed, a bounded likelihood, public risks). ``posterior`` names
    the posterior the draws came from, ``prior_scale`` and ``nll_bound`` its pseudo
    posterior; ``diagnostics`` its fit's aggregates (an exact sampler's split-R̂ and
    effective sample sizes, ‖θ_d − centre‖ of a seeded draw).

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
    posterior: str = "swag"
    prior_scale: float = math.inf
    nll_bound: float | None = None
    proven_epsilon: float | None = None
    diagnostics: dict[str, float] = field(default_factory=dict)

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

    @property
    def params(self) -> TrialParams:
        """The trial's parameters, whole, as the fit ran them (its prior scale and seed included)."""
        return TrialParams(c=self.c, ft_epochs=self.ft_epochs, g=self.g, prior_scale=self.prior_scale,
                           seed=self.seed)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(kw_only=True)
class Fit:
    """One fit held in memory: its public result and, private to this process, its posterior and weights.

    ``posterior`` (stage 2's) is ``None`` when the fit failed; ``weights`` are the
    per-record privacy weights of the last round. Neither may be stored or
    published: they are for audits and releases inside the process that made them.
    """

    result: SWAGPPMResult
    posterior: Posterior | None
    weights: torch.Tensor


DrawsCallback = Callable[[int, float], bool]  # (privacy draws done, running ε): True stops the privacy draws


def fit(resources: Resources, stage1: Stage1, params: TrialParams, *, stop_above_epsilon: float | None = None,
        on_epoch: EpochCallback | None = None, progress: bool | None = None,
        on_draws: DrawsCallback | None = None) -> Fit:
    """One SWAG-PPM fit of ``params`` from ``stage1``, kept in memory (see ``Fit``).

    ``stop_above_epsilon`` stops the privacy draws once one draw shows ε above it
    (ε is then a lower bound). ``on_draws(d, ε_d)`` is called after each privacy
    draw d of the sweep that gives ε, with the running ε_d = 2·max of the first d
    draw maxima, a lower bound of ε that only grows; returning True stops the draws
    there (ε is then the lower bound ε_d, and the utility draws are skipped).
    ``on_epoch`` sees every epoch's aggregates and may return True to stop (a
    catastrophic fit). ``result.timings`` holds this fit's
    stages and their ``total``. ``progress``: see ``swagppm.progress`` (None: shown
    when stderr is a terminal).
    """
    start = time.perf_counter()
    timer = StageTimer(resources.device)
    seed = resources.config.seed if params.seed is None else params.seed
    result = _empty_result(resources, stage1, params, seed=seed)
    config = resources.config
    risk = normalise_risk(stage1.risk, public_range=config.risk_range)
    weights = privacy_weights(risk, c=params.c, g=params.g).float().to(resources.device)
    init = stage1.model_state if config.stage2_init == "stage1" else None
    scale = result.prior_scale
    spec = PosteriorSpec(kind=config.posterior, prior_scale=None if math.isinf(scale) else scale,
                         prior_centre=resources.bundle.initial_state, nll_bound=config.nll_bound)
    try:
        posterior, sweep, weights = _stage2(resources, result, weights, init=init, seed=seed, on_epoch=on_epoch,
                                            stop_above_epsilon=stop_above_epsilon, progress=progress, timer=timer,
                                            on_draws=on_draws, spec=spec)
    except TrainingFailure as failure:
        result.failure = str(failure)
        result.timings = {**timer.seconds, "total": time.perf_counter() - start}
        return Fit(result=result, posterior=None, weights=weights)
    _record_privacy(result, sweep.draw_max, stopped_early=sweep.stopped_early,
                    draws=resources.config.draws_privacy)
    if resources.net.amp:  # a count, not seconds: how many records per draw the bf16 screen sent to float32
        timer.seconds["privacy_confirmed_per_draw"] = sweep.confirmed / max(len(sweep.draw_max), 1)
    result.diagnostics = dict(posterior.diagnostics)
    if result.failure is None and not sweep.stopped_early:
        with timer("utility"):
            _utility(resources, result, posterior, seed=seed, progress=progress)
    result.timings = {**timer.seconds, "total": time.perf_counter() - start}
    return Fit(result=result, posterior=None if result.failure else posterior, weights=weights)


def _empty_result(resources: Resources, stage1: Stage1, params: TrialParams, *, seed: int) -> SWAGPPMResult:
    data, config = resources.data, resources.config
    scale = params.resolved_prior_scale(config.prior_scale)
    return SWAGPPMResult(
        c=params.c, g=params.g, ft_epochs=params.ft_epochs, seed=seed, posterior=config.posterior, prior_scale=scale,
        nll_bound=config.nll_bound, proven_epsilon=proven_bound(config, params), epsilon=math.inf, max_delta=[],
        f1_macro=[],
        f1_weighted=[], baseline_f1_macro=stage1.baseline_f1_macro, baseline_f1_weighted=stage1.baseline_f1_weighted,
        stage1_cache_hit=stage1.cached, stage1_fingerprint=stage1.fingerprint, majority_rate=data.majority_rate,
        num_train=len(data.train_texts), num_test=len(data.test_texts), num_classes=data.num_classes,
        data_hash=data.data_hash, device=resources.device.type, threads=resources.threads,
        cpu_kernels=resources.cpu_kernels)


def _stage2(
    resources: Resources, result: SWAGPPMResult, weights: torch.Tensor, *, init: dict[str, torch.Tensor] | None,
    seed: int, on_epoch: EpochCallback | None, stop_above_epsilon: float | None, progress: bool | None,
    timer: StageTimer, spec: PosteriorSpec, on_draws: DrawsCallback | None = None,
) -> tuple[Posterior, Sweep, torch.Tensor]:
    """Steps 5-7, twice with the reweighting variant: (posterior, privacy sweep, the weights it used).

    ``on_draws`` sees the last round's sweep only (the one that gives ε)."""
    config, net = resources.config, resources.net
    rounds = 2 if config.reweight_k is not None else 1
    stop_above = None if stop_above_epsilon is None else stop_above_epsilon / 2
    for round_ in range(rounds):
        resources.bundle.reset(init)
        stage = "stage2" if round_ == 0 else "reweighted"
        posterior, history = fine_tune_and_fit(
            net, resources.train, config, stage=stage, epochs=result.ft_epochs, seed=seed, timer=timer,
            weights=weights, majority_rate=resources.data.majority_rate, on_epoch=on_epoch, progress=progress,
            spec=spec)
        result.history += [dataclasses.asdict(h) for h in history]
        last = round_ == rounds - 1
        on_draw = None if on_draws is None or not last else _as_epsilon(on_draws)
        with timer("privacy"):
            sweep = sweep_draws(net, resources.train, posterior, draws=config.draws_privacy,
                                noise=SeededNoise(rng.generator(seed, "privacy", round_, device=resources.device)),
                                batch_size=config.eval_batch_size, weights=weights, nll_bound=spec.nll_bound,
                                stop_above=stop_above,
                                on_draw=on_draw, desc=f"{stage}: privacy draws", progress=progress)
        if sweep.stopped_early or last:
            break
        weights = reweight(weights, sweep.record_max, k=config.reweight_k)  # type: ignore[arg-type]
    return posterior, sweep, weights


def _as_epsilon(on_draws: DrawsCallback) -> DrawCallback:
    """The sweep's callback (running max of the draw maxima) as ``on_draws`` takes it (the running ε)."""
    return lambda draws, running: on_draws(draws, 2.0 * running)


def _record_privacy(result: SWAGPPMResult, series: list[float], *, stopped_early: bool, draws: int) -> None:
    """ε from the max-delta series; a non-finite draw makes the fit a failure (never a NaN ε)."""
    result.epsilon_is_lower_bound = stopped_early
    result.draws_skipped = draws - len(series)
    result.failure = series_failure(series)
    result.max_delta = [v for v in series if math.isfinite(v)]
    if result.failure is None:
        result.epsilon = epsilon_from_series(torch.tensor(series))


def _utility(resources: Resources, result: SWAGPPMResult, posterior: Posterior, *, seed: int,
             progress: bool | None) -> None:
    """Step 8: macro and weighted F1 on the test split of each utility draw."""
    config, data = resources.config, resources.data
    for preds in predict_draws(resources.net, resources.test, posterior, draws=config.draws_utility,
                               noise=SeededNoise(rng.generator(seed, "utility", device=resources.device)),
                               batch_size=config.eval_batch_size, progress=progress,
                               desc="stage2: utility draws"):
        macro, weighted = f1_pair(data.test_labels, preds, data.num_classes)
        result.f1_macro.append(macro)
        result.f1_weighted.append(weighted)
