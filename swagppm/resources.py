"""The trial-independent parts of one configuration, built once and shared by every fit.

Device, prepared data, the model bundle, the token splits, the splits training
and draws run on (tokens, or the frozen part's outputs computed once and kept in
the private cache), the ``Net`` and the private cache itself.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, TypeVar

import numpy as np
import torch

from swagppm.cache import HUB_FOLDER, PrivateCache, cache_key
from swagppm.config import SWAGPPMConfig
from swagppm.data.prepare import PreparedData, prepare_data
from swagppm.data.sources import hub_cache
from swagppm.errors import ConfigError
from swagppm.models.build import ModelBundle, build_model
from swagppm.models.partial import HiddenSplit, boundary_states
from swagppm.provenance import code_digest, cpu_kernels, fingerprint_key, keyed_fingerprint, versions
from swagppm.train.engine import Net, Split, pooled_features

_R = TypeVar("_R", bound="Resources")


def resolve_device(name: str) -> torch.device:
    """The device ``swagppm.device`` names ("auto": CUDA when available); a ``ConfigError`` when it cannot fit."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None
    if device is None or device.type not in ("cpu", "cuda"):
        raise ConfigError(f"swagppm.device = {name!r}: not a device for fitting "
                          "(use 'auto', 'cpu', 'cuda' or 'cuda:N')")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"swagppm.device = {name!r}, but CUDA is not available on this machine; "
                          "use device = 'auto' or 'cpu'")
    return device


class Resources:
    """What every fit of ``config`` shares, built once: data, model, splits, ``Net`` and the private cache.

    ``tokens`` are the (train, test) token splits; ``train`` and ``test`` are what
    training and draws run on (the tokens, or the cached outputs of a frozen
    part). ``stage1_split`` is what stage 1 fits on: the training split, or the public
    records of ``[data] risk_source`` (read and checked on first use). ``close()`` (or
    leaving a ``with`` block) frees the model and the device tensors.
    ``setup_seconds`` is how long building took.
    """

    def __init__(self, config: SWAGPPMConfig) -> None:
        start = time.perf_counter()
        self.config = config
        self.device = resolve_device(config.device)
        self.threads = torch.get_num_threads()
        self.cpu_kernels = cpu_kernels(self.device)
        self.cache = PrivateCache(config.cache_dir, hold=True)  # `clean` refuses it while this process lives
        with hub_cache(self.cache.directory / HUB_FOLDER):  # a Hub dataset is downloaded there, never shared
            prepared = prepare_data(config.data, seed=config.seed)
        self.fingerprint_key = fingerprint_key(self.cache.directory)
        # the bare digests stay here: results, studies and exports carry keyed ones
        self._records_hash = prepared.records_hash
        self.data: PreparedData = dataclasses.replace(
            prepared, data_hash=keyed_fingerprint(self.fingerprint_key, prepared.data_hash), records_hash="")
        self.bundle: ModelBundle = build_model(config, self.data, self.device)
        tokenizer, max_length = self.bundle.tokenizer, config.data.max_length
        self.tokens = (
            Split.from_texts(self.data.train_texts, self.data.train_labels, tokenizer, max_length=max_length,
                             device=self.device),
            Split.from_texts(self.data.test_texts, self.data.test_labels, tokenizer, max_length=max_length,
                             device=self.device),
        )
        self.train, self.test = self._splits()
        self._public_stage1: tuple[Split, str] | None = None
        on_cuda = self.device.type == "cuda"
        self.net = Net(self.bundle.model, self.bundle.head, device=self.device, amp=config.amp and on_cuda,
                       graphs=config.cuda_graphs and on_cuda, compile_eval=config.compile_eval and on_cuda,
                       compile_train=config.compile_train and config.cuda_graphs and on_cuda)
        self.setup_seconds = time.perf_counter() - start

    def __enter__(self: _R) -> _R:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Drop the model and every tensor (device memory is freed once nothing else refers to them); let the private
        cache go."""
        self.cache.release()
        for name in ("bundle", "net", "tokens", "train", "test", "_public_stage1"):
            self.__dict__.pop(name, None)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def records_fingerprint(self, key: bytes) -> str:
        """An HMAC under ``key`` of the records read, whatever their order and preparation: names a data set
        (the privacy ledger's) without telling anything of it to anyone without the key."""
        return keyed_fingerprint(key, self._records_hash)

    def result_settings(self) -> dict[str, Any]:
        """What changes a computed result on this device besides the data and the weights (part of cache keys)."""
        on_cpu = self.device.type == "cpu"
        return {"device": self.device.type, "threads": self.threads if on_cpu else None, "versions": versions(),
                "code": code_digest()}

    @property
    def stage1_split(self) -> Split:
        """What stage 1 fits on: the private training split, or the public risk source's records."""
        return self.train if self.config.data.risk_source is None else self._public_source()[0]

    @property
    def stage1_source_digest(self) -> str | None:
        """The public risk source's content digest (part of stage 1's cache key), None without one."""
        return None if self.config.data.risk_source is None else self._public_source()[1]

    def _public_source(self) -> tuple[Split, str]:
        """The records of ``[data] risk_source`` as training runs on them (tokens or cached inputs), and their
        content digest: read and checked (no private record among them) once."""
        if self._public_stage1 is None:
            from swagppm.data.public import read_public_records

            source = self.config.data.risk_source
            assert source is not None
            records = read_public_records(source, data=self.data, config=self.config.data, seed=self.config.seed,
                                          tokenizer=self.bundle.tokenizer, device=self.device)
            split = records.split if self.bundle.head is None else \
                self._cached_inputs({"public": (records.split, records.labels)}, extra=records.digest)["public"]
            self._public_stage1 = (split, records.digest)
        return self._public_stage1

    def _splits(self) -> tuple[Split, Split]:
        """What training and draws run on: tokens, or the frozen part's outputs computed once and cached."""
        if self.bundle.head is None:
            return self.tokens
        named = {"train": (self.tokens[0], self.data.train_labels), "test": (self.tokens[1], self.data.test_labels)}
        splits = self._cached_inputs(named, extra=self.data.data_hash)
        return splits["train"], splits["test"]

    def _cached_inputs(self, named: dict[str, tuple[Split, np.ndarray]], *, extra: str) -> dict[str, Split]:
        """The frozen part's outputs for each named token split, computed once and kept in the private cache (keyed
        by ``extra``, the records' digest, the model and its settings)."""
        config, bundle = self.config, self.bundle
        model = {k: v for k, v in dataclasses.asdict(config.model).items() if k != "name_or_path"}
        kind = "features" if bundle.cached_layers is None else "hidden"
        key = cache_key(kind, extra, bundle.fingerprint, model, config.data.max_length, self.result_settings(),
                        sorted(named))

        def compute() -> dict[str, Any]:
            label = "encoding the {} records through the frozen layers (once, then cached)".format
            if bundle.cached_layers is None:
                return {name: pooled_features(bundle.model, split, batch_size=config.eval_batch_size,
                                              label=label(name)).cpu() for name, (split, _) in named.items()}
            return {name: boundary_states(bundle.model, split, first=bundle.cached_layers,  # type: ignore[arg-type]
                                          batch_size=config.eval_batch_size, label=label(name))
                    for name, (split, _) in named.items()}

        def valid(payload: dict[str, Any]) -> bool:
            if bundle.cached_layers is None:
                return all(payload[name].shape[0] == len(split) for name, (split, _) in named.items())
            return all(split.lengths is not None and np.array_equal(payload[name]["lengths"].numpy(), split.lengths)
                       for name, (split, _) in named.items())

        payload, _ = self.cache.get_or_compute(kind, key, compute, validate=valid)
        if bundle.cached_layers is None:
            return {name: Split(payload[name], labels, None, self.device) for name, (_, labels) in named.items()}
        return {name: HiddenSplit(payload[name]["states"], labels, payload[name]["lengths"].numpy(), self.device)
                for name, (_, labels) in named.items()}
