"""Release: a refused data-derived tokenizer, a folder plain transformers loads, a public card that holds only what
may be published, the owner-only report beside it, the claim ε ≤ ε* binding, files readable by others."""

from __future__ import annotations

import hashlib
import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import swagppm
from swagppm import TrialParams
from swagppm.data.prepare import prepare_data
from swagppm.releases.staging import owner_report_path
from swagppm.releases.writer import ReleaseSpec, check_release
from swagppm.statement import unaccounted_statement
from swagppm.train import rng
from tests import PATIENCE
from tests.swagppm.helpers import release_now, small_config, verified_claim

pytestmark = pytest.mark.fits

CAP = 100.0  # the declared epsilon cap of these releases (the tiny fits' measured epsilon is far below it)
TUNING = {"mode": "unaccounted", "total_epsilon": None, "delta": None, "statement": "unaccounted: adaptive search",
          "trials_run": 3, "max_trial_epsilon": 1.2345, "by_state": {"complete": 3}}
CARD_KEYS = {"format", "hyperparameters", "mechanism", "unit_of_privacy", "base_model", "private_parameters",
             "privacy_claim", "tuning", "selection", "utility", "audit", "release_noise", "tokenizer_data_derived",
             "config", "versions", "caveats", "owner_report", "privacy_statement"}


def spec(config: swagppm.SWAGPPMConfig, **fields: Any) -> ReleaseSpec:
    return ReleaseSpec(claim=verified_claim(config, epsilon_cap=CAP), **fields)


def test_tiny_tokenizer_is_refused_without_force(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    with pytest.raises(swagppm.ReleaseRefused, match="tokenizer from the training texts"):
        check_release(tmp_path / "out", spec(config), config)
    assert not (tmp_path / "out").exists()


def test_a_release_states_only_a_verified_claim(config: swagppm.SWAGPPMConfig) -> None:
    """Issue 48, finding 5: the library wrote a card with any cap and tuning text its caller passed; a release's spec
    now takes a verified claim only, and ``swagppm`` has no one-call release past the gate (``tuner.release``)."""
    claim = verified_claim(config, epsilon_cap=CAP)
    for forged in (claim.claim, claim.claim.to_dict(), 0.5):
        with pytest.raises(TypeError, match="must be a VerifiedClaim"):
            ReleaseSpec(claim=forged)  # type: ignore[arg-type]
    assert not hasattr(swagppm, "release") and "release" not in swagppm.__all__


@pytest.fixture(scope="module")
def release_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two forced releases of one fit, the SWAG mean's head weights after them, and the head weights of the
    draw that the recorded seeds would give (what the release noise must NOT be)."""
    folder = tmp_path_factory.mktemp("release")
    config = small_config(folder / "cache")
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=0.9, ft_epochs=2))
        out = release_now(session, fit, folder / "model", epsilon_cap=CAP, force=True, tuning=TUNING)
        again = release_now(session, fit, folder / "again", epsilon_cap=CAP, force=True, public_labels=True)
        data = session.data
        public_eval = folder / "public.csv"  # reworded test texts: records the owner may declare public
        pd.DataFrame({"text": [f"Reported publicly: {text}" for text in data.test_texts[:40]],
                      "label": [data.class_names[k] for k in data.test_labels[:40]]}).to_csv(public_eval, index=False)
        scored = release_now(session, fit, folder / "scored", epsilon_cap=CAP, force=True, public_eval=str(public_eval))
        model = session.bundle.model
        mean = model.classifier.weight.detach().clone()
        assert fit.posterior is not None
        for labels in (("release",), ()):  # the old derivation, and the trial's own stream
            fit.posterior.load_into(model, fit.posterior.draw(rng.SeededNoise(rng.generator(fit.result.seed, *labels))))
        seeded = model.classifier.weight.detach().clone()
        fit.posterior.restore_mean(model)
        names = session.data.label_names
    return {"out": out, "again": again, "scored": scored, "config": config, "mean": mean, "seeded": seeded,
            "result": fit.result, "names": names, "cache": session.cache.directory}


@pytest.fixture
def released(release_run: dict[str, Any]) -> Path:
    return release_run["out"]


def test_released_directory_loads_and_predicts_with_private_class_names(release_run: dict[str, Any]) -> None:
    model = AutoModelForSequenceClassification.from_pretrained(release_run["out"]).eval()
    tokenizer = AutoTokenizer.from_pretrained(release_run["out"])
    batch = tokenizer(["A worker at a plant fractured the wrist while unloading a truck"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, 4) and torch.isfinite(logits).all()
    assert model.config.id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2", 3: "LABEL_3"}
    public = AutoModelForSequenceClassification.from_pretrained(release_run["again"])
    assert set(public.config.id2label.values()) == {"burn", "fracture", "amputation", "laceration"}
    assert "burn" in (release_run["again"] / "README.md").read_text()
    labels = (release_run["out"] / "README.md").read_text().split("## Labels")[1]
    assert not any(name in labels for name in release_run["names"]) and "LABEL_0, LABEL_1" in labels


def test_released_directory_loads_without_swagppm(released: Path) -> None:
    """The copied model code lets plain transformers load it (trust_remote_code)."""
    script = (
        "import sys, torch\n"
        "from transformers import AutoModelForSequenceClassification as A, AutoTokenizer as T\n"
        f"m = A.from_pretrained({str(released)!r}, trust_remote_code=True).eval()\n"
        f"t = T.from_pretrained({str(released)!r})\n"
        "print(m(**t(['an employee burned the hand'], return_tensors='pt')).logits.shape)\n"
        "assert 'swagppm' not in sys.modules\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch.Size([1, 4])" in out.stdout


def test_the_card_holds_only_what_may_be_published(release_run: dict[str, Any]) -> None:
    released, result = release_run["out"], release_run["result"]
    card = json.loads((released / "release_card.json").read_text())
    assert set(card) == CARD_KEYS
    assert card["hyperparameters"] == {"c": 0.9, "g": 0.0, "ft_epochs": 2, "prior_scale": 1.0}
    assert card["privacy_claim"]["epsilon_at_most"] == CAP and card["privacy_claim"]["kind"] == "estimate"
    assert card["tuning"] == {"mode": "unaccounted", "total_epsilon": None, "delta": None,
                              "statement": unaccounted_statement(), "outside_the_total": None}  # the claim's mode
    assert TUNING["statement"] not in json.dumps(card)  # the owner-side tuning text never reaches the card
    assert card["utility"] is None and card["audit"] == "none was run before this release"
    assert card["tokenizer_data_derived"] is True and card["private_parameters"]["trainable"] == "all"
    assert not {"seed", "device", "cache_dir", "eval_batch_size"} & set(card["config"])
    assert card["privacy_statement"][0].startswith(f"Claim: no differential-privacy guarantee is proven for this "
                                                   f"release. Cap: epsilon <= {CAP:g} ")
    assert card["versions"]["torch"] == torch.__version__
    published = "".join(p.read_text(errors="ignore") for p in released.iterdir() if p.suffix in (".json", ".md"))
    for secret in (repr(result.epsilon), f"{result.epsilon:.4g}", result.data_hash, result.stage1_fingerprint,
                   "1.2345", '"trials_run"', '"seeds"', '"num_train"', '"threads"', '"cpu_threads"',
                   '"support"', '"confusion_matrix"', '"baseline', str(released.parent)):
        assert secret not in published, secret


def test_utility_is_published_only_on_a_set_the_owner_declares_public(release_run: dict[str, Any]) -> None:
    card = json.loads((release_run["scored"] / "release_card.json").read_text())
    scores = card["utility"]["public_evaluation"]
    assert scores["records"] == 40 and all(0.0 <= scores[key] <= 1.0 for key in ("f1_macro", "f1_weighted"))
    assert json.loads((release_run["out"] / "release_card.json").read_text())["utility"] is None


def test_the_owner_report_lies_beside_the_folder_owner_only_with_every_private_figure(
        release_run: dict[str, Any]) -> None:
    released, result = release_run["out"], release_run["result"]
    path = owner_report_path(released)
    assert path.parent == released.parent and stat.S_IMODE(path.stat().st_mode) == 0o600
    report = json.loads(path.read_text())
    assert report["format"] == "swagppm-owner-report/1"
    assert report["epsilon"] == {"measured": result.epsilon, "is_lower_bound": False, "cap": CAP}
    assert report["seeds"] == {"stage1": 0, "trial": result.seed} and report["trials_run"] == 3
    assert report["tuning"] == TUNING and report["machine"]["cpu_threads"] == result.threads
    assert report["labels"] == {f"LABEL_{k}": name for k, name in enumerate(release_run["names"])}
    assert "confusion_matrix" in report["private_test_split"]["released_draw"]
    assert report["data"]["fingerprint"] == result.data_hash


def test_the_data_fingerprint_is_keyed_by_a_private_key_not_a_bare_digest(release_run: dict[str, Any]) -> None:
    config, result = release_run["config"], release_run["result"]
    bare = prepare_data(config.data, seed=config.seed).data_hash
    key = release_run["cache"] / "fingerprint.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and len(key.read_bytes()) == 32
    assert result.data_hash != bare and len(result.data_hash) == 64
    assert hashlib.sha256(key.read_bytes() + bare.encode()).hexdigest() != result.data_hash
    with swagppm.Resources(config) as again:  # the same key, reused: the same fingerprint
        assert again.data.data_hash == result.data_hash


def test_released_files_are_readable_by_others(released: Path) -> None:
    assert stat.S_IMODE(released.stat().st_mode) == 0o755
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in released.iterdir()}
    assert "model.safetensors" in modes and set(modes.values()) == {0o644}
    assert not list(released.parent.glob(".model.staging-*"))


def test_release_draw_differs_from_the_restored_swag_mean(release_run: dict[str, Any]) -> None:
    released, mean_weight = release_run["out"], release_run["mean"]
    saved = AutoModelForSequenceClassification.from_pretrained(released).state_dict()
    assert saved["classifier.weight"].shape == mean_weight.shape
    assert not torch.equal(saved["classifier.weight"], mean_weight)


def _head(folder: Path) -> torch.Tensor:
    return AutoModelForSequenceClassification.from_pretrained(folder).state_dict()["classifier.weight"]


def test_two_releases_differ_and_no_recorded_seed_regenerates_the_noise(release_run: dict[str, Any]) -> None:
    first, second = _head(release_run["out"]), _head(release_run["again"])
    assert not torch.equal(first, second)
    assert not torch.equal(first, release_run["seeded"]) and not torch.equal(second, release_run["seeded"])
    card = json.loads((release_run["out"] / "release_card.json").read_text())
    assert "entropy" in card["release_noise"] and "never recorded" in card["release_noise"]


def test_a_measured_epsilon_above_the_declared_cap_is_refused_and_leaves_nothing(
        release_run: dict[str, Any], tmp_path: Path) -> None:
    with swagppm.Session(release_run["config"]) as session:
        fit = session.fit(TrialParams(c=0.9, ft_epochs=2))
        cap = fit.result.epsilon / 2
        with pytest.raises(swagppm.ReleaseRefused, match=f"above the declared cap {cap:g}"):
            release_now(session, fit, tmp_path / "out", epsilon_cap=cap, force=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_a_non_empty_release_folder_is_refused_before_fitting(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(swagppm.ConfigError, match="not empty.*--overwrite"):
        check_release(folder, spec(config, force=True), config)
    assert not (tmp_path / "cache").exists()  # refused before any work
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_an_owner_report_the_tool_did_not_write_is_refused_before_fitting(config: swagppm.SWAGPPMConfig,
                                                                          tmp_path: Path) -> None:
    owner_report_path(tmp_path / "out").write_text("my notes")
    with pytest.raises(swagppm.ConfigError, match="was not written by swagppm"):
        check_release(tmp_path / "out", spec(config, force=True), config)
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()


def test_overwrite_replaces_an_earlier_release_as_a_whole_and_nothing_else(config: swagppm.SWAGPPMConfig,
                                                                           tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(swagppm.ConfigError, match="replaces only a release folder swagppm wrote"):
        check_release(folder, spec(config, force=True, overwrite=True), config)
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]  # the user's folder, untouched
    (folder / "notes.txt").unlink()
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=1))
        for _ in range(2):  # an earlier release is replaced
            release_now(session, fit, folder, epsilon_cap=CAP, force=True, overwrite=True)
    assert (folder / "release_card.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".out.")) == []  # no lock, no staging


def test_a_changed_undrawn_parameter_is_refused(make_config: Any, tmp_path: Path) -> None:
    """Frozen parameters must still hold their public values when the draw is written."""
    config = make_config(model={"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 2,
                                "tiny_vocab_size": 400, "trainable": "last_n_layers", "n_layers": 1})
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=1))
        model = session.bundle.model
        frozen = next(p for p in model.parameters() if not p.requires_grad)
        with torch.no_grad():
            frozen.add_(1e-3)
        with pytest.raises(swagppm.ReleaseRefused, match="differ from their public pretrained values"):
            release_now(session, fit, tmp_path / "out", force=True, epsilon_cap=CAP)
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.staging-*"))


def test_the_release_looks_native_to_hugging_face(released: Path) -> None:
    """A model card with metadata, no missing-weight report on load, long inputs truncated where training did."""
    from transformers import pipeline

    readme = (released / "README.md").read_text()
    assert readme.startswith("---\nlibrary_name: transformers\npipeline_tag: text-classification\n")
    assert "differential-privacy" in readme and "truncation=True" in readme and f"epsilon <= {CAP:g}" in readme
    _, info = AutoModelForSequenceClassification.from_pretrained(released, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert AutoTokenizer.from_pretrained(released).model_max_length == 128
    classify = pipeline("text-classification", model=str(released), truncation=True)
    assert classify("an employee burned the hand " * 300)[0]["label"] in {f"LABEL_{k}" for k in range(4)}


def test_a_title_column_that_varies_within_a_class_is_refused_naming_the_column(tmp_path: Path) -> None:
    data = tmp_path / "records.csv"
    pd.DataFrame({"text": [f"record number {i}" for i in range(8)], "label": ["a", "b"] * 4,
                  "title": ["Alpha", "Beta", "Alpha", "Beta", "Alpha", "Beta", "Alpha (J. Smith)", "Beta"]}
                 ).to_csv(data, index=False)
    config = small_config(tmp_path / "cache", data={"source": str(data), "title_column": "title"})
    with pytest.raises(swagppm.DataError) as info:
        prepare_data(config.data)
    message = str(info.value)
    assert "'title'" in message and "varies within a class" in message and "Smith" not in message


def test_the_readme_usage_snippet_runs_verbatim(released: Path) -> None:
    """The card's own snippet, with only the folder's path filled in, classifies a text in a fresh interpreter."""
    readme = (released / "README.md").read_text()
    snippet = readme.split("```python\n")[1].split("```")[0]
    assert "trust_remote_code=True" in snippet and "`trust_remote_code=True`: the classifier's mean-pooling" in readme
    script = snippet.replace("PATH/TO/THIS/FOLDER", str(released))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "'label': 'LABEL_" in out.stdout


def test_the_library_checks_a_release_folder_before_any_fit(tmp_path: Path) -> None:
    """``swagppm.releases.check_release`` is what a script calls before ``Session.fit`` (the README's snippet)."""
    import swagppm.releases

    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    config = small_config(tmp_path / "cache")
    released = swagppm.releases.ReleaseSpec(claim=verified_claim(config, epsilon_cap=1.0), force=True)
    with pytest.raises(swagppm.ConfigError, match="not empty"):
        swagppm.releases.check_release(folder, released, config)
    assert swagppm.releases.check_release(tmp_path / "new", released, config) == tmp_path / "new"
    assert not (tmp_path / "new").exists()


def test_the_fingerprint_key_is_made_once_owner_only_and_cleaned_with_the_cache(tmp_path: Path) -> None:
    from swagppm.cache import PrivateCache, clear_cache
    from swagppm.provenance import fingerprint_key, keyed_fingerprint

    cache = PrivateCache(tmp_path / "cache")
    key = fingerprint_key(cache.directory)
    assert fingerprint_key(cache.directory) == key and len(key) == 32
    assert stat.S_IMODE((cache.directory / "fingerprint.key").stat().st_mode) == 0o600
    assert keyed_fingerprint(key, "digest") != keyed_fingerprint(bytes(32), "digest")
    kept = PrivateCache(tmp_path / "kept")
    kept_key = fingerprint_key(kept.directory)
    assert clear_cache(tmp_path / "kept", keep_key=True) == (kept.directory, 0)
    assert fingerprint_key(PrivateCache(tmp_path / "kept").directory) == kept_key  # found again, the same key
    assert clear_cache(tmp_path / "cache") == (cache.directory, 1) and not cache.directory.exists()
