"""Release: a refused data-derived tokenizer, and a directory that plain transformers loads."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import swagppm
from swagppm.train import rng
from tests import PATIENCE
from tests.swagppm.helpers import small_config


def test_tiny_tokenizer_is_refused_without_force(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    with pytest.raises(swagppm.ReleaseRefused, match="tokenizer from the training texts"):
        swagppm.release(config, c=1.0, ft_epochs=1, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def release_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two forced releases of one fit, the SWAG mean's head weights after them, and the head weights of the
    draw that the recorded seeds would give (what the release noise must NOT be)."""
    folder = tmp_path_factory.mktemp("release")
    config = small_config(folder / "cache")
    with swagppm.Session(config) as session:
        fit = session.fit(c=0.9, ft_epochs=2)
        out = session.release(fit, folder / "model", force=True, trials_run=3)
        again = session.release(fit, folder / "again", force=True)
        model = session.bundle.model
        mean = model.classifier.weight.detach().clone()
        assert fit.posterior is not None
        for labels in (("release",), ()):  # the old derivation, and the trial's own stream
            fit.posterior.load_into(model, fit.posterior.sample(rng.generator(fit.result.seed, *labels)))
        seeded = model.classifier.weight.detach().clone()
        fit.posterior.restore_mean(model)
    return {"out": out, "again": again, "config": config, "mean": mean, "seeded": seeded,
            "stage1_fingerprint": fit.result.stage1_fingerprint}


@pytest.fixture
def released(release_run: dict[str, Any]) -> Path:
    return release_run["out"]


def test_released_directory_loads_and_predicts(released: Path) -> None:
    model = AutoModelForSequenceClassification.from_pretrained(released).eval()
    tokenizer = AutoTokenizer.from_pretrained(released)
    batch = tokenizer(["A worker at a plant fractured the wrist while unloading a truck"], return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits
    assert logits.shape == (1, 4) and torch.isfinite(logits).all()
    assert set(model.config.id2label.values()) == {"burn", "fracture", "amputation", "laceration"}


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


def test_release_card_has_aggregates_caveats_and_no_records(release_run: dict[str, Any]) -> None:
    released, config = release_run["out"], release_run["config"]
    card = json.loads((released / "release_card.json").read_text())
    assert card["hyperparameters"] == {"c": 0.9, "g": 0.0, "ft_epochs": 2}
    assert card["epsilon"] > 0 and card["trials_run"] == 3
    assert card["tokenizer_data_derived"] is True
    assert card["private_parameters"]["trainable"] == "all"
    assert len(card["caveats"]) == 3 and "asymptotic" in card["caveats"][0]
    report = card["utility"]["released_draw"]
    assert set(report) == {"f1_macro", "f1_weighted", "f1_top_quartile", "f1_bottom_quartile"}
    assert all(0 <= value <= 1 for value in report.values())
    assert card["versions"]["torch"] == torch.__version__
    texts, _ = swagppm.synthetic_corpus(config.data.synthetic_size, num_classes=4, seed=config.seed)
    text = (released / "release_card.json").read_text()
    assert not any(t in text for t in texts)
    assert release_run["stage1_fingerprint"] not in text  # a published digest could be tested against candidate data


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
    assert set(card["seeds"]) == {"stage1", "trial"}
    assert "entropy" in card["release_noise"] and "never recorded" in card["release_noise"]




def test_a_non_empty_release_folder_is_refused_before_fitting(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    with pytest.raises(swagppm.ConfigError, match="not empty.*--overwrite"):
        swagppm.release(config, c=1.0, ft_epochs=1, out_dir=folder, force=True)
    assert not (tmp_path / "cache").exists()  # refused before any work
    assert [p.name for p in folder.iterdir()] == ["notes.txt"]


def test_overwrite_writes_over_the_release_and_keeps_other_files(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    folder = tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("mine")
    swagppm.release(config, c=1.0, ft_epochs=1, out_dir=folder, force=True, overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine" and (folder / "release_card.json").exists()


def test_a_changed_undrawn_parameter_is_refused(make_config: Any, tmp_path: Path) -> None:
    """Frozen parameters must still hold their public values when the draw is written."""
    config = make_config(model={"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 2,
                                "tiny_vocab_size": 400, "trainable": "last_n_layers", "n_layers": 1})
    with swagppm.Session(config) as session:
        fit = session.fit(c=1.0, ft_epochs=1)
        model = session.bundle.model
        frozen = next(p for p in model.parameters() if not p.requires_grad)
        with torch.no_grad():
            frozen.add_(1e-3)
        with pytest.raises(swagppm.ReleaseRefused, match="differ from their public pretrained values"):
            session.release(fit, tmp_path / "out", force=True)
    assert not (tmp_path / "out" / "config.json").exists()


def test_the_release_looks_native_to_hugging_face(released: Path) -> None:
    """A model card with metadata, no missing-weight report on load, long inputs truncated where training did."""
    from transformers import pipeline

    readme = (released / "README.md").read_text()
    assert readme.startswith("---\nlibrary_name: transformers\npipeline_tag: text-classification\n")
    assert "differential-privacy" in readme and "truncation=True" in readme and "epsilon = " in readme
    _, info = AutoModelForSequenceClassification.from_pretrained(released, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert AutoTokenizer.from_pretrained(released).model_max_length == 128
    classify = pipeline("text-classification", model=str(released), truncation=True)
    label = classify("an employee burned the hand " * 300)[0]["label"]
    assert label in {"burn", "fracture", "amputation", "laceration"}




def test_the_model_folder_holds_no_path_and_no_class_count(release_run: dict[str, Any]) -> None:
    """Per-class supports and the confusion matrix go to an owner-only private report in the cache folder."""
    released, config = release_run["out"], release_run["config"]
    published = "".join(p.read_text(errors="ignore") for p in released.iterdir() if p.suffix in (".json", ".md"))
    assert str(released.parent) not in published and "cache" not in json.loads(
        (released / "release_card.json").read_text())["config"]
    for word in ('"confusion_matrix"', '"support"', '"per_class"'):
        assert word not in published
    cache_dir = Path(config.cache_dir)
    private = list(cache_dir.glob("*/release-*.json")) + list(cache_dir.glob("release-*.json"))
    assert private and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in private)
    assert "confusion_matrix" in private[0].read_text()
