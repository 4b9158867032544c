"""Release: one SWAG-2 draw with secret noise, saved as a normal Hugging Face model directory plus a card.

The draw's noise (z₁, z₂) comes from fresh operating-system entropy
(``rng.secret_normal``) and is never recorded: whoever could regenerate it could
subtract it and recover parameters that are a deterministic function of the
private data. Before anything is written, every parameter the posterior does not
cover is checked to be bit-identical to its public pretrained value. The card
(``card``) carries only aggregates and the caveats of METHOD.md; the per-class
evaluation goes to an owner-only report in the private cache folder.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from swagppm.cache import cache_key
from swagppm.errors import ConfigError, ReleaseRefused
from swagppm.evaluate.probes import RecordLosses, record_losses
from swagppm.models.pooled import PooledClassifier, PooledClassifierConfig
from swagppm.provenance import tensor_digest
from swagppm.releases.card import model_card, release_card
from swagppm.releases.selection import Selection, choose_draw
from swagppm.resources import Resources
from swagppm.stage2 import Fit
from swagppm.train.engine import Net
from swagppm.utility import class_report


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


def write_release(resources: Resources, fit: Fit, out_dir: str | Path, *, force: bool, overwrite: bool,
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
    cost (trials run, the largest trial ε, an accounted total). The model holds
    the SWAG mean again afterwards.
    """
    config, bundle, data = resources.config, resources.bundle, resources.data
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
            selected, tried = choose_draw(resources, posterior, selection)
        _check_undrawn_are_public(model, set(posterior.parameter_names), bundle.public_digests)
        test_tokens = resources.tokens[1]  # the released draw on tokens (not cached features): what users will run
        full = Net(model, None, device=resources.device, amp=False)
        preds = full.predict(test_tokens, config.eval_batch_size).cpu().numpy()
        audited = None if audit is None else audit(record_losses(bundle, resources.train, resources.test, data,
                                                                 batch_size=config.eval_batch_size))
        if isinstance(model, PooledClassifier):
            PooledClassifierConfig.register_for_auto_class()
            PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
        _releasable(model).save_pretrained(out)
        _save_tokenizer(bundle.tokenizer, out, max_length=config.data.max_length)
    finally:
        posterior.restore_mean(model)
    report = class_report(data.test_labels, preds, class_names=data.label_names, train_counts=data.train_counts)
    card = release_card(config, fit.result, report, drawn=posterior.parameter_names, trials_run=trials_run,
                        data_derived=bundle.data_derived, tuning=tuning, selection=selected, audit=audited)
    (out / "release_card.json").write_text(json.dumps(card, indent=2, allow_nan=True))
    (out / "README.md").write_text(model_card(card, labels=data.label_names))
    private = {"released_draw_on_the_test_split": report} | ({"selection_candidates_tried": tried} if tried else {})
    _write_private(private_report_path(resources.cache.directory, card), private)
    return out


def private_report_path(cache_dir: Path, card: Mapping[str, Any]) -> Path:
    """Where a release's private evaluation goes: the owner-only cache folder, named by a digest of its card."""
    return cache_dir / f"release-{cache_key(card)}.json"


def _write_private(path: Path, document: dict[str, Any]) -> None:
    """An owner-only (0600) JSON file: per-class supports and the confusion matrix are private-data output."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document, handle, indent=2)


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


def _check_undrawn_are_public(model: Any, drawn: set[str], public: dict[str, str]) -> None:
    """Refuse unless every parameter outside the draw is bit-identical to its value as loaded (public)."""
    changed = [name for name, parameter in model.named_parameters()
               if name not in drawn and tensor_digest(parameter) != public.get(name)]
    if changed:
        raise ReleaseRefused(
            f"{len(changed)} parameter(s) not covered by the posterior differ from their public pretrained values "
            f"(e.g. {changed[0]!r}): releasing them undrawn would leak the private data; nothing was written")
