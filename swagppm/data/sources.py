"""Where labelled texts come from: a registry of data sources, and the built-in ones.

A source claims the ``data.source`` values it reads (``claims``) and turns one
into texts, labels and class titles (``read``); ``register_source`` adds a kind of
source ahead of the built-in ones: the synthetic corpus, local files (CSV,
JSONL/JSON, Parquet), folders, and Hugging Face dataset names.

No copy of the private records may land in the shared Hugging Face cache: local files,
and folders of them, are read with pandas; ``save_to_disk`` folders with
``load_from_disk``, which writes nothing; anything else goes through ``load_dataset``
with its cache in an owner-only temporary folder, deleted once read. Every problem
with the input is raised as one ``DataError`` naming the file, the column, the first
offending row and the kind of problem, never the records' content.
"""

from __future__ import annotations

import csv
import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Protocol, TypeVar

import numpy as np
import pandas as pd

from swagppm.config import DataConfig
from swagppm.data.synthetic import synthetic_corpus
from swagppm.errors import DataError

_FILE_READERS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}


@dataclass(frozen=True, kw_only=True)
class Records:
    """Texts and their labels (as strings) in source order, and the title of each label value when known."""

    texts: list[str]
    labels: list[str]
    titles: dict[str, str] = field(default_factory=dict)


class Source(Protocol):
    """A kind of data source: which ``data.source`` values it takes, and how it reads one."""

    name: str

    def claims(self, source: str) -> bool:
        """Whether this kind reads ``source`` (asked in registry order; the first that claims it reads it)."""
        ...

    def read(self, config: DataConfig, *, seed: int) -> Records:
        """The records of ``config.source``; problems are ``DataError`` naming where, never the records."""
        ...


def register_source(source: Source) -> None:
    """Add a kind of source, asked before every kind registered earlier (one of the same name is replaced)."""
    _SOURCES[:] = [source, *(known for known in _SOURCES if known.name != source.name)]


def source_for(source: str) -> Source:
    """The registered kind that reads ``source``; a ``DataError`` saying why when none does."""
    for kind in _SOURCES:
        if kind.claims(source):
            return kind
    path = Path(source).expanduser()
    if path.suffix:
        raise DataError(
            f"{path}: unsupported file type {path.suffix!r}; use .csv, .jsonl, .json or .parquet, "
            "or a Hugging Face dataset name or directory"
        )
    raise DataError(f"{path}: no such file or folder")


def read_records(config: DataConfig, *, seed: int = 0) -> Records:
    """The records of ``config.source`` from the kind of source that claims it."""
    try:
        records = source_for(config.source).read(config, seed=seed)
    except PermissionError as error:  # e.g. a folder on the way to the source that this user may not enter
        where = error.filename or Path(config.source).expanduser()
        raise DataError(f"{where}: cannot be read by this user (permission denied)") from None
    if not records.texts:
        raise DataError(f"{config.source}: no records")
    return records


def load_records(config: DataConfig, *, seed: int = 0) -> tuple[list[str], list[str]]:
    """Read (texts, labels) from ``config.source``; labels are returned as strings."""
    records = read_records(config, seed=seed)
    return records.texts, records.labels


def records_from_frames(parts: list[tuple[pd.DataFrame, str]], config: DataConfig) -> Records:
    """The checked text, label and title columns of (frame, origin) parts, one per file where there are several."""
    texts: list[str] = []
    labels: list[str] = []
    titles: dict[str, str] = {}
    kinds = LabelKinds(column=config.label_column)
    for frame, origin in parts:
        part_texts, part_labels = _checked_records(frame, origin, config)
        texts += part_texts
        labels += kinds.names(part_labels, origin)
        titles |= _titles(frame, origin, config, labels[-len(part_labels):] if part_labels else [])
    return Records(texts=texts, labels=labels, titles=titles)


class LabelKinds:
    """Label cells as class names: a number by its value (1 and 1.0 are one class, "1"), text as written.

    A column that holds numbers and also numbers written as text (1 and "1.0") is
    refused, naming the column and a row of each: which of them is meant to be one
    class cannot be told. Text labels alone are kept as written ("01" and "1" are
    two codes).
    """

    def __init__(self, *, column: str) -> None:
        self.column = column
        self.number_at: str | None = None  # where the first number cell was seen
        self.numeric_text_at: str | None = None  # where the first text cell that reads as a number was seen

    def names(self, values: list[object], origin: str) -> list[str]:
        names = []
        for row, value in enumerate(values, start=1):
            if _is_number(value):
                self.number_at = self.number_at or f"{origin} row {row}"
                names.append(_number_name(value))
            else:
                names.append(str(value))
                if self.numeric_text_at is None and isinstance(value, str) and _reads_as_number(value):
                    self.numeric_text_at = f"{origin} row {row}"
            if self.number_at and self.numeric_text_at:
                raise DataError(f"column {self.column!r} mixes numbers ({self.number_at}) and numbers written as "
                                f"text ({self.numeric_text_at}): write every label one way, all as numbers or all "
                                "as text")
        return names


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))


def _number_name(value: object) -> str:
    """A number label's class name: an integral value without a decimal point (1, 1.0 and 1e0 are "1")."""
    number = float(value)  # type: ignore[arg-type]
    if number.is_integer():
        return str(int(value)) if isinstance(value, (int, np.integer)) else str(int(number))
    return repr(number)


def _reads_as_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


# --- The built-in sources ----------------------------------------------------------------------


class SyntheticSource:
    """``"synthetic"``: the built-in offline corpus (``synthetic_corpus``), sized by the data settings."""

    name = "synthetic"

    def claims(self, source: str) -> bool:
        return source == "synthetic"

    def read(self, config: DataConfig, *, seed: int) -> Records:
        texts, labels = synthetic_corpus(config.synthetic_size, num_classes=config.synthetic_classes, seed=seed)
        return Records(texts=texts, labels=labels)


class FileSource:
    """A local ``.csv``, ``.jsonl``, ``.json`` or ``.parquet`` file, read with pandas."""

    name = "file"

    def claims(self, source: str) -> bool:
        return Path(source).expanduser().suffix.lower() in _FILE_READERS

    def read(self, config: DataConfig, *, seed: int) -> Records:
        path = Path(config.source).expanduser()
        if path.is_dir():
            raise DataError(f"{path}: is a folder, not a file; data.source must name a {path.suffix} file itself")
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        return records_from_frames([(_read_file(path, _FILE_READERS[path.suffix.lower()]), str(path))], config)


class FolderSource:
    """A local folder: a ``save_to_disk`` dataset, or data files named as ``load_dataset`` names splits."""

    name = "folder"

    def claims(self, source: str) -> bool:
        return Path(source).expanduser().is_dir()

    def read(self, config: DataConfig, *, seed: int) -> Records:
        return records_from_frames(_read_folder(Path(config.source).expanduser(), config.split), config)


class HubSource:
    """A Hugging Face dataset name (no file suffix, not a path), loaded with ``load_dataset``."""

    name = "huggingface"

    def claims(self, source: str) -> bool:
        path = Path(source).expanduser()
        return not path.suffix and not path.is_absolute() and not source.startswith((".", "~"))

    def read(self, config: DataConfig, *, seed: int) -> Records:
        return records_from_frames([(_load_dataset_privately(config.source, config.split), config.source)], config)


# Asked in this order: a folder wins over a dataset name of the same spelling, as for ``load_dataset``.
_SOURCES: list[Source] = [SyntheticSource(), FileSource(), FolderSource(), HubSource()]


# --- Checking the columns ----------------------------------------------------------------------

def _titles(frame: pd.DataFrame, origin: str, config: DataConfig, labels: list[str]) -> dict[str, str]:
    """Each label value's title: a class name, so one per class (a title that varies within a class is refused)."""
    column = config.title_column
    if column is None:
        return {}
    if column not in frame.columns:
        raise DataError(f"{origin}: column {column!r} not found (data.title_column)")
    found: dict[str, str] = {}
    for label, title in zip(labels, frame[column].tolist()):
        if isinstance(title, str) and title.strip() and found.setdefault(label, title.strip()) != title.strip():
            raise DataError(f"{origin}: column {column!r} (data.title_column) varies within a class; a class title "
                            "must be the same for every record of its class (else one record's value is published)")
    return found


def _checked_records(frame: pd.DataFrame, origin: str, config: DataConfig) -> tuple[list[str], list[object]]:
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
    return texts, labels


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



# --- Local files -------------------------------------------------------------------------------

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
