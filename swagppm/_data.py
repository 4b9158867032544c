"""Loading and preparing labelled texts: files, folders, Hugging Face datasets, or a synthetic corpus.

No copy of the private records may land in the shared Hugging Face cache: local files,
and folders of them, are read with pandas; ``save_to_disk`` folders with
``load_from_disk``, which writes nothing; anything else goes through ``load_dataset``
with its cache in an owner-only temporary folder, deleted once read. Every problem
with the input is raised as one ``DataError`` naming the file, the column, the first
offending row and the kind of problem, never the records' content.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np
import pandas as pd
from sklearn.model_selection import train_test_split

from swagppm._config import DataConfig
from swagppm._errors import DataError

_FILE_READERS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


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


def load_records(config: DataConfig, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """Read (texts, labels) from ``config.source``; labels are returned as strings."""
    texts, labels, _ = _load(config, seed=seed)
    return texts, labels


def _load(config: DataConfig, *, seed: int) -> tuple[list[str], list[str], dict[str, str]]:
    """(texts, labels, the title of each label value when ``data.title_column`` names one)."""
    if config.source == "synthetic":
        texts, labels = synthetic_corpus(config.synthetic_size, num_classes=config.synthetic_classes, seed=seed)
        return texts, labels, {}
    texts, labels = [], []
    titles: dict[str, str] = {}
    for frame, origin in _read_parts(config):
        part_texts, part_labels = _checked_records(frame, origin, config)
        texts += part_texts
        labels += part_labels
        titles |= _titles(frame, origin, config, part_labels)
    if not texts:
        raise DataError(f"{config.source}: no records")
    return texts, labels, titles


def _titles(frame: pd.DataFrame, origin: str, config: DataConfig, labels: list[str]) -> dict[str, str]:
    """The first non-empty title seen for each label value (class names, not per-record values)."""
    column = config.title_column
    if column is None:
        return {}
    if column not in frame.columns:
        raise DataError(f"{origin}: column {column!r} not found (data.title_column)")
    found: dict[str, str] = {}
    for label, title in zip(labels, frame[column].tolist()):
        if label not in found and isinstance(title, str) and title.strip():
            found[label] = title.strip()
    return found


def _display_names(classes: list[str], titles: dict[str, str]) -> tuple[str, ...] | None:
    """Unique human-readable class names: the title, with the label value added where titles repeat or lack."""
    if not titles:
        return None
    named = [titles.get(label, label) for label in classes]
    repeated = {name for name in named if named.count(name) > 1}
    return tuple(f"{name} ({label})" if name in repeated else name for name, label in zip(named, classes))


def _checked_records(frame: pd.DataFrame, origin: str, config: DataConfig) -> tuple[list[str], list[str]]:
    """The text and label columns of one file, or a ``DataError`` naming the first bad cell (not its content)."""
    for column in (config.text_column, config.label_column):
        if column not in frame.columns:
            raise DataError(
                f"{origin}: column {column!r} not found; columns present: {', '.join(map(str, frame.columns))}. "
                f"Set data.text_column / data.label_column."
            )
    texts = frame[config.text_column].tolist()
    labels = frame[config.label_column].tolist()
    for column, values, problem_of in ((config.text_column, texts, _text_problem),
                                       (config.label_column, labels, _label_problem)):
        for row, value in enumerate(values, start=1):
            problem = problem_of(value)
            if problem is not None:
                raise DataError(f"{origin}: column {column!r}, row {row}: {problem}")
    return texts, [str(label) for label in labels]


def _text_problem(value: object) -> str | None:
    if isinstance(value, str):
        return None if value.strip() else "an empty text"
    return "an empty text" if _is_missing(value) else f"{_kind_of(value)}, not text"


def _label_problem(value: object) -> str | None:
    if _is_missing(value) or (isinstance(value, str) and not value.strip()):
        return "missing label"
    if not pd.api.types.is_scalar(value) or isinstance(value, bytes):
        return f"{_kind_of(value)}, not a label (text or a number)"
    return None


def _is_missing(value: object) -> bool:
    """None, NaN or pd.NA: what an empty CSV cell or a JSON null becomes."""
    return bool(pd.api.types.is_scalar(value) and pd.isna(value))


def _kind_of(value: object) -> str:
    """The type of a cell in words: error messages must not quote the records themselves."""
    if isinstance(value, (list, tuple, np.ndarray)):
        return "a list"
    if isinstance(value, dict):
        return "a dict"
    if isinstance(value, (bool, np.bool_)):
        return "a true/false value"
    if isinstance(value, (int, float, np.number)):
        return "a number"
    return f"a value of type {type(value).__name__}"


def prepare_data(config: DataConfig, *, seed: int = 0) -> PreparedData:
    """Load, cap each class at ``max_per_class``, drop rare classes, split 50/50 stratified."""
    texts, labels, titles = _load(config, seed=seed)
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
        detail = ", ".join(str(count) for _, count in counts.most_common(5))  # counts only: class names are labels
        raise DataError(
            f"{config.source}: column {config.label_column!r} has {len(kept_classes)} class(es) with at least "
            f"{config.min_per_class} records (largest class sizes: {detail}); a classifier needs at least 2"
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
    prepared: dict[str, Any] = {
        "train_texts": tuple(texts[i] for i in train_idx),
        "train_labels": np.asarray([class_index[labels[i]] for i in train_idx], dtype=np.int64),
        "test_texts": tuple(texts[i] for i in test_idx),
        "test_labels": np.asarray([class_index[labels[i]] for i in test_idx], dtype=np.int64),
        "class_names": tuple(kept_classes),
    }
    return PreparedData(**prepared, data_hash=_hash_prepared(**prepared),
                        class_titles=_display_names(kept_classes, titles))


def _hash_prepared(**parts: object) -> str:
    digest = hashlib.sha256()
    for key in sorted(parts):
        value = parts[key]
        payload = value.tolist() if isinstance(value, np.ndarray) else list(value)  # type: ignore[call-overload]
        digest.update(key.encode())
        digest.update(json.dumps(payload, ensure_ascii=False).encode())
    return digest.hexdigest()


def _read_parts(config: DataConfig) -> list[tuple[pd.DataFrame, str]]:
    """The records of ``config.source`` as (frame, origin) parts, one per file where there are several."""
    source = Path(config.source).expanduser()
    try:
        return _read_source(source, config)
    except PermissionError as error:  # e.g. a folder on the way to the source that this user may not enter
        raise DataError(f"{error.filename or source}: cannot be read by this user (permission denied)") from None


def _read_source(source: Path, config: DataConfig) -> list[tuple[pd.DataFrame, str]]:
    kind = _FILE_READERS.get(source.suffix.lower())
    if source.is_dir():
        if kind is not None:
            raise DataError(f"{source}: is a folder, not a file; data.source must name a {source.suffix} file itself")
        return _read_folder(source, config.split)
    if kind is not None:
        if not source.is_file():
            raise DataError(f"{source}: file not found")
        return [(_read_file(source, kind), str(source))]
    if source.suffix:
        raise DataError(
            f"{source}: unsupported file type {source.suffix!r}; use .csv, .jsonl, .json or .parquet, "
            "or a Hugging Face dataset name or directory"
        )
    if source.is_absolute() or config.source.startswith((".", "~")):
        raise DataError(f"{source}: no such file or folder")
    return [(_load_dataset_privately(config.source, config.split), config.source)]


def _read_file(path: Path, kind: str) -> pd.DataFrame:
    """One local file, read with pandas: no copy of it is written anywhere."""
    if kind != "parquet":
        _check_utf8(path)
    try:
        if kind == "csv":
            return pd.read_csv(path, dtype=object, keep_default_na=False, na_values=[""])
        if kind == "json":
            return pd.read_json(path, lines=path.suffix.lower() == ".jsonl", dtype=False)
        return pd.read_parquet(path)
    except PermissionError:
        raise
    except Exception as error:  # noqa: BLE001 - pandas raises many parser types; all mean "unreadable"
        # The parser's own message can quote the file, so only its type and the line are named.
        line = _first_bad_line(path, kind)
        where = f" at line {line}" if line is not None else ""
        raise DataError(f"{path}: cannot be read as {kind}: {type(error).__name__}{where}") from None


def _first_bad_line(path: Path, kind: str) -> int | None:
    if kind == "csv":
        return _first_bad_csv_line(path)
    if path.suffix.lower() == ".jsonl":
        return _first_bad_json_line(path)
    if kind == "json":
        try:
            json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            return error.lineno
    return None


def _first_bad_csv_line(path: Path) -> int | None:
    """Where the first record with more fields than the header, or else the last malformed one, starts.

    A strict ``csv`` reader flags stray quotes that pandas accepts, so a malformed record
    counts only when it is the last one: an unclosed quote runs to the end of the file.
    """
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.reader(handle, strict=True)
        width, malformed = None, None
        while True:
            start = reader.line_num + 1
            try:
                record = next(reader)
            except StopIteration:
                return malformed
            except csv.Error:
                malformed = start
                continue
            if width is None:
                width = len(record) or None  # the header, after any blank lines
            elif len(record) > width:
                return start


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


# --- Folders and Hugging Face datasets ---------------------------------------------------------

# In a folder, .json files go to ``datasets``: its reader takes JSON Lines there too, pandas' does not.
_FOLDER_READERS = {".csv": "csv", ".jsonl": "json", ".parquet": "parquet"}


def _read_folder(folder: Path, split: str) -> list[tuple[pd.DataFrame, str]]:
    """A ``save_to_disk`` folder, or a folder of data files as ``load_dataset`` would read it, but uncached."""
    os.listdir(folder)  # raises PermissionError here, where the search for data files would just find none
    if any((folder / name).is_file() for name in ("dataset_info.json", "dataset_dict.json")):
        return [(_load_saved_dataset(folder, split), str(folder))]
    splits = _folder_splits(folder)
    if _needs_datasets_builder(folder, [path for paths in splits.values() for path in paths]):
        return [(_load_dataset_privately(str(folder), split), str(folder))]
    return [(_read_file(path, _FOLDER_READERS[path.suffix.lower()]), str(path))
            for path in _pick_split(splits, split, str(folder))]


def _folder_splits(folder: Path) -> dict[str, list[Path]]:
    """The data files of each split, by the file-name conventions of ``load_dataset`` (train*, test*, ...)."""
    data_files = _datasets(folder, "a folder of data files").data_files
    try:
        patterns = data_files.get_data_patterns(str(folder))
    except data_files.EmptyDatasetError:
        raise DataError(f"{folder}: no data files in this folder") from None
    resolved = data_files.DataFilesDict.from_patterns(patterns, base_path=str(folder))
    return {str(name): [Path(path) for path in sorted(paths)] for name, paths in resolved.items()}


def _needs_datasets_builder(folder: Path, files: list[Path]) -> bool:
    """Whether only ``load_dataset`` reads the folder right: other file types, or a dataset card's YAML settings."""
    card = folder / "README.md"
    configured = card.is_file() and card.read_text(encoding="utf-8", errors="replace").startswith("---")
    return configured or any(path.suffix.lower() not in _FOLDER_READERS for path in files)


def _load_saved_dataset(folder: Path, split: str) -> pd.DataFrame:
    """A ``save_to_disk`` folder: ``load_from_disk`` maps its Arrow files in place and writes nothing."""
    datasets = _datasets(folder, "a saved Hugging Face dataset")

    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as error:  # noqa: BLE001 - its message can quote the records: only the type is named
        raise DataError(f"{folder}: cannot load as a saved Hugging Face dataset: {type(error).__name__}") from None
    dataset = _pick_split(loaded, split, str(folder)) if isinstance(loaded, datasets.DatasetDict) else loaded
    return dataset.to_pandas()


def _load_dataset_privately(name: str, split: str) -> pd.DataFrame:
    """``datasets.load_dataset`` with its Arrow copy in an owner-only temporary folder, deleted once read.

    Files it downloads from the Hub still go to the Hugging Face hub cache.
    """
    datasets = _datasets(name, "a Hugging Face dataset")

    with tempfile.TemporaryDirectory(prefix="swagppm-data-") as cache:
        try:
            loaded = datasets.load_dataset(name, cache_dir=cache, keep_in_memory=True)
        except Exception as error:  # noqa: BLE001 - its message can quote the records: only the type is named
            raise DataError(f"{name}: cannot load as a Hugging Face dataset: {type(error).__name__}") from None
        return _pick_split(loaded, split, name).to_pandas()


def _datasets(source: str | Path, kind: str) -> ModuleType:
    """The ``datasets`` package, an optional extra: only folders, saved datasets and Hub names need it."""
    try:
        import datasets
        import datasets.data_files
    except ImportError:
        raise DataError(f"{source}: reading {kind} needs the datasets package: pip install 'swagppm-tuner[datasets]' "
                        "(CSV, JSON Lines and Parquet files need nothing more)") from None
    return datasets


_Part = TypeVar("_Part")


def _pick_split(splits: Mapping[str, _Part], split: str, origin: str) -> _Part:
    if split not in splits:
        present = ", ".join(map(str, splits)) or "none"
        raise DataError(f"{origin}: no split {split!r} (splits present: {present}); set data.split")
    return splits[split]


# --- The built-in synthetic corpus -------------------------------------------------------------

_INJURIES = (
    ("fracture", ("fractured", "broke", "cracked"), ("leg", "wrist", "ankle", "rib", "arm", "hip")),
    ("amputation", ("amputated", "severed", "lost the tip of"), ("finger", "thumb", "toe", "fingertip")),
    ("burn", ("burned", "scalded", "seared"), ("hand", "forearm", "face", "chest")),
    ("laceration", ("cut", "lacerated", "sliced"), ("hand", "palm", "scalp", "forearm")),
    ("contusion", ("bruised", "struck", "crushed"), ("shoulder", "knee", "foot", "back")),
    ("sprain", ("sprained", "twisted", "strained"), ("ankle", "knee", "wrist", "back")),
    ("electric shock", ("was shocked through", "received a shock to", "was electrocuted through"),
     ("hand", "arm", "body")),
    ("heat illness",
     ("collapsed from heat with cramps in", "fainted from heat with pain in", "overheated with weakness in"),
     ("legs", "body", "arms")),
    ("puncture", ("punctured", "pierced", "stabbed"), ("hand", "foot", "thigh", "palm")),
    ("hearing loss", ("lost hearing in", "damaged the eardrum of", "suffered ringing in"),
     ("ear", "left ear", "right ear")),
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
        name, _verbs, parts = _INJURIES[k]
        verb_class = rng.integers(num_classes) if rng.random() < 0.1 else k
        verb = _pick(rng, _INJURIES[verb_class][1])
        sentence = (f"{_pick(rng, _WORKERS)} {_pick(rng, _PLACES)} {verb} the {_pick(rng, parts)} "
                    f"{_pick(rng, _CAUSES)} {_pick(rng, _OUTCOMES)}")
        texts.append(sentence)
        labels.append(name)
    return texts, labels


def _pick(rng: np.random.Generator, options: tuple[str, ...]) -> str:
    return options[int(rng.integers(len(options)))]
