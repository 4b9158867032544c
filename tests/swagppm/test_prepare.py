"""``swagppm.data.prepare``: label mapping, split sizes and order, capping, the data fingerprint and the refusals."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from swagppm import ConfigError, DataConfig, DataError, PreparedData, prepare_data
from swagppm.data.prepare import stratified_split
from swagppm.data.synthetic import synthetic_corpus
from swagppm.provenance import keyed_fingerprint
from tests.swagppm.helpers import error_naming

SECRET = "Zq7-SECRET"


def _jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _records(path: Path, texts: list[str], labels: list[object]) -> Path:
    return _jsonl(path, [{"text": text, "label": label} for text, label in zip(texts, labels)])


def _config(path: Path, **options: object) -> DataConfig:
    return DataConfig(source=str(path), **options)


def _assert_private(message: str) -> None:
    assert SECRET not in message and "SECRET" not in message
    assert len(message.splitlines()) == 1


# --- Labels and the split ------------------------------------------------------------------------


TEN = [f"rec {i}" for i in range(10)]
TEN_LABELS = [3, 7, 12, 3, 7, 12, 3, 7, 12, 3]


def test_classes_are_the_label_values_sorted_as_text_and_labels_index_them(tmp_path: Path) -> None:
    path = _records(tmp_path / "records.jsonl", TEN, TEN_LABELS)
    prepared = prepare_data(_config(path))
    assert prepared.class_names == ("12", "3", "7")  # sorted as strings, not as numbers
    assert prepared.num_classes == 3 and prepared.class_titles is None
    label_of = {text: str(label) for text, label in zip(TEN, TEN_LABELS)}
    for texts, labels in ((prepared.train_texts, prepared.train_labels), (prepared.test_texts, prepared.test_labels)):
        assert isinstance(texts, tuple) and labels.dtype == np.int64
        assert [prepared.class_names[k] for k in labels] == [label_of[text] for text in texts]


def test_a_fixed_data_set_gives_a_fixed_split_and_fingerprint(tmp_path: Path) -> None:
    """Every cache key and study fingerprint derives from ``data_hash``: a change here invalidates them all."""
    prepared = prepare_data(_config(_records(tmp_path / "records.jsonl", TEN, TEN_LABELS)))
    assert prepared.train_texts == ("rec 0", "rec 1", "rec 6", "rec 7", "rec 8")
    assert prepared.train_labels.tolist() == [1, 2, 1, 2, 0]
    assert prepared.test_texts == ("rec 2", "rec 3", "rec 4", "rec 5", "rec 9")
    assert prepared.test_labels.tolist() == [0, 1, 2, 0, 1]
    assert prepared.data_hash == "b167ab9598edc3929893a9205aae86cc740495f0458aef8ff9212d1ce914f34b"


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_both_sides_keep_the_records_in_file_order(tmp_path: Path, seed: int) -> None:
    path = _records(tmp_path / "records.jsonl", TEN, TEN_LABELS)
    prepared = prepare_data(_config(path), seed=seed)
    for texts in (prepared.train_texts, prepared.test_texts):
        positions = [TEN.index(text) for text in texts]
        assert positions == sorted(positions)
    assert sorted(prepared.train_texts + prepared.test_texts) == sorted(TEN)


@pytest.mark.parametrize("test_size, train, test", [(0.25, 7, 3), (0.3, 7, 3), (0.34, 6, 4), (0.5, 5, 5)])
def test_the_test_side_is_rounded_up(tmp_path: Path, test_size: float, train: int, test: int) -> None:
    path = _records(tmp_path / "records.jsonl", TEN, TEN_LABELS)
    prepared = prepare_data(_config(path, test_size=test_size))
    assert (len(prepared.train_texts), len(prepared.test_texts)) == (train, test)
    assert set(prepared.train_labels.tolist()) == set(prepared.test_labels.tolist()) == {0, 1, 2}


def test_a_side_exactly_as_large_as_the_number_of_classes_is_accepted(tmp_path: Path) -> None:
    path = _records(tmp_path / "records.jsonl", [f"r{i}" for i in range(4)], ["x", "y", "x", "y"])
    prepared = prepare_data(_config(path, test_size=0.3))  # ceil(1.2) = 2 test records for 2 classes
    assert sorted(prepared.train_labels.tolist()) == sorted(prepared.test_labels.tolist()) == [0, 1]


@pytest.mark.parametrize("test_size", [0.2, 0.8], ids=["test side too small", "train side too small"])
def test_a_split_that_would_miss_a_class_is_refused_in_one_line(tmp_path: Path, test_size: float) -> None:
    path = _records(tmp_path / "records.jsonl", [f"{SECRET} text {i}" for i in range(4)],
                    [f"{SECRET}-a", f"{SECRET}-b", f"{SECRET}-a", f"{SECRET}-b"])
    message = error_naming(DataError, path, lambda: prepare_data(_config(path, test_size=test_size)))
    assert message == (f"{path}: 4 records cannot be split stratified into train and test with 2 classes each; "
                       "use more records or fewer classes")
    _assert_private(message)


def _sklearn_split(strata: list[str], test_size: float, seed: int) -> tuple[list[int], list[int]]:
    """The positions scikit-learn's stratified ``train_test_split`` puts on each side, sorted."""
    from sklearn.model_selection import train_test_split

    train, test = train_test_split(np.arange(len(strata)), test_size=test_size, stratify=strata, random_state=seed)
    return sorted(train.tolist()), sorted(test.tolist())


def _numpy_split(strata: list[str], test_size: float, seed: int) -> tuple[list[int], list[int]]:
    train, test = stratified_split(strata, test_size=test_size, seed=seed)
    return sorted(train.tolist()), sorted(test.tolist())


def _counts(*sizes: int) -> list[str]:
    """Strata of the given sizes, interleaved as records of different classes come in a file."""
    labels = [f"class-{k}" for k, size in enumerate(sizes) for _ in range(size)]
    return [labels[i] for i in np.random.default_rng(len(labels)).permutation(len(labels))]


SPLIT_SHAPES = {  # the data the tests, studies and demos split: synthetic corpora and small files, 2 and 3 classes
    "demo (300 records, 6 classes)": synthetic_corpus(300, num_classes=6, seed=0)[1],
    "demo_tiny (400, 8)": synthetic_corpus(400, num_classes=8, seed=0)[1],
    "small studies (240, 4)": synthetic_corpus(240, num_classes=4, seed=0)[1],
    "osha-like default (600, 8)": synthetic_corpus(seed=3)[1],
    "ten records, 3 classes": [str(label) for label in TEN_LABELS],
    "2 classes, balanced": _counts(20, 20),
    "2 classes, 9 to 1": _counts(45, 5),
    "2 classes, 2 records each": _counts(2, 2),
    "3 classes, tied remainders": _counts(7, 7, 7),
    "3 classes, 2 3 and 40": _counts(2, 3, 40),
}


def _splittable(sizes: list[int], test_size: float) -> bool:
    """Whether each side gets a record of every class (else prepare_data refuses before splitting)."""
    n_test = math.ceil(test_size * sum(sizes))
    return min(n_test, sum(sizes) - n_test) >= len(sizes)


@pytest.mark.parametrize("shape", list(SPLIT_SHAPES))
def test_the_split_puts_the_same_records_on_each_side_as_scikit_learn(shape: str) -> None:
    strata = SPLIT_SHAPES[shape]
    sizes = [strata.count(name) for name in set(strata)]
    cases = [(seed, size) for seed in (0, 1, 7, 12345) for size in (0.2, 0.25, 0.3, 0.5) if _splittable(sizes, size)]
    assert len(cases) >= 8
    for seed, test_size in cases:
        assert _numpy_split(strata, test_size, seed) == _sklearn_split(strata, test_size, seed), (seed, test_size)


def test_the_split_matches_scikit_learn_on_many_random_class_counts() -> None:
    rng = np.random.default_rng(2026)
    compared = 0
    while compared < 300:
        sizes = [int(size) for size in rng.integers(2, 30, size=int(rng.integers(2, 12)))]
        test_size, seed = float(rng.choice([0.1, 0.15, 0.2, 0.25, 0.3, 1 / 3, 0.5])), int(rng.integers(2**31))
        if not _splittable(sizes, test_size):
            continue
        strata = _counts(*sizes)
        assert _numpy_split(strata, test_size, seed) == _sklearn_split(strata, test_size, seed), (sizes, test_size)
        compared += 1


# --- Too few classes -------------------------------------------------------------------------------


def test_no_class_large_enough_is_refused_with_the_five_largest_sizes_only(tmp_path: Path) -> None:
    path = _records(tmp_path / "records.jsonl", [f"{SECRET} text {i}" for i in range(7)],
                    [f"{SECRET}-{i}" for i in range(7)])
    message = error_naming(DataError, path, lambda: prepare_data(_config(path)))
    assert message == (f"{path}: column 'label' has 0 class(es) with at least 2 records "
                       "(largest class sizes: 1, 1, 1, 1, 1); a classifier needs at least 2")
    _assert_private(message)


def test_the_refusal_names_the_configured_column_and_minimum(tmp_path: Path) -> None:
    path = _jsonl(tmp_path / "records.jsonl",
                  [{"story": f"{SECRET} {i}", "nature": label} for i, label in enumerate([SECRET] * 4 + ["b"] * 2)])
    config = DataConfig(source=str(path), text_column="story", label_column="nature", min_per_class=3)
    message = error_naming(DataError, path, lambda: prepare_data(config))
    assert message == (f"{path}: column 'nature' has 1 class(es) with at least 3 records "
                       "(largest class sizes: 4, 2); a classifier needs at least 2")
    _assert_private(message)


# --- Capping and dropping ----------------------------------------------------------------------------


def _capped_source(tmp_path: Path) -> Path:
    texts = [f"a{i}" for i in range(10)] + [f"b{i}" for i in range(3)] + ["c0", "c1"]
    return _records(tmp_path / "records.jsonl", texts, ["a"] * 10 + ["b"] * 3 + ["c"] * 2)


def test_only_classes_above_the_cap_are_sampled_and_rare_ones_dropped_first(tmp_path: Path) -> None:
    prepared = prepare_data(_config(_capped_source(tmp_path), max_per_class=3, min_per_class=3))
    kept = prepared.train_texts + prepared.test_texts
    assert prepared.class_names == ("a", "b")
    assert sorted(text for text in kept if text.startswith("b")) == ["b0", "b1", "b2"]  # at the cap: all kept
    assert len([text for text in kept if text.startswith("a")]) == 3 and not any(t.startswith("c") for t in kept)


def test_the_capped_sample_is_fixed_by_the_seed(tmp_path: Path) -> None:
    path = _capped_source(tmp_path)

    def sample(seed: int) -> tuple[str, ...]:
        prepared = prepare_data(_config(path, max_per_class=3), seed=seed)
        return tuple(sorted(t for t in prepared.train_texts + prepared.test_texts if t.startswith("a")))

    assert sample(0) == sample(0)
    assert len({sample(seed) for seed in range(4)}) > 1


# --- The data fingerprint ------------------------------------------------------------------------------

TWELVE = [f"worker {i} was hurt" for i in range(12)]
TWELVE_LABELS = ["x", "y", "z"] * 4


def test_the_fingerprint_and_its_keyed_form_change_with_any_one_record(tmp_path: Path) -> None:
    key = b"k" * 32
    variants = [(TWELVE, TWELVE_LABELS)]
    for i in range(12):
        variants.append(([*TWELVE[:i], TWELVE[i] + " badly", *TWELVE[i + 1:]], TWELVE_LABELS))
        other = {"x": "y", "y": "z", "z": "x"}[TWELVE_LABELS[i]]
        variants.append((TWELVE, [*TWELVE_LABELS[:i], other, *TWELVE_LABELS[i + 1:]]))
    hashes = [prepare_data(_config(_records(tmp_path / f"v{n}.jsonl", texts, labels))).data_hash
              for n, (texts, labels) in enumerate(variants)]
    assert len(set(hashes)) == len(variants) == 25
    assert all(len(h) == 64 and int(h, 16) >= 0 for h in hashes)
    keyed = {keyed_fingerprint(key, h) for h in hashes}
    assert len(keyed) == 25 and not keyed & set(hashes)
    assert keyed_fingerprint(b"j" * 32, hashes[0]) != keyed_fingerprint(key, hashes[0])


def test_moving_text_across_a_record_boundary_changes_the_fingerprint(tmp_path: Path) -> None:
    labels = ["x", "x", "y", "y"]
    before = prepare_data(_config(_records(tmp_path / "a.jsonl", ["fell ab", "c cut", "burn", "slip"], labels)))
    after = prepare_data(_config(_records(tmp_path / "b.jsonl", ["fell a", "bc cut", "burn", "slip"], labels)))
    np.testing.assert_array_equal(after.train_labels, before.train_labels)  # the same split, only texts differ
    assert after.data_hash != before.data_hash


def test_renaming_a_class_changes_the_fingerprint(tmp_path: Path) -> None:
    before = prepare_data(_config(_records(tmp_path / "a.jsonl", TWELVE, TWELVE_LABELS)))
    renamed = [{"x": "p", "y": "q", "z": "r"}[label] for label in TWELVE_LABELS]  # the same order of classes
    after = prepare_data(_config(_records(tmp_path / "b.jsonl", TWELVE, renamed)))
    assert after.train_texts == before.train_texts and after.test_texts == before.test_texts
    np.testing.assert_array_equal(after.train_labels, before.train_labels)
    assert after.data_hash != before.data_hash


def test_a_dropped_record_leaves_no_trace_in_the_fingerprint(tmp_path: Path) -> None:
    one = prepare_data(_config(_records(tmp_path / "a.jsonl", [*TWELVE, "lonely one"], [*TWELVE_LABELS, "w"])))
    other = prepare_data(_config(_records(tmp_path / "b.jsonl", [*TWELVE, "lonely two"], [*TWELVE_LABELS, "v"])))
    assert one.data_hash == other.data_hash == prepare_data(
        _config(_records(tmp_path / "c.jsonl", TWELVE, TWELVE_LABELS))).data_hash


# --- Class titles ------------------------------------------------------------------------------------


def test_a_class_without_a_title_is_named_by_its_label_and_clashes_are_told_apart(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label,title\nr0,A,Burns\nr1,A,Burns\nr2,B,\nr3,B,\nr4,C,B\nr5,C,B\n", encoding="utf-8")
    prepared = prepare_data(_config(path, title_column="title"))
    assert prepared.class_names == ("A", "B", "C")
    assert prepared.class_titles == prepared.label_names == ("Burns", "B (B)", "B (C)")


def test_a_title_column_without_any_title_leaves_the_label_values(tmp_path: Path) -> None:
    path = tmp_path / "records.csv"
    path.write_text("text,label,title\nr0,A,\nr1,A,\nr2,B,\nr3,B,\n", encoding="utf-8")
    prepared = prepare_data(_config(path, title_column="title"))
    assert prepared.class_titles is None and prepared.label_names == ("A", "B")


# --- PreparedData --------------------------------------------------------------------------------------


def test_train_counts_cover_every_class_even_one_missing_from_training() -> None:
    prepared = PreparedData(train_texts=("a", "b", "c"), train_labels=np.array([2, 0, 2]), test_texts=("d",),
                            test_labels=np.array([1]), class_names=("p", "q", "r"), data_hash="h")
    assert prepared.train_counts.tolist() == [1, 0, 2]
    assert prepared.majority_rate == pytest.approx(2 / 3)
    assert prepared.label_names == ("p", "q", "r")


def test_a_synthetic_corpus_the_config_accepts_is_prepared_or_refused_clearly() -> None:
    try:
        prepared = prepare_data(DataConfig(synthetic_size=20, synthetic_classes=12))
    except (ConfigError, DataError) as error:
        assert "synthetic" in str(error)
    else:
        assert prepared.num_classes >= 2
