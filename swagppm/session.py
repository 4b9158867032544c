"""The tuner's entry point: a configuration's resources with its stage 1, fits, probes and releases.

A ``Session`` is the ``Resources`` of one configuration (data, tokenisation, the
model, cached encoder features) for an explicit lifetime (``with Session(config)
as session``); every ``session.fit`` reads stage 1 from the private disk cache or
computes it once (``stage1.compute_or_load``), then runs ``stage2.fit``. The
evaluation probes act on its parts, and so does a release (``swagppm.releases.stage``
takes the session as the resources it reads; ``tuner.release_chosen`` is the gate a
release goes through). ``run_fit`` and ``prepare`` do one thing in a session of their
own.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from swagppm.config import SWAGPPMConfig
from swagppm.evaluate import probes
from swagppm.evaluate.probes import RecordLosses
from swagppm.posteriors.base import Posterior
from swagppm.resources import Resources
from swagppm.stage1 import Preparation, Stage1, compute_or_load, stage1_key
from swagppm.stage2 import DrawsCallback, Fit, SWAGPPMResult, fit
from swagppm.train.engine import EpochCallback
from swagppm.train.timing import StageTimer
from swagppm.trial import TrialParams


class Session(Resources):
    """The trial-independent state of one configuration, with the operations the tuner runs on it.

    Build it once and run many fits; ``close()`` (or leaving a ``with`` block)
    frees the model and the device tensors. Stage 1 lives in the private disk
    cache, keyed by the data, every setting that changes it, the model's weights,
    the library versions and (on a CPU) the thread count, so a stale entry is never
    reused. The first fit or ``prepare`` reports the session's setup time.
    """

    def __init__(self, config: SWAGPPMConfig) -> None:
        super().__init__(config)
        self._setup_seconds: float | None = self.setup_seconds

    @property
    def stage1_key(self) -> str:
        return stage1_key(self)

    def prepare(self, *, progress: bool | None = None) -> Preparation:
        """Compute (or read) stage 1 before any trial, so bad data or a diverging stage 1 fail once, here."""
        timer = self._new_timer()
        stage1 = self._stage1(progress=progress, timer=timer)
        return Preparation.of(self.data, stage1, timings=timer.seconds)

    def fit(self, params: TrialParams, *, stop_above_epsilon: float | None = None,
            on_epoch: EpochCallback | None = None, on_draws: DrawsCallback | None = None,
            progress: bool | None = None) -> Fit:
        """One SWAG-PPM fit of ``params`` (c, g, ft_epochs, seed), kept in memory (see ``Fit`` and ``stage2.fit``).

        ``params.seed`` (default ``config.seed``) seeds the trial's stage-2 training
        and draws; stage 1 always uses ``config.seed``. ``stop_above_epsilon`` stops
        the privacy draws once one draw shows ε above it (ε is then a lower bound).
        ``on_epoch`` sees every epoch's aggregates and may return True to stop (a
        catastrophic fit). ``on_draws``: see ``stage2.fit``. The timings add the setup (first fit only) and stage 1.
        """
        timer = self._new_timer()
        start = time.perf_counter() - timer.seconds.get("setup", 0.0)
        stage1 = self._stage1(progress=progress, timer=timer)
        if not stage1.cached:  # the breakdown of a stage 1 computed in this call
            timer.seconds.update({f"stage1_{part}": seconds for part, seconds in stage1.timings.items()})
        done = fit(self, stage1, params, stop_above_epsilon=stop_above_epsilon, on_epoch=on_epoch,
                   progress=progress, on_draws=on_draws)
        own = {stage: seconds for stage, seconds in done.result.timings.items() if stage != "total"}
        done.result.timings = {**timer.seconds, **own, "total": time.perf_counter() - start}
        return done

    # --- evaluation for comparisons (class-level aggregates only) -------------------------------------

    def test_scores(self) -> dict[str, float]:
        """Macro/weighted F1 and the macro F1 of the top and bottom class-size quartiles, current parameters."""
        return probes.f1_scores(self.net, self.test, self.data, batch_size=self.config.eval_batch_size)

    def baseline_scores(self) -> dict[str, float]:
        """``test_scores`` of the non-private stage-1 model."""
        with self._holding_baseline():
            return self.test_scores()

    def non_private_scores(self, *, epochs: int, progress: bool | None = None) -> dict[str, float]:
        """``test_scores`` after a plain (unweighted) fine-tune of ``epochs`` epochs from the base model."""
        return probes.non_private_scores(self, epochs=epochs, progress=progress)

    def draw_scores(self, fit: Fit, *, draws: int, seed: int | None = None) -> list[dict[str, float]]:
        """``test_scores`` of ``draws`` seeded posterior draws of ``fit`` (its own stream, not the utility one)."""
        return probes.draw_scores(self.net, self.test, self.data, _posterior(fit), draws=draws,
                                  seed=fit.result.seed if seed is None else seed,
                                  batch_size=self.config.eval_batch_size)

    def record_losses(self, *, progress: bool | None = None, label: str = "audit") -> RecordLosses:
        """Every training and test record's NLL under the current parameters, at float32 (see ``RecordLosses``)."""
        return probes.record_losses(self.bundle, self.train, self.test, self.data,
                                    batch_size=self.config.eval_batch_size, progress=progress, label=label)

    def baseline_losses(self, *, progress: bool | None = None) -> RecordLosses:
        """``record_losses`` of the non-private stage-1 model."""
        with self._holding_baseline():
            return self.record_losses(progress=progress, label="audit of the non-private baseline")

    def secret_draw_losses(self, fit: Fit, *, progress: bool | None = None) -> RecordLosses:
        """``record_losses`` of one draw with secret noise, as a release draws it (and never records)."""
        with probes.secret_draw(_posterior(fit), self.bundle.model):
            return self.record_losses(progress=progress, label="audit of a release-like draw")

    def secret_draw_scores(self, fit: Fit) -> dict[str, float]:
        """``test_scores`` of one draw with secret noise, as a release draws it (and, like it, never recorded)."""
        with probes.secret_draw(_posterior(fit), self.bundle.model):
            return self.test_scores()

    # --- pieces ------------------------------------------------------------------------------------

    def _new_timer(self) -> StageTimer:
        """A stage timer; the session's first one carries the setup time (data, model, features)."""
        timer = StageTimer(self.device)
        if self._setup_seconds is not None:
            timer.seconds["setup"], self._setup_seconds = self._setup_seconds, None
        return timer

    def _stage1(self, *, progress: bool | None, timer: StageTimer) -> Stage1:
        with timer("stage1"):
            return compute_or_load(self, progress=progress)

    @contextmanager
    def _holding_baseline(self) -> Iterator[None]:
        """The non-private stage-1 model (stage 1 from the cache) in place for a block."""
        with self.bundle.holding(compute_or_load(self).model_state):
            yield


def _posterior(fit: Fit) -> Posterior:
    if fit.posterior is None:
        raise ValueError(f"the fit failed, it has no posterior: {fit.result.failure}")
    return fit.posterior


def run_fit(config: SWAGPPMConfig, params: TrialParams, *, stop_above_epsilon: float | None = None,
            on_epoch: EpochCallback | None = None, progress: bool | None = None) -> SWAGPPMResult:
    """One SWAG-PPM fit in a session of its own (stage 1 from the cache when it can); see ``Session.fit``.

    Several fits of one configuration are faster in one ``Session``.
    """
    with Session(config) as session:
        return session.fit(params, stop_above_epsilon=stop_above_epsilon, on_epoch=on_epoch,
                           progress=progress).result


def prepare(config: SWAGPPMConfig, *, progress: bool | None = None) -> Preparation:
    """Stage 1 of ``config`` computed (or read) in a session of its own; see ``Session.prepare``."""
    with Session(config) as session:
        return session.prepare(progress=progress)
