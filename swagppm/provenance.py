"""What a result depends on besides the data and the settings: code, library versions and the model's weights.

All go into the stage-1 and feature cache keys (a stale entry is never reused
after an upgrade or a changed weight file) and the per-parameter digests let a
release check that every parameter it does not draw still holds its public value.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import platform
import secrets
import tempfile
from collections.abc import Mapping
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from swagppm.cache import FINGERPRINT_KEY, tensor_digest

if TYPE_CHECKING:  # torch is imported by the functions that need it: the cache key alone (fingerprint_key) loads none
    import torch
    from transformers import PreTrainedTokenizerBase


def cpu_kernels(device: torch.device | str = "cpu") -> str:
    """torch's CPU kernel level (e.g. ``"AVX512"``) on a CPU, empty elsewhere: not a cache key (see README,
    Reproducibility), but another level rounds differently, so results record it."""
    import torch

    return torch.backends.cpu.get_cpu_capability() if torch.device(device).type == "cpu" else ""


def versions(*extra: str) -> dict[str, str]:
    """Versions of Python and the packages a result depends on (plus ``extra`` distributions), for records."""
    import torch

    found = {"python": platform.python_version(), "torch": torch.__version__}
    for package in ("swagppm-tuner", "transformers", "tokenizers", "numpy", "scikit-learn", *extra):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    return found


@cache
def code_digest() -> str:
    """SHA-256 of every source file of this package, subpackages included, with its path in the package.

    An edited (or moved) copy of the code never reuses another's stage 1.
    """
    root = Path(__file__).parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def fingerprint_key(cache_dir: Path) -> bytes:
    """The secret key of every data fingerprint: 32 random bytes in ``cache_dir`` (0600), created once, reused.

    A bare digest of the data is an oracle: whoever knows every record but one
    hashes each candidate for the last one and compares. Keyed, a fingerprint only
    says "same data" to whoever holds the key (the owner's private cache). The key is
    written whole to a temporary file and linked into place, so a process starting
    at the same moment never reads a key half written: it reads the one that won.
    """
    path = cache_dir / FINGERPRINT_KEY
    if not path.exists():
        fd, temporary = tempfile.mkstemp(dir=cache_dir, prefix=f".{FINGERPRINT_KEY}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(secrets.token_bytes(32))
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(temporary, 0o600)
            with contextlib.suppress(FileExistsError):  # another process linked its key first: use that one
                os.link(temporary, path)
        finally:
            os.unlink(temporary)
    key = path.read_bytes()
    if len(key) != 32:
        raise ValueError(f"{path}: not a fingerprint key (32 bytes); delete it to make a new one")
    return key


def keyed_fingerprint(key: bytes, digest: str) -> str:
    """HMAC-SHA-256 of a data digest under the owner's ``fingerprint_key``: what leaves the cache instead of it."""
    return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()


def stage1_fingerprint(risk: torch.Tensor, state: Mapping[str, torch.Tensor], *, key: bytes) -> str:
    """16 hex digits of an HMAC (``keyed_fingerprint``) over stage 1's per-record risks and trained state.

    Equal exactly when two stage 1s are bit-identical: another CPU, thread count or
    library version can change stage 1, and trials on different ones do not compare.
    Keyed, it tells nothing of the risks to anyone without the owner's key.
    """
    text = json.dumps([tensor_digest(risk), sorted((name, tensor_digest(value)) for name, value in state.items())])
    return keyed_fingerprint(key, text)[:16]


def tokenizer_digest(tokenizer: PreTrainedTokenizerBase) -> str:
    """SHA-256 of the tokenizer's full definition (fast tokenizers) or its vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.to_str() if backend is not None else json.dumps(tokenizer.get_vocab(), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def model_fingerprint(parameter_digests: dict[str, str], tokenizer: PreTrainedTokenizerBase) -> str:
    """One digest of every starting parameter value and the tokenizer: what the model *is*,
    wherever it was loaded from."""
    text = json.dumps([sorted(parameter_digests.items()), tokenizer_digest(tokenizer)])
    return hashlib.sha256(text.encode()).hexdigest()
