"""Release: one fresh SWAG-2 draw saved as a normal Hugging Face model directory plus a card.

The draw uses its own seed stream ("release"), never one used for the privacy or
utility draws. The card carries only aggregates and the caveats of METHOD.md.
"""

from __future__ import annotations

import json
import platform
import statistics
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

from swagppm import _rng
from swagppm._config import SWAGPPMConfig
from swagppm._engine import Net
from swagppm._pipeline import _fit
from swagppm._pooled import PooledClassifier, PooledClassifierConfig
from swagppm._utility import class_report

CAVEATS = (
    "epsilon is a local, data-dependent bound (asymptotic differential privacy); "
    "delta is not quantified for finite samples.",
    "Choosing hyperparameters by looking at epsilon and utility on the private data is itself data-dependent; "
    "report how many configurations were tried.",
    "A tokenizer or vocabulary fitted on the private texts leaks them.",
)


class ReleaseRefused(RuntimeError):
    """The release would leak private data (e.g. a tokenizer fitted on the training texts)."""


def release(
    config: SWAGPPMConfig,
    *,
    c: float,
    ft_epochs: int,
    out_dir: str | Path,
    g: float = 0.0,
    seed: int | None = None,
    trials_run: int | None = None,
    force: bool = False,
    progress: bool = False,
) -> Path:
    """Fit (stage 1 from the cache), draw once from SWAG 2 and save it to ``out_dir``.

    Writes the weights, config and tokenizer (loadable with
    ``AutoModelForSequenceClassification.from_pretrained(out_dir)``) and
    ``release_card.json``. Refuses a data-derived tokenizer unless ``force=True``.
    """
    if config.model.is_tiny and not force:
        raise ReleaseRefused(
            "model.name_or_path = 'tiny' builds its tokenizer from the training texts: its vocabulary lists words "
            "(names, places, rare terms) that occur in the private records, so releasing it leaks them whatever "
            "epsilon says. Use a public pretrained model for releases; pass force=True only for demos."
        )
    fit = _fit(config, c=c, ft_epochs=ft_epochs, g=g, stop_above=None, seed=seed, on_epoch=None, progress=progress)
    result, session = fit.result, fit.session
    if fit.posterior is None:
        raise RuntimeError(f"the fit failed, nothing to release: {result.failure}")
    seed = result.seed
    model = session.bundle.model
    fit.posterior.load_into(model, fit.posterior.sample(_rng.generator(seed, "release", device=session.device)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    try:
        # Evaluate the released draw on the tokens (not cached features): what users will run.
        test_tokens = session.token_splits[1]
        full = Net(model, None, device=session.device, amp=config.amp)
        preds = full.predict(test_tokens, config.eval_batch_size).cpu().numpy()
        if isinstance(model, PooledClassifier):
            PooledClassifierConfig.register_for_auto_class()
            PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
        model.save_pretrained(out)
        session.bundle.tokenizer.save_pretrained(out)
    finally:
        fit.posterior.restore_mean(model)
    report = class_report(session.data.test_labels, preds, class_names=session.data.class_names,
                          train_counts=session.train_counts)
    card = _card(config, result, report, private=session.bundle.private_parameters, trials_run=trials_run,
                 data_derived=session.bundle.data_derived)
    (out / "release_card.json").write_text(json.dumps(card, indent=2, allow_nan=True))
    return out


def _card(config: SWAGPPMConfig, result: Any, report: dict[str, Any], *, private: tuple[str, ...],
          trials_run: int | None, data_derived: bool) -> dict[str, Any]:
    return {
        "hyperparameters": {"c": result.c, "g": result.g, "ft_epochs": result.ft_epochs},
        "epsilon": result.epsilon,
        "max_delta_median": statistics.median(result.max_delta),
        "utility": {
            "f1_macro_median": result.f1_macro_median, "f1_macro_q10": result.f1_macro_q10,
            "f1_weighted_median": result.f1_weighted_median, "f1_weighted_q10": result.f1_weighted_q10,
            "baseline_f1_macro": result.baseline_f1_macro, "baseline_f1_weighted": result.baseline_f1_weighted,
            "released_draw": report,
        },
        "seeds": {"stage1": config.seed, "trial": result.seed, "release_stream": "release"},
        "data": {"hash": result.data_hash, "num_train": result.num_train, "num_test": result.num_test,
                 "num_classes": result.num_classes},
        "private_parameters": {"trainable": config.model.trainable, "count": len(private),
                               "names": list(private)},
        "tokenizer_data_derived": data_derived,
        "config": config.to_dict(),
        "trials_run": trials_run,
        "versions": versions(),
        "caveats": list(CAVEATS),
    }


def versions(*extra: str) -> dict[str, str]:
    """Versions of Python and the packages a result depends on (plus ``extra`` distributions), for records."""
    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("swagppm-tuner", "transformers", "tokenizers", "numpy", "scikit-learn", *extra):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found
