"""The public side of a release: ``release_card.json`` and the model folder's ``README.md``.

Only what METHOD.md's "What may be published" allows: data-independent facts (the
mechanism, the unit of privacy, the base model and which parameters were private,
c, g, E, the settings, library versions, the caveats), the claim "ε ≤ ε*" with the
cap declared before any fit, the tuning mode and its DP-accounted total, and
utility only on data the owner declares public. Everything that is an exact
function of the private data (a fingerprint, the measured ε, the series, private
F1s, the baseline, audit figures, seeds, thread counts, trial and record counts)
goes to the owner-only report, which the card names without a path.

The card is one typed value (``ReleaseCard``) whose privacy and tuning sections are
built from a verified claim (``swagppm.claim.VerifiedClaim``) and nothing else: no
field of it is free text a caller passes.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from swagppm.claim import VerifiedClaim
from swagppm.config import SWAGPPMConfig, public_settings
from swagppm.models.build import public_name
from swagppm.models.pooled import PooledClassifier
from swagppm.provenance import versions
from swagppm.releases.owner import label_names
from swagppm.releases.staging import CARD_FORMAT_PREFIX
from swagppm.statement import (
    OWNER_REPORT,
    PUBLIC_HYPERPARAMETERS,
    PUBLIC_SELECTION_KEYS,
    RELEASE_NOISE,
    AccountedTotal,
    AuditVerdict,
    PrivacyClaim,
    caveats,
    mechanism,
    release_statement,
    tuning_section,
)

FORMAT = f"{CARD_FORMAT_PREFIX}3"
# the file a pooled release carries its classifier's code in (save_pretrained copies the class's module)
POOLED_CODE = f"{PooledClassifier.__module__.rpartition('.')[2]}.py"
# why the usage snippet of a pooled release passes trust_remote_code=True, in one line
REMOTE_CODE = ("`trust_remote_code=True`: the classifier's mean-pooling head ships as code in this folder "
               f"(`{POOLED_CODE}`, read it first), which transformers runs only when asked to; with the `swagppm` "
               "package installed, `import swagppm.models` first and it loads without remote code")
# what the card of a release saved as a standard class says instead
STANDARD = ("This is a standard transformers model (no remote code): the trained weights under the standard "
            "class's names, its head set to give the trained model's logits (`swagppm.models.standard`); keep it "
            "in float32, the dtype it is saved in")


@dataclass(frozen=True, kw_only=True)
class ReleaseCard:
    """The public card of a release: every field a public fact (``docs/privacy.md`` lists them), in this order in
    ``release_card.json``; the README is rendered from it (``readme``)."""

    format: str
    hyperparameters: dict[str, float]
    mechanism: str
    unit_of_privacy: str
    base_model: str | None
    private_parameters: dict[str, Any]
    privacy_claim: PrivacyClaim
    tuning: dict[str, Any] | None
    selection: dict[str, Any] | None
    utility: dict[str, Any] | None
    audit: str
    release_noise: str
    tokenizer_data_derived: bool
    config: dict[str, Any]
    versions: dict[str, str]
    caveats: tuple[str, ...]
    owner_report: str
    privacy_statement: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """The card as ``release_card.json`` holds it."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return values | {"privacy_claim": self.privacy_claim.to_dict(), "caveats": list(self.caveats),
                         "privacy_statement": list(self.privacy_statement)}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=True)

    def readme(self, *, labels: tuple[str, ...], labels_public: bool, remote_code: bool = False) -> str:
        """The model folder's README.md (``model_card``; ``remote_code``: the saved model is the pooled classifier)."""
        return model_card(self.to_dict(), labels=labels, labels_public=labels_public, remote_code=remote_code)


def release_card(config: SWAGPPMConfig, *, hyperparameters: Mapping[str, float], drawn: tuple[str, ...],
                 data_derived: bool, claim: VerifiedClaim, prior_scale: float, proven_epsilon: float | None,
                 total: AccountedTotal | None, by_study: bool, selection: Mapping[str, Any] | None,
                 public_evaluation: dict[str, Any] | None, audit: AuditVerdict) -> ReleaseCard:
    """The card of a released draw. Its privacy and tuning sections come from the verified ``claim`` alone (the cap,
    the pseudo posterior's settings, the tuning mode), with the draw's own prior scale and proven bound (both checked
    against the claim by the writer) and, for an accounted claim, its ledger's ``total``; ``by_study`` False (a
    configuration chosen by hand) states no tuning. ``hyperparameters`` (c, g, ft_epochs, the prior's scale) were
    chosen before the fit; ``audit`` says in words whether the audit ran, whether it could test the cap, and what it
    found (never a figure of it)."""
    terms = claim.claim
    privacy = PrivacyClaim(epsilon_cap=terms.epsilon_cap, posterior=terms.posterior, prior_scale=prior_scale,
                           nll_bound=terms.nll_bound, public_risks=terms.public_risks, proven_epsilon=proven_epsilon)
    tuned = tuning_section(terms, total) if by_study else None
    chosen = None if selection is None else {key: selection.get(key) for key in PUBLIC_SELECTION_KEYS}
    return ReleaseCard(
        format=FORMAT,
        hyperparameters={key: hyperparameters[key] for key in PUBLIC_HYPERPARAMETERS if key in hyperparameters},
        mechanism=mechanism(privacy.posterior),
        unit_of_privacy="one training record",
        base_model=_public_base(config.model.name_or_path),
        private_parameters={"trainable": config.model.trainable, "count": len(drawn), "names": list(drawn),
                            "all_others": "bit-identical to the public pretrained model (checked before writing)"},
        privacy_claim=privacy,
        tuning=tuned,
        selection=chosen,
        utility={"public_evaluation": public_evaluation} if public_evaluation else None,
        audit=audit.sentence(epsilon_cap=privacy.epsilon_cap),
        release_noise=RELEASE_NOISE,
        tokenizer_data_derived=data_derived,
        config=public_config(config),
        versions=versions(),
        caveats=caveats(data_derived_tokenizer=data_derived),
        owner_report=OWNER_REPORT,
        privacy_statement=tuple(release_statement(claim=privacy, trainable=config.model.trainable,
                                                  private_parameters=len(drawn), tuning=tuned, selection=chosen,
                                                  audit=audit, data_derived_tokenizer=data_derived)),
    )


def public_config(config: SWAGPPMConfig) -> dict[str, Any]:
    """The settings each field declares publishable (``swagppm.config.setting``): never a path, a seed, the machine
    or the declared labels; a local base model is named only as such."""
    values = public_settings(config)
    values["model"]["name_or_path"] = _public_base(values["model"]["name_or_path"]) or "a local folder"
    return values


def _public_base(name: str) -> str | None:
    """The base model's hub name; "tiny" for the demo preset, None for a local folder."""
    if name == "tiny":
        return "tiny"
    looks_local = name.startswith(("/", ".", "~")) or Path(name).expanduser().exists()
    return None if looks_local else public_name(name)


def model_card(card: dict[str, Any], *, labels: tuple[str, ...], labels_public: bool,
               remote_code: bool = False) -> str:
    """The model folder's README.md: Hugging Face metadata, a usage snippet that runs as written (``remote_code``:
    the saved model is the pooled classifier, loaded with ``trust_remote_code=True``), the privacy terms."""
    config, hyper = card["config"], card["hyperparameters"]
    base = card["base_model"] if card["base_model"] not in (None, "tiny") else None
    meta = ["---", "library_name: transformers", "pipeline_tag: text-classification",
            "tags:", "- text-classification", "- differential-privacy", "- swag-ppm"]
    meta += [f"base_model: {base}"] if base else []
    named = ", ".join(label_names(labels, public=labels_public))  # LABEL_k, whatever names a caller passed
    named += "" if labels_public else " (the class names are kept private; the data owner holds the mapping)"
    lines = [
        *meta, "---", "", "# A text classifier released under SWAG-PPM", "",
        f"{card['privacy_claim']['statement']}", "",
        "One posterior draw fitted with privacy weights (SWAG-PPM): records whose loss is risky were down-weighted "
        "before training, and the released parameters carry the posterior's noise.", "",
        "## Use", "", "```python", "from transformers import pipeline", "",
        *_pipeline_call(remote_code),
        'print(classify("An employee fractured a wrist while unloading a truck."))', "```", "",
        f"{REMOTE_CODE if remote_code else STANDARD}. Inputs are truncated to {config['data']['max_length']} "
        "tokens, the length used in training (`truncation=True`).", "",
        "## Privacy", "",
        f"Configuration: c = {hyper['c']:.4g}, g = {hyper['g']:.4g}, {hyper['ft_epochs']} fine-tuning epoch"
        f"{'' if hyper['ft_epochs'] == 1 else 's'}.", "",
        *(f"- {line}" for line in card["privacy_statement"]), "",
        f"## Labels ({len(labels)} classes)", "", named, "",
        "`release_card.json` beside this file holds the statement above, the settings and the library versions.", "",
    ]
    return "\n".join(lines)


def _pipeline_call(remote_code: bool) -> list[str]:
    """The snippet's ``pipeline(...)`` lines: with ``trust_remote_code=True`` only for the pooled classifier."""
    call = 'classify = pipeline("text-classification", model="PATH/TO/THIS/FOLDER", truncation=True'
    return [f"{call},", "                    trust_remote_code=True)"] if remote_code else [f"{call})"]
