"""Records the owner declares public: read like the training data, refused if one of them is a private record.

A public evaluation set (``--public-eval``), a release's selection set and a public
risk source (``[data] risk_source``) are files of records of the same kind and
columns as the private data. A label outside the model's classes is refused, and so
is any record that also occurs in the private data, compared as the model's tokenizer
normalises texts and ignoring letter case, width and spacing (calling such a set
public would tell whether one record is in it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from swagppm.config import DataConfig
from swagppm.data.prepare import PreparedData
from swagppm.data.sources import load_records
from swagppm.errors import DataError
from swagppm.train.engine import Split


@dataclass(frozen=True, kw_only=True, eq=False)
class PublicRecords:
    """A public set tokenised as in training: its split, its class codes and a digest of its content (public)."""

    split: Split
    labels: np.ndarray
    digest: str


def read_public_records(source: str, *, data: PreparedData, config: DataConfig, seed: int, tokenizer: Any,
                        device: torch.device) -> PublicRecords:
    """The records of the file ``source``, tokenised as in training; refused if a label is unknown or a text is
    private."""
    file_config = dataclasses.replace(config, source=source, revision=None)  # a file, not the Hub's
    texts, labels = load_records(file_config, seed=seed)
    index = {name: k for k, name in enumerate(data.class_names)}
    unknown = sum(label not in index for label in labels)
    if unknown:
        raise DataError(f"{source}: {unknown} of {len(labels)} records have a {config.label_column!r} value that is "
                        f"not one of the {data.num_classes} classes the model was trained on")
    canonical = canonical_form(tokenizer)
    private = {_digest(canonical(text)) for text in (*data.train_texts, *data.test_texts)}
    overlap = sum(_digest(canonical(text)) in private for text in texts)
    if overlap:
        raise DataError(f"{source}: {overlap} of {len(texts)} records also occur in the private data; a set declared "
                        "public must hold no private record (remove them)")
    codes = np.asarray([index[label] for label in labels], dtype=np.int64)
    split = Split.from_texts(tuple(texts), codes, tokenizer, max_length=config.max_length, device=device)
    content = hashlib.sha256("\n".join(f"{label}\t{text}" for text, label in zip(texts, labels)).encode())
    return PublicRecords(split=split, labels=codes, digest=content.hexdigest())


def canonical_form(tokenizer: Any) -> Callable[[str], str]:
    """A text as the model cannot tell it apart from its variants: the tokenizer's own normaliser (a fast tokenizer's:
    lower case, accents stripped, control characters dropped, for an uncased model), then Unicode compatibility forms,
    letter case and runs of white space folded whatever the tokenizer, since a record in other case or spacing is the
    same record to a reader and to a membership attack."""
    normalizer = getattr(getattr(tokenizer, "backend_tokenizer", None), "normalizer", None)

    def canonical(text: str) -> str:
        if normalizer is not None:
            text = normalizer.normalize_str(text)
        return " ".join(unicodedata.normalize("NFKC", text).casefold().split())

    return canonical


def _digest(text: str) -> bytes:
    """A canonical text's digest for the overlap check (never leaves the process)."""
    return hashlib.sha256(text.encode()).digest()
