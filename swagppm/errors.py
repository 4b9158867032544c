"""The errors swagppm raises for bad settings and input, failed fits and refused releases.

Kept in a module of their own, free of torch, so that a command line can catch
them without importing the training stack.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A configuration value is missing, unknown or out of range."""


class DataError(ValueError):
    """The training data cannot be used as given; the message says where and why."""


class TrainingFailure(RuntimeError):
    """Training diverged (NaN/inf loss) or a callback stopped it: a catastrophic fit."""

    def __init__(self, stage: str, epoch: int, reason: str) -> None:
        super().__init__(f"{stage}, epoch {epoch}: {reason}")
        self.stage, self.epoch, self.reason = stage, epoch, reason


class MixingFailure(TrainingFailure):
    """An exact sampler's chains failed its convergence gate: its draws cannot be called draws of the posterior."""

    def __init__(self, stage: str, reason: str) -> None:
        RuntimeError.__init__(self, f"{stage}, exact sampler: {reason}")
        self.stage, self.epoch, self.reason = stage, 0, reason


class ReleaseRefused(RuntimeError):
    """The release would leak private data (e.g. a tokenizer fitted on the training texts)."""
