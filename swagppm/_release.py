"""Release: one SWAG-2 draw with secret noise, saved as a normal Hugging Face model directory plus a card.

The draw's noise (z₁, z₂) comes from fresh operating-system entropy
(``_rng.secret_normal``) and is never recorded: whoever could regenerate it could
subtract it and recover parameters that are a deterministic function of the
private data. Before anything is written, every parameter the posterior does not
cover is checked to be bit-identical to its public pretrained value. The card
carries only aggregates and the caveats of METHOD.md.
"""

from __future__ import annotations

import copy
import json
import os
import statistics
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swagppm._cache import cache_key
from swagppm._config import ConfigError, SWAGPPMConfig
from swagppm._engine import Net
from swagppm._errors import ReleaseRefused
from swagppm._models import public_name
from swagppm._pooled import PooledClassifier, PooledClassifierConfig
from swagppm._provenance import tensor_digest, versions
from swagppm._selection import Selection, choose_draw
from swagppm._statement import CAVEATS, RELEASE_NOISE, privacy_statement
from swagppm._utility import class_report

if TYPE_CHECKING:
    from swagppm._pipeline import Fit, RecordLosses, Session, SWAGPPMResult

def check_release_dir(out_dir: str | Path, *, overwrite: bool, data_derived: bool, force: bool) -> Path:
    """Refuse what would leak or destroy before any work: a data-derived tokenizer, a non-empty folder, no access."""
    if data_derived and not force:
        raise ReleaseRefused(
            "model.name_or_path = 'tiny' builds its tokenizer from the training texts: its vocabulary lists words "
            "(names, places, rare terms) that occur in the private records, so releasing it leaks them whatever "
            "epsilon says. Use a public pretrained model for releases; pass --force (force=True in Python) only "
            "for demos."
        )
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"{out}: the release folder is a file; name a new folder")
    if out.is_dir() and any(out.iterdir()) and not overwrite:
        raise ConfigError(f"{out}: the release folder is not empty; name a new folder, or pass --overwrite "
                          "(overwrite=True in Python) to write over the files of the same name")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".swagppm-write-check"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{out}: cannot write the release folder ({error.strerror or error})") from None
    return out


def write_release(session: Session, fit: Fit, out_dir: str | Path, *, force: bool, overwrite: bool,
                  trials_run: int | None, audit: Callable[[RecordLosses], dict[str, Any]] | None = None,
                  tuning: Mapping[str, Any] | None = None, selection: Selection | None = None) -> Path:
    """Draw once from ``fit``'s SWAG 2 with secret noise, check the undrawn parameters, and save model and card.

    Writes the weights, config and tokenizer (loadable with
    ``AutoModelForSequenceClassification.from_pretrained(out_dir)``), the public
    ``release_card.json`` and a ``README.md`` model card. The public card holds
    overall figures only: no paths, no count or score of an individual class, no
    confusion matrix. The per-class evaluation of the released draw is a private
    report in the owner-only cache folder (``private_report_path``), never in the
    model folder. ``audit`` turns the released draw's per-record losses (private)
    into aggregates for the card; ``tuning`` adds what choosing the configuration
    cost (trials run, the largest trial ε, an accounted total). The session's model
    holds the SWAG mean again afterwards.
    """
    config, bundle = session.config, session.bundle
    out = check_release_dir(out_dir, overwrite=overwrite, data_derived=bundle.data_derived, force=force)
    posterior = fit.posterior
    if posterior is None:
        raise ReleaseRefused(f"the fit failed, nothing to release: {fit.result.failure}")
    model = bundle.model
    selected, tried = None, None
    try:
        if selection is None:
            posterior.load_into(model, posterior.sample_secret())
        else:
            selected, tried = choose_draw(session, posterior, selection)
        _check_undrawn_are_public(model, set(posterior.parameter_names), bundle.public_digests)
        test_tokens = session.tokens[1]  # the released draw on tokens (not cached features): what users will run
        full = Net(model, None, device=session.device, amp=False)
        preds = full.predict(test_tokens, config.eval_batch_size).cpu().numpy()
        audited = None if audit is None else audit(session.record_losses())
        if isinstance(model, PooledClassifier):
            PooledClassifierConfig.register_for_auto_class()
            PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
        _releasable(model).save_pretrained(out)
        _save_tokenizer(bundle.tokenizer, out, max_length=config.data.max_length)
    finally:
        posterior.restore_mean(model)
    report = class_report(session.data.test_labels, preds, class_names=session.data.label_names,
                          train_counts=session.train_counts)
    card = _card(config, fit.result, report, drawn=posterior.parameter_names, trials_run=trials_run,
                 data_derived=bundle.data_derived)
    card |= {"tuning": dict(tuning or {"trials_run": trials_run}), "selection": selected}
    card |= {"audit": audited} if audited else {}
    card["privacy_statement"] = privacy_statement(
        epsilon=fit.result.epsilon, trainable=config.model.trainable, private_parameters=len(posterior.parameter_names),
        release_noise=RELEASE_NOISE, tuning=card["tuning"], selection=selected, audit=audited)
    (out / "release_card.json").write_text(json.dumps(card, indent=2, allow_nan=True))
    (out / "README.md").write_text(model_card(card, labels=session.data.label_names))
    private = {"released_draw_on_the_test_split": report} | ({"selection_candidates_tried": tried} if tried else {})
    _write_private(private_report_path(session, card), private)
    return out


def private_report_path(session: Session, card: Mapping[str, Any]) -> Path:
    """Where a release's private evaluation goes: the owner-only cache folder, named by a digest of its card."""
    return session.cache.directory / f"release-{cache_key(card)}.json"


def _write_private(path: Path, document: dict[str, Any]) -> None:
    """An owner-only (0600) JSON file: per-class supports and the confusion matrix are private-data output."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)


def public_config(config: SWAGPPMConfig) -> dict[str, Any]:
    """The configuration without what only the private side knows: paths of the data, the cache, a local model."""
    values = config.to_dict()
    values.pop("cache_dir")
    values["data"].pop("source")
    name = values["model"]["name_or_path"]
    values["model"]["name_or_path"] = "tiny" if name == "tiny" else _public_base(name)  # None: a local folder
    return values


def _releasable(model: Any) -> Any:
    """What is saved: the model itself, or for LoRA a copy with the (drawn) adapters merged into the public base."""
    merge = getattr(model, "merge_and_unload", None)
    return copy.deepcopy(model).merge_and_unload() if merge is not None else model


def _save_tokenizer(tokenizer: Any, out: Path, *, max_length: int) -> None:
    """Save with ``model_max_length`` = the training length, so ``truncation=True`` cuts inputs where training did."""
    saved = tokenizer.model_max_length
    tokenizer.model_max_length = max_length
    try:
        tokenizer.save_pretrained(out)
    finally:
        tokenizer.model_max_length = saved


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


def _check_undrawn_are_public(model: Any, drawn: set[str], public: dict[str, str]) -> None:
    """Refuse unless every parameter outside the draw is bit-identical to its value as loaded (public)."""
    changed = [name for name, parameter in model.named_parameters()
               if name not in drawn and tensor_digest(parameter) != public.get(name)]
    if changed:
        raise ReleaseRefused(
            f"{len(changed)} parameter(s) not covered by the posterior differ from their public pretrained values "
            f"(e.g. {changed[0]!r}): releasing them undrawn would leak the private data; nothing was written")


def _card(config: SWAGPPMConfig, result: SWAGPPMResult, report: dict[str, Any], *, drawn: tuple[str, ...],
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
