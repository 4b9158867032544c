"""The released model's shape says nothing of membership: with a declared label set, a data set holding a class of
exactly two records and the same data set without one of them release files that are byte for byte identical, apart
from the weights (the mechanism's noisy output); without a declared set nothing is released."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.releases.writer import ReleaseSpec, check_release
from tests.swagppm.helpers import release_now, small_config, verified_claim

pytestmark = pytest.mark.fits

WEIGHTS = "model.safetensors"
RARE = "hearing loss"  # the class of exactly two records


def _header(path: Path) -> dict[str, Any]:
    """A safetensors file's header: every tensor's name, dtype, shape and offsets."""
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8:8 + size])


@pytest.fixture(scope="module")
def releases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One release with both records of the rare class, one without the second (everything else fixed)."""
    from transformers import BertConfig, BertModel

    from swagppm.models.tokenizer import fit_wordpiece_tokenizer

    folder = tmp_path_factory.mktemp("classes")
    public_texts, _ = swagppm.synthetic_corpus(200, seed=5)
    tokenizer = fit_wordpiece_tokenizer(public_texts, vocab_size=300)  # fitted on public texts: a public tokenizer
    torch.manual_seed(0)
    base = folder / "public-base"
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=130)).save_pretrained(base)
    tokenizer.save_pretrained(base)
    texts, labels = swagppm.synthetic_corpus(120, num_classes=3, seed=3)
    texts += ["A worker lost hearing in the left ear near a press.", "An operator suffered ringing in the ear."]
    labels += [RARE, RARE]
    declared = sorted({*labels})
    found = {}
    for name, keep in (("with", len(texts)), ("without", len(texts) - 1)):
        data = folder / f"{name}.csv"
        pd.DataFrame({"text": texts[:keep], "label": labels[:keep]}).to_csv(data, index=False)
        config = small_config(folder / "cache", data={"source": str(data), "labels": declared},
                              model={"name_or_path": str(base), "trainable": "head"})
        with swagppm.Session(config) as session:
            assert session.data.num_classes == 4
            fit = session.fit(TrialParams(c=1.0, ft_epochs=2))
            found[name] = release_now(session, fit, folder / f"release-{name}", epsilon_cap=1e6)
    return found


def test_every_released_file_but_the_weights_is_identical_with_and_without_a_rare_record(
        releases: dict[str, Path]) -> None:
    folders = list(releases.values())
    names = [sorted(p.name for p in folder.iterdir()) for folder in folders]
    assert names[0] == names[1] and WEIGHTS in names[0] and "config.json" in names[0]
    for name in names[0]:
        if name != WEIGHTS:
            assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name
    assert _header(folders[0] / WEIGHTS) == _header(folders[1] / WEIGHTS)  # the classifier's shape included
    assert (folders[0] / WEIGHTS).stat().st_size == (folders[1] / WEIGHTS).stat().st_size
    config = json.loads((folders[0] / "config.json").read_text())
    assert config["id2label"] == {str(k): f"LABEL_{k}" for k in range(4)}
    assert "## Labels (4 classes)" in (folders[0] / "README.md").read_text()


def test_a_study_without_a_declared_label_set_is_refused_before_any_fit(tmp_path: Path) -> None:
    data = tmp_path / "records.csv"
    pd.DataFrame({"text": ["a b", "c d", "e f", "g h"], "label": ["x", "y", "x", "y"]}).to_csv(data, index=False)
    config = small_config(tmp_path / "cache", data={"source": str(data)})
    with pytest.raises(swagppm.ReleaseRefused, match=r"no declared label set.*\[data\] labels = "):
        check_release(tmp_path / "out", ReleaseSpec(claim=verified_claim(config, epsilon_cap=1.0), force=True), config)
    assert not (tmp_path / "out").exists()
