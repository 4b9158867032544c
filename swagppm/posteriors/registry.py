"""The posterior registry: each kind of ``swagppm.posteriors.kinds`` has one fit, registered under its name.

``register_posterior(name)`` decorates a function from a ``FitContext`` to a
``PosteriorFit``; ``posterior_fit(name, context)`` builds it. The implementations load
on first use (``exact`` imports pyro).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar

from swagppm.posteriors.kinds import KINDS

if TYPE_CHECKING:
    from swagppm.posteriors.base import FitContext, PosteriorFit

FitBuilder = Callable[["FitContext"], "PosteriorFit"]
_B = TypeVar("_B", bound=FitBuilder)
FITS: dict[str, FitBuilder] = {}
_MODULES = {"swag": "swagppm.posteriors.swag", "laplace": "swagppm.posteriors.laplace",
            "exact": "swagppm.posteriors.exact", "sgld": "swagppm.posteriors.sgld"}


def register_posterior(name: str) -> Callable[[_B], _B]:
    """Register the fit of the posterior kind ``name`` (one of ``kinds.KINDS``)."""
    if name not in KINDS:
        raise ValueError(f"unknown posterior kind {name!r}: describe it in swagppm.posteriors.kinds first")

    def decorate(build: _B) -> _B:
        FITS[name] = build
        return build

    return decorate


def posterior_fit(name: str, context: FitContext) -> PosteriorFit:
    """The fit of posterior ``name`` on ``context``."""
    if name not in FITS:
        importlib.import_module(_MODULES[name])
    return FITS[name](context)


def load_all() -> dict[str, FitBuilder]:
    """Every registered fit (each implementation imported): for the conformance suite."""
    for module in _MODULES.values():
        importlib.import_module(module)
    return dict(FITS)
