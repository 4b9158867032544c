"""The records stay private: no cached copy outside a temporary owner-only folder, no record content in errors."""

import json
import tempfile

import pandas as pd
import pytest

from swagppm import DataConfig, DataError, Resources, load_records, prepare_data
from swagppm.cache import HUB_FOLDER, PrivateCache
from swagppm.data.sources import hub_cache
from tests.swagppm.helpers import error_naming, local_hub_dataset, offline_hub, parquet_bytes, small_config

SECRET = "Zq7-SECRET-name-of-a-patient"


def _config(path, **options):
    return DataConfig(source=str(path), text_column="narrative", label_column="code", **options)


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _files_under(folder):
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*"))


@pytest.fixture
def hf_cache(tmp_path, monkeypatch):
    """Every Hugging Face cache, and the temporary folder, moved under ``tmp_path`` so that writes can be seen."""
    datasets = pytest.importorskip("datasets")
    cache, scratch = tmp_path / "hf_home", tmp_path / "scratch"
    cache.mkdir()
    scratch.mkdir()
    monkeypatch.setenv("HF_HOME", str(cache))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache / "datasets"))
    monkeypatch.setattr(datasets.config, "HF_CACHE_HOME", str(cache))
    for name in ("HF_DATASETS_CACHE", "HF_MODULES_CACHE", "DOWNLOADED_DATASETS_PATH", "EXTRACTED_DATASETS_PATH"):
        monkeypatch.setattr(datasets.config, name, cache / name.lower())
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    yield cache
    assert _files_under(cache) == [], "a copy of the records was left in the Hugging Face cache"
    assert _files_under(scratch) == [], "a temporary copy of the records was not removed"


def _two_csv_parts(folder):
    folder.mkdir()
    (folder / "part-b.csv").write_text("narrative,code\nburned a hand,3\ncut a finger,7\n", encoding="utf-8")
    (folder / "part-a.csv").write_text("narrative,code\nfell from a ladder,3\nslipped on ice,7\n", encoding="utf-8")
    return folder


# --- 1. A folder of records leaves no copy behind ---------------------------------------------------


def test_folder_of_csv_files_is_read_without_a_cached_copy(tmp_path, hf_cache):
    folder = _two_csv_parts(tmp_path / "records")
    texts, labels = load_records(_config(folder))
    assert texts == ["fell from a ladder", "slipped on ice", "burned a hand", "cut a finger"]  # files in sorted order
    assert labels == ["3", "7", "3", "7"]


def test_folder_split_is_chosen_by_file_name(tmp_path, hf_cache):
    folder = tmp_path / "records"
    folder.mkdir()
    _jsonl(folder / "train.jsonl", [{"narrative": "fell", "code": 1}, {"narrative": "cut", "code": 2}])
    _jsonl(folder / "test.jsonl", [{"narrative": "burned", "code": 2}])
    assert load_records(_config(folder)) == (["fell", "cut"], ["1", "2"])
    assert load_records(_config(folder, split="test")) == (["burned"], ["2"])
    message = error_naming(DataError, folder, lambda: load_records(_config(folder, split="validation")))
    assert "no split 'validation' (splits present: train, test)" in message


def test_folder_gives_the_same_prepared_data_as_one_file(tmp_path, hf_cache):
    rows = [{"narrative": f"worker {i} hurt", "code": i % 3} for i in range(18)]
    folder = tmp_path / "records"
    folder.mkdir()
    pd.DataFrame(rows[:10]).to_csv(folder / "a.csv", index=False)
    pd.DataFrame(rows[10:]).to_csv(folder / "b.csv", index=False)
    single = tmp_path / "records.csv"
    pd.DataFrame(rows).to_csv(single, index=False)
    from_folder, from_file = prepare_data(_config(folder), seed=2), prepare_data(_config(single), seed=2)
    assert from_folder.data_hash == from_file.data_hash
    assert from_folder.train_texts == from_file.train_texts


def test_folder_error_names_the_file_and_its_row(tmp_path, hf_cache):
    folder = _two_csv_parts(tmp_path / "records")
    (folder / "part-c.csv").write_text("narrative,code\nfell,3\n,7\n", encoding="utf-8")
    message = error_naming(DataError, folder / "part-c.csv", lambda: load_records(_config(folder)))
    assert "column 'narrative', row 2: an empty text" in message


def test_folder_of_other_file_types_goes_through_a_temporary_cache(tmp_path, hf_cache):
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "records.tsv").write_text("narrative\tcode\nfell\t1\ncut\t2\n", encoding="utf-8")
    assert load_records(_config(folder)) == (["fell", "cut"], ["1", "2"])


def test_saved_dataset_is_read_without_writing(tmp_path, hf_cache):
    datasets = pytest.importorskip("datasets")
    folder = tmp_path / "saved"
    datasets.Dataset.from_dict({"narrative": ["fell", "cut"], "code": [1, 2]}).save_to_disk(str(folder))
    before = {path: path.stat().st_mtime_ns for path in folder.rglob("*")}
    assert load_records(_config(folder)) == (["fell", "cut"], ["1", "2"])
    assert {path: path.stat().st_mtime_ns for path in folder.rglob("*")} == before


def test_folder_without_data_files(tmp_path, hf_cache):
    folder = tmp_path / "empty"
    folder.mkdir()
    message = error_naming(DataError, folder, lambda: load_records(_config(folder)))
    assert "no data files" in message


# --- 2. Errors name the place and the kind of problem, never the content --------------------------


def _assert_private(message):
    assert SECRET not in message
    assert "SECRET" not in message


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_list_in_text_column_is_named_by_type(tmp_path, suffix):
    rows = [{"narrative": [SECRET, "x"], "code": 1}, {"narrative": ["fell"], "code": 2}]
    path = tmp_path / f"records{suffix}"
    if suffix == ".jsonl":
        _jsonl(path, rows)
    else:
        pd.DataFrame(rows).to_parquet(path, index=False)  # the list comes back as a numpy array
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'narrative', row 1: a list, not text" in message
    _assert_private(message)


def test_number_in_text_column_is_named_by_type(tmp_path):
    path = _jsonl(tmp_path / "records.jsonl", [{"narrative": "fell", "code": 1}, {"narrative": 987654321, "code": 2}])
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'narrative', row 2: a number, not text" in message
    assert "987654321" not in message


def test_dict_in_label_column_is_named_by_type(tmp_path):
    rows = [{"narrative": "fell", "code": 1}, {"narrative": "cut", "code": 2},
            {"narrative": "burned", "code": {"name": SECRET}}]
    path = _jsonl(tmp_path / "records.jsonl", rows)
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'code', row 3: a dict, not a label" in message
    _assert_private(message)


def test_too_few_classes_does_not_name_the_classes(tmp_path):
    frame = pd.DataFrame({"narrative": [f"text {i}" for i in range(7)],
                          "code": [SECRET] * 5 + ["SECRET-b", "SECRET-c"]})
    path = tmp_path / "records.csv"
    frame.to_csv(path, index=False)
    message = error_naming(DataError, path, lambda: prepare_data(_config(path)))
    assert "1 class(es)" in message
    assert "5, 1, 1" in message
    _assert_private(message)


@pytest.mark.parametrize("bad_line", [f'"{SECRET} fell,1', f"{SECRET},fell,1"], ids=["unclosed quote", "extra field"])
def test_a_malformed_csv_line_is_named_not_quoted(tmp_path, bad_line):
    path = tmp_path / "records.csv"
    path.write_text(f'narrative,code\n"a\nlong one",1\nfell,2\n{bad_line}\ncut,2\n', encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "cannot be read as csv: ParserError at line 5" in message
    _assert_private(message)


def test_malformed_json_names_the_line_not_the_content(tmp_path):
    path = tmp_path / "records.json"
    path.write_text(f'[{{"narrative": "fell", "code": 1}},\n {{"narrative": "{SECRET}" "code": 2}}]\n',
                    encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "cannot be read as json: ValueError at line 2" in message
    _assert_private(message)


def test_hugging_face_error_is_named_by_type_only(tmp_path, hf_cache):
    folder = tmp_path / "records"
    folder.mkdir()
    (folder / "a.tsv").write_text("narrative\tcode\nfell\t1\n", encoding="utf-8")
    (folder / "b.tsv").write_text(f"narrative\tcode\ncut\t{SECRET}\n", encoding="utf-8")
    message = error_naming(DataError, folder, lambda: load_records(_config(folder)))
    assert "DatasetGenerationError" in message
    _assert_private(message)



# --- 3. A Hub dataset a study reads lives in its private cache -----------------------------------------------


HUB_ROWS = [{"narrative": f"worker {i} hurt a {'hand' if i % 2 else 'foot'}", "code": i % 2} for i in range(20)]


def _hub_config():
    return DataConfig(source="owner/injuries", text_column="narrative", label_column="code")


def test_a_study_reads_a_hub_dataset_from_its_private_cache_not_the_shared_one(tmp_path, monkeypatch):
    """The snapshot is looked for (and, online, downloaded) in the private cache's ``hub`` folder: here, offline, only
    that folder holds it, and the shared Hugging Face cache stays empty."""
    shared, private = tmp_path / "shared-hub", tmp_path / "cache" / HUB_FOLDER
    shared.mkdir()
    local_hub_dataset(private, "owner/injuries", {"c" * 40: {"data/train.parquet": parquet_bytes(HUB_ROWS)}},
                      refs={"main": "c" * 40})
    offline_hub(shared, monkeypatch)
    with hub_cache(private):
        texts, labels = load_records(_hub_config())
    assert texts == [row["narrative"] for row in HUB_ROWS] and labels == [str(row["code"]) for row in HUB_ROWS]
    assert list(shared.iterdir()) == []
    with pytest.raises(DataError, match="not in the local Hugging Face cache"):
        load_records(_hub_config())  # outside a study it is the shared cache's, which lacks it


def test_offline_a_snapshot_only_the_shared_cache_holds_is_read_from_there_without_a_write(tmp_path, monkeypatch):
    shared, private = tmp_path / "shared-hub", tmp_path / "cache" / HUB_FOLDER
    local_hub_dataset(shared, "owner/injuries", {"c" * 40: {"data/train.parquet": parquet_bytes(HUB_ROWS)}},
                      refs={"main": "c" * 40})
    before = _files_under(shared)
    offline_hub(shared, monkeypatch)
    with hub_cache(private):
        assert len(load_records(_hub_config())[0]) == len(HUB_ROWS)
    assert _files_under(shared) == before and _files_under(private) == []


def test_resources_read_a_hub_dataset_through_their_private_cache(tmp_path, monkeypatch):
    shared = tmp_path / "shared-hub"
    shared.mkdir()
    config = small_config(tmp_path / "cache", data={"source": "owner/injuries", "text_column": "narrative",
                                                    "label_column": "code", "labels": ["0", "1"]})
    folder = PrivateCache(config.cache_dir).directory
    local_hub_dataset(folder / HUB_FOLDER, "owner/injuries",
                      {"c" * 40: {"data/train.parquet": parquet_bytes(HUB_ROWS)}}, refs={"main": "c" * 40})
    offline_hub(shared, monkeypatch)
    with Resources(config) as resources:
        assert len(resources.data.train_texts) + len(resources.data.test_texts) == len(HUB_ROWS)
    assert list(shared.iterdir()) == []
