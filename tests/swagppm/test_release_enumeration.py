"""The enumeration attack against every file of a release folder recovers nothing.

Differential privacy assumes an adversary who knows every record but one. Here the
unknown is one training record's label: the adversary releases (or imagines) the
data set with each candidate label, computes every hash the public pipeline lets it
compute, and compares with the published files. Apart from the model weights (the
mechanism's noisy output), no file may differ between the candidates or contain
anything that tells them apart: a digest of the data, the measured ε, seeds.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.data.prepare import prepare_data
from tests.swagppm.helpers import release_now, small_config

pytestmark = pytest.mark.fits

WEIGHTS = "model.safetensors"
UNKNOWN = 0  # the index of the record whose label the adversary does not know


@pytest.fixture(scope="module")
def candidates(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """One release per candidate label of the unknown record, everything else fixed (a public base model)."""
    from transformers import BertConfig, BertModel

    from swagppm.models.tokenizer import fit_wordpiece_tokenizer

    folder = tmp_path_factory.mktemp("enumeration")
    public_texts, _ = swagppm.synthetic_corpus(200, seed=5)
    tokenizer = fit_wordpiece_tokenizer(public_texts, vocab_size=300)
    torch.manual_seed(0)
    base = folder / "public-base"
    BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                         intermediate_size=64, max_position_embeddings=130)).save_pretrained(base)
    tokenizer.save_pretrained(base)
    texts, labels = swagppm.synthetic_corpus(150, num_classes=3, seed=3)
    found: dict[str, dict[str, Any]] = {}
    for label in sorted(set(labels)):
        candidate = list(labels)
        candidate[UNKNOWN] = label
        data = folder / f"data-{label}.csv"
        pd.DataFrame({"text": texts, "label": candidate}).to_csv(data, index=False)
        config = small_config(folder / "cache", data={"source": str(data), "labels": sorted(set(labels))},
                              model={"name_or_path": str(base), "trainable": "head"})
        with swagppm.Session(config) as session:
            fit = session.fit(TrialParams(c=1.0, ft_epochs=2))
            out = release_now(session, fit, folder / f"release-{label}", epsilon_cap=1e6)
        found[label] = {"out": out, "result": fit.result, "bare_hash": prepare_data(config.data).data_hash}
    return found


def test_the_candidates_differ_where_the_private_side_sees_them(candidates: dict[str, dict[str, Any]]) -> None:
    """The attack has something to find: the data, its digests and the measured ε differ between candidates."""
    assert len({c["bare_hash"] for c in candidates.values()}) == len(candidates) == 3
    assert len({c["result"].data_hash for c in candidates.values()}) == 3
    assert len({c["result"].epsilon for c in candidates.values()}) == 3


def test_every_published_file_but_the_weights_is_identical_for_every_candidate(
        candidates: dict[str, dict[str, Any]]) -> None:
    folders = [c["out"] for c in candidates.values()]
    names = [sorted(p.name for p in folder.iterdir()) for folder in folders]
    assert all(listing == names[0] for listing in names) and WEIGHTS in names[0]
    for name in names[0]:
        if name != WEIGHTS:
            contents = {(folder / name).read_bytes() for folder in folders}
            assert len(contents) == 1, f"{name} differs between candidate data sets"


def test_no_published_file_holds_a_digest_an_epsilon_or_a_seed_of_any_candidate(
        candidates: dict[str, dict[str, Any]]) -> None:
    secrets: list[str] = []
    for candidate in candidates.values():
        result = candidate["result"]
        secrets += [candidate["bare_hash"], result.data_hash, result.stage1_fingerprint, repr(result.epsilon),
                    f"{result.epsilon:.4g}", json.dumps(result.epsilon)]
    for candidate in candidates.values():
        for path in candidate["out"].iterdir():
            text = path.read_bytes().decode("latin-1")
            assert not [s for s in secrets if s in text], path.name
            if path.name != WEIGHTS:
                assert '"seed' not in text and '"threads' not in text and '"num_train' not in text, path.name
