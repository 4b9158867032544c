"""Seeds derived from (seed, stage, ...) so that every stage has its own explicit stream."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def seeded_global_rng(seed: int, *labels: object, device: torch.device) -> Iterator[None]:
    """Seed torch's global RNG (dropout, weight init) for a block, restoring it afterwards.

    Dropout and ``nn.Linear`` initialisation draw from the global RNG; forking it
    makes training reproducible without disturbing the caller's random state.
    """
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        torch.manual_seed(derive_seed(seed, *labels))
        yield
