"""Loading and preparing labelled texts: files, Hugging Face datasets and the synthetic corpus."""

import dataclasses
import json
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import swagppm
from swagppm import (
    ConfigError,
    DataConfig,
    DataError,
    PreparedData,
    load_records,
    prepare_data,
    synthetic_corpus,
)
from tests.swagppm.helpers import error_naming

OSHA_SAMPLE = Path(__file__).resolve().parents[3] / "shared" / "data" / "osha_sample.jsonl"


def _frame(sizes=(10, 8, 6)):
    """Records with integer labels 3, 7, 12, ... and unique texts, ``sizes[k]`` records of class k."""
    label_values = [3, 7, 12, 40][: len(sizes)]
    rows = []
    for value, size in zip(label_values, sizes):
        rows += [{"narrative": f"worker {i} hurt, case of kind {value}", "code": value} for i in range(size)]
    return pd.DataFrame(rows)


def _write(frame, path):
    suffix = path.suffix
    if suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True, force_ascii=False)
    elif suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        raise AssertionError(suffix)
    return path


def _config(path, **options):
    return DataConfig(source=str(path), text_column="narrative", label_column="code", **options)


def _assert_same(a: PreparedData, b: PreparedData):
    assert a.data_hash == b.data_hash
    assert a.train_texts == b.train_texts
    assert a.test_texts == b.test_texts
    np.testing.assert_array_equal(a.train_labels, b.train_labels)
    np.testing.assert_array_equal(a.test_labels, b.test_labels)
    assert a.class_names == b.class_names


# --- Bad input: one DataError naming the file, the column and the first offending row ----------


@pytest.mark.parametrize("name", ["missing.csv", "missing.jsonl", "missing.json", "missing.parquet"])

def test_missing_file(tmp_path, name):
    path = tmp_path / name
    with pytest.raises(DataError) as info:
        load_records(_config(path))
    assert str(path) in str(info.value)
    assert "not found" in str(info.value)


@pytest.mark.parametrize("name", ["records.csv", "records.parquet"])
def test_folder_named_like_a_file(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    message = error_naming(DataError, folder, lambda: load_records(_config(folder)))
    assert "is a folder, not a file" in message


def test_missing_local_folder(tmp_path):
    folder = tmp_path / "no_such_folder"
    message = error_naming(DataError, folder, lambda: load_records(_config(folder)))
    assert "no such file or folder" in message


def _skip_unless_permissions_hold(folder):
    probe = folder / "probe"
    probe.write_text("x")
    probe.chmod(0)
    try:
        probe.read_text()
    except PermissionError:
        return
    finally:
        probe.chmod(0o600)
    pytest.skip("this user (root) can read any file, so permissions cannot be tested")


@pytest.mark.parametrize("name", ["records.csv", "records.parquet", "records_folder"])
def test_unreadable_source(tmp_path, name):
    _skip_unless_permissions_hold(tmp_path)
    path = tmp_path / name
    if name.endswith("folder"):
        path.mkdir()
        _write(_frame(), path / "records.csv")
    else:
        _write(_frame(), path)
    path.chmod(0)
    try:
        message = error_naming(DataError, path, lambda: load_records(_config(path)))
    finally:
        path.chmod(0o700)
    assert "cannot be read" in message and "permission" in message


def test_unsupported_extension(tmp_path):
    path = tmp_path / "records.txt"
    path.write_text("narrative,code\nfell,1\n", encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "'.txt'" in message
    assert ".csv" in message and ".jsonl" in message and ".parquet" in message


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_missing_text_column_lists_columns_present(tmp_path, suffix):
    path = _write(_frame().rename(columns={"narrative": "story"}), tmp_path / f"records{suffix}")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "'narrative' not found" in message
    assert "columns present: story, code" in message


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_missing_label_column_lists_columns_present(tmp_path, suffix):
    path = _write(_frame().rename(columns={"code": "nature"}), tmp_path / f"records{suffix}")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "'code' not found" in message
    assert "columns present: narrative, nature" in message


def test_empty_text_in_csv_names_row(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("narrative,code\nfell from a ladder,1\ncut a finger,2\n,1\n,2\n", encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'narrative', row 3" in message
    assert "empty text" in message


@pytest.mark.parametrize("empty", ["", "   "])
def test_empty_text_in_jsonl_names_row(tmp_path, empty):
    path = tmp_path / "records.jsonl"
    lines = [{"narrative": "fell", "code": 1}, {"narrative": "cut", "code": 2}, {"narrative": empty, "code": 1}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'narrative', row 3" in message
    assert "empty text" in message


def test_null_text_in_jsonl_is_reported_as_empty(tmp_path):
    path = tmp_path / "records.jsonl"
    lines = [{"narrative": "fell", "code": 1}, {"narrative": None, "code": 2}, {"narrative": "cut", "code": 1}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    with pytest.raises(DataError, match=r"column 'narrative', row 2: .*empty"):
        load_records(_config(path))


def test_non_text_value_in_text_column(tmp_path):
    path = tmp_path / "records.jsonl"
    lines = [{"narrative": "fell", "code": 1}, {"narrative": 42, "code": 2}, {"narrative": 7, "code": 1}]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'narrative', row 2: a number, not text" in message


def test_missing_label_in_csv(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("narrative,code\nfell,1\ncut,\nburned,\n", encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'code', row 2: missing label" in message


@pytest.mark.parametrize("label_json", ['null', '""', None])
def test_missing_label_in_jsonl(tmp_path, label_json):
    path = tmp_path / "records.jsonl"
    third = '{"narrative": "burned"}' if label_json is None else f'{{"narrative": "burned", "code": {label_json}}}'
    path.write_text(f'{{"narrative": "fell", "code": "a"}}\n{{"narrative": "cut", "code": "b"}}\n{third}\n',
                    encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "column 'code', row 3: missing label" in message


def test_single_class_after_dropping_rare_classes(tmp_path):
    frame = pd.DataFrame({"narrative": [f"text {i}" for i in range(7)], "code": ["a"] * 5 + ["b", "c"]})
    path = _write(frame, tmp_path / "records.csv")
    message = error_naming(DataError, path, lambda: prepare_data(_config(path)))
    assert "column 'code'" in message
    assert "1 class(es)" in message
    assert "at least 2" in message


def test_too_few_records_for_a_stratified_split(tmp_path):
    frame = pd.DataFrame({"narrative": ["a", "b", "c", "d"], "code": ["x", "x", "y", "y"]})
    path = _write(frame, tmp_path / "records.csv")
    with pytest.raises(DataError, match="cannot be split stratified"):
        prepare_data(_config(path, test_size=0.6))


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_not_utf8_names_the_line(tmp_path, suffix):
    path = tmp_path / f"records{suffix}"
    if suffix == ".csv":
        text = "narrative,code\nfell,1\ncut,2\ncaf\xe9 burn,1\n"
    else:
        text = '{"narrative": "fell", "code": 1}\n{"narrative": "cut", "code": 2}\n{"narrative": "ok", "code": 2}\n' \
               '{"narrative": "caf\xe9 burn", "code": 1}\n'
    path.write_bytes(text.encode("latin-1"))
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "UTF-8" in message
    assert "line 4" in message


def test_garbled_parquet(tmp_path):
    path = tmp_path / "records.parquet"
    path.write_bytes(b"this is not a parquet file at all")
    with pytest.raises(DataError) as info:
        load_records(_config(path))
    assert str(path) in str(info.value)
    assert "cannot be read as parquet" in str(info.value)


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"narrative": "fell", "code": 1}\n{"narrative": "cut", "code": 2}\n'
                    '{"narrative": "burned", "code":\n{"narrative": "slipped", "code": 1}\n', encoding="utf-8")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "cannot be read as json" in message
    assert "line 3" in message


def test_malformed_csv(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text('narrative,code\n"fell,1\ncut,2\n', encoding="utf-8")
    with pytest.raises(DataError, match="cannot be read as csv"):
        load_records(_config(path))


def test_header_only_csv_has_no_records(tmp_path):
    path = tmp_path / "records.csv"
    path.write_text("narrative,code\n", encoding="utf-8")
    with pytest.raises(DataError, match="no records"):
        load_records(_config(path))


def test_data_error_is_a_value_error():
    assert issubclass(DataError, ValueError)


# --- Happy paths -------------------------------------------------------------------------------


def test_csv_jsonl_and_parquet_give_the_same_split(tmp_path):
    frame = _frame()
    prepared = [prepare_data(_config(_write(frame, tmp_path / f"records{suffix}")), seed=3)
                for suffix in (".csv", ".jsonl", ".parquet")]
    _assert_same(prepared[0], prepared[1])
    _assert_same(prepared[0], prepared[2])


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_integer_labels_become_strings(tmp_path, suffix):
    path = _write(_frame(), tmp_path / f"records{suffix}")
    texts, labels = load_records(_config(path))
    assert len(texts) == len(labels) == 24
    assert all(isinstance(label, str) for label in labels)
    assert set(labels) == {"3", "7", "12"}
    prepared = prepare_data(_config(path))
    assert sorted(prepared.class_names) == ["12", "3", "7"]
    assert all(isinstance(name, str) for name in prepared.class_names)
    assert prepared.train_labels.dtype == np.int64
    assert set(prepared.train_labels.tolist()) == {0, 1, 2}


def test_load_records_keeps_order_and_text(tmp_path):
    frame = pd.DataFrame({"narrative": ["Fell, 3 m", "cut – finger", "burned"], "code": ["b", "a", "b"]})
    path = _write(frame, tmp_path / "records.csv")
    assert load_records(_config(path)) == (["Fell, 3 m", "cut – finger", "burned"], ["b", "a", "b"])


def test_max_per_class_caps_every_class(tmp_path):
    path = _write(_frame(sizes=(20, 10, 4)), tmp_path / "records.csv")
    prepared = prepare_data(_config(path, max_per_class=6))
    counts = Counter(prepared.class_names[k] for k in [*prepared.train_labels, *prepared.test_labels])
    assert counts == {"3": 6, "7": 6, "12": 4}
    texts = prepared.train_texts + prepared.test_texts
    assert len(set(texts)) == len(texts) == 16


def test_classes_below_min_per_class_are_dropped(tmp_path):
    path = _write(_frame(sizes=(10, 8, 4)), tmp_path / "records.csv")
    prepared = prepare_data(_config(path, min_per_class=5))
    assert prepared.class_names == ("3", "7")
    assert len(prepared.train_texts) + len(prepared.test_texts) == 18
    assert not any("kind 12" in text for text in prepared.train_texts + prepared.test_texts)


def test_singleton_classes_are_dropped_by_default(tmp_path):
    frame = pd.concat([_frame(sizes=(6, 6)), pd.DataFrame({"narrative": ["lonely"], "code": [99]})])
    path = _write(frame, tmp_path / "records.csv")
    prepared = prepare_data(_config(path))
    assert prepared.num_classes == 2
    assert "99" not in prepared.class_names


def test_split_is_stratified_and_half_by_default(tmp_path):
    path = _write(_frame(sizes=(10, 8, 6)), tmp_path / "records.csv")
    prepared = prepare_data(_config(path))
    assert len(prepared.train_texts) == len(prepared.train_labels) == 12
    assert len(prepared.test_texts) == len(prepared.test_labels) == 12
    assert set(prepared.train_labels.tolist()) == set(prepared.test_labels.tolist()) == {0, 1, 2}
    np.testing.assert_array_equal(np.bincount(prepared.train_labels), np.bincount(prepared.test_labels))
    assert not set(prepared.train_texts) & set(prepared.test_texts)


def test_split_respects_test_size(tmp_path):
    path = _write(_frame(sizes=(20, 12, 8)), tmp_path / "records.csv")
    prepared = prepare_data(_config(path, test_size=0.25))
    assert len(prepared.test_texts) == 10
    assert len(prepared.train_texts) == 30
    assert set(prepared.test_labels.tolist()) == {0, 1, 2}
    assert set(prepared.train_labels.tolist()) == {0, 1, 2}


def test_labels_match_texts_after_split(tmp_path):
    path = _write(_frame(), tmp_path / "records.parquet")
    prepared = prepare_data(_config(path), seed=5)
    for texts, labels in ((prepared.train_texts, prepared.train_labels), (prepared.test_texts, prepared.test_labels)):
        for text, label in zip(texts, labels):
            assert text.endswith(f"kind {prepared.class_names[label]}")


def test_same_seed_same_data_different_seed_different_split(tmp_path):
    path = _write(_frame(), tmp_path / "records.csv")
    first, again = prepare_data(_config(path), seed=1), prepare_data(_config(path), seed=1)
    _assert_same(first, again)
    other = prepare_data(_config(path), seed=2)
    assert other.data_hash != first.data_hash
    assert other.train_texts != first.train_texts
    assert other.class_names == first.class_names


def test_data_hash_changes_when_a_text_changes(tmp_path):
    frame = _frame()
    before = prepare_data(_config(_write(frame, tmp_path / "before.csv")))
    changed = frame.copy()
    changed.loc[0, "narrative"] = changed.loc[0, "narrative"] + " (amended)"
    after = prepare_data(_config(_write(changed, tmp_path / "after.csv")))
    assert after.data_hash != before.data_hash
    np.testing.assert_array_equal(after.train_labels, before.train_labels)


def test_majority_rate_on_hand_built_data():
    prepared = PreparedData(
        train_texts=("a", "b", "c", "d"),
        train_labels=np.array([0, 1, 0, 0]),
        test_texts=("e", "f"),
        test_labels=np.array([1, 1]),
        class_names=("x", "y"),
        data_hash="h",
    )
    assert prepared.num_classes == 2
    assert prepared.majority_rate == pytest.approx(0.75)


def test_majority_rate_after_prepare(tmp_path):
    frame = pd.DataFrame({"narrative": [f"text {i}" for i in range(8)], "code": ["a"] * 6 + ["b"] * 2})
    prepared = prepare_data(_config(_write(frame, tmp_path / "records.csv")))
    assert np.bincount(prepared.train_labels).tolist() == [3, 1]
    assert prepared.majority_rate == pytest.approx(0.75)


def test_hugging_face_dataset_from_disk(tmp_path):
    datasets = pytest.importorskip("datasets")
    frame = _frame()
    folder = tmp_path / "hf_records"
    datasets.Dataset.from_dict({"narrative": frame["narrative"].tolist(), "code": frame["code"].tolist()}) \
        .save_to_disk(str(folder))
    texts, labels = load_records(_config(folder))
    assert texts == frame["narrative"].tolist()
    assert labels == [str(code) for code in frame["code"]]
    from_hf = prepare_data(_config(folder), seed=4)
    from_csv = prepare_data(_config(_write(frame, tmp_path / "records.csv")), seed=4)
    _assert_same(from_hf, from_csv)


def test_hugging_face_dataset_dict_split(tmp_path):
    datasets = pytest.importorskip("datasets")
    frame = _frame()
    folder = tmp_path / "hf_dict"
    part = datasets.Dataset.from_dict({"narrative": frame["narrative"].tolist(), "code": frame["code"].tolist()})
    datasets.DatasetDict({"train": part, "extra": part.select(range(3))}).save_to_disk(str(folder))
    assert len(load_records(_config(folder))[0]) == 24
    assert len(load_records(_config(folder, split="extra"))[0]) == 3
    with pytest.raises(DataError, match=r"no split 'validation'"):
        load_records(_config(folder, split="validation"))


# --- DataConfig ----------------------------------------------------------------------------------


def test_data_config_defaults():
    config = DataConfig()
    assert config.source == "synthetic"
    assert (config.text_column, config.label_column, config.split) == ("text", "label", "train")
    assert config.max_per_class is None
    assert config.min_per_class == 2
    assert config.test_size == 0.5


@pytest.mark.parametrize(
    "options, key",
    [
        ({"test_size": 0.0}, "data.test_size"),
        ({"test_size": 1.0}, "data.test_size"),
        ({"min_per_class": 1}, "data.min_per_class"),
        ({"max_per_class": 1}, "data.max_per_class"),
        ({"max_length": 4}, "data.max_length"),
        ({"synthetic_size": 10}, "data.synthetic_size"),
        ({"synthetic_classes": 13}, "data.synthetic_classes"),
    ],
)
def test_data_config_rejects_out_of_range(options, key):
    with pytest.raises(ConfigError, match=key):
        DataConfig(**options)


# --- Synthetic corpus ----------------------------------------------------------------------------


def test_synthetic_corpus_is_deterministic_per_seed():
    assert synthetic_corpus(200, seed=7) == synthetic_corpus(200, seed=7)
    assert synthetic_corpus(200, seed=7) != synthetic_corpus(200, seed=8)


def test_synthetic_corpus_is_imbalanced():
    texts, labels = synthetic_corpus(600, num_classes=8, seed=0)
    assert len(texts) == len(labels) == 600
    counts = Counter(labels)
    assert max(counts.values()) >= 3 * min(counts.values())


@pytest.mark.parametrize("num_classes", [2, 5, 12])
def test_synthetic_corpus_respects_num_classes(num_classes):
    texts, labels = synthetic_corpus(300, num_classes=num_classes, seed=1)
    assert len(set(labels)) == num_classes
    assert all(isinstance(text, str) and text.strip() for text in texts)


def test_synthetic_corpus_every_class_at_least_twice():
    for seed in range(5):
        _, labels = synthetic_corpus(24, num_classes=12, seed=seed)
        counts = Counter(labels)
        assert len(counts) == 12
        assert min(counts.values()) >= 2


@pytest.mark.parametrize("num_classes", [1, 13])
def test_synthetic_corpus_rejects_bad_num_classes(num_classes):
    with pytest.raises(ValueError, match="num_classes"):
        synthetic_corpus(100, num_classes=num_classes)


def test_synthetic_source_through_load_and_prepare():
    config = DataConfig(source="synthetic", synthetic_size=120, synthetic_classes=5)
    assert load_records(config, seed=3) == synthetic_corpus(120, num_classes=5, seed=3)
    prepared = prepare_data(config, seed=3)
    assert prepared.num_classes == 5
    assert len(prepared.train_texts) + len(prepared.test_texts) == 120
    _assert_same(prepared, prepare_data(config, seed=3))


# --- The real OSHA sample ------------------------------------------------------------------------


@pytest.mark.skipif(not OSHA_SAMPLE.is_file(), reason=f"OSHA sample not present at {OSHA_SAMPLE}")
def test_osha_sample():
    config = DataConfig(source=str(OSHA_SAMPLE), text_column="text", label_column="nature")
    texts, labels = load_records(config)
    assert len(texts) == len(labels) == 1493
    counts = Counter(labels)
    kept = {label: count for label, count in counts.items() if count >= 2}
    assert len(kept) == 45
    prepared = prepare_data(config)
    assert prepared.num_classes == 45
    assert set(prepared.class_names) == set(kept)
    assert len(prepared.train_texts) + len(prepared.test_texts) == sum(kept.values())
    assert set(prepared.train_labels.tolist()) == set(prepared.test_labels.tolist()) == set(range(45))


def test_public_names():
    for name in ("DataConfig", "DataError", "PreparedData", "load_records", "prepare_data", "synthetic_corpus"):
        assert name in swagppm.__all__


def test_a_title_column_names_the_classes_without_changing_the_data(tmp_path: Path) -> None:
    rows = [{"text": f"record {i} about an injury", "code": code, "title": title}
            for i, (code, title) in enumerate([("111", "Fractures"), ("111", "Fractures"), ("200", "Burns"),
                                               ("200", "Burns"), ("300", "Burns"), ("300", "Burns")])]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    plain = swagppm.DataConfig(source=str(path), label_column="code", test_size=0.5)
    titled = dataclasses.replace(plain, title_column="title")
    without, with_titles = swagppm.prepare_data(plain), swagppm.prepare_data(titled)
    assert with_titles.data_hash == without.data_hash and without.label_names == ("111", "200", "300")
    assert with_titles.label_names == ("Fractures", "Burns (200)", "Burns (300)")
    with pytest.raises(swagppm.DataError, match="column 'missing' not found"):
        swagppm.prepare_data(dataclasses.replace(plain, title_column="missing"))


def test_without_the_datasets_package_reading_says_what_to_install(tmp_path, monkeypatch):
    """``datasets`` reads every source but the synthetic corpus; a broken install is one line, not a traceback."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets now raises ImportError
    path = _write(_frame(), tmp_path / "records.csv")
    message = error_naming(DataError, path, lambda: load_records(_config(path)))
    assert "pip install 'datasets>=4.7'" in message and len(message.splitlines()) == 1
    assert len(load_records(DataConfig(source="synthetic", synthetic_size=20))[0]) == 20
