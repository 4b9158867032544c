"""The parameters of one trial: what stage 2 depends on beyond the configuration (METHOD.md steps 4-8)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, g: float = 0.0, seed: int | None = None) -> TrialParams:
        """The one reader of stored parameters (an Optuna trial's, an export's, a table row's): ``g`` is the fixed
        intercept a study that does not search g never stores, so its caller passes the study's."""
        return cls(c=float(params["c"]), ft_epochs=int(params["ft_epochs"]), g=float(params.get("g", g)), seed=seed)

    def as_params(self) -> dict[str, float | int]:
        """(c, ft_epochs, g) as an export and a card's owner report write them (the seed is owner-side, apart)."""
        return {"c": self.c, "ft_epochs": self.ft_epochs, "g": self.g}
