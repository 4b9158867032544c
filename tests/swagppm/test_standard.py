"""A first-token pooled classifier becomes its encoder's standard class with the same logits to float rounding, for
any input (the head's scale follows the LayerNorm's bound), and so does a mean-pooled one when asked (an appended
averaging layer); otherwise mean pooling, native heads and other encoders stay as they are."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import (
    BertConfig,
    BertForSequenceClassification,
    BertModel,
    ElectraConfig,
    ElectraModel,
    RobertaConfig,
    RobertaForSequenceClassification,
    RobertaModel,
)

from swagppm.models.build import _pooled
from swagppm.models.standard import TANH_LINEAR, layer_norm_bound, standard_model
from tests import PATIENCE

ROOT = Path(__file__).resolve().parents[2]

LABELS = {"num_labels": 3, "id2label": {0: "a", 1: "b", 2: "c"}, "label2id": {"a": 0, "b": 1, "c": 2}}
SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64}


def _ids() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(5, 90, (4, 11), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 6:], mask[2, 2:] = 0, 0
    return ids, mask


def _classifier(encoder: torch.nn.Module, pooling: str = "cls", classes: int = 3) -> torch.nn.Module:
    torch.manual_seed(0)
    names = {k: f"class {k}" for k in range(classes)}
    model = _pooled(encoder.eval(), pooling, {"num_labels": classes, "id2label": names,  # type: ignore[arg-type]
                                              "label2id": {name: k for k, name in names.items()}})
    torch.nn.init.normal_(model.classifier.weight, std=2.0)
    torch.nn.init.normal_(model.classifier.bias)
    return model.eval()


ENCODERS = {
    "bert": (lambda: BertModel(BertConfig(vocab_size=100, **SIZES), add_pooling_layer=False),
             BertForSequenceClassification),
    "bert-with-pooler": (lambda: BertModel(BertConfig(vocab_size=100, **SIZES)), BertForSequenceClassification),
    "roberta": (lambda: RobertaModel(RobertaConfig(vocab_size=100, pad_token_id=1, **SIZES)),
                RobertaForSequenceClassification),
}


def _gap(model: torch.nn.Module, standard: torch.nn.Module) -> tuple[float, float]:
    """The largest |logit difference| on a padded batch and on one short text alone, and the largest |logit|."""
    ids, mask = _ids()
    with torch.no_grad():
        ours = model(ids, attention_mask=mask).logits
        theirs = standard(input_ids=ids, attention_mask=mask).logits
        alone = standard(input_ids=ids[2:3, :2]).logits - model(ids[2:3, :2]).logits
    return max(float((ours - theirs).abs().max()), float(alone.abs().max())), float(ours.abs().max())


def _encoder(name: str, gain: float) -> torch.nn.Module:
    """A random encoder whose LayerNorms are scaled by ``gain`` (outputs far from the usual range when large)."""
    encoder = ENCODERS[name][0]()
    with torch.no_grad():
        for module in encoder.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.mul_(gain).add_(torch.randn_like(module.weight))
                module.bias.add_(gain * torch.randn_like(module.bias))
    return encoder


@pytest.mark.parametrize("name", sorted(ENCODERS))
@pytest.mark.parametrize("gain", [1.0, 300.0])
def test_first_token_pooling_becomes_the_standard_class_with_the_same_logits(name: str, gain: float) -> None:
    model = _classifier(_encoder(name, gain))
    standard = standard_model(model)
    assert type(standard) is ENCODERS[name][1] and standard.config.num_labels == 3
    gap, largest = _gap(model, standard)
    print(f"cls, {name}, LayerNorm gain {gain:g}: max |logit difference| {gap:.3g} (logits up to {largest:.3g})")
    assert gap <= 1e-6 * max(1.0, largest)


@pytest.mark.parametrize("name", sorted(ENCODERS))
@pytest.mark.parametrize("gain, classes", [(1.0, 3), (1.0, 12), (30.0, 5)])
def test_mean_pooling_asked_for_becomes_the_standard_class_with_one_averaging_layer(
        name: str, gain: float, classes: int) -> None:
    model = _classifier(_encoder(name, gain), "mean", classes)
    assert standard_model(model) is model  # only when asked
    standard = standard_model(model, mean=True)
    assert type(standard) is ENCODERS[name][1]
    assert standard.config.num_hidden_layers == SIZES["num_hidden_layers"] + 1
    gap, largest = _gap(model, standard)
    print(f"mean, {name}, LayerNorm gain {gain:g}, {classes} classes: max |logit difference| {gap:.3g} "
          f"(logits up to {largest:.3g})")
    assert gap <= 2e-6 * max(1.0, largest)
    again = standard_model(model, mean=True).state_dict()  # a fixed function of the model's parameters
    assert all(torch.equal(value, again[key]) for key, value in standard.state_dict().items())


def test_a_mean_pooled_head_too_wide_for_the_averaging_layer_stays_pooled() -> None:
    model = _classifier(_encoder("bert", 1.0), "mean", classes=16)  # 2·16 + 2 > 32 dimensions
    assert standard_model(model, mean=True) is model


def test_the_head_scale_keeps_every_possible_state_in_tanh_s_linear_range() -> None:
    norm = torch.nn.LayerNorm(16)
    with torch.no_grad():
        norm.weight.fill_(2.0)
        norm.bias.fill_(-0.5)
    bound = layer_norm_bound(norm)
    assert bound == pytest.approx(2.0 * 15**0.5 + 0.5)
    worst = torch.zeros(1, 16)
    worst[0, 0] = 1e6  # one coordinate far from the others: its standardised value is sqrt(15)
    with torch.no_grad():
        assert float(norm(worst).abs().max()) <= bound
    model = _classifier(BertModel(BertConfig(vocab_size=100, **SIZES), add_pooling_layer=False))
    standard = standard_model(model)
    scale = float(standard.state_dict()["bert.pooler.dense.weight"][0, 0])
    last = layer_norm_bound(model.encoder.encoder.layer[-1].output.LayerNorm)
    assert scale * last <= TANH_LINEAR < 2 * scale * last and math.frexp(scale)[0] == 0.5  # a power of two


def test_mean_pooling_a_native_head_and_another_encoder_stay_as_they_are() -> None:
    mean = _classifier(BertModel(BertConfig(vocab_size=100, **SIZES), add_pooling_layer=False), "mean")
    assert standard_model(mean) is mean  # without mean=True
    native = BertForSequenceClassification(BertConfig(vocab_size=100, **LABELS, **SIZES))
    assert standard_model(native) is native
    model = _classifier(ElectraModel(ElectraConfig(vocab_size=100, embedding_size=32, **SIZES)))
    assert standard_model(model) is model


@pytest.mark.slow  # two interpreters
def test_the_documented_conversion_of_a_mean_pooled_folder_loads_without_swagppm(tmp_path: Path) -> None:
    """docs/library.md's snippet, run as written on a saved pooled classifier: the converted folder loads in a fresh
    interpreter with no swagppm and no remote code, with the pooled classifier's logits."""
    from swagppm.models.pooled import PooledClassifier, PooledClassifierConfig
    from swagppm.models.tokenizer import fit_wordpiece_tokenizer

    tokenizer = fit_wordpiece_tokenizer([f"a worker hurt the hand number {i}" for i in range(50)], vocab_size=100)
    model = _classifier(BertModel(BertConfig(vocab_size=len(tokenizer), **SIZES), add_pooling_layer=False), "mean")
    PooledClassifierConfig.register_for_auto_class()
    PooledClassifier.register_for_auto_class("AutoModelForSequenceClassification")
    model.save_pretrained(tmp_path / "released")
    tokenizer.save_pretrained(tmp_path / "released")
    page = (ROOT / "docs" / "library.md").read_text().split("## A released folder in a standard class")[1]
    snippet = page.split("```python\n")[1].split("```")[0]
    subprocess.run([sys.executable, "-c", snippet], cwd=tmp_path, check=True, timeout=PATIENCE,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})
    texts = ["a worker hurt the hand", "the hand number 7 of a worker was hurt at the station"]
    script = (
        "import sys, json, torch\n"
        "from transformers import AutoModelForSequenceClassification as A, AutoTokenizer as T\n"
        "m, t = A.from_pretrained('released-standard').eval(), T.from_pretrained('released-standard')\n"
        f"batch = t({texts!r}, padding=True, return_tensors='pt')\n"
        "print(type(m).__name__, json.dumps(m(**batch).logits.tolist()))\n"
        "assert 'swagppm' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True,
                         timeout=PATIENCE, env={**os.environ, "PYTHONPATH": ""})
    assert out.returncode == 0, out.stderr[-2000:]
    name, logits = out.stdout.split(" ", 1)
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        ours = model(batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    gap = float((torch.tensor(json.loads(logits)) - ours).abs().max())
    print(f"documented conversion: {name}, max |logit difference| {gap:.3g}")
    assert name == "BertForSequenceClassification" and gap <= 2e-6 * max(1.0, float(ours.abs().max()))
