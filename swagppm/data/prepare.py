"""Preparing read records for training: rare classes dropped, classes capped, a stratified split, a hash."""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
from sklearn.model_selection import train_test_split

from swagppm.config import DataConfig
from swagppm.data.sources import read_records
from swagppm.errors import DataError


@dataclass(frozen=True, kw_only=True)
class PreparedData:
    """A stratified train/test split with integer labels ``0..K-1``.

    ``class_names[k]`` is the original label value of class ``k``; ``data_hash``
    identifies the exact prepared records (texts, labels and split).
    ``class_titles[k]`` is its human-readable name from ``data.title_column``
    (e.g. OSHA's ``nature_title``), when one is given.
    """

    train_texts: tuple[str, ...]
    train_labels: np.ndarray
    test_texts: tuple[str, ...]
    test_labels: np.ndarray
    class_names: tuple[str, ...]
    data_hash: str
    class_titles: tuple[str, ...] | None = None

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def label_names(self) -> tuple[str, ...]:
        """What a released model calls its classes: the titles when known, else the label values."""
        return self.class_titles or self.class_names

    @property
    def majority_rate(self) -> float:
        """Share of the most common class in the training set (the 'stuck' accuracy)."""
        return float(np.bincount(self.train_labels).max() / len(self.train_labels))

    @property
    def train_counts(self) -> np.ndarray:
        """Training records per class (class sizes order the quartiles of ``utility.class_report``)."""
        return np.bincount(self.train_labels, minlength=self.num_classes)


def prepare_data(config: DataConfig, *, seed: int = 0) -> PreparedData:
    """Load, cap each class at ``max_per_class``, drop rare classes, split stratified by ``test_size``."""
    records = read_records(config, seed=seed)
    texts, labels = records.texts, records.labels
    keep = _kept(labels, config, seed=seed)
    kept_classes = sorted({labels[i] for i in keep})
    if len(kept_classes) < 2:
        detail = ", ".join(str(count) for _, count in Counter(labels).most_common(5))  # counts only: names are labels
        raise DataError(
            f"{config.source}: column {config.label_column!r} has {len(kept_classes)} class(es) with at least "
            f"{config.min_per_class} records (largest class sizes: {detail}); a classifier needs at least 2"
        )
    class_index = {name: k for k, name in enumerate(kept_classes)}
    n_test = int(np.ceil(len(keep) * config.test_size))  # as train_test_split rounds it
    if min(n_test, len(keep) - n_test) < len(kept_classes):
        raise DataError(
            f"{config.source}: {len(keep)} records cannot be split stratified into train and test with "
            f"{len(kept_classes)} classes each; use more records or fewer classes"
        )
    train_idx, test_idx = train_test_split(
        np.asarray(keep), test_size=config.test_size, stratify=[labels[i] for i in keep], random_state=seed
    )
    train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
    prepared: dict[str, Any] = {
        "train_texts": tuple(texts[i] for i in train_idx),
        "train_labels": np.asarray([class_index[labels[i]] for i in train_idx], dtype=np.int64),
        "test_texts": tuple(texts[i] for i in test_idx),
        "test_labels": np.asarray([class_index[labels[i]] for i in test_idx], dtype=np.int64),
        "class_names": tuple(kept_classes),
    }
    return PreparedData(**prepared, data_hash=_hash_prepared(**prepared),
                        class_titles=_display_names(kept_classes, records.titles))


def _kept(labels: list[str], config: DataConfig, *, seed: int) -> list[int]:
    """Indices of the records kept, in record order: classes under ``min_per_class`` dropped, the rest capped."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    keep: list[int] = []
    for label in sorted(by_class):
        members = by_class[label]
        if len(members) < config.min_per_class:
            continue
        if config.max_per_class is not None and len(members) > config.max_per_class:
            members = sorted(rng.choice(members, size=config.max_per_class, replace=False).tolist())
        keep.extend(members)
    return sorted(keep)


def _display_names(classes: list[str], titles: dict[str, str]) -> tuple[str, ...] | None:
    """Unique human-readable class names: the title, with the label value added where titles repeat or lack."""
    if not titles:
        return None
    named = [titles.get(label, label) for label in classes]
    repeated = {name for name in named if named.count(name) > 1}
    return tuple(f"{name} ({label})" if name in repeated else name for name, label in zip(named, classes))


def _hash_prepared(**parts: object) -> str:
    digest = hashlib.sha256()
    for key in sorted(parts):
        value = parts[key]
        payload = value.tolist() if isinstance(value, np.ndarray) else list(value)  # type: ignore[call-overload]
        digest.update(key.encode())
        digest.update(json.dumps(payload, ensure_ascii=False).encode())
    return digest.hexdigest()
