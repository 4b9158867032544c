"""Shared fixtures: small, fast SWAG-PPM configurations and the optional real data."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import swagppm
from tests.swagppm.helpers import small_config

REPO = Path(__file__).resolve().parents[2]
OSHA = REPO.parent / "shared" / "data" / "osha_sample.jsonl"


@pytest.fixture
def make_config(tmp_path: Path) -> Callable[..., swagppm.SWAGPPMConfig]:
    """``small_config`` with a per-test private cache directory."""
    return lambda **overrides: small_config(tmp_path / "cache", **overrides)


@pytest.fixture
def config(make_config: Callable[..., swagppm.SWAGPPMConfig]) -> swagppm.SWAGPPMConfig:
    return make_config()


@pytest.fixture
def osha_path() -> Path:
    if not OSHA.exists():
        pytest.skip(f"real OSHA sample not found at {OSHA} (../shared is absent)")
    return OSHA


@pytest.fixture
def local_pretrained(tmp_path: Path) -> Path:
    """A small BERT saved like a hub model, to exercise the from_pretrained path offline."""
    from transformers import BertConfig, BertModel

    from swagppm.models.tokenizer import fit_wordpiece_tokenizer

    texts, _ = swagppm.synthetic_corpus(200, seed=5)
    tokenizer = fit_wordpiece_tokenizer(texts, vocab_size=300)
    torch.manual_seed(0)
    model = BertModel(BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                 intermediate_size=64, max_position_embeddings=130))
    folder = tmp_path / "pretrained"
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
