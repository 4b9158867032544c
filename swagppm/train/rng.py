"""Random streams: seeded ones derived from (seed, stage, ...), and the one secret stream of a release.

Training, risk, privacy and utility draws are reproducible from the recorded
seeds. The release draw's noise must not be: whoever can regenerate it can
subtract it from the released parameters. Every posterior draws through a ``Noise``
it is handed (``swagppm.posteriors``): ``SeededNoise`` for the reproducible draws,
and ``secret_noise()``, the one source of a release's noise, seeded from 128 bits of
fresh operating-system entropy that exist only inside it. No posterior makes its own.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import numpy as np
import torch


def derive_seed(seed: int, *labels: object) -> int:
    """A 63-bit seed determined by ``seed`` and the labels (e.g. ``"privacy"``, trial numbers)."""
    text = "/".join(map(str, (seed, *labels)))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def generator(seed: int, *labels: object, device: torch.device | str = "cpu") -> torch.Generator:
    """A fresh ``torch.Generator`` on ``device`` seeded with ``derive_seed(seed, *labels)``."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, *labels))
    return gen


GLOBAL_RNG = threading.RLock()  # held by every block that seeds and draws from torch's global random state


@contextmanager
def seeded_global_rng(seed: int, *labels: object, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG (dropout, weight init) for a block, restoring it afterwards.

    Dropout and ``nn.Linear`` initialisation draw from the global RNG; forking it
    makes training reproducible without disturbing the caller's random state. The
    block holds ``GLOBAL_RNG``, so fits in other threads (``swagppm.side_by_side``)
    never draw from the state it seeded.
    """
    with _forked_global_rng(derive_seed(seed, *labels), device):
        yield


class Noise(Protocol):
    """Where a posterior draw's randomness comes from: handed to every draw, never made by a posterior.

    ``secret`` says the draw must not be reproducible (a release): a posterior whose
    draws are stored samples (an exact sampler's) then moves a chain of its own with
    this noise rather than handing back a stored sample.
    """

    secret: bool

    def normal(self, size: int, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> torch.Tensor:
        """``size`` standard-normal values on ``device``."""
        ...

    def index(self, high: int) -> int:
        """A uniformly random integer in [0, high)."""
        ...

    def global_rng(self, device: torch.device) -> contextlib.AbstractContextManager[None]:
        """Torch's global random state seeded from this noise for a block (for a library that draws from it, such
        as pyro's samplers), restored afterwards."""
        ...


class SeededNoise:
    """Reproducible noise from an explicit ``torch.Generator`` (risk, privacy, utility and training draws)."""

    secret = False

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def normal(self, size: int, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> torch.Tensor:
        values = torch.randn(size, generator=self.generator, device=self.generator.device, dtype=dtype)
        return values.to(device)

    def index(self, high: int) -> int:
        return int(torch.randint(high, (1,), generator=self.generator, device=self.generator.device))

    @contextmanager
    def global_rng(self, device: torch.device) -> Iterator[None]:
        seed = int(torch.randint(2**62, (1,), generator=self.generator, device=self.generator.device))
        with _forked_global_rng(seed, device):
            yield


class _SecretNoise:
    """Noise from a generator seeded with 128 bits of fresh OS entropy, never recorded (``secret_noise``)."""

    secret = True

    def __init__(self) -> None:
        self._generator = np.random.Generator(np.random.PCG64(secrets.randbits(128)))

    def normal(self, size: int, *, dtype: torch.dtype = torch.float32,
               device: torch.device | str = "cpu") -> torch.Tensor:
        numpy_dtype = np.float64 if dtype == torch.float64 else np.float32
        return torch.from_numpy(self._generator.standard_normal(size, dtype=numpy_dtype)).to(device)

    def index(self, high: int) -> int:
        return int(self._generator.integers(high))

    @contextmanager
    def global_rng(self, device: torch.device) -> Iterator[None]:
        with _forked_global_rng(int(self._generator.integers(2**63)), device):
            yield


def secret_noise() -> Noise:
    """The one source of a release's noise: fresh operating-system entropy (``secrets``, the OS's CSPRNG) seeds a
    generator that lives only in the returned object; nothing in the process or on disk can regenerate it."""
    return _SecretNoise()


@contextmanager
def _forked_global_rng(seed: int, device: torch.device) -> Iterator[None]:
    devices = [device] if device.type == "cuda" else []
    with GLOBAL_RNG, torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        torch.manual_seed(seed)
        yield
