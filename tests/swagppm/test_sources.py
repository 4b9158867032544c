"""The registry of data sources: which kind reads a ``data.source``, and a kind registered by a user."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from swagppm import ConfigError, DataConfig, DataError, SWAGPPMConfig, load_records, prepare_data
from swagppm.data import sources
from swagppm.data.sources import Records, records_from_frames, register_source, source_for
from tests.swagppm.helpers import local_hub_dataset, offline_hub, parquet_bytes


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


# --- Repeated records: refused where they are read, before any preparation ----------------------


SECRET = "Zq7-SECRET-name-of-a-patient"


def _rows(count: int) -> list[dict[str, object]]:
    return [{"text": f"{SECRET} record {i}", "label": f"k{i % 2}"} for i in range(count)]


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    frame = pd.DataFrame(rows)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        path.write_text(frame.to_json(orient="records", lines=True))
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".csv", ".parquet"])
def test_a_file_with_every_record_twice_is_refused_naming_how_many_and_where(tmp_path: Path, suffix: str) -> None:
    path = _write(tmp_path / f"records{suffix}", _rows(6) * 2)
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source=str(path)))
    message = str(info.value)
    assert message == (f"{path}: column 'text': 6 record(s) repeat an earlier record, text and label (the first: row 7 "
                       "repeats row 1); a repeat in both the training and the test split inflates the test scores: "
                       "remove the repeats")
    assert SECRET not in message


def test_a_text_repeated_with_another_label_has_its_own_line(tmp_path: Path) -> None:
    rows = _rows(6)
    path = _write(tmp_path / "records.jsonl", [*rows, {"text": rows[2]["text"], "label": "k1"}, rows[4]])
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source=str(path)))
    message = str(info.value)
    assert "1 record(s) repeat an earlier record's text with another label (the first: row 7 repeats row 3)" in message
    assert SECRET not in message


def test_a_repeat_differing_only_in_white_space_is_a_repeat(tmp_path: Path) -> None:
    rows = _rows(4)
    path = _write(tmp_path / "records.csv", [*rows, {"text": f"  {rows[1]['text']}".replace(" ", "  "), "label": "k1"}])
    with pytest.raises(DataError, match=r"1 record\(s\) repeat an earlier record, text and label \(the first: row 5 "
                                        r"repeats row 2\)"):
        load_records(DataConfig(source=str(path)))


def test_a_repeat_across_the_files_of_a_folder_names_both_files(tmp_path: Path) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    rows = _rows(8)
    _write(folder / "train-0.csv", rows[:4])
    _write(folder / "train-1.csv", [*rows[4:], rows[1]])
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source=str(folder)))
    assert str(info.value).startswith(f"{folder}/train-1.csv: column 'text': 1 record(s) repeat an earlier record, "
                                      f"text and label (the first: row 5 repeats {folder}/train-0.csv row 2)")


def test_repeats_are_refused_before_preparation(tmp_path: Path) -> None:
    path = _write(tmp_path / "records.jsonl", _rows(20) + _rows(20)[:3])
    with pytest.raises(DataError, match="3 record"):
        prepare_data(DataConfig(source=str(path)))


# --- The private cache of load_dataset ------------------------------------------------------------


def test_load_dataset_caches_in_an_owner_only_folder_deleted_once_read(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    seen: list[tuple[str, int, bool]] = []
    load_dataset = datasets.load_dataset

    def watched(*args: object, cache_dir: str, **options: object) -> object:
        loaded = load_dataset(*args, cache_dir=cache_dir, **options)
        seen.append((cache_dir, Path(cache_dir).stat().st_mode & 0o777, any(Path(cache_dir).rglob("*.arrow"))))
        return loaded

    monkeypatch.setattr(datasets, "load_dataset", watched)
    path = _write(tmp_path / "records.jsonl", _rows(6))
    assert len(load_records(DataConfig(source=str(path)))[0]) == 6
    [(cache, mode, arrow_written)] = seen
    assert mode == 0o700 and arrow_written  # the Arrow copy was there, owner-only,
    assert not Path(cache).exists()  # and is gone


# --- Hugging Face dataset names at a revision, from a local hub cache (offline) --------------------

MAIN, TAGGED = "a" * 40, "b" * 40


CARD = b"""---
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: test
    path: data/test-*.parquet
---
# injuries
"""


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``owner/injuries`` in an offline hub cache: main (a card naming the files of two splits) and tag v1 (JSON
    Lines); the datasets cache is moved to an empty folder that must stay empty."""
    import datasets

    cache, arrow = tmp_path / "hub", tmp_path / "datasets-cache"
    arrow.mkdir()
    rows = _rows(12)
    local_hub_dataset(cache, "owner/injuries", {
        MAIN: {"README.md": CARD, "data/train-00000-of-00001.parquet": parquet_bytes(rows[:10]),
               "data/test-00000-of-00001.parquet": parquet_bytes(rows[10:])},
        TAGGED: {"train.jsonl": "".join(json.dumps(row) + "\n" for row in rows[:6]).encode()},
    }, refs={"main": MAIN, "v1": TAGGED})
    offline_hub(cache, monkeypatch)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", arrow)
    before = sorted(map(str, cache.rglob("*")))
    yield cache
    assert sorted(map(str, cache.rglob("*"))) == before, "the hub cache was written to"
    assert not any(arrow.iterdir()), "a copy of the records was left in the datasets cache"


def test_a_hub_name_reads_its_main_branch_offline(hub: Path) -> None:
    texts, labels = load_records(DataConfig(source="owner/injuries"))
    assert texts == [row["text"] for row in _rows(10)] and labels == ["k0", "k1"] * 5
    assert len(load_records(DataConfig(source="owner/injuries", split="test"))[0]) == 2


@pytest.mark.parametrize("revision", ["v1", TAGGED])
def test_a_hub_name_reads_the_revision_asked_by_tag_or_commit(hub: Path, revision: str) -> None:
    assert load_records(DataConfig(source="owner/injuries", revision=revision))[0] == [row["text"] for row in _rows(6)]


def test_hub_errors_are_one_line_naming_the_dataset_and_revision(hub: Path) -> None:
    with pytest.raises(DataError) as info:
        load_records(DataConfig(source="owner/injuries", revision="v2"))
    assert str(info.value).startswith("owner/injuries@v2: not in the local Hugging Face cache, and the Hub cannot be "
                                      "reached (HF_HUB_OFFLINE is set)")
    with pytest.raises(DataError, match=r"^owner/absent: not in the local Hugging Face cache"):
        load_records(DataConfig(source="owner/absent"))
    with pytest.raises(DataError, match=r"^owner/injuries@v1: no split 'test' \(splits present: train\)"):
        load_records(DataConfig(source="owner/injuries", revision="v1", split="test"))


def test_a_hub_file_error_names_the_file_inside_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    local_hub_dataset(tmp_path, "owner/broken", {MAIN: {"train.jsonl": b'{"text": "a", "label": 1}\n[1]\n'}},
                      refs={"main": MAIN})
    offline_hub(tmp_path, monkeypatch)
    with pytest.raises(DataError, match=r"^owner/broken/train\.jsonl: line 2 \(row 2\) is an array"):
        load_records(DataConfig(source="owner/broken"))


def test_a_revision_for_a_local_source_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path / "records.csv", _rows(4))
    with pytest.raises(DataError, match=r"data.revision = 'v1' is for a Hugging Face dataset name, and this is a "
                                        r"file source; remove data.revision"):
        load_records(DataConfig(source=str(path), revision="v1"))
    with pytest.raises(ConfigError, match="data.revision"):
        DataConfig(source="owner/injuries", revision=" ")
    with pytest.raises(ConfigError, match=r"\[data\]: revision = 3 has the wrong type"):
        SWAGPPMConfig.from_dict({"data": {"source": "owner/injuries", "revision": 3}})
    assert SWAGPPMConfig.from_dict({"data": {"source": "owner/injuries", "revision": "v1"}}).data.revision == "v1"
