"""The parameters of one trial: what stage 2 depends on beyond the configuration (METHOD.md steps 4-8)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from swagppm.config import check_value


@dataclass(frozen=True, kw_only=True)
class TrialParams:
    """The slope ``c`` and intercept ``g`` of the privacy weights, the FT epochs and the trial's seed.

    Checked once, here: ``c`` positive and finite, ``g`` finite, at least one
    epoch. ``seed`` seeds stage 2's training and draws; ``None`` means the
    configuration's seed (stage 1 always uses that one).
    """

    c: float
    ft_epochs: int
    g: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (self.c > 0 and math.isfinite(self.c)):
            raise ValueError(f"c must be positive and finite, got {self.c}")
        if self.ft_epochs < 1:
            raise ValueError(f"ft_epochs must be at least 1, got {self.ft_epochs}")
        if not math.isfinite(self.g):
            raise ValueError(f"g must be finite, got {self.g}")
        if self.seed is not None:
            check_value(0 <= self.seed < 2**32, "seed", self.seed, "an integer in [0, 2**32)")
