"""Random streams: seeded ones derived from (seed, stage, ...), and the one secret stream of a release.

Training, risk, privacy and utility draws are reproducible from the recorded
seeds. The release draw's noise must not be: whoever can regenerate it can
subtract it from the released parameters. ``secret_normal`` draws it from 128 bits
of fresh operating-system entropy that exist only inside the call.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
    devices = [device] if device.type == "cuda" else []
    with GLOBAL_RNG, torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        torch.manual_seed(derive_seed(seed, *labels))
        yield


def secret_normal(size: int, *, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """``size`` standard-normal values from a generator seeded with fresh OS entropy, never recorded.

    The 128-bit seed comes from ``secrets`` (the operating system's CSPRNG) and is
    discarded when the call returns; nothing in the process or on disk can
    regenerate the values.
    """
    generator = np.random.Generator(np.random.PCG64(secrets.randbits(128)))
    numpy_dtype = np.float64 if dtype == torch.float64 else np.float32
    return torch.from_numpy(generator.standard_normal(size, dtype=numpy_dtype))
