"""Release: a refused data-derived tokenizer, and a directory that plain transformers loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import swagppm
from tests.swagppm.conftest import small_config


def test_tiny_tokenizer_is_refused_without_force(config: swagppm.SWAGPPMConfig, tmp_path: Path) -> None:
    with pytest.raises(swagppm.ReleaseRefused, match="tokenizer from the training texts"):
        swagppm.release(config, c=1.0, ft_epochs=1, out_dir=tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.fixture(scope="module")
def release_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, swagppm.SWAGPPMConfig, torch.Tensor]:
    """One forced release shared by the tests below, with the SWAG mean's head weights after it."""
    from swagppm import _pipeline

    folder = tmp_path_factory.mktemp("release")
    config = small_config(folder / "cache")
    out = swagppm.release(config, c=0.9, ft_epochs=2, out_dir=folder / "model", force=True, trials_run=3)
    session = next(iter(_pipeline._SESSION.values()))
    return out, config, session.bundle.model.classifier.weight.detach().clone()


@pytest.fixture
def released(release_run: tuple[Path, swagppm.SWAGPPMConfig, torch.Tensor]) -> Path:
    return release_run[0]


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
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "torch.Size([1, 4])" in out.stdout


def test_release_card_has_aggregates_caveats_and_no_records(release_run: tuple) -> None:
    released, config, _ = release_run
    card = json.loads((released / "release_card.json").read_text())
    assert card["hyperparameters"] == {"c": 0.9, "g": 0.0, "ft_epochs": 2}
    assert card["epsilon"] > 0 and card["trials_run"] == 3
    assert card["tokenizer_data_derived"] is True
    assert card["private_parameters"]["trainable"] == "all"
    assert len(card["caveats"]) == 3 and "asymptotic" in card["caveats"][0]
    report = card["utility"]["released_draw"]
    assert len(report["confusion_matrix"]) == 4
    assert 0 <= report["f1_bottom_quartile"] <= 1 and 0 <= report["f1_top_quartile"] <= 1
    assert card["versions"]["torch"] == torch.__version__
    texts, _ = swagppm.synthetic_corpus(config.data.synthetic_size, num_classes=4, seed=config.seed)
    text = (released / "release_card.json").read_text()
    assert not any(t in text for t in texts)


def test_release_draw_differs_from_the_restored_swag_mean(release_run: tuple) -> None:
    released, _, mean_weight = release_run
    saved = AutoModelForSequenceClassification.from_pretrained(released).state_dict()
    assert saved["classifier.weight"].shape == mean_weight.shape
    assert not torch.equal(saved["classifier.weight"], mean_weight)
