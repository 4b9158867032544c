"""Where labelled texts come from: a registry of data sources, and the built-in ones.

A source claims the ``data.source`` values it reads (``claims``) and turns one
into texts, labels and class titles (``read``); ``register_source`` adds a kind of
source ahead of the built-in ones: the synthetic corpus, local files (CSV,
JSONL/JSON, Parquet), folders, and Hugging Face dataset names (at ``data.revision``).

All but the synthetic corpus are read through ``datasets``: local files after the
checks of ``files.check_file`` (CSV cells as text, as written), ``save_to_disk``
folders with ``load_from_disk``, which writes nothing, folders of data files with
``load_dataset``. A Hub name is its repository's snapshot, read as a folder: a study
downloads it into its private cache (``hub_cache``, set by ``swagppm.Resources``: the
``hub`` folder of the owner-only cache, which ``clean`` deletes), found there offline,
else, offline, read where the shared Hugging Face cache already holds it (writing
nothing there); outside a study it is the shared cache's. No copy of the private
records may land in the shared Hugging Face cache: ``load_dataset`` writes its Arrow
copy to an owner-only temporary folder, deleted once read. Every problem with the
input is raised as one ``DataError`` naming the file, the column, the first offending
row and the kind of problem, never the records' content; records that repeat an
earlier record's text are refused too.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import numpy as np

from swagppm.config import DataConfig, special_file_kind
from swagppm.data.files import Columns, check_file, explain_json_failure, missing_column, reads_as_number
from swagppm.data.synthetic import synthetic_corpus
from swagppm.errors import DataError

if TYPE_CHECKING:  # files are read into pandas frames; the synthetic corpus, and so the demo, loads no pandas
    import pandas as pd

_FILE_READERS = {".csv": "csv", ".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_HUB_CACHE: ContextVar[Path | None] = ContextVar("swagppm_hub_cache", default=None)  # set by ``hub_cache``


@dataclass(frozen=True, kw_only=True)
class Records:
    """Texts and their labels (as strings) in source order, and the title of each label value when known."""

    texts: list[str]
    labels: list[str]
    titles: dict[str, str] = field(default_factory=dict)


class Source(Protocol):
    """A kind of data source: which ``data.source`` values it takes, and how it reads one.

    A kind that reads ``data.revision`` says so with ``takes_revision = True``; for
    the others a revision is refused before reading.
    """

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
    """The records of ``config.source`` from the kind of source that claims it (a device, FIFO or socket is refused
    before anything reads it: ``/dev/zero`` never ends, a FIFO waits for a writer forever)."""
    special = special_file_kind(Path(config.source).expanduser())
    if special is not None:
        raise DataError(f"{config.source}: is {special}, not a data file or folder; name a .csv, .jsonl, .json or "
                        ".parquet file, a folder or a Hugging Face dataset name")
    kind = source_for(config.source)
    if config.revision is not None and not getattr(kind, "takes_revision", False):
        raise DataError(f"{config.source}: data.revision = {config.revision!r} is for a Hugging Face dataset name, "
                        f"and this is a {kind.name} source; remove data.revision")
    try:
        records = kind.read(config, seed=seed)
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
    """The checked text, label and title columns of (frame, origin) parts, one per file where there are several.

    Records that repeat an earlier record's text are refused (``_refuse_repeats``).
    """
    texts: list[str] = []
    labels: list[str] = []
    titles: dict[str, str] = {}
    places: list[tuple[str, int]] = []
    kinds = LabelKinds(column=config.label_column)
    for frame, origin in parts:
        part_texts, part_labels = _checked_records(frame, origin, config)
        texts += part_texts
        labels += kinds.names(part_labels, origin)
        places += [(origin, row) for row in range(1, len(part_texts) + 1)]
        titles |= _titles(frame, origin, config, labels[-len(part_labels):] if part_labels else [])
    _refuse_repeats(texts, labels, places, column=config.text_column)
    return Records(texts=texts, labels=labels, titles=titles)


def _refuse_repeats(texts: list[str], labels: list[str], places: list[tuple[str, int]], *, column: str) -> None:
    """Refuse records whose text repeats an earlier record's (white space aside), saying how many and where first.

    With the same label, a repeat can fall in both the training and the test split,
    and the test scores then count records the model was trained on; with another
    label, the text's class is contradictory. ``places`` gives each record's (file, row).
    """
    first: dict[str, int] = {}
    same: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []
    for index, text in enumerate(texts):
        earlier = first.setdefault(" ".join(text.split()), index)
        if earlier != index:
            (same if labels[earlier] == labels[index] else other).append((earlier, index))
    if other:
        origin, pair = _pair(other[0], places)
        raise DataError(f"{origin}: column {column!r}: {len(other)} record(s) repeat an earlier record's text with "
                        f"another label (the first: {pair}); a text must have one label: correct or remove them")
    if same:
        origin, pair = _pair(same[0], places)
        raise DataError(f"{origin}: column {column!r}: {len(same)} record(s) repeat an earlier record, text and "
                        f"label (the first: {pair}); a repeat in both the training and the test split inflates the "
                        "test scores: remove the repeats")


def _pair(pair: tuple[int, int], places: list[tuple[str, int]]) -> tuple[str, str]:
    """The file of a repeat, and "row R repeats row E" (naming the earlier record's file when it is another)."""
    (first_origin, first_row), (origin, row) = places[pair[0]], places[pair[1]]
    earlier = f"row {first_row}" if first_origin == origin else f"{first_origin} row {first_row}"
    return origin, f"row {row} repeats {earlier}"


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
                if self.numeric_text_at is None and isinstance(value, str) and reads_as_number(value):
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
    """A local ``.csv``, ``.jsonl``, ``.json`` or ``.parquet`` file, read through ``datasets``."""

    name = "file"

    def claims(self, source: str) -> bool:
        return Path(source).expanduser().suffix.lower() in _FILE_READERS

    def read(self, config: DataConfig, *, seed: int) -> Records:
        path = Path(config.source).expanduser()
        if path.is_dir():
            raise DataError(f"{path}: is a folder, not a file; data.source must name a {path.suffix} file itself")
        if not path.is_file():
            raise DataError(f"{path}: file not found")
        return records_from_frames([(_read_file(path, config, origin=str(path)), str(path))], config)


class FolderSource:
    """A local folder: a ``save_to_disk`` dataset, or data files named as ``load_dataset`` names splits."""

    name = "folder"

    def claims(self, source: str) -> bool:
        return Path(source).expanduser().is_dir()

    def read(self, config: DataConfig, *, seed: int) -> Records:
        folder = Path(config.source).expanduser()
        return records_from_frames(_read_folder(folder, config, name=str(folder)), config)


class HubSource:
    """A Hugging Face dataset name (no file suffix, not a path) at ``data.revision``: its snapshot, read as a folder."""

    name = "huggingface"
    takes_revision = True

    def claims(self, source: str) -> bool:
        path = Path(source).expanduser()
        return not path.suffix and not path.is_absolute() and not source.startswith((".", "~"))

    def read(self, config: DataConfig, *, seed: int) -> Records:
        name = config.source if config.revision is None else f"{config.source}@{config.revision}"
        folder = _hub_snapshot(config.source, config.revision, name=name)
        return records_from_frames(_read_folder(folder, config, name=name), config)


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
            raise missing_column(origin, column, list(frame.columns))
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
    if isinstance(value, str):
        if value.strip().lower() in ("nan", "-nan", "+nan"):  # a missing number written out, not a class
            return "missing label (written as NaN)"
        return "a label that runs over lines (a quote left open?)" if "\n" in value or "\r" in value else None
    from pandas.api.types import is_scalar

    if not is_scalar(value) or isinstance(value, bytes):
        return f"{_kind_of(value)}, not a label (text or a number)"
    if _is_number(value) and not math.isfinite(float(value)):  # type: ignore[arg-type]
        return "an infinite number, not a label"
    return None


def _is_missing(value: object) -> bool:
    """None, NaN or pd.NA: what an empty CSV cell or a JSON null becomes."""
    import pandas as pd

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



# --- Reading through datasets ---------------------------------------------------------------

def _read_file(path: Path, config: DataConfig, *, origin: str) -> pd.DataFrame:
    """One local file through ``datasets``, after ``check_file``; a CSV file's columns in use are read as text."""
    kind = _FILE_READERS[path.suffix.lower()]
    header = check_file(path, kind, _columns(config), origin=origin)
    options: dict[str, Any] = {}
    if header is not None:
        for column in (config.text_column, config.label_column):
            if column not in header:
                raise missing_column(origin, column, header)
        datasets = _datasets(origin)
        used = [name for name in dict.fromkeys(_columns(config).used) if name in header]
        options = {"usecols": used, "features": datasets.Features({name: datasets.Value("string") for name in used}),
                   "keep_default_na": False, "na_values": [""]}  # every cell as written: "01" stays "01"
    try:
        return _load(kind, "train", origin, data_files={"train": [str(path)]}, **options)
    except (DataError, PermissionError):
        raise
    except Exception as error:  # noqa: BLE001 - its message can quote the records: only the type is named
        if kind == "json":
            explain_json_failure(path, origin)
        raise DataError(f"{origin}: cannot be read as {kind}: {type(_root(error)).__name__}") from None


def _columns(config: DataConfig) -> Columns:
    return Columns(text=config.text_column, label=config.label_column, title=config.title_column)


def _root(error: BaseException) -> BaseException:
    """The first error of a chain (``datasets`` wraps the reader's own in a ``DatasetGenerationError``)."""
    while (cause := error.__cause__ or error.__context__) is not None:
        error = cause
    return error


def _read_folder(folder: Path, config: DataConfig, *, name: str) -> list[tuple[pd.DataFrame, str]]:
    """A ``save_to_disk`` folder, or a folder of data files as ``load_dataset`` would read it; ``name`` in messages."""
    os.listdir(folder)  # raises PermissionError here, where the search for data files would just find none
    if any((folder / file).is_file() for file in ("dataset_info.json", "dataset_dict.json")):
        return [(_load_saved_dataset(folder, config.split, name), name)]
    splits = _folder_splits(folder, name)
    if _needs_datasets_builder(folder, [path for paths in splits.values() for path in paths]):
        try:
            return [(_load(str(folder), config.split, name), name)]
        except (DataError, PermissionError):
            raise
        except Exception as error:  # noqa: BLE001 - its message can quote the records: only the type is named
            raise DataError(f"{name}: cannot load as a Hugging Face dataset: {type(error).__name__}") from None
    parts = []
    for path in _pick_split(splits, config.split, name):
        origin = f"{name}/{path.relative_to(folder).as_posix()}"
        parts.append((_read_file(path, config, origin=origin), origin))
    return parts


def _folder_splits(folder: Path, name: str) -> dict[str, list[Path]]:
    """The data files of each split, by the file-name conventions of ``load_dataset`` (train*, test*, ...)."""
    data_files = _datasets(name).data_files
    try:
        patterns = data_files.get_data_patterns(str(folder))
    except data_files.EmptyDatasetError:
        raise DataError(f"{name}: no data files in this folder") from None
    resolved = data_files.DataFilesDict.from_patterns(patterns, base_path=str(folder))
    return {str(split): [Path(path) for path in sorted(paths)] for split, paths in resolved.items()}


def _needs_datasets_builder(folder: Path, files: list[Path]) -> bool:
    """Whether only ``load_dataset`` on the whole folder reads it right: other file types, or a card's settings."""
    card = folder / "README.md"
    configured = card.is_file() and card.read_text(encoding="utf-8", errors="replace").startswith("---")
    return configured or any(path.suffix.lower() not in _FILE_READERS for path in files)


def _load_saved_dataset(folder: Path, split: str, name: str) -> pd.DataFrame:
    """A ``save_to_disk`` folder: ``load_from_disk`` maps its Arrow files in place and writes nothing."""
    datasets = _datasets(name)
    try:
        loaded = datasets.load_from_disk(str(folder))
    except Exception as error:  # noqa: BLE001 - its message can quote the records: only the type is named
        raise DataError(f"{name}: cannot load as a saved Hugging Face dataset: {type(error).__name__}") from None
    dataset = _pick_split(loaded, split, name) if isinstance(loaded, datasets.DatasetDict) else loaded
    return dataset.to_pandas()


def _load(path: str, split: str, origin: str, **options: Any) -> pd.DataFrame:
    """``load_dataset(path, **options)``'s ``split`` as a frame; its Arrow copy goes to ``_private_cache``."""
    datasets = _datasets(origin)
    with _private_cache(datasets) as cache:
        loaded = datasets.load_dataset(path, cache_dir=cache, keep_in_memory=True, **options)
        return _pick_split(loaded, split, origin).to_pandas()


@contextmanager
def _private_cache(datasets: ModuleType) -> Iterator[str]:
    """An owner-only (0700) temporary folder for ``load_dataset``'s cache, deleted on leaving.

    ``datasets``' log lines (they can quote the records) and progress bars are silenced
    meanwhile, and restored after.
    """
    bars, verbosity = datasets.is_progress_bar_enabled(), datasets.logging.get_verbosity()
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity(datasets.logging.CRITICAL)
    try:
        with tempfile.TemporaryDirectory(prefix="swagppm-data-") as cache:
            os.chmod(cache, 0o700)  # as mkdtemp makes it; said here because the records depend on it
            yield cache
    finally:
        datasets.logging.set_verbosity(verbosity)
        if bars:
            datasets.enable_progress_bars()


@contextmanager
def hub_cache(folder: Path) -> Iterator[None]:
    """Hub datasets read in the block are downloaded into ``folder`` (a private cache's, owner-only), not into the
    shared Hugging Face cache."""
    token = _HUB_CACHE.set(folder)
    try:
        yield
    finally:
        _HUB_CACHE.reset(token)


def _hub_snapshot(repo: str, revision: str | None, *, name: str) -> Path:
    """The dataset repository's files at ``revision``: in the private ``hub_cache`` when one is set, else in the
    Hugging Face hub cache.

    ``snapshot_download`` downloads them there when the Hub is reachable and finds
    them there when it is not (``HF_HUB_OFFLINE=1``): a branch or tag by its
    ``refs/`` entry, a commit by its snapshot folder. Offline, a snapshot the private
    cache lacks is read from the shared cache when that holds it (nothing is written
    there).
    """
    import huggingface_hub
    from huggingface_hub import errors

    private = _HUB_CACHE.get()
    try:
        if private is not None:
            try:
                return Path(huggingface_hub.snapshot_download(repo_id=repo, repo_type="dataset", revision=revision,
                                                              cache_dir=str(_owner_folder(private))))
            except errors.LocalEntryNotFoundError:
                return Path(huggingface_hub.snapshot_download(repo_id=repo, repo_type="dataset", revision=revision,
                                                              local_files_only=True))
        return Path(huggingface_hub.snapshot_download(repo_id=repo, repo_type="dataset", revision=revision))
    except errors.RevisionNotFoundError:
        raise DataError(f"{name}: the Hugging Face dataset has no revision {revision!r} (data.revision)") from None
    except errors.RepositoryNotFoundError:
        raise DataError(f"{name}: no such dataset on the Hugging Face Hub, or this user may not read it (a private "
                        "or gated dataset needs `hf auth login`)") from None
    except errors.HFValidationError:
        raise DataError(f"{repo}: neither a local file or folder nor a Hugging Face dataset name "
                        "(owner/name)") from None
    except errors.LocalEntryNotFoundError:
        offline = " (HF_HUB_OFFLINE is set)" if huggingface_hub.constants.HF_HUB_OFFLINE else ""
        raise DataError(f"{name}: not in the local Hugging Face cache, and the Hub cannot be reached{offline}: "
                        "download it once where the Hub is reachable, or set data.source to a local copy") from None
    except Exception as error:  # noqa: BLE001 - one line, whatever the network or the Hub answered
        raise DataError(f"{name}: cannot be downloaded from the Hugging Face Hub: {type(error).__name__}") from None


def _owner_folder(folder: Path) -> Path:
    """``folder`` made owner-only (0700) if it is new (the private cache's ``hub`` folder)."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def _datasets(source: str) -> ModuleType:
    """The ``datasets`` package, which reads every source but the synthetic corpus (a broken install: one line)."""
    try:
        import datasets
        import datasets.data_files
    except ImportError:
        raise DataError(f"{source}: reading data needs the datasets package, a dependency of swagppm-tuner: "
                        "pip install 'datasets>=4.7'") from None
    return datasets


_Part = TypeVar("_Part")


def _pick_split(splits: Mapping[str, _Part], split: str, origin: str) -> _Part:
    if split not in splits:
        present = ", ".join(map(str, splits)) or "none"
        raise DataError(f"{origin}: no split {split!r} (splits present: {present}); set data.split")
    return splits[split]
