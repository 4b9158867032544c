"""``swagppm.data.synthetic``: the built-in corpus's size, its classes and their shares, its sentences, its seed."""

from __future__ import annotations

from collections import Counter

import pytest

from swagppm import synthetic_corpus

NAMES = ("fracture", "amputation", "burn", "laceration", "contusion", "sprain", "electric shock", "heat illness",
         "puncture", "hearing loss", "chemical burn", "crush injury")
# The verbs and body parts of the first four classes, as the corpus writes them.
VERBS = {"fracture": ("fractured", "broke", "cracked"), "amputation": ("amputated", "severed", "lost the tip of"),
         "burn": ("burned", "scalded", "seared"), "laceration": ("cut", "lacerated", "sliced")}
PARTS = {"fracture": ("leg", "wrist", "ankle", "rib", "arm", "hip"),
         "amputation": ("finger", "thumb", "toe", "fingertip"),
         "burn": ("hand", "forearm", "face", "chest"), "laceration": ("hand", "palm", "scalp", "forearm")}


def test_the_default_corpus_has_exact_class_counts() -> None:
    texts, labels = synthetic_corpus()
    assert (texts, labels) == synthetic_corpus(600, num_classes=8, seed=0)
    assert len(texts) == len(labels) == 600
    assert Counter(labels) == {"fracture": 191, "amputation": 108, "burn": 87, "laceration": 56, "contusion": 50,
                               "sprain": 42, "heat illness": 36, "electric shock": 30}


@pytest.mark.parametrize("size", [24, 37, 1000])
def test_the_corpus_has_exactly_the_requested_size(size: int) -> None:
    texts, labels = synthetic_corpus(size, num_classes=12, seed=4)
    assert len(texts) == len(labels) == size
    assert all(isinstance(text, str) for text in texts) and all(isinstance(label, str) for label in labels)


@pytest.mark.parametrize("num_classes", range(2, 13))
def test_the_classes_are_the_first_injury_names_each_twice_at_the_start(num_classes: int) -> None:
    _, labels = synthetic_corpus(60, num_classes=num_classes, seed=2)
    assert labels[: 2 * num_classes] == [name for name in NAMES[:num_classes] for _ in range(2)]
    assert set(labels) == set(NAMES[:num_classes])


def test_class_shares_follow_one_over_rank() -> None:
    _, labels = synthetic_corpus(4000, num_classes=4, seed=0)
    counts = Counter(labels)
    for rank, name in enumerate(NAMES[:4]):
        assert counts[name] / 4000 == pytest.approx((1 / (rank + 1)) / (1 + 1 / 2 + 1 / 3 + 1 / 4), abs=0.015)


def test_every_sentence_names_a_body_part_of_its_own_class() -> None:
    texts, labels = synthetic_corpus(400, num_classes=4, seed=1)
    for text, label in zip(texts, labels):
        assert text.startswith(("A ", "An ")) and text.endswith(".")
        assert any(f" the {part} " in text for part in PARTS[label])


def test_about_one_record_in_ten_borrows_another_class_s_verb() -> None:
    """A tenth of the records draw their verb's class at random: 3/4 of those (4 classes) pick another class."""
    texts, labels = synthetic_corpus(4000, num_classes=4, seed=0)
    borrowed = sum(not any(f" {verb} the " in text for verb in VERBS[label]) for text, label in zip(texts, labels))
    assert borrowed == 335
    assert all(any(f" {verb} the " in text for verbs in VERBS.values() for verb in verbs) for text in texts)


def test_the_seed_changes_the_labels_as_well_as_the_texts() -> None:
    first, other = synthetic_corpus(200, num_classes=4, seed=7), synthetic_corpus(200, num_classes=4, seed=8)
    assert first[1] != other[1] and first[0] != other[0]
    assert synthetic_corpus(200, num_classes=4, seed=7) == first


@pytest.mark.parametrize("num_classes", [0, 1, 13])
def test_a_number_of_classes_out_of_range_is_refused_exactly(num_classes: int) -> None:
    with pytest.raises(ValueError) as info:
        synthetic_corpus(100, num_classes=num_classes)
    assert str(info.value) == f"num_classes must be between 2 and 12, got {num_classes}"


def test_a_size_too_small_for_two_records_a_class_is_refused_naming_the_size() -> None:
    with pytest.raises(ValueError, match=r"size"):
        synthetic_corpus(20, num_classes=12)
