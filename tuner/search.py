"""``[search]``: the ranges a study searches, its start points and the guide's flowchart steps.

Its own module so that the samplers, which read the ranges and steps, and the
study file, which names a sampler, import it without importing each other.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scorers import GUIDE
from swagppm import ConfigError, TrialParams
from swagppm.config import check_value

if TYPE_CHECKING:
    from optuna.trial import BaseTrial


def check_finite(table: str, settings: object, names: tuple[str, ...]) -> None:
    """A ``ConfigError`` for the first of ``names`` set to inf or NaN (TOML allows both)."""
    for name in names:
        value = getattr(settings, name)
        check_value(value is None or is_finite(value), f"{table}.{name}", value, "a finite number")


def is_finite(value: float) -> bool:
    """Whether ``value`` is a finite float, or an integer a float can hold (TOML's and JSON's integers have no
    bound, where ``math.isfinite`` raises OverflowError)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


@dataclass(frozen=True)
class StartPoint:
    """One configuration to evaluate first (enqueued before the sampler proposes anything)."""

    c: float
    ft_epochs: int
    g: float | None = None


@dataclass(frozen=True, kw_only=True)
class SearchSpace:
    """``[search]``: the ranges of c, fine-tuning epochs and (optionally) g, and the start points.

    g is searched only when ``g_min``/``g_max`` are given; otherwise it stays at ``g``.
    The prior's scale s is searched (log-uniform) only when ``prior_scale_min``/
    ``prior_scale_max`` are given; otherwise every trial uses ``[swagppm] prior_scale``.
    ``probe`` adds one start point after ``start`` (see ``start_points``).
    ``epochs_step``, ``c_step`` and ``restart_epochs`` are the guide's flowchart moves,
    used by the ``flowchart`` sampler and for every trial's recommendation; half a
    step is the resolution at which the default TPE counts a proposal as a repeat
    (``tuner.samplers.tpe.repeats``).
    """

    c_min: float = 0.1
    c_max: float = 1.5
    c_log: bool = False
    ft_epochs_min: int = 1
    ft_epochs_max: int = 16
    g: float = 0.0
    g_min: float | None = None
    g_max: float | None = None
    prior_scale_min: float | None = None
    prior_scale_max: float | None = None
    start: tuple[StartPoint, ...] = (StartPoint(GUIDE.start_c, GUIDE.start_epochs),)
    probe: bool = True
    epochs_step: int = GUIDE.epochs_step
    c_step: float = GUIDE.c_step
    restart_epochs: int = GUIDE.restart_epochs

    def __post_init__(self) -> None:
        check_finite("search", self, ("c_min", "c_max", "g", "g_min", "g_max", "c_step", "prior_scale_min",
                                      "prior_scale_max"))
        check_value(self.c_min > 0, "search.c_min", self.c_min, "positive")
        check_value(self.c_max > self.c_min, "search.c_max", self.c_max, f"greater than c_min = {self.c_min}")
        check_value(self.ft_epochs_min >= 1, "search.ft_epochs_min", self.ft_epochs_min, "at least 1")
        check_value(self.ft_epochs_max >= self.ft_epochs_min, "search.ft_epochs_max", self.ft_epochs_max,
                    f"at least ft_epochs_min = {self.ft_epochs_min}")
        if (self.g_min is None) != (self.g_max is None):
            raise ConfigError("search.g_min and search.g_max: give both (to search g) or neither")
        if self.g_min is not None and self.g_max is not None:
            check_value(self.g_max > self.g_min, "search.g_max", self.g_max, f"greater than g_min = {self.g_min}")
        if (self.prior_scale_min is None) != (self.prior_scale_max is None):
            raise ConfigError("search.prior_scale_min and search.prior_scale_max: give both (to search the prior's "
                              "scale) or neither")
        if self.prior_scale_min is not None and self.prior_scale_max is not None:
            check_value(self.prior_scale_min > 0, "search.prior_scale_min", self.prior_scale_min, "positive")
            check_value(self.prior_scale_max > self.prior_scale_min, "search.prior_scale_max", self.prior_scale_max,
                        f"greater than prior_scale_min = {self.prior_scale_min}")
        check_value(self.epochs_step >= 1, "search.epochs_step", self.epochs_step, "at least 1")
        check_value(self.c_step > 0, "search.c_step", self.c_step, "positive")
        check_value(self.ft_epochs_min <= self.restart_epochs <= self.ft_epochs_max, "search.restart_epochs",
                    self.restart_epochs, f"within [{self.ft_epochs_min}, {self.ft_epochs_max}]")
        for number, point in enumerate(self.start):
            where = f"search.start[{number}]"
            check_value(self.c_min <= point.c <= self.c_max, f"{where}.c", point.c,
                        f"within [c_min, c_max] = [{self.c_min}, {self.c_max}]")
            check_value(self.ft_epochs_min <= point.ft_epochs <= self.ft_epochs_max, f"{where}.ft_epochs",
                        point.ft_epochs, f"within [{self.ft_epochs_min}, {self.ft_epochs_max}]")
            if point.g is not None:
                check_value(self.searches_g, f"{where}.g", point.g, "left out unless g is searched (g_min, g_max)")
                check_value(self.g_min <= point.g <= self.g_max, f"{where}.g", point.g,  # type: ignore[operator]
                            f"within [g_min, g_max] = [{self.g_min}, {self.g_max}]")

    @property
    def searches_g(self) -> bool:
        return self.g_min is not None

    @property
    def searches_prior_scale(self) -> bool:
        return self.prior_scale_min is not None

    def suggest(self, trial: BaseTrial) -> TrialParams:
        """The one place a trial's parameters are proposed: c (log-uniform with ``c_log``), the FT epochs and, when
        searched, g (else the fixed ``g``, never stored as a parameter) and the prior's scale (log-uniform; else the
        configuration's)."""
        c = trial.suggest_float("c", self.c_min, self.c_max, log=self.c_log)
        epochs = trial.suggest_int("ft_epochs", self.ft_epochs_min, self.ft_epochs_max)
        g = trial.suggest_float("g", self.g_min, self.g_max) if self.searches_g else self.g  # type: ignore[arg-type]
        scale = trial.suggest_float("prior_scale", self.prior_scale_min, self.prior_scale_max,  # type: ignore[arg-type]
                                    log=True) if self.searches_prior_scale else None
        return TrialParams(c=c, ft_epochs=epochs, g=g, prior_scale=scale)

    def start_params(self) -> list[dict[str, Any]]:
        """The one place start points become trials: each of ``start_points()`` as the parameters it is enqueued
        with (c, the FT epochs, and g when searched: the point's own, else the fixed ``g``)."""
        params: list[dict[str, Any]] = []
        for point in self.start_points():
            point_params: dict[str, Any] = {"c": point.c, "ft_epochs": point.ft_epochs}
            if self.searches_g:
                point_params["g"] = self.g if point.g is None else point.g
            params.append(point_params)
        return params

    def params_of(self, params: Mapping[str, Any], *, seed: int | None = None) -> TrialParams:
        """A stored trial's parameters read back, with this search's fixed g where the trial stored none (the prior's
        scale, when not searched, is the configuration's)."""
        return TrialParams.from_params(params, g=self.g, seed=seed)

    def start_points(self) -> tuple[StartPoint, ...]:
        """The points every study evaluates first: ``start``, then (with ``probe``) the private-side probe.

        The probe is the middle of the c range at ``ft_epochs_max``: the side of the
        range where ε falls and the band tightens, opposite the guide's start (high c,
        7 epochs), so TPE and GP model both sides of the trade-off from their first
        fits (``benchmarks/tuning/bench_samplers.py`` replays the choice).
        """
        probe = StartPoint(round((self.c_min + self.c_max) / 2, 6), self.ft_epochs_max)
        known = {(point.c, point.ft_epochs) for point in self.start}
        return self.start + ((probe,) if self.probe and (probe.c, probe.ft_epochs) not in known else ())
