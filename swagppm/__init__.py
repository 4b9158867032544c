"""SWAG-PPM: release a transformer text classifier fine-tuned on private records.

Risky records are down-weighted (w = clip(c·(1−f)+g, 0, 1)), a SWAG Gaussian
posterior is fitted on the weighted loss, and one draw is released; its privacy
cost is ε = 2·max over draws and records of w·NLL. ``docs/method.md`` describes
the method.

The names here are what a library user needs: the configuration, the trial's
parameters, ``Session`` (or ``Resources`` + ``stage1.compute_or_load`` + ``fit``
for explicit parts), the one-call ``run_fit`` and ``prepare``, the results and the errors (a release goes through
``tuner.release_chosen``: ledger, sealed claim, audit). Everything else lives in a public submodule (``config``,
``statement``, ``mechanism``, ``data``, ``models``, ``train``, ``stage1``,
``stage2``, ``evaluate``, ``releases``, ...).

Importing the package is light: the configuration, the trial's parameters and the
errors load at once, everything that needs torch, transformers or pandas on first
use. A released folder loads with plain ``AutoModelForSequenceClassification.from_pretrained(folder)``:
a standard class where its pooling allows; a mean-pooled ``PooledClassifier`` once
``swagppm.models`` is imported (or ``swagppm.register_auto_classes()`` called), which
registers it, or with ``trust_remote_code=True`` and no swagppm at all. A bare
``import swagppm`` registers nothing: it must not load torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from swagppm.config import DEFAULT_LEARNING_RATES, DataConfig, ModelConfig, SWAGPPMConfig
from swagppm.errors import ConfigError, DataError, ReleaseRefused, TrainingFailure
from swagppm.trial import TrialParams

if TYPE_CHECKING:
    from swagppm.data import PreparedData, load_records, prepare_data, synthetic_corpus
    from swagppm.models.pooled import PooledClassifier, register_auto_classes
    from swagppm.posteriors.swag import SWAGPosterior
    from swagppm.resources import Resources
    from swagppm.session import Session, prepare, run_fit
    from swagppm.stage1 import Stage1
    from swagppm.stage2 import Fit, SWAGPPMResult, fit

# Where each public name that needs torch, transformers or pandas lives; loaded on first use.
_LAZY = {
    "swagppm.data": ("PreparedData", "load_records", "prepare_data", "synthetic_corpus"),
    "swagppm.models.pooled": ("PooledClassifier", "register_auto_classes"),
    "swagppm.resources": ("Resources",),
    "swagppm.session": ("Session", "prepare", "run_fit"),
    "swagppm.stage1": ("Stage1",),
    "swagppm.stage2": ("Fit", "SWAGPPMResult", "fit"),
    "swagppm.posteriors.swag": ("SWAGPosterior",),
}
_HOME = {name: module for module, names in _LAZY.items() for name in names}

__version__ = "0.1.0"

__all__ = sorted([
    "ConfigError", "DEFAULT_LEARNING_RATES", "DataConfig", "DataError", "ModelConfig", "ReleaseRefused",
    "SWAGPPMConfig", "TrainingFailure", "TrialParams", *(name for names in _LAZY.values() for name in names),
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
