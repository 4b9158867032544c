"""Resources: which device a configuration names (and the refusals), and what one CPU build shares, caches and frees."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

import swagppm
from swagppm.data.prepare import prepare_data
from swagppm.errors import ConfigError
from swagppm.provenance import code_digest, keyed_fingerprint, versions
from swagppm.resources import Resources, resolve_device
from swagppm.train.engine import pooled_features

MakeConfig = Callable[..., swagppm.SWAGPPMConfig]
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
NOT_FOR_FITTING = "not a device for fitting (use 'auto', 'cpu', 'cuda' or 'cuda:N')"


def tiny(make_config: MakeConfig, **model: object) -> swagppm.SWAGPPMConfig:
    """A 40-record synthetic corpus and a one-layer tiny model: built in milliseconds."""
    return make_config(data={"source": "synthetic", "synthetic_size": 40, "synthetic_classes": 4},
                       model={"name_or_path": "tiny", "tiny_hidden_size": 32, "tiny_layers": 1,
                              "tiny_vocab_size": 400, **model})


def cached(cache: Path, kind: str) -> list[Path]:
    return sorted(cache.glob(f"{kind}-*.pt"))


@no_cuda
def test_auto_is_the_cpu_on_a_machine_without_cuda() -> None:
    assert resolve_device("auto") == torch.device("cpu")


def test_cpu_names_resolve_to_the_cpu() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("cpu:0") == torch.device("cpu", 0)


@no_cuda
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:1"])
def test_a_cuda_device_without_cuda_is_refused_with_the_way_out(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_device(name)
    assert str(info.value) == (f"swagppm.device = {name!r}, but CUDA is not available on this machine; "
                               "use device = 'auto' or 'cpu'")


@pytest.mark.parametrize("name", ["gpu", "CPU", "", " cpu", "cuda:-1", "cuda:0:1"])
def test_a_name_torch_cannot_read_is_refused_without_torchs_own_error(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_device(name)
    assert str(info.value) == f"swagppm.device = {name!r}: {NOT_FOR_FITTING}"
    assert info.value.__cause__ is None and info.value.__context__ is None  # torch's list of device types is not shown


@pytest.mark.parametrize("name", ["meta", "mps", "xla"])
def test_a_torch_device_that_cannot_fit_is_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_device(name)
    assert str(info.value) == f"swagppm.device = {name!r}: {NOT_FOR_FITTING}"


def test_a_refused_device_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not a device for fitting"):
        resolve_device("tpu")


def test_a_full_fine_tune_on_the_cpu_trains_and_draws_on_the_token_splits(make_config: MakeConfig) -> None:
    config = tiny(make_config)
    with Resources(config) as resources:
        assert resources.device == torch.device("cpu") and resources.threads == torch.get_num_threads()
        assert resources.cpu_kernels == torch.backends.cpu.get_cpu_capability()
        assert resources.setup_seconds >= 0.0
        assert resources.bundle.head is None
        assert resources.train is resources.tokens[0] and resources.test is resources.tokens[1]
        assert resources.train.is_tokens and resources.test.is_tokens
        assert resources.train.labels.tolist() == resources.data.train_labels.tolist()
        assert resources.test.labels.tolist() == resources.data.test_labels.tolist()
        assert len(resources.train) + len(resources.test) == 40


def test_amp_and_cuda_graphs_stay_off_on_the_cpu(make_config: MakeConfig) -> None:
    config = tiny(make_config).replace(amp=True, cuda_graphs=True)
    with Resources(config) as resources:
        assert resources.net.amp is False and resources.net.graphs is False


def test_the_data_fingerprint_is_keyed_with_the_private_caches_key(make_config: MakeConfig, tmp_path: Path) -> None:
    config = tiny(make_config)
    with Resources(config) as resources:
        bare = prepare_data(config.data, seed=config.seed).data_hash
        assert resources.fingerprint_key == (tmp_path / "cache" / "fingerprint.key").read_bytes()
        assert resources.data.data_hash == keyed_fingerprint(resources.fingerprint_key, bare) != bare
        assert resources.cache.directory == tmp_path / "cache"


def test_the_result_settings_on_the_cpu_name_the_threads_versions_and_code(make_config: MakeConfig) -> None:
    with Resources(tiny(make_config)) as resources:
        settings = resources.result_settings()
    assert settings == {"device": "cpu", "threads": torch.get_num_threads(), "versions": versions(),
                        "code": code_digest()}
    assert settings["versions"]["torch"] == torch.__version__ and json.loads(json.dumps(settings)) == settings


def test_close_drops_the_model_and_tensors_and_keeps_the_rest(make_config: MakeConfig) -> None:
    resources = Resources(tiny(make_config))
    resources.close()
    for name in ("bundle", "net", "tokens", "train", "test"):
        assert not hasattr(resources, name), name
    assert resources.device == torch.device("cpu") and len(resources.data.train_labels) > 0
    assert resources.result_settings()["device"] == "cpu"
    resources.close()  # closing twice is harmless


def test_leaving_a_with_block_closes_even_when_it_raises(make_config: MakeConfig) -> None:
    with pytest.raises(RuntimeError, match="^inside$"), Resources(tiny(make_config)) as resources:
        assert hasattr(resources, "net")
        raise RuntimeError("inside")
    assert not hasattr(resources, "net") and not hasattr(resources, "bundle")


def test_a_head_only_model_runs_on_frozen_features_computed_once_and_cached(make_config: MakeConfig,
                                                                           tmp_path: Path) -> None:
    config = tiny(make_config, trainable="head")
    with Resources(config) as resources:
        assert resources.bundle.head is not None
        assert not resources.train.is_tokens and not resources.test.is_tokens
        assert resources.train.inputs.shape == (len(resources.tokens[0]), 32)
        assert resources.test.inputs.shape == (len(resources.tokens[1]), 32)
        torch.testing.assert_close(resources.train.inputs,
                                   pooled_features(resources.bundle.model, resources.tokens[0],
                                                   batch_size=config.eval_batch_size),
                                   rtol=0, atol=0)
        assert resources.train.labels.tolist() == resources.data.train_labels.tolist()
        features = resources.train.inputs.clone()
    [entry] = cached(tmp_path / "cache", "features")
    written = entry.stat().st_mtime_ns
    with Resources(config) as again:  # read back, not recomputed
        assert torch.equal(again.train.inputs, features)
    assert cached(tmp_path / "cache", "features") == [entry] and entry.stat().st_mtime_ns == written


def test_another_cpu_thread_count_keys_its_own_cached_features(make_config: MakeConfig, tmp_path: Path) -> None:
    """Another thread count may round differently: its features are computed and cached apart."""
    config = tiny(make_config, trainable="head")
    threads = torch.get_num_threads()
    with Resources(config):
        pass
    torch.set_num_threads(1 if threads != 1 else 2)
    try:
        with Resources(config) as other:
            assert other.result_settings()["threads"] == torch.get_num_threads()
    finally:
        torch.set_num_threads(threads)
    assert len(cached(tmp_path / "cache", "features")) == 2
