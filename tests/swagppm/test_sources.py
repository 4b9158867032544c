"""The registry of data sources: which kind reads a ``data.source``, and a kind registered by a user."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from swagppm import DataConfig, DataError, load_records, prepare_data
from swagppm.data import sources
from swagppm.data.sources import Records, records_from_frames, register_source, source_for


class Parity:
    """``parity:N``: N records labelled by the parity of their number, read as a frame (checked like a file's)."""

    name = "parity"

    def claims(self, source: str) -> bool:
        return source.startswith("parity:")

    def read(self, config: DataConfig, *, seed: int) -> Records:
        count = int(config.source.removeprefix("parity:"))
        texts = [f"record number {i}" if i != 7 else " " for i in range(count)]
        frame = pd.DataFrame({"text": texts, "label": ["even" if i % 2 == 0 else "odd" for i in range(count)]})
        return records_from_frames([(frame, config.source)], config)


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """The built-in registry, restored after the test."""
    monkeypatch.setattr(sources, "_SOURCES", list(sources._SOURCES))


def test_each_built_in_kind_claims_what_it_reads(tmp_path: Path) -> None:
    assert source_for("synthetic").name == "synthetic"
    assert source_for(str(tmp_path / "records.csv")).name == "file"
    assert source_for(str(tmp_path / "records.parquet")).name == "file"
    assert source_for(str(tmp_path)).name == "folder"
    assert source_for("an-owner/a-dataset").name == "huggingface"
    with pytest.raises(DataError, match="unsupported file type '.txt'"):
        source_for(str(tmp_path / "records.txt"))
    with pytest.raises(DataError, match="no such file or folder"):
        source_for(str(tmp_path / "missing"))


def test_a_registered_kind_is_asked_first_and_its_records_are_checked(registry: None) -> None:
    register_source(Parity())
    assert source_for("parity:7").name == "parity"
    prepared = prepare_data(DataConfig(source="parity:7"))
    assert prepared.class_names == ("even", "odd")
    assert len(prepared.train_texts) + len(prepared.test_texts) == 7
    with pytest.raises(DataError, match="parity:8: column 'text', row 8: an empty text"):
        load_records(DataConfig(source="parity:8"))
    register_source(Parity())  # the same name again replaces it
    assert [kind.name for kind in sources._SOURCES].count("parity") == 1
    assert len(load_records(DataConfig(source="synthetic", synthetic_size=20))[0]) == 20


def _jsonl(path: Path, labels: list[object]) -> Path:
    import json

    path.write_text("".join(json.dumps({"text": f"record {i}", "label": label}) + "\n"
                            for i, label in enumerate(labels)))
    return path


def test_numerically_equal_numbers_are_one_class(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "records.jsonl", [1, 1.0, 2, 2.0, 1e0, 0.5])
    assert load_records(DataConfig(source=str(path)))[1] == ["1", "1", "2", "2", "1", "0.5"]


def test_numbers_mixed_with_numbers_as_text_are_refused_naming_the_column(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "records.jsonl", [1, 2, "1", "2.0", 1.0])
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source=str(path)))
    message = str(info.value)
    assert "column 'label' mixes numbers" in message and "row 1" in message and "row 3" in message
    assert "record" not in message.replace(str(path), "")  # no text of a record


def test_the_mix_is_found_across_the_files_of_a_folder(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    pd.DataFrame({"text": ["a b", "c d"], "label": [1, 2]}).to_parquet(folder / "train-0.parquet")
    pd.DataFrame({"text": ["e f", "g h"], "label": ["1", "2"]}).to_parquet(folder / "train-1.parquet")
    with pytest.raises(DataError, match="mixes numbers"):
        load_records(DataConfig(source=str(folder)))


def test_text_codes_alone_are_kept_as_written(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label\na b,01\nc d,1\ne f,1.0\ng h,cat\n")
    assert load_records(DataConfig(source=str(path)))[1] == ["01", "1", "1.0", "cat"]


def test_words_beside_numbers_are_two_kinds_of_class(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "records.jsonl", [1, "cat", 2.0])
    assert load_records(DataConfig(source=str(path)))[1] == ["1", "cat", "2"]
