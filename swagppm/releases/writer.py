"""Release: one posterior draw with secret noise, staged as a normal Hugging Face model directory, then committed.

A release is staged below and decided above (Optuna's ask and tell, applied to a
release): ``stage`` checks the claim, a ``swagppm.claim.VerifiedClaim`` (the fit is the
one it covers, its proven ε, or else its measured ε, within the cap ε*), draws once
with noise from the one secret source (``rng.secret_noise``, fresh operating-system
entropy, never recorded: whoever could regenerate it could subtract it), checks that
every parameter the posterior does not cover is bit-identical to its public pretrained
value, and writes the model and tokenizer into a hidden staging folder. The
``StagedRelease`` it yields exposes the released draw's per-record losses for an
audit (``losses``); the caller then either commits it, saying in the open
whether and how it was audited (the card states it), or leaves the block, which
discards it. The folder appears only at the commit, all or nothing (``staging``),
with its public card (``card``), README and the owner-only report (``owner``).
The gate that stages, audits, commits and enters every attempt in the data set's
privacy ledger is ``tuner.release``; this module writes no ledger.
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from swagppm.claim import StudyClaim, VerifiedClaim
from swagppm.config import SWAGPPMConfig
from swagppm.errors import ConfigError, ReleaseRefused
from swagppm.evaluate.probes import RecordLosses, record_losses
from swagppm.models.pooled import PooledClassifier, PooledClassifierConfig
from swagppm.models.standard import standard_model
from swagppm.provenance import tensor_digest
from swagppm.releases.card import ReleaseCard, release_card
from swagppm.releases.owner import label_names, owner_report
from swagppm.releases.selection import Selection, choose_draw, public_scores
from swagppm.releases.staging import CARD_FILE, ReleaseTarget, check_target, claim, hide_config
from swagppm.resources import Resources
from swagppm.stage2 import Fit, SWAGPPMResult
from swagppm.statement import AccountedTotal, AuditVerdict
from swagppm.train.engine import Net
from swagppm.train.rng import secret_noise
from swagppm.utility import class_report

NO_AUDIT = AuditVerdict(outcome=None)
UNDECLARED = ("the study has no declared label set, and a class list derived from the data tells whether a record "
              "of a rare class was trained on (a class is kept or dropped by its count); declare the classes the "
              "model outputs in the study file ([data] labels = [\"a\", \"b\", ...] or labels_file = \"FILE\", "
              "one label a line) and run the study again")


class AuditRefuted(ReleaseRefused):
    """The empirical audit refutes the claim ε ≤ ε*: nothing was released. ``epsilon_lower_bound`` is the
    audit's bound (an aggregate, for the owner)."""

    def __init__(self, message: str, *, epsilon_lower_bound: float | None = None) -> None:
        super().__init__(message)
        self.epsilon_lower_bound = epsilon_lower_bound


@dataclass(frozen=True, kw_only=True)
class ReleaseSpec:
    """What one release claims and may publish, everything it reads besides the fit and the resources.

    ``claim`` is the study's verified claim (``swagppm.claim.VerifiedClaim``: sealed
    when the study was created and checked since): the card's privacy and tuning
    sections come from it alone, and a fit it does not cover (a measured or proven ε
    above its cap ε*, another posterior, prior, bound or risk source) is refused.
    ``total`` is the accounted total its ledger composes (an accounted claim needs it);
    ``by_study`` False says the configuration was chosen by hand, not by the study's
    search (the card then states no tuning). Class names are ``LABEL_k`` unless
    ``public_labels`` (then the declared names); ``public_eval`` (records the owner
    declares public) adds the released draw's F1 on them to the card; ``selection``
    chooses the released draw by its utility; ``force`` releases a data-derived
    tokenizer (demos only); ``overwrite`` replaces a folder that is not empty, as a
    whole; ``standard_class`` saves a mean-pooled head as a standard class too
    (``swagppm.models.standard``: one averaging layer appended, float32 only; first-token
    pooling and native heads are always standard). ``tuner.release`` is the gate that
    builds it: ledger entry, claim, audit.
    """

    claim: VerifiedClaim
    public_labels: bool = False
    public_eval: str | None = None
    selection: Selection | None = None
    force: bool = False
    overwrite: bool = False
    standard_class: bool = False
    total: AccountedTotal | None = None
    by_study: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.claim, VerifiedClaim):
            raise TypeError("ReleaseSpec.claim must be a VerifiedClaim (swagppm.claim.SealedClaim.verify): a release "
                            "states only a claim sealed when its study was created; tuner.release_chosen is the gate")

    @property
    def epsilon_cap(self) -> float:
        """ε*, the cap the card claims, fixed before any fit."""
        return self.claim.claim.epsilon_cap


def check_release(out_dir: str | Path, spec: ReleaseSpec, config: SWAGPPMConfig, *,
                  report: Path | None = None) -> Path:
    """Refuse what would leak or destroy, before any work: no declared label set, a data-derived tokenizer, a target
    that is a file or a folder that is not empty, an owner report the tool did not write or one inside the public
    folder (``report``: its path when not beside the folder), no write access beside it.

    Call it before ``Session.fit`` (nothing is created but the target's parent folder); ``stage`` checks again.
    """
    if config.data.declared_labels is None:
        raise ReleaseRefused(f"nothing released: {UNDECLARED}")
    if config.model.is_tiny and not spec.force:
        raise ReleaseRefused(
            "model.name_or_path = 'tiny' builds its tokenizer from the training texts: its vocabulary lists words "
            "(names, places, rare terms) that occur in the private records, so releasing it leaks them whatever "
            "epsilon says. Use a public pretrained model for releases; pass --force (force=True in Python) only "
            "for demos."
        )
    out = Path(out_dir)
    check_target(out, overwrite=spec.overwrite, report=report)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        probe = out.parent / f".{out.name}.write-check"
        probe.touch()
        probe.unlink()
    except OSError as error:
        raise ConfigError(f"{out}: cannot write beside the release folder ({error.strerror or error})") from None
    return out


def check_covered(config: SWAGPPMConfig, prior_scale: float, claim: StudyClaim) -> None:
    """Refuse a configuration the claim does not cover: another posterior, prior scale, NLL bound or risk source than
    the ones the claim fixed when its study was created (checked before the fit, and again on its result)."""
    differs = [what for what, same in (
        (f"posterior = {config.posterior!r} (the claim: {claim.posterior!r})", config.posterior == claim.posterior),
        (f"prior_scale = {prior_scale:g} (the claim: {claim.to_dict()['prior_scale']})",
         claim.covers_prior_scale(prior_scale)),
        (f"nll_bound = {config.nll_bound} (the claim: {claim.nll_bound})", config.nll_bound == claim.nll_bound),
        (f"public risks = {config.public_risks} (the claim: {claim.public_risks})",
         config.public_risks == claim.public_risks)) if not same]
    if differs:
        raise ReleaseRefused(f"the configuration is not the one its claim covers ({'; '.join(differs)}): the claim was "
                             "fixed when the study was created, so nothing was released; release the configuration "
                             "the study declared")


def check_claim(result: SWAGPPMResult, claim: StudyClaim, config: SWAGPPMConfig) -> None:
    """Refuse a fit the claim does not cover (``check_covered``, at the fit's own prior scale), or whose ε is above its
    cap ε* (the fit's proven ε when it has one, known before the fit, else its measured ε)."""
    if result.failure:
        raise ReleaseRefused(f"the fit failed, nothing to release: {result.failure}")
    check_covered(config, result.prior_scale, claim)
    cap = claim.epsilon_cap
    if result.proven_epsilon is not None:
        if not result.proven_epsilon <= cap:
            raise ReleaseRefused(f"the proven epsilon 2 x clip(c + g, 0, 1) x B = {result.proven_epsilon:.4g} is above "
                                 f"the declared cap {cap:g}: nothing was released (lower c + g or B)")
        return
    if result.epsilon_is_lower_bound or not result.epsilon <= cap:
        raise ReleaseRefused(f"the fit's measured epsilon is above the declared cap {cap:g}: the card's claim "
                             "epsilon <= cap would be false, so nothing was released (the measured value is in no "
                             "output; choose another configuration)")


@dataclass(kw_only=True)
class StagedRelease:
    """A release written into its hidden staging folder, not yet in place; the released draw is in the model.

    ``losses()`` gives the draw's per-record losses (private, for an audit in this
    process); ``commit`` writes the card, the README and the owner report and puts
    the folder in place; leaving ``stage``'s block without a commit discards it.
    ``remote_code`` says that the saved model is the pooled classifier, whose code
    the folder carries (its card's snippet then passes ``trust_remote_code=True``).
    """

    resources: Resources
    fit: Fit
    spec: ReleaseSpec
    target: ReleaseTarget
    folder: Path
    drawn: tuple[str, ...]
    evaluation: dict[str, Any]
    selection: dict[str, Any] | None = None
    selection_private: dict[str, Any] | None = None
    remote_code: bool = False
    committed: Path | None = field(default=None, init=False)
    card: ReleaseCard | None = field(default=None, init=False)

    def losses(self) -> RecordLosses:
        """Every training and test record's NLL under the released draw, at float32 (PRIVATE: in memory only)."""
        resources = self.resources
        return record_losses(resources.bundle, resources.train, resources.test, resources.data,
                             batch_size=resources.config.eval_batch_size, label="audit of the released draw")

    def commit(self, *, audit: AuditVerdict, tuning: Mapping[str, Any] | None = None,
               owner: Mapping[str, Any] | None = None) -> Path:
        """Write the public card (its audit sentence from ``audit``; ``NO_AUDIT`` says none was run), the README and
        the owner-only report (``tuning``: what choosing the configuration cost, trial counts and all, for the owner
        only; ``owner`` adds sections), then put the folder in place; returns its path. ``card`` holds the card."""
        resources, result, spec = self.resources, self.fit.result, self.spec
        scored = public_scores(resources, spec.public_eval) if spec.public_eval is not None else None
        card = release_card(resources.config, hyperparameters=result.params.as_params(), drawn=self.drawn,
                            data_derived=resources.bundle.data_derived, claim=spec.claim,
                            prior_scale=result.prior_scale, proven_epsilon=result.proven_epsilon, total=spec.total,
                            by_study=spec.by_study, selection=self.selection, public_evaluation=scored, audit=audit)
        published = published_names(resources, public=spec.public_labels)
        (self.folder / CARD_FILE).write_text(card.to_json())
        (self.folder / "README.md").write_text(card.readme(labels=published, labels_public=spec.public_labels,
                                                                  remote_code=self.remote_code))
        report = owner_report(result, stage1_seed=resources.config.seed, epsilon_cap=spec.epsilon_cap,
                              names=resources.data.label_names, published_names=published,
                              evaluation=self.evaluation, tuning=tuning, selection=self.selection_private,
                              extra={"audited": audit.outcome is not None, "claim": card.privacy_claim.to_dict(),
                                     "study_claim": spec.claim.claim.to_dict(), **dict(owner or {})})
        self.card = card
        self.committed = self.target.commit(self.folder, report)
        return self.committed


@contextlib.contextmanager
def stage(resources: Resources, fit: Fit, out_dir: str | Path | ReleaseTarget,
          spec: ReleaseSpec) -> Iterator[StagedRelease]:
    """Check the claim, draw once with secret noise (or select a draw), and write the model into a staging folder.

    ``out_dir`` is a folder (claimed here) or a ``ReleaseTarget`` the caller claimed
    before its fit. The staged release is discarded unless committed inside the
    block; the model holds the SWAG mean again afterwards either way.
    """
    check_release(_path(out_dir), spec, resources.config)
    if not resources.data.declared:
        raise ReleaseRefused(f"nothing released: {UNDECLARED}")
    check_claim(fit.result, spec.claim.claim, resources.config)
    try:
        with _claimed(out_dir, overwrite=spec.overwrite) as target, target.staging() as folder:
            yield _staged(resources, fit, spec, target, folder)
    finally:
        if fit.posterior is not None:
            fit.posterior.restore_mean(resources.bundle.model)


def published_names(resources: Resources, *, public: bool) -> tuple[str, ...]:
    """What the released model calls its classes: the declared names when published, else ``LABEL_k``."""
    data = resources.data
    return label_names(data.public_names or data.class_names, public=public)


@contextlib.contextmanager
def _claimed(out_dir: str | Path | ReleaseTarget, *, overwrite: bool) -> Iterator[ReleaseTarget]:
    """The caller's claimed target as it is, or a target claimed (and let go) for this release only."""
    if isinstance(out_dir, ReleaseTarget):
        yield out_dir
        return
    with claim(out_dir, overwrite=overwrite) as target:
        yield target


def _path(out_dir: str | Path | ReleaseTarget) -> Path:
    return out_dir.path if isinstance(out_dir, ReleaseTarget) else Path(out_dir)


def _staged(resources: Resources, fit: Fit, spec: ReleaseSpec, target: ReleaseTarget,
            folder: Path) -> StagedRelease:
    """Draw (or select) the released parameters, evaluate them on the test split and save the model and tokenizer
    into ``folder``; the model keeps the draw (for the audit and the public scores) until ``stage`` ends.

    What is saved is a standard transformers class where the pooling allows (``swagppm.models.standard``: the same
    logits to float rounding), else the pooled classifier with its code (``remote_code``); the undrawn parameters
    are checked on the model as trained, before that conversion."""
    config, bundle, data = resources.config, resources.bundle, resources.data
    posterior = fit.posterior
    if posterior is None:
        raise ReleaseRefused(f"the fit failed, nothing to release: {fit.result.failure}")
    model = bundle.model
    public, chosen = None, None
    if spec.selection is None:
        posterior.load_into(model, posterior.draw(secret_noise()))
    else:
        public, chosen = choose_draw(resources, posterior, spec.selection)
    _check_undrawn_are_public(model, set(posterior.view.names), bundle.public_digests)
    preds = Net(model, None, device=resources.device, amp=False).predict(  # on tokens: what users will run
        resources.tokens[1], config.eval_batch_size).cpu().numpy()
    releasable = standard_model(_releasable(model), mean=spec.standard_class)
    remote_code = isinstance(releasable, PooledClassifier)
    if remote_code:  # the folder carries pooled.py for trust_remote_code=True
        PooledClassifierConfig.register_for_auto_class()
        PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
    with _labelled(releasable.config, published_names(resources, public=spec.public_labels)), _as_os_error():
        releasable.save_pretrained(folder)
    hide_config(folder)
    _save_tokenizer(bundle.tokenizer, folder, max_length=config.data.max_length)
    evaluation = class_report(data.test_labels, preds, class_names=data.label_names, train_counts=data.train_counts)
    return StagedRelease(resources=resources, fit=fit, spec=spec, target=target, folder=folder,
                         drawn=posterior.view.names, evaluation=evaluation, selection=public,
                         selection_private=chosen, remote_code=remote_code)


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
