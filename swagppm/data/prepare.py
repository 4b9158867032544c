"""Preparing read records for training: the classes (declared, or those with enough records), a cap per class, a
stratified split and a digest.

With a declared label set (``DataConfig.declared_labels``) the classes are exactly the
declared ones, in their order, whatever the records hold: no class is dropped, a class
with one record is split at random, and a record whose label is not declared is refused.
Without one, classes under ``min_per_class`` are dropped (a tuning-only study: the
resulting class list depends on the data, so such a study cannot release).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from swagppm.config import DataConfig
from swagppm.data.sources import read_records
from swagppm.errors import DataError


@dataclass(frozen=True, kw_only=True)
class PreparedData:
    """A stratified train/test split with integer labels ``0..K-1``.

    ``class_names[k]`` is the original label value of class ``k``; ``data_hash``
    identifies the exact prepared records (texts, labels and split).
    ``class_titles[k]`` is its human-readable name from ``data.title_column``
    (e.g. OSHA's ``nature_title``) or ``data.label_titles``, when one is given.
    ``declared``: the classes are a declared label set, not the ones found in the data.
    ``records_hash`` identifies the records read, whatever their order and preparation
    (the privacy ledger's data set).
    """

    train_texts: tuple[str, ...]
    train_labels: np.ndarray
    test_texts: tuple[str, ...]
    test_labels: np.ndarray
    class_names: tuple[str, ...]
    data_hash: str
    class_titles: tuple[str, ...] | None = None
    declared: bool = False
    declared_titles: tuple[str, ...] | None = None
    records_hash: str = ""

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def public_names(self) -> tuple[str, ...] | None:
        """The declared class names a release may publish (never titles read from the records, which exist only for
        the classes present); None without a declared label set."""
        if not self.declared:
            return None
        return self.declared_titles or self.class_names

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
    """Load, cap each class at ``max_per_class``, fix the classes, split stratified by ``test_size``."""
    records = read_records(config, seed=seed)
    texts, labels = records.texts, records.labels
    declared = config.declared_labels
    if declared is None:
        keep = _kept(labels, config, seed=seed, minimum=config.min_per_class)
        classes = sorted({labels[i] for i in keep})
        _check_classes(classes, labels, config)
    else:
        _check_declared(labels, declared, config)
        keep, classes = _kept(labels, config, seed=seed, minimum=1), list(declared)  # no class dropped
    class_index = {name: k for k, name in enumerate(classes)}
    train_idx, test_idx = _split(keep, labels, config, seed=seed)
    prepared: dict[str, Any] = {
        "train_texts": tuple(texts[i] for i in train_idx),
        "train_labels": np.asarray([class_index[labels[i]] for i in train_idx], dtype=np.int64),
        "test_texts": tuple(texts[i] for i in test_idx),
        "test_labels": np.asarray([class_index[labels[i]] for i in test_idx], dtype=np.int64),
        "class_names": tuple(classes),
    }
    titles = config.label_titles or _display_names(classes, records.titles)
    return PreparedData(**prepared, data_hash=_hash_prepared(**prepared), class_titles=titles,
                        declared=declared is not None, declared_titles=config.label_titles,
                        records_hash=_hash_prepared(records=sorted(zip(texts, labels))))


def _check_classes(classes: list[str], labels: list[str], config: DataConfig) -> None:
    """An undeclared study needs two classes with at least ``min_per_class`` records."""
    if len(classes) < 2:
        detail = ", ".join(str(count) for _, count in Counter(labels).most_common(5))  # counts only: names are labels
        raise DataError(
            f"{config.source}: column {config.label_column!r} has {len(classes)} class(es) with at least "
            f"{config.min_per_class} records (largest class sizes: {detail}); a classifier needs at least 2"
        )


def _check_declared(labels: list[str], declared: tuple[str, ...], config: DataConfig) -> None:
    """Every record's label is one of the declared set; else one line with the count and the first row (never the
    label itself: it is a record's value)."""
    allowed = set(declared)
    outside = [row for row, label in enumerate(labels, start=1) if label not in allowed]
    if outside:
        raise DataError(
            f"{config.source}: column {config.label_column!r}: {len(outside)} record(s) (the first at row "
            f"{outside[0]}) have a label outside the declared label set ({len(declared)} labels in "
            "[data] labels or labels_file); declare it, or remove those records")


def _split(keep: list[int], labels: list[str], config: DataConfig, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices: stratified over the classes with at least 2 kept records, each record of a class with
    one record to the test split with probability ``test_size`` (a declared class may have one)."""
    sizes = Counter(labels[i] for i in keep)
    paired = [i for i in keep if sizes[labels[i]] >= 2]
    single = np.asarray([i for i in keep if sizes[labels[i]] < 2], dtype=np.int64)
    n_classes = len({labels[i] for i in paired})
    n_test = math.ceil(config.test_size * len(paired))  # as stratified_split rounds it
    if paired and min(n_test, len(paired) - n_test) < n_classes:
        raise DataError(
            f"{config.source}: {len(paired)} records cannot be split stratified into train and test with "
            f"{n_classes} classes each; use more records or fewer classes"
        )
    train_idx, test_idx = np.empty(0, np.int64), np.empty(0, np.int64)
    if paired:
        train_at, test_at = stratified_split([labels[i] for i in paired], test_size=config.test_size, seed=seed)
        train_idx, test_idx = np.asarray(paired)[train_at], np.asarray(paired)[test_at]
    to_test = np.random.default_rng([seed, 1]).random(len(single)) < config.test_size
    train_idx, test_idx = np.concatenate([train_idx, single[~to_test]]), np.concatenate([test_idx, single[to_test]])
    if not len(train_idx) or not len(test_idx):
        raise DataError(f"{config.source}: {len(keep)} records leave the train or the test split empty; use more "
                        "records")
    return np.sort(train_idx), np.sort(test_idx)


def stratified_split(strata: Sequence[str], *, test_size: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Positions of the train and the test records: the split of scikit-learn's ``train_test_split(test_size=
    test_size, stratify=strata, random_state=seed)`` (its ``StratifiedShuffleSplit``), the same records on each side,
    without loading scikit-learn (with SciPy, pandas and pyarrow: seconds of a run's start) for one split.

    It takes the same steps with the same random stream (``RandomState(seed)``): the
    test side is ``ceil(test_size * n)`` records; each stratum's share of either side
    is the rounded mode of the hypergeometric, ties broken at random; then each
    stratum's records are shuffled and cut. Both sides come in stratum order (the
    callers sort them). Every stratum needs two records, and each side at least one
    record per stratum (the caller checks both).
    """
    n_test = math.ceil(test_size * len(strata))
    _, inverse, counts = np.unique(np.asarray(strata), return_inverse=True, return_counts=True)
    members = np.split(np.argsort(inverse.reshape(-1), kind="stable"), np.cumsum(counts)[:-1])
    rng = np.random.RandomState(seed)
    to_train = _hypergeometric_mode(counts, len(strata) - n_test, rng)
    to_test = _hypergeometric_mode(counts - to_train, n_test, rng)
    train, test = [], []
    for positions, n_train_k, n_test_k in zip(members, to_train, to_test, strict=True):
        shuffled = positions.take(rng.permutation(len(positions)), mode="clip")
        train.append(shuffled[:n_train_k])
        test.append(shuffled[n_train_k:n_train_k + n_test_k])
    return np.concatenate(train), np.concatenate(test)


def _hypergeometric_mode(counts: np.ndarray, draws: int, rng: np.random.RandomState) -> np.ndarray:
    """How many of ``draws`` records each stratum gives: its share rounded down, then one more for the strata with
    the largest remainders, equal remainders chosen at random (scikit-learn's ``_approximate_mode``)."""
    continuous = counts / counts.sum() * draws
    floored = np.floor(continuous)
    missing = int(draws - floored.sum())
    if missing > 0:
        remainder = continuous - floored
        for value in np.sort(np.unique(remainder))[::-1]:
            (tied,) = np.where(remainder == value)
            chosen = rng.choice(tied, size=min(len(tied), missing), replace=False)
            floored[chosen] += 1
            missing -= len(chosen)
            if missing == 0:
                break
    return floored.astype(int)


def _kept(labels: list[str], config: DataConfig, *, seed: int, minimum: int) -> list[int]:
    """Indices of the records kept, in record order: classes under ``minimum`` records dropped, the rest capped at
    ``max_per_class``."""
    rng = np.random.default_rng(seed)
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    keep: list[int] = []
    for label in sorted(by_class):
        members = by_class[label]
        if len(members) < minimum:
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
