"""Loading and preparing labelled texts: files, Hugging Face datasets, or a synthetic corpus.

Local files are read with pandas (not ``datasets``) so that no copy of the private
records lands in a shared Hugging Face cache. Every problem with the input is
raised as one ``DataError`` naming the file, the column and the first offending row.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from swagppm._config import DataConfig

_FILE_READERS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


class DataError(ValueError):
    """The training data cannot be used as given; the message says where and why."""


@dataclass(frozen=True)
class PreparedData:
    """A stratified train/test split with integer labels ``0..K-1``.

    ``class_names[k]`` is the original label value of class ``k``; ``data_hash``
    identifies the exact prepared records (texts, labels and split).
    """

    train_texts: tuple[str, ...]
    train_labels: np.ndarray
    test_texts: tuple[str, ...]
    test_labels: np.ndarray
    class_names: tuple[str, ...]
    data_hash: str

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def majority_rate(self) -> float:
        """Share of the most common class in the training set (the 'stuck' accuracy)."""
        return float(np.bincount(self.train_labels).max() / len(self.train_labels))


def load_records(config: DataConfig, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """Read (texts, labels) from ``config.source``; labels are returned as strings."""
    if config.source == "synthetic":
        texts, labels = synthetic_corpus(config.synthetic_size, num_classes=config.synthetic_classes, seed=seed)
        return texts, labels
    frame, origin = _read_frame(config)
    for column in (config.text_column, config.label_column):
        if column not in frame.columns:
            raise DataError(
                f"{origin}: column {column!r} not found; columns present: {', '.join(map(str, frame.columns))}. "
                f"Set data.text_column / data.label_column."
            )
    if len(frame) == 0:
        raise DataError(f"{origin}: no records")
    texts = frame[config.text_column].tolist()
    labels = frame[config.label_column].tolist()
    for row, text in enumerate(texts, start=1):
        if not isinstance(text, str) or not text.strip():
            missing = text is None or (isinstance(text, float) and np.isnan(text))  # e.g. an empty CSV cell
            kind = "an empty text" if isinstance(text, str) or missing else f"a non-text value {text!r}"
            raise DataError(f"{origin}: column {config.text_column!r}, row {row}: {kind}")
    for row, label in enumerate(labels, start=1):
        if label is None or (isinstance(label, float) and np.isnan(label)) or str(label).strip() == "":
            raise DataError(f"{origin}: column {config.label_column!r}, row {row}: missing label")
    return texts, [str(label) for label in labels]


def prepare_data(config: DataConfig, *, seed: int = 0) -> PreparedData:
    """Load, cap each class at ``max_per_class``, drop rare classes, split 50/50 stratified."""
    texts, labels = load_records(config, seed=seed)
    rng = np.random.default_rng(seed)
    counts = Counter(labels)
    keep: list[int] = []
    by_class: dict[str, list[int]] = {}
    for index, label in enumerate(labels):
        by_class.setdefault(label, []).append(index)
    for label in sorted(by_class):
        members = by_class[label]
        if len(members) < config.min_per_class:
            continue
        if config.max_per_class is not None and len(members) > config.max_per_class:
            members = sorted(rng.choice(members, size=config.max_per_class, replace=False).tolist())
        keep.extend(members)
    kept_classes = sorted({labels[i] for i in keep})
    if len(kept_classes) < 2:
        detail = ", ".join(f"{k!r}: {v}" for k, v in counts.most_common(5))
        raise DataError(
            f"{config.source}: column {config.label_column!r} has {len(kept_classes)} class(es) with at least "
            f"{config.min_per_class} records (counts: {detail}); a classifier needs at least 2"
        )
    keep.sort()
    kept_labels = [labels[i] for i in keep]
    class_index = {name: k for k, name in enumerate(kept_classes)}
    n_test = int(np.ceil(len(keep) * config.test_size))  # as train_test_split rounds it
    if min(n_test, len(keep) - n_test) < len(kept_classes):
        raise DataError(
            f"{config.source}: {len(keep)} records cannot be split stratified into train and test with "
            f"{len(kept_classes)} classes each; use more records or fewer classes"
        )
    train_idx, test_idx = train_test_split(
        np.asarray(keep), test_size=config.test_size, stratify=kept_labels, random_state=seed
    )
    train_idx, test_idx = np.sort(train_idx), np.sort(test_idx)
    prepared = dict(
        train_texts=tuple(texts[i] for i in train_idx),
        train_labels=np.asarray([class_index[labels[i]] for i in train_idx], dtype=np.int64),
        test_texts=tuple(texts[i] for i in test_idx),
        test_labels=np.asarray([class_index[labels[i]] for i in test_idx], dtype=np.int64),
        class_names=tuple(kept_classes),
    )
    return PreparedData(**prepared, data_hash=_hash_prepared(**prepared))


def _hash_prepared(**parts: object) -> str:
    digest = hashlib.sha256()
    for key in sorted(parts):
        value = parts[key]
        payload = value.tolist() if isinstance(value, np.ndarray) else list(value)  # type: ignore[call-overload]
        digest.update(key.encode())
        digest.update(json.dumps(payload, ensure_ascii=False).encode())
    return digest.hexdigest()


def _read_frame(config: DataConfig) -> tuple[pd.DataFrame, str]:
    source = Path(config.source).expanduser()
    kind = _FILE_READERS.get(source.suffix.lower())
    if kind is None:
        if source.suffix and not source.is_dir():
            raise DataError(
                f"{source}: unsupported file type {source.suffix!r}; use .csv, .jsonl, .json or .parquet, "
                "or a Hugging Face dataset name or directory"
            )
        return _read_hf_dataset(config), config.source
    if not source.is_file():
        raise DataError(f"{source}: file not found")
    if kind != "parquet":
        _check_utf8(source)
    try:
        if kind == "csv":
            frame = pd.read_csv(source, dtype=object, keep_default_na=False, na_values=[""])
        elif kind == "json":
            frame = pd.read_json(source, lines=source.suffix.lower() == ".jsonl", dtype=False)
        else:
            frame = pd.read_parquet(source)
    except Exception as error:  # pandas raises many parser types; all mean "unreadable"
        bad_line = _first_bad_json_line(source) if source.suffix.lower() == ".jsonl" else None
        where = f" (line {bad_line} is not valid JSON)" if bad_line is not None else ""
        raise DataError(f"{source}: cannot be read as {kind}{where}: {error}") from None
    return frame, str(source)


def _first_bad_json_line(path: Path) -> int | None:
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if line.strip():
            try:
                json.loads(line)
            except ValueError:
                return number
    return None


def _check_utf8(path: Path) -> None:
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise DataError(
            f"{path}: not valid UTF-8 at byte {error.start} (line {line}); re-save the file as UTF-8"
        ) from None


def _read_hf_dataset(config: DataConfig) -> pd.DataFrame:
    import datasets

    source = Path(config.source).expanduser()
    try:
        if source.is_dir() and any((source / name).exists() for name in ("dataset_info.json", "dataset_dict.json")):
            loaded = datasets.load_from_disk(str(source))
            dataset = loaded[config.split] if isinstance(loaded, datasets.DatasetDict) else loaded
        else:
            dataset = datasets.load_dataset(config.source, split=config.split)
    except KeyError:
        raise DataError(f"{config.source}: no split {config.split!r}; set data.split") from None
    except Exception as error:
        raise DataError(f"{config.source}: cannot load as a Hugging Face dataset: {error}") from None
    return dataset.to_pandas()


# --- The built-in synthetic corpus -------------------------------------------------------------

_INJURIES = (
    ("fracture", ("fractured", "broke", "cracked"), ("leg", "wrist", "ankle", "rib", "arm", "hip")),
    ("amputation", ("amputated", "severed", "lost the tip of"), ("finger", "thumb", "toe", "fingertip")),
    ("burn", ("burned", "scalded", "seared"), ("hand", "forearm", "face", "chest")),
    ("laceration", ("cut", "lacerated", "sliced"), ("hand", "palm", "scalp", "forearm")),
    ("contusion", ("bruised", "struck", "crushed"), ("shoulder", "knee", "foot", "back")),
    ("sprain", ("sprained", "twisted", "strained"), ("ankle", "knee", "wrist", "back")),
    ("electric shock", ("was shocked through", "received a shock to", "was electrocuted through"), ("hand", "arm", "body")),
    ("heat illness", ("collapsed from heat with cramps in", "fainted from heat with pain in", "overheated with weakness in"), ("legs", "body", "arms")),
    ("puncture", ("punctured", "pierced", "stabbed"), ("hand", "foot", "thigh", "palm")),
    ("hearing loss", ("lost hearing in", "damaged the eardrum of", "suffered ringing in"), ("ear", "left ear", "right ear")),
    ("chemical burn", ("splashed acid on", "got caustic on", "spilled solvent on"), ("face", "eyes", "hand")),
    ("crush injury", ("caught and crushed", "pinned", "compressed"), ("hand", "pelvis", "leg", "foot")),
)
_WORKERS = ("An employee", "A worker", "A laborer", "A technician", "A driver", "An operator", "A welder", "A roofer")
_PLACES = ("at a warehouse", "on a construction site", "in a machine shop", "at a plant", "on a loading dock",
           "in a kitchen", "at a farm", "in a freezer room")
_CAUSES = ("while operating a press", "after slipping on ice", "while unloading a truck", "when a ladder shifted",
           "while cleaning a conveyor", "when a pallet fell", "while repairing a pump", "during a routine shift")
_OUTCOMES = ("and was hospitalized.", "and was taken to the hospital.", "and received treatment.",
             "and was kept overnight.", "and was released the next day.")


def synthetic_corpus(size: int = 600, *, num_classes: int = 8, seed: int = 0) -> tuple[list[str], list[str]]:
    """Injury-like narratives with Zipf-imbalanced classes, made from our own word lists.

    Class ``k`` gets a share proportional to ``1/(k+1)``; about 10% of the records
    borrow the verb of another class, so the task is learnable but not trivial.
    """
    if not 2 <= num_classes <= len(_INJURIES):
        raise ValueError(f"num_classes must be between 2 and {len(_INJURIES)}, got {num_classes}")
    rng = np.random.default_rng(seed)
    shares = 1.0 / np.arange(1, num_classes + 1)
    labels_idx = rng.choice(num_classes, size=size, p=shares / shares.sum())
    labels_idx[: 2 * num_classes] = np.repeat(np.arange(num_classes), 2)  # every class at least twice
    texts, labels = [], []
    for k in labels_idx:
        name, verbs, parts = _INJURIES[k]
        verb_class = rng.integers(num_classes) if rng.random() < 0.1 else k
        verb = _pick(rng, _INJURIES[verb_class][1])
        sentence = (f"{_pick(rng, _WORKERS)} {_pick(rng, _PLACES)} {verb} the {_pick(rng, parts)} "
                    f"{_pick(rng, _CAUSES)} {_pick(rng, _OUTCOMES)}")
        texts.append(sentence)
        labels.append(name)
    return texts, labels


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]
