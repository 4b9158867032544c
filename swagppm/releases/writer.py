"""Release: one SWAG-2 draw with secret noise, saved as a normal Hugging Face model directory plus a card.

The draw's noise (z₁, z₂) comes from fresh operating-system entropy
(``rng.secret_normal``) and is never recorded: whoever could regenerate it could
subtract it and recover parameters that are a deterministic function of the
private data. Before anything is written, every parameter the posterior does not
cover is checked to be bit-identical to its public pretrained value. A release is
all or nothing (``staging``): the folder appears, under a lock, only once the
model, the public card (``card``), the README and the owner-only report (``owner``)
are all written, and only when the measured ε is within the declared cap ε* and the
caller's audit (if any) does not refute ε ≤ ε*.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from swagppm.errors import ConfigError, ReleaseRefused
from swagppm.evaluate.probes import RecordLosses, record_losses
from swagppm.models.pooled import PooledClassifier, PooledClassifierConfig
from swagppm.provenance import tensor_digest
from swagppm.releases.card import model_card, release_card
from swagppm.releases.owner import label_names, owner_report
from swagppm.releases.selection import Selection, choose_draw, public_scores
from swagppm.releases.staging import ReleaseTarget, check_target, claim, hide_config, write_owner_report
from swagppm.resources import Resources
from swagppm.stage2 import Fit, SWAGPPMResult
from swagppm.train.engine import Net
from swagppm.utility import class_report

AuditCheck = Callable[[RecordLosses], Mapping[str, Any]]
"""Sees the released draw's per-record losses before the folder is moved into place; returns the owner report's
audit section (aggregates; ``"forced": True`` when it refuted the claim and the owner released anyway), or raises
``AuditRefuted`` to refuse the release."""

NO_AUDIT = "none was run before this release"
AUDIT_PASSED = ("a membership-inference audit of the released draw (training records against held-out records) was "
                "run before release and did not refute the claim")
AUDIT_FORCED = ("a membership-inference audit of the released draw refuted the claim, and the data owner released "
                "it anyway (forced)")


class AuditRefuted(ReleaseRefused):
    """The empirical audit refutes the claim ε ≤ ε*: nothing was released."""


def check_release_dir(out_dir: str | Path, *, overwrite: bool, data_derived: bool, force: bool) -> Path:
    """Refuse what would leak or destroy, before any work: a data-derived tokenizer, a target that is a file or a
    folder that is not empty, an owner report the tool did not write, no write access beside the target.

    Call it before ``Session.fit`` (nothing is created but the target's parent
    folder); ``write_release`` and ``swagppm.release`` check again under the lock.
    """
    if data_derived and not force:
        raise ReleaseRefused(
            "model.name_or_path = 'tiny' builds its tokenizer from the training texts: its vocabulary lists words "
            "(names, places, rare terms) that occur in the private records, so releasing it leaks them whatever "
            "epsilon says. Use a public pretrained model for releases; pass --force (force=True in Python) only "
            "for demos."
        )
    out = Path(out_dir)
    check_target(out, overwrite=overwrite)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.write-check"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{out}: cannot write beside the release folder ({error.strerror or error})") from None
    return out


def check_claim(result: SWAGPPMResult, epsilon_cap: float) -> None:
    """Refuse a fit whose measured ε is not within the declared cap ε* (the claim the card makes)."""
    if not epsilon_cap > 0:
        raise ConfigError(f"epsilon_cap = {epsilon_cap!r}: the declared cap must be a positive number")
    if result.failure:
        raise ReleaseRefused(f"the fit failed, nothing to release: {result.failure}")
    if result.epsilon_is_lower_bound or not result.epsilon <= epsilon_cap:
        raise ReleaseRefused(f"the fit's measured epsilon is above the declared cap {epsilon_cap:g}: the card's claim "
                             "epsilon <= cap would be false, so nothing was released (the measured value is in no "
                             "output; choose another configuration)")


@contextlib.contextmanager
def _claimed(out_dir: str | Path | ReleaseTarget, *, overwrite: bool) -> Iterator[ReleaseTarget]:
    """The caller's claimed target as it is, or a target claimed (and let go) for this release only."""
    if isinstance(out_dir, ReleaseTarget):
        yield out_dir
        return
    with claim(out_dir, overwrite=overwrite) as target:
        yield target


def write_release(resources: Resources, fit: Fit, out_dir: str | Path | ReleaseTarget, *, epsilon_cap: float,
                  force: bool = False, overwrite: bool = False, public_labels: bool = False,
                  public_eval: str | None = None, trials_run: int | None = None,
                  tuning: Mapping[str, Any] | None = None, selection: Selection | None = None,
                  audit: AuditCheck | None = None, owner: Mapping[str, Any] | None = None) -> Path:
    """Draw once from ``fit``'s SWAG 2 with secret noise, check the undrawn parameters, and save model and card.

    ``out_dir`` is a folder (claimed here) or a ``ReleaseTarget`` the caller
    claimed before its fit. The folder holds the weights, config and tokenizer
    (loadable with ``AutoModelForSequenceClassification.from_pretrained(out_dir,
    trust_remote_code=True)``), ``release_card.json`` and ``README.md``: only
    what may be published. Class names are ``LABEL_k`` unless ``public_labels``;
    ``public_eval`` (a file of records the owner declares public) adds the
    released draw's F1 on it. Everything else goes to the owner-only report beside
    the folder; ``owner`` adds sections to it. ``audit`` may refuse the release
    (``AuditRefuted``). The model holds the SWAG mean again afterwards.
    """
    check_release_dir(_path(out_dir), overwrite=overwrite, data_derived=resources.bundle.data_derived, force=force)
    check_claim(fit.result, epsilon_cap)
    try:
        with _claimed(out_dir, overwrite=overwrite) as target, target.staging() as folder:
            _write_folder(resources, fit, folder, epsilon_cap=epsilon_cap, public_labels=public_labels,
                          public_eval=public_eval, trials_run=trials_run, tuning=tuning, selection=selection,
                          audit=audit, owner=owner)
            return target.path
    finally:
        if fit.posterior is not None:
            fit.posterior.restore_mean(resources.bundle.model)


def _write_folder(resources: Resources, fit: Fit, folder: Path, *, epsilon_cap: float, public_labels: bool,
                  public_eval: str | None, trials_run: int | None, tuning: Mapping[str, Any] | None,
                  selection: Selection | None, audit: AuditCheck | None, owner: Mapping[str, Any] | None) -> None:
    """Everything of one release into the staging ``folder``: model, card, README, owner report."""
    drawn, private = _write_draw(resources, fit, folder, public_labels=public_labels, selection=selection)
    scored = public_scores(resources, public_eval) if public_eval is not None else None
    audited = None if audit is None else audit(record_losses(
        resources.bundle, resources.train, resources.test, resources.data,
        batch_size=resources.config.eval_batch_size, label="audit of the released draw"))
    verdict = NO_AUDIT if audited is None else AUDIT_FORCED if audited.get("forced") else AUDIT_PASSED
    result = fit.result
    card = release_card(resources.config, hyperparameters={"c": result.c, "g": result.g, "ft_epochs": result.ft_epochs},
                        drawn=drawn, data_derived=resources.bundle.data_derived, epsilon_cap=epsilon_cap,
                        tuning=tuning, selection=private["selection"], public_evaluation=scored, audit=verdict)
    names = resources.data.label_names
    published = label_names(names, public=public_labels)
    (folder / "release_card.json").write_text(json.dumps(card, indent=2, allow_nan=True))
    (folder / "README.md").write_text(model_card(card, labels=published, labels_public=public_labels))
    extra = {**({"audit": dict(audited)} if audited else {}), **dict(owner or {})}
    write_owner_report(folder, owner_report(
        result, stage1_seed=resources.config.seed, epsilon_cap=epsilon_cap, names=names, published_names=published,
        evaluation=private["evaluation"], trials_run=trials_run, tuning=tuning,
        selection=private["selection_private"], extra=extra))


def _path(out_dir: str | Path | ReleaseTarget) -> Path:
    return out_dir.path if isinstance(out_dir, ReleaseTarget) else Path(out_dir)


def _write_draw(resources: Resources, fit: Fit, folder: Path, *, public_labels: bool,
                selection: Selection | None) -> tuple[tuple[str, ...], dict[str, Any]]:
    """Draw (or select) the released parameters, evaluate them on the test split and save the model into
    ``folder``; the model keeps the draw (for the audit and the public scores) until ``write_release`` ends."""
    config, bundle, data = resources.config, resources.bundle, resources.data
    posterior = fit.posterior
    if posterior is None:
        raise ReleaseRefused(f"the fit failed, nothing to release: {fit.result.failure}")
    model = bundle.model
    public, chosen = None, None
    if selection is None:
        posterior.load_into(model, posterior.sample_secret())
    else:
        public, chosen = choose_draw(resources, posterior, selection)
    _check_undrawn_are_public(model, set(posterior.parameter_names), bundle.public_digests)
    preds = Net(model, None, device=resources.device, amp=False).predict(  # on tokens: what users will run
        resources.tokens[1], config.eval_batch_size).cpu().numpy()
    if isinstance(model, PooledClassifier):
        PooledClassifierConfig.register_for_auto_class()
        PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
    releasable = _releasable(model)
    with _labelled(releasable.config, label_names(data.label_names, public=public_labels)), _as_os_error():
        releasable.save_pretrained(folder)
    hide_config(folder)
    _save_tokenizer(bundle.tokenizer, folder, max_length=config.data.max_length)
    evaluation = class_report(data.test_labels, preds, class_names=data.label_names, train_counts=data.train_counts)
    return tuple(posterior.parameter_names), {"evaluation": evaluation, "selection": public,
                                              "selection_private": chosen}


@contextlib.contextmanager
def _as_os_error() -> Iterator[None]:
    """safetensors reports a failed write (a full disk, a file-size limit) as its own error: raise it as the
    ``OSError`` it wraps, so that callers treat it as every other failed write."""
    try:
        yield
    except SafetensorError as error:
        code = re.search(r"os error (\d+)", str(error))
        if code is None:
            raise OSError(str(error)) from error
        raise OSError(int(code[1]), os.strerror(int(code[1]))) from error


@contextlib.contextmanager
def _labelled(model_config: Any, names: tuple[str, ...]) -> Iterator[None]:
    """The model config's class names set to ``names`` while it is saved, then back."""
    saved = model_config.id2label, model_config.label2id
    model_config.id2label = dict(enumerate(names))
    model_config.label2id = {name: k for k, name in enumerate(names)}
    try:
        yield
    finally:
        model_config.id2label, model_config.label2id = saved


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
