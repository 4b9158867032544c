"""SWAG-PPM: release a transformer text classifier fine-tuned on private records.

Risky records are down-weighted (w = clip(c·(1−f)+g, 0, 1)), a SWAG Gaussian
posterior is fitted on the weighted loss, and one draw is released; its privacy
cost is ε = 2·max over draws and records of w·NLL. See METHOD.md for the method.
"""

from transformers import AutoConfig, AutoModelForSequenceClassification

from swagppm._cache import clear_cache, default_cache_dir
from swagppm._config import (
    DEFAULT_LEARNING_RATES,
    ConfigError,
    DataConfig,
    ModelConfig,
    SWAGPPMConfig,
    check_choice,
    check_value,
    config_from_table,
    load_toml,
)
from swagppm._data import DataError, PreparedData, load_records, prepare_data, synthetic_corpus
from swagppm._engine import EpochInfo, TrainingFailure
from swagppm._pipeline import Fit, Preparation, Session, SWAGPPMResult, prepare, release, run_fit
from swagppm._pooled import PooledClassifier, PooledClassifierConfig
from swagppm._privacy import (
    epsilon_from_series,
    normalise_risk,
    privacy_weights,
    reweight,
    weighted_delta,
    weighted_nll,
)
from swagppm._provenance import versions
from swagppm._release import CAVEATS, ReleaseRefused, check_release_dir
from swagppm._swag import SWAGPosterior

AutoConfig.register(PooledClassifierConfig.model_type, PooledClassifierConfig, exist_ok=True)
AutoModelForSequenceClassification.register(PooledClassifierConfig, PooledClassifier, exist_ok=True)

__version__ = "0.1.0"

__all__ = [
    "CAVEATS",
    "DEFAULT_LEARNING_RATES",
    "ConfigError",
    "DataConfig",
    "DataError",
    "EpochInfo",
    "Fit",
    "ModelConfig",
    "PooledClassifier",
    "PooledClassifierConfig",
    "Preparation",
    "PreparedData",
    "ReleaseRefused",
    "SWAGPPMConfig",
    "SWAGPPMResult",
    "Session",
    "SWAGPosterior",
    "TrainingFailure",
    "check_choice",
    "check_release_dir",
    "check_value",
    "clear_cache",
    "config_from_table",
    "default_cache_dir",
    "epsilon_from_series",
    "load_records",
    "load_toml",
    "normalise_risk",
    "prepare",
    "prepare_data",
    "privacy_weights",
    "release",
    "reweight",
    "run_fit",
    "synthetic_corpus",
    "versions",
    "weighted_delta",
    "weighted_nll",
]
