"""Stage 1 in the private cache: hit, corrupt entry, keyed by what changes it and nothing else."""

from __future__ import annotations

import math
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import swagppm
from swagppm import TrialParams, resources
from swagppm.cache import CHECKSUM, payload_checksum
from swagppm.provenance import stage1_fingerprint, versions
from swagppm.stage1 import Stage1, compute_or_load

pytestmark = pytest.mark.fits

MakeConfig = Callable[..., swagppm.SWAGPPMConfig]


def test_stage1_cache_hit_and_corrupt_entry(tmp_path: Path, config: swagppm.SWAGPPMConfig) -> None:
    cache = tmp_path / "cache"
    first = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1))
    assert not first.stage1_cache_hit
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    entries = list(cache.glob("stage1-*.pt"))
    assert len(entries) == 1 and stat.S_IMODE(entries[0].stat().st_mode) == 0o600
    assert swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1)).stage1_cache_hit
    entries[0].write_bytes(b"not a torch file")
    with pytest.warns(UserWarning, match="corrupt"):
        again = swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1))
    assert not again.stage1_cache_hit
    assert again.max_delta == first.max_delta  # recomputed deterministically


def _stage1_hit(config: swagppm.SWAGPPMConfig) -> bool:
    with swagppm.Session(config) as session:
        return session.prepare().stage1_cache_hit


def test_stage1_is_keyed_by_what_changes_it_and_nothing_else(make_config: MakeConfig,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    config = make_config()
    assert not _stage1_hit(config) and _stage1_hit(config)
    # on a CPU these change nothing, so they share the entry
    assert _stage1_hit(config.replace(amp=False, eval_batch_size=7, swag_deviations_device="cpu", draws_privacy=3))
    assert not _stage1_hit(config.replace(finetune_lr=1e-3))
    monkeypatch.setattr(resources, "versions", lambda: {**versions(), "torch": "0.0.1"})
    assert not _stage1_hit(config)
    monkeypatch.setattr(resources, "code_digest", lambda: "an edited copy of the code")
    assert not _stage1_hit(config)


def test_changed_weight_files_miss_the_cache(local_pretrained: Path, make_config: MakeConfig) -> None:
    config = make_config(model={"name_or_path": str(local_pretrained), "trainable": "head"})
    assert not _stage1_hit(config) and _stage1_hit(config)
    from transformers import BertModel

    model = BertModel.from_pretrained(local_pretrained)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.bias.add_(1e-4)
    model.save_pretrained(local_pretrained)  # same path, other weights
    assert not _stage1_hit(config)


def test_the_thread_count_is_recorded_and_keys_stage1(config: swagppm.SWAGPPMConfig) -> None:
    threads = torch.get_num_threads()
    assert swagppm.run_fit(config, TrialParams(c=1.0, ft_epochs=1)).threads == threads
    torch.set_num_threads(1 if threads > 1 else 2)
    try:
        assert not _stage1_hit(config)
    finally:
        torch.set_num_threads(threads)


def test_an_infinite_risk_is_the_riskiest_record_not_a_nan(config: swagppm.SWAGPPMConfig) -> None:
    with swagppm.Session(config) as session:
        session.prepare()
        entry = session.cache.path("stage1", session.stage1_key)
    payload = torch.load(entry, weights_only=True)
    payload["risk"][0] = math.inf  # an entry the cache wrote so (its checksum remade): not a damaged one
    payload[CHECKSUM] = payload_checksum({key: value for key, value in payload.items() if key != CHECKSUM})
    torch.save(payload, entry)
    with swagppm.Session(config) as session:
        fit = session.fit(TrialParams(c=1.0, ft_epochs=1))
    assert fit.result.stage1_cache_hit and fit.result.failure is None and math.isfinite(fit.result.epsilon)
    assert float(fit.weights[0]) == 0.0 and bool(torch.isfinite(fit.weights).all())


def test_stage1_state_round_trips_through_its_state_dict(config: swagppm.SWAGPPMConfig) -> None:
    with swagppm.Resources(config) as resources:
        stage1 = compute_or_load(resources)
        key = resources.fingerprint_key
    restored = Stage1.from_state_dict(stage1.state_dict())
    assert torch.equal(restored.risk, stage1.risk) and restored.fingerprint == stage1.fingerprint
    assert stage1_fingerprint(restored.risk, restored.model_state, key=key) == stage1.fingerprint
    assert (restored.baseline_f1_macro, restored.baseline_f1_weighted) == (stage1.baseline_f1_macro,
                                                                          stage1.baseline_f1_weighted)
    assert restored.history == stage1.history and restored.timings == stage1.timings
    assert set(stage1.timings) == {"finetune", "swag", "risk"}
