"""The public card of a release, function by function: which keys and sentences it holds, and what it never holds."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path
from typing import Any

import pytest

import swagppm
from swagppm.claim import Accounting, SealedClaim, StudyClaim, VerifiedClaim
from swagppm.provenance import versions
from swagppm.releases.card import FORMAT, REMOTE_CODE, STANDARD, ReleaseCard, model_card, public_config, release_card
from swagppm.releases.owner import label_names
from swagppm.statement import (
    CAVEATS,
    NOT_PROVEN,
    OUTSIDE_THE_TOTAL,
    OWNER_REPORT,
    PUBLIC_PROXY_STATEMENT,
    PUBLIC_TUNING_KEYS,
    RELEASE_NOISE,
    TOKENIZER_CAVEAT,
    AccountedTotal,
    AuditVerdict,
    PrivacyClaim,
    mechanism,
    release_statement,
    tuning_section,
    unaccounted_statement,
)
from tests.swagppm.helpers import TEST_KEY, small_config

CARD_KEYS = ["format", "hyperparameters", "mechanism", "unit_of_privacy", "base_model", "private_parameters",
             "privacy_claim", "tuning", "selection", "utility", "audit", "release_noise", "tokenizer_data_derived",
             "config", "versions", "caveats", "owner_report", "privacy_statement"]
DRAWN = ("classifier.weight", "classifier.bias")
AUDIT = AuditVerdict(outcome=None)
HYPER = {"c": 0.9, "g": 0.0, "ft_epochs": 2}
TOTAL = AccountedTotal(epsilon=9.25, delta=1e-6, accountant="dp-accounting 0.4, one RDP accountant")
# What the card must never say, whatever the inputs carry: seeds, paths, the machine.
SEED, CACHE, SOURCE, BASE = 987654321, "/srv/owner/cache-7f3a", "/srv/owner/records-7f3a.csv", "/srv/owner/base-7f3a"
NEVER = ('"seed"', '"cache_dir"', '"device"', '"source"', '"eval_batch_size"', '"amp"', '"cuda_graphs"',
         '"compile_eval"', '"compile_train"', '"swag_deviations_device"', '"trials_run"', '"by_state"',
         '"max_trial_epsilon', '"planned_trials"', '"sampler"', '"tuning_epsilon"', '"data_set"', '"study_id"',
         str(SEED), "7f3a", "owner-cases-7f3a")


def _verified(cap: float = 2.0, *, mode: str = "unaccounted") -> VerifiedClaim:
    accounting = Accounting(trials_shape=1.0, trials_mean=10.0) if mode == "accounted" else None
    claim = StudyClaim(epsilon_cap=cap, mode=mode, data_public=mode == "public-proxy",  # type: ignore[arg-type]
                       delta=1e-6 if mode == "accounted" else None, max_records=1000 if mode == "accounted" else None,
                       accounting=accounting, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False,
                       data_set="owner-cases-7f3a", study_id="7f3a-study")
    return SealedClaim.of(claim, TEST_KEY).verify(TEST_KEY)


def _card(config: swagppm.SWAGPPMConfig, *, cap: float = 2.0, mode: str = "unaccounted",
          total: AccountedTotal | None = None, by_study: bool = True, selection: dict[str, Any] | None = None,
          public_evaluation: dict[str, Any] | None = None, hyperparameters: dict[str, Any] | None = None,
          data_derived: bool = True) -> dict[str, Any]:
    return _typed(config, cap=cap, mode=mode, total=total, by_study=by_study, selection=selection,
                  public_evaluation=public_evaluation, hyperparameters=hyperparameters,
                  data_derived=data_derived).to_dict()


def _typed(config: swagppm.SWAGPPMConfig, *, cap: float = 2.0, mode: str = "unaccounted",
           total: AccountedTotal | None = None, by_study: bool = True, selection: dict[str, Any] | None = None,
           public_evaluation: dict[str, Any] | None = None, hyperparameters: dict[str, Any] | None = None,
           data_derived: bool = True) -> ReleaseCard:
    return release_card(config, hyperparameters=HYPER if hyperparameters is None else hyperparameters, drawn=DRAWN,
                        data_derived=data_derived, claim=_verified(cap, mode=mode), prior_scale=1.0,
                        proven_epsilon=None, total=total, by_study=by_study, selection=selection,
                        public_evaluation=public_evaluation, audit=AUDIT)


def _claim(cap: float) -> PrivacyClaim:
    return PrivacyClaim(epsilon_cap=cap, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False)


def _private_config(**model: object) -> swagppm.SWAGPPMConfig:
    """A configuration whose every machine- or owner-side setting is distinctive, so a leak is found by text."""
    return small_config(Path(CACHE), seed=SEED, device="cpu", eval_batch_size=333, amp=False, cuda_graphs=False,
                        compile_eval=True, swag_deviations_device="cpu",
                        data={"source": SOURCE, "max_length": 64},
                        model={"name_or_path": BASE, "trainable": "head", "pooling": "mean", **model})


def _named(name: str, tmp_path: Path) -> Any:
    return public_config(small_config(tmp_path / "cache", model={"name_or_path": name}))["model"]["name_or_path"]


def test_the_tuning_section_comes_from_the_claims_mode_and_its_ledgers_total_alone() -> None:
    sections = {mode: tuning_section(_verified(mode=mode).claim, TOTAL if mode == "accounted" else None)
                for mode in ("public-proxy", "unaccounted", "accounted")}
    assert sections["public-proxy"] == {"mode": "public-proxy", "total_epsilon": 0.0, "delta": None,
                                        "statement": PUBLIC_PROXY_STATEMENT, "outside_the_total": None}
    assert sections["unaccounted"] == {"mode": "unaccounted", "total_epsilon": None, "delta": None,
                                       "statement": unaccounted_statement(), "outside_the_total": None}
    accounted = sections["accounted"]
    assert (accounted["mode"], accounted["total_epsilon"], accounted["delta"]) == ("accounted", 9.25, 1e-6)
    assert accounted["outside_the_total"] == list(OUTSIDE_THE_TOTAL) and "audit gate" in OUTSIDE_THE_TOTAL[-1]
    assert "epsilon 9.25 at delta 1e-06 in total (dp-accounting 0.4, one RDP accountant)" in accounted["statement"]
    assert all(list(section) == list(PUBLIC_TUNING_KEYS) for section in sections.values())
    with pytest.raises(ValueError, match="states its ledger's total"):
        tuning_section(_verified(mode="accounted").claim, None)


def test_no_card_field_is_free_text_a_caller_passes(tmp_path: Path) -> None:
    """Issue 48, findings 3 and 5: the export's unsealed tuning field, and the library's free cap and tuning text,
    reached the card. The card takes a verified claim (made only by a seal's check), never a tuning mapping."""
    parameters = inspect.signature(release_card).parameters
    assert "tuning" not in parameters and "epsilon_cap" not in parameters
    assert parameters["claim"].annotation in ("VerifiedClaim", VerifiedClaim)
    with pytest.raises(TypeError, match="a VerifiedClaim comes only from SealedClaim.verify"):
        VerifiedClaim(claim=_verified().claim, key="forged", token=object())
    card = _card(small_config(tmp_path / "cache"), mode="public-proxy", by_study=False)
    assert card["tuning"] is None  # a configuration chosen by hand states no tuning, whatever its study's mode


def test_public_config_drops_the_machine_the_seed_the_cache_and_the_data_source() -> None:
    values = public_config(_private_config())
    assert set(values) == {"data", "model", "stage1_epochs", "batch_size", "finetune_lr", "finetune_weight_decay",
                           "swag_epochs", "swag_lr", "swag_momentum", "swag_rank", "swag_dtype", "swag_modules",
                           "draws_risk", "draws_privacy", "draws_utility", "stage2_init", "stage2_step_scale",
                           "reweight_k", "posterior", "prior_scale", "nll_bound", "risk_range", "exact_chains",
                           "exact_warmup", "exact_samples", "exact_max_rhat", "exact_min_ess", "exact_max_tree_depth",
                           "exact_release_steps", "laplace_structure", "sgld_lr", "sgld_burnin_epochs"}
    assert set(values["data"]) == {"text_column", "label_column", "title_column", "split", "max_per_class",
                                   "min_per_class", "test_size", "max_length", "synthetic_size", "synthetic_classes",
                                   "public"}
    assert values["model"]["name_or_path"] == "a local folder" and values["model"]["trainable"] == "head"
    assert values["data"]["max_length"] == 64 and values["draws_privacy"] == 8


def test_public_config_names_a_hub_model_the_demo_preset_and_hides_every_local_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _named("distilroberta-base", tmp_path) == "distilroberta-base"
    assert _named("all-MiniLM-L6-v2", tmp_path) == "sentence-transformers/all-MiniLM-L6-v2"  # the offline alias
    assert _named("tiny", tmp_path) == "tiny"
    for local in ("/srv/owner/model", "./model", "../model", "~/model"):
        assert _named(local, tmp_path) == "a local folder", local
    monkeypatch.chdir(tmp_path)
    (tmp_path / "owner-model").mkdir()  # a bare relative name that is a folder here is a local folder too
    assert _named("owner-model", tmp_path) == "a local folder"


def test_the_card_holds_exactly_its_keys_in_order_with_their_fixed_texts(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache")
    card = _card(config, cap=2.5)
    assert [field.name for field in dataclasses.fields(ReleaseCard)] == CARD_KEYS
    assert list(card) == CARD_KEYS and card["format"] == FORMAT == "swagppm-release-card/3"
    assert card["hyperparameters"] == HYPER and card["hyperparameters"] is not HYPER
    assert card["mechanism"] == mechanism("swag") and card["unit_of_privacy"] == "one training record"
    assert card["base_model"] == "tiny" and card["tokenizer_data_derived"] is True
    assert card["private_parameters"] == {
        "trainable": "all", "count": 2, "names": ["classifier.weight", "classifier.bias"],
        "all_others": "bit-identical to the public pretrained model (checked before writing)"}
    assert card["privacy_claim"] == _claim(2.5).to_dict()
    assert card["privacy_claim"]["kind"] == "estimate" and card["privacy_claim"]["statement"].startswith(NOT_PROVEN)
    assert card["tuning"] == tuning_section(_verified().claim, None)
    assert card["selection"] is None and card["utility"] is None
    assert card["audit"] == "none was run before this release" and card["release_noise"] == RELEASE_NOISE
    assert card["config"] == public_config(config) and card["versions"] == versions()
    assert card["caveats"] == [*CAVEATS, TOKENIZER_CAVEAT]  # the tiny preset's tokenizer is data-derived
    assert card["owner_report"] == OWNER_REPORT


def test_the_card_states_the_release_statement_of_the_claims_tuning(tmp_path: Path) -> None:
    card = _card(small_config(tmp_path / "cache", model={"name_or_path": "tiny", "trainable": "head",
                                                         "pooling": "mean"}), cap=3.0, mode="accounted", total=TOTAL)
    tuning = tuning_section(_verified(3.0, mode="accounted").claim, TOTAL)
    assert card["tuning"] == tuning
    assert card["privacy_statement"] == release_statement(claim=_claim(3.0), trainable="head", private_parameters=2,
                                                          tuning=tuning, selection=None, audit=AUDIT,
                                                          data_derived_tokenizer=True)
    assert "Tuning: accounted: random search from secret randomness over a random, hidden number of trials, each " \
           "capped at epsilon* = 3 (binding)" in "\n".join(card["privacy_statement"])
    assert "Private parameters: 2 tensors (trainable = 'head'), all drawn from the posterior; every other parameter " \
           "is the public pretrained value (checked bit for bit before a release is written)." \
           in card["privacy_statement"]


@pytest.mark.parametrize("cap", [0.5, 2.0, 12.75, 100.0])
def test_the_claim_is_worded_from_the_declared_cap(cap: float, tmp_path: Path) -> None:
    card = _card(small_config(tmp_path / "cache"), cap=cap)
    claims = [line for line in card["privacy_statement"] if line.startswith("Claim:")]
    assert claims == [f"Claim: {NOT_PROVEN}. Cap: epsilon <= {cap:g} for the release of one draw, declared before any "
                      "fit; the measured epsilon (an estimate (2 x the largest weighted loss over finitely many "
                      "posterior draws: an order statistic, which grows with the number of draws), not a bound) was "
                      "within it and stays private; delta is not quantified for finite samples."]
    assert card["privacy_claim"]["epsilon_at_most"] == cap


def test_the_claimed_bound_is_never_below_the_declared_cap(tmp_path: Path) -> None:
    cap = 1.0000004
    card = _card(small_config(tmp_path / "cache"), cap=cap)
    [claim] = [line for line in card["privacy_statement"] if line.startswith("Claim:")]
    stated = float(claim.split("Cap: epsilon <= ")[1].split(" ")[0])
    assert stated >= cap


def test_nothing_private_in_the_inputs_reaches_the_card_or_its_readme() -> None:
    """Seeds, paths, the machine settings, the data set's name and the study's id are all in the inputs."""
    typed = _typed(_private_config(), mode="accounted", total=TOTAL)
    card = typed.to_dict()
    published = typed.to_json() + typed.readme(labels=("LABEL_0", "LABEL_1"), labels_public=False)
    assert json.loads(typed.to_json()) == json.loads(json.dumps(card, allow_nan=True))
    assert [secret for secret in NEVER if secret in published] == []
    assert card["base_model"] is None and card["config"]["model"]["name_or_path"] == "a local folder"


@pytest.mark.parametrize("field", ["hyperparameters", "selection"])
def test_private_figures_in_the_other_inputs_do_not_reach_the_card(field: str, tmp_path: Path) -> None:
    carried: dict[str, Any] = {
        "hyperparameters": {**HYPER, "seed": SEED},  # a trial's seed beside its parameters
        "selection": {"procedure": "threshold selection with random (geometric) stopping (Liu & Talwar 2019)",
                      "metric": "f1_macro", "threshold": 0.5, "stop_probability": 0.2,
                      "selection_set": "the private test split", "released_draw_score": None, "accounted": False,
                      "unaccounted_because": "scored on the private test split", "cost": None,
                      "candidates_tried": 61283, "score": 3.14159},
    }
    card = _card(small_config(tmp_path / "cache"), **{field: carried[field]})
    published = json.dumps(card, allow_nan=True)
    assert [secret for secret in (str(SEED), "61283", "3.14159") if secret in published] == []


def test_utility_is_on_the_card_only_when_scored_on_a_public_set(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache")
    scores = {"records": 40, "f1_macro": 0.5, "f1_weighted": 0.625}
    assert _card(config, public_evaluation=scores)["utility"] == {"public_evaluation": scores}
    assert _card(config, public_evaluation={})["utility"] is None
    assert _card(config, public_evaluation=None)["utility"] is None


def test_the_readme_metadata_names_a_hub_base_model_and_never_the_demo_or_a_local_folder(tmp_path: Path) -> None:
    meta = ("---\nlibrary_name: transformers\npipeline_tag: text-classification\ntags:\n- text-classification\n"
            "- differential-privacy\n- swag-ppm\n")
    hub = _card(small_config(tmp_path / "cache", model={"name_or_path": "distilroberta-base"}), data_derived=False)
    assert hub["base_model"] == "distilroberta-base"
    assert model_card(hub, labels=("LABEL_0",), labels_public=False).startswith(
        meta + "base_model: distilroberta-base\n---\n\n# A text classifier released under SWAG-PPM\n")
    for name in ("tiny", BASE):
        card = _card(small_config(tmp_path / "cache", model={"name_or_path": name}))
        readme = model_card(card, labels=("LABEL_0",), labels_public=False)
        assert readme.startswith(meta + "---\n\n# A text classifier") and "base_model" not in readme, name


def test_the_readme_states_the_configuration_the_training_length_and_every_statement_line(tmp_path: Path) -> None:
    config = small_config(tmp_path / "cache", data={"source": "synthetic", "max_length": 64})
    card = _card(config, hyperparameters={"c": 0.912345, "g": 0.05, "ft_epochs": 3}, mode="accounted", total=TOTAL)
    readme = model_card(card, labels=("LABEL_0", "LABEL_1"), labels_public=False, remote_code=True)
    assert "\nConfiguration: c = 0.9123, g = 0.05, 3 fine-tuning epochs.\n" in readme
    assert f"\n{REMOTE_CODE}. Inputs are truncated to 64 tokens, the length used in training (`truncation=True`).\n" \
           in readme
    privacy = readme.split("## Privacy\n\n")[1].split("\n\n## Labels")[0].splitlines()
    assert privacy == ["Configuration: c = 0.9123, g = 0.05, 3 fine-tuning epochs.", "",
                       *(f"- {line}" for line in card["privacy_statement"])]
    assert readme.endswith("\n`release_card.json` beside this file holds the statement above, the settings and the "
                           "library versions.\n")
    one = _card(config, hyperparameters={"c": 1.0, "g": 0.0, "ft_epochs": 1})
    assert "\nConfiguration: c = 1, g = 0, 1 fine-tuning epoch.\n" in model_card(one, labels=("LABEL_0",),
                                                                               labels_public=False)


def test_the_readme_usage_snippet_loads_the_folder_with_remote_code_and_truncation(tmp_path: Path) -> None:
    readme = model_card(_card(small_config(tmp_path / "cache")), labels=("LABEL_0",), labels_public=False,
                        remote_code=True)
    assert readme.split("```python\n")[1].split("```")[0] == (
        "from transformers import pipeline\n\n"
        'classify = pipeline("text-classification", model="PATH/TO/THIS/FOLDER", truncation=True,\n'
        "                    trust_remote_code=True)\n"
        'print(classify("An employee fractured a wrist while unloading a truck."))\n')
    assert "(`pooled.py`, read it first)" in readme and "`import swagppm.models` first" in readme
    assert "modeling_" not in readme


def test_the_readme_usage_snippet_of_a_standard_class_passes_no_remote_code(tmp_path: Path) -> None:
    readme = model_card(_card(small_config(tmp_path / "cache")), labels=("LABEL_0",), labels_public=False)
    assert readme.split("```python\n")[1].split("```")[0] == (
        "from transformers import pipeline\n\n"
        'classify = pipeline("text-classification", model="PATH/TO/THIS/FOLDER", truncation=True)\n'
        'print(classify("An employee fractured a wrist while unloading a truck."))\n')
    assert f"\n{STANDARD}. Inputs are truncated to 128 tokens" in readme and "remote_code=True" not in readme


def test_the_readme_lists_label_k_with_the_mapping_kept_private_unless_names_are_declared_public(
        tmp_path: Path) -> None:
    card = _card(small_config(tmp_path / "cache"))
    names = ("burn", "crush injury", "amputation")
    private = model_card(card, labels=label_names(names, public=False), labels_public=False)
    assert private.split("## Labels")[1] == (
        " (3 classes)\n\nLABEL_0, LABEL_1, LABEL_2 (the class names are kept private; the data owner holds the "
        "mapping)\n\n`release_card.json` beside this file holds the statement above, the settings and the library "
        "versions.\n")
    assert not [name for name in names if name in private]
    public = model_card(card, labels=label_names(names, public=True), labels_public=True)
    assert public.split("## Labels")[1].startswith(" (3 classes)\n\nburn, crush injury, amputation\n\n")


def test_the_readme_never_prints_class_names_that_are_not_declared_public(tmp_path: Path) -> None:
    readme = model_card(_card(small_config(tmp_path / "cache")), labels=("burn", "amputation of a thumb"),
                        labels_public=False)
    assert "burn" not in readme and "amputation of a thumb" not in readme
    assert "LABEL_0, LABEL_1 (the class names are kept private" in readme


def test_docs_privacy_lists_every_field_of_the_card_in_order() -> None:
    """docs/privacy.md's table of the card's fields names exactly the ``ReleaseCard`` fields, in their order."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "privacy.md").read_text()
    table = text.split("### The card's fields")[1].split("\n\n")[2]
    listed = re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.MULTILINE)
    assert listed == [field.name for field in dataclasses.fields(ReleaseCard)]
