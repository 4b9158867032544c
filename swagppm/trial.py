"""The parameters of one trial: what stage 2 depends on beyond the configuration (METHOD.md steps 4-8)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from swagppm.config import check_value


@dataclass(frozen=True, kw_only=True)
class TrialParams:
    """The slope ``c`` and intercept ``g`` of the privacy weights, the FT epochs, the prior's scale and the seed.

    Checked once, here: ``c`` positive and finite, ``g`` finite, at least one
    epoch, ``prior_scale`` positive (inf: the flat prior). ``prior_scale`` None means
    the configuration's (a study that searches it sets it per trial). ``seed`` seeds
    stage 2's training and draws; ``None`` means the configuration's seed (stage 1
    always uses that one).
    """

    c: float
    ft_epochs: int
    g: float = 0.0
    prior_scale: float | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (self.c > 0 and math.isfinite(self.c)):
            raise ValueError(f"c must be positive and finite, got {self.c}")
        if self.ft_epochs < 1:
            raise ValueError(f"ft_epochs must be at least 1, got {self.ft_epochs}")
        if not math.isfinite(self.g):
            raise ValueError(f"g must be finite, got {self.g}")
        if self.prior_scale is not None and not self.prior_scale > 0:
            raise ValueError(f"prior_scale must be positive, got {self.prior_scale}")
        if self.seed is not None:
            check_value(0 <= self.seed < 2**32, "seed", self.seed, "an integer in [0, 2**32)")

    @classmethod
    def from_params(cls, params: Mapping[str, Any], *, g: float = 0.0, prior_scale: float | None = None,
                    seed: int | None = None) -> TrialParams:
        """The one reader of stored parameters (an Optuna trial's, an export's, a table row's): ``g`` and
        ``prior_scale`` are the fixed values a study that does not search them never stores, so its caller passes
        the study's."""
        scale = params.get("prior_scale", prior_scale)
        return cls(c=float(params["c"]), ft_epochs=int(params["ft_epochs"]), g=float(params.get("g", g)),
                   prior_scale=None if scale is None else float(scale), seed=seed)

    def as_params(self) -> dict[str, float | int]:
        """(c, ft_epochs, g[, prior_scale]) as an export and a card write them (the seed is owner-side, apart)."""
        values: dict[str, float | int] = {"c": self.c, "ft_epochs": self.ft_epochs, "g": self.g}
        if self.prior_scale is not None:
            values["prior_scale"] = self.prior_scale
        return values

    def resolved_prior_scale(self, configured: float) -> float:
        """The prior's scale this trial runs with: its own, else the configuration's."""
        return configured if self.prior_scale is None else self.prior_scale
