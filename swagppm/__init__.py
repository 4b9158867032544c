"""SWAG-PPM: release a transformer text classifier fine-tuned on private records.

Risky records are down-weighted (w = clip(c·(1−f)+g, 0, 1)), a SWAG Gaussian
posterior is fitted on the weighted loss, and one draw is released; its privacy
cost is ε = 2·max over draws and records of w·NLL. ``docs/method.md`` describes
the method.

Importing the package is light: the configuration and the errors load at once,
everything that needs torch or transformers on first use. A released folder whose
model is a ``PooledClassifier`` loads with
``AutoModelForSequenceClassification.from_pretrained(folder, trust_remote_code=True)``,
or without remote code after ``swagppm.register_auto_classes()``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from swagppm._config import (
    DEFAULT_LEARNING_RATES,
    PRIVATE_TEST,
    ConfigError,
    DataConfig,
    ModelConfig,
    SWAGPPMConfig,
    check_choice,
    check_value,
    config_from_table,
    load_toml,
)
from swagppm._errors import DataError, ReleaseRefused, TrainingFailure
from swagppm._statement import CAVEATS, RELEASED_DRAW, audit_contradiction

if TYPE_CHECKING:
    from swagppm._cache import clear_cache, default_cache_dir
    from swagppm._data import PreparedData, load_records, prepare_data, synthetic_corpus
    from swagppm._engine import EpochInfo
    from swagppm._models import register_auto_classes
    from swagppm._pipeline import (
        Fit,
        Preparation,
        RecordLosses,
        Session,
        SWAGPPMResult,
        prepare,
        release,
        run_fit,
    )
    from swagppm._pooled import PooledClassifier, PooledClassifierConfig
    from swagppm._privacy import (
        epsilon_from_series,
        normalise_risk,
        privacy_weights,
        reweight,
        weighted_delta,
        weighted_nll,
    )
    from swagppm._provenance import cpu_kernels, versions
    from swagppm._release import check_release_dir
    from swagppm._selection import Selection, SelectionFailed, check_selection
    from swagppm._swag import SWAGPosterior

# Where each name that needs torch, transformers or pandas lives; loaded on first use.
_LAZY = {
    "swagppm._cache": ("clear_cache", "default_cache_dir"),
    "swagppm._data": ("PreparedData", "load_records", "prepare_data", "synthetic_corpus"),
    "swagppm._engine": ("EpochInfo",),
    "swagppm._models": ("register_auto_classes",),
    "swagppm._pipeline": ("Fit", "Preparation", "RecordLosses", "Session", "SWAGPPMResult", "prepare", "release",
                          "run_fit"),
    "swagppm._pooled": ("PooledClassifier", "PooledClassifierConfig"),
    "swagppm._privacy": ("epsilon_from_series", "normalise_risk", "privacy_weights", "reweight", "weighted_delta",
                         "weighted_nll"),
    "swagppm._provenance": ("cpu_kernels", "versions"),
    "swagppm._release": ("check_release_dir",),
    "swagppm._selection": ("Selection", "SelectionFailed", "check_selection"),
    "swagppm._swag": ("SWAGPosterior",),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__version__ = "0.1.0"

__all__ = sorted([
    "CAVEATS", "ConfigError", "DEFAULT_LEARNING_RATES", "PRIVATE_TEST", "DataConfig", "DataError", "ModelConfig",
    "RELEASED_DRAW", "ReleaseRefused", "SWAGPPMConfig", "TrainingFailure", "audit_contradiction", "check_choice",
    "check_value", "config_from_table", "load_toml", *_HOME,
])


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'swagppm' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__
