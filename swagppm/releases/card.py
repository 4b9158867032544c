"""The public side of a release: ``release_card.json`` and the model folder's ``README.md``.

Only aggregates and data-independent facts go here, with the privacy statement
and the caveats of METHOD.md: no paths, no count or score of an individual class,
no confusion matrix (those go to the owner-only report).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from swagppm.config import SWAGPPMConfig
from swagppm.models.build import public_name
from swagppm.provenance import versions
from swagppm.stage2 import SWAGPPMResult
from swagppm.statement import CAVEATS, RELEASE_NOISE, privacy_statement


def release_card(config: SWAGPPMConfig, result: SWAGPPMResult, report: dict[str, Any], *, drawn: tuple[str, ...],
                 trials_run: int | None, data_derived: bool, tuning: Mapping[str, Any] | None,
                 selection: dict[str, Any] | None, audit: dict[str, Any] | None) -> dict[str, Any]:
    """The card of a released draw: the fit's aggregates, the released draw's overall scores (``report``), the
    tuning cost, the selection and the audit when there are any, and the privacy statement built from them."""
    card = _figures(config, result, report, drawn=drawn, trials_run=trials_run, data_derived=data_derived)
    card |= {"tuning": dict(tuning or {"trials_run": trials_run}), "selection": selection}
    card |= {"audit": audit} if audit else {}
    card["privacy_statement"] = privacy_statement(
        epsilon=result.epsilon, trainable=config.model.trainable, private_parameters=len(drawn),
        release_noise=RELEASE_NOISE, tuning=card["tuning"], selection=selection, audit=audit)
    return card


def _figures(config: SWAGPPMConfig, result: SWAGPPMResult, report: dict[str, Any], *, drawn: tuple[str, ...],
             trials_run: int | None, data_derived: bool) -> dict[str, Any]:
    return {
        "hyperparameters": {"c": result.c, "g": result.g, "ft_epochs": result.ft_epochs},
        "epsilon": result.epsilon,
        "max_delta_median": statistics.median(result.max_delta),
        "utility": {
            "f1_macro_median": result.f1_macro_median, "f1_macro_q10": result.f1_macro_q10,
            "f1_weighted_median": result.f1_weighted_median, "f1_weighted_q10": result.f1_weighted_q10,
            "baseline_f1_macro": result.baseline_f1_macro, "baseline_f1_weighted": result.baseline_f1_weighted,
            "released_draw": {"f1_macro": report["per_class"]["macro avg"]["f1-score"],
                              "f1_weighted": report["per_class"]["weighted avg"]["f1-score"],
                              "f1_top_quartile": report["f1_top_quartile"],
                              "f1_bottom_quartile": report["f1_bottom_quartile"]},
        },
        "seeds": {"stage1": config.seed, "trial": result.seed},
        "release_noise": RELEASE_NOISE,
        "data": {"hash": result.data_hash, "num_train": result.num_train, "num_test": result.num_test,
                 "num_classes": result.num_classes},
        "private_parameters": {"trainable": config.model.trainable, "count": len(drawn), "names": list(drawn),
                               "all_others": "bit-identical to the public pretrained model (checked before writing)"},
        "tokenizer_data_derived": data_derived,
        "config": public_config(config),
        "trials_run": trials_run,
        "reproducibility": {"device": result.device, "cpu_threads": result.threads,
                            "cpu_kernels": result.cpu_kernels or None},
        "versions": versions(),
        "caveats": list(CAVEATS),
    }


def public_config(config: SWAGPPMConfig) -> dict[str, Any]:
    """The configuration without what only the private side knows: paths of the data, the cache, a local model."""
    values = config.to_dict()
    values.pop("cache_dir")
    values["data"].pop("source")
    name = values["model"]["name_or_path"]
    values["model"]["name_or_path"] = "tiny" if name == "tiny" else _public_base(name)  # None: a local folder
    return values


def _public_base(name: str) -> str | None:
    """The base model's hub name for the card's metadata; None for local folders and the tiny preset."""
    looks_local = name.startswith(("/", ".", "~")) or Path(name).expanduser().exists()
    return None if looks_local or name == "tiny" else public_name(name)


def model_card(card: dict[str, Any], *, labels: tuple[str, ...]) -> str:
    """The model directory's README.md: Hugging Face metadata, how to use it, and its privacy terms."""
    config = card["config"]
    base = config["model"]["name_or_path"] if config["model"]["name_or_path"] != "tiny" else None
    meta = ["---", "library_name: transformers", "pipeline_tag: text-classification",
            "tags:", "- text-classification", "- differential-privacy", "- swag-ppm"]
    meta += [f"base_model: {base}"] if base else []
    lines = [
        *meta, "---", "", "# A text classifier released under SWAG-PPM", "",
        "One draw from a SWAG posterior fitted with privacy weights (SWAG-PPM): records whose loss is risky "
        "were down-weighted before training, and the released parameters carry the posterior's noise.", "",
        "## Use", "", "```python", "from transformers import pipeline", "",
        'classify = pipeline("text-classification", model="PATH/TO/THIS/FOLDER", truncation=True)',
        'classify("An employee fractured a wrist while unloading a truck.")', "```", "",
        f"Inputs are truncated to {config['data']['max_length']} tokens, the length used in training "
        "(pass `truncation=True`).", "",
        "## Privacy", "",
        f"Configuration: c = {card['hyperparameters']['c']:.4g}, g = {card['hyperparameters']['g']:.4g}, "
        f"{card['hyperparameters']['ft_epochs']} fine-tuning epochs.", "",
        *(f"- {line}" for line in card["privacy_statement"]), "",
        f"## Labels ({len(labels)} classes)", "", ", ".join(labels), "",
        "`release_card.json` beside this file holds the figures above and the library versions.", "",
    ]
    return "\n".join(lines)
