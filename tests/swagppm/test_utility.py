"""Utility metrics: the (macro, weighted) F1 pair, the median/q10 summary of draws and the class-level report."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from swagppm.utility import MIN_REPORTED_CLASS_RECORDS, SUPPRESSED_COLUMN, class_report, f1_pair, summarise

# Six test records of three classes. By hand: class 0 has TP 2, FP 1, FN 1 (F1 2/3); class 1 TP 2, FP 1, FN 0
# (precision 2/3, recall 1, F1 0.8); class 2 is never predicted (F1 0). Supports 3, 2, 1.
Y_TRUE = np.array([0, 0, 0, 1, 1, 2])
Y_PRED = np.array([0, 0, 1, 1, 1, 0])


def test_the_macro_f1_averages_classes_equally_and_the_weighted_f1_by_support() -> None:
    macro, weighted = f1_pair(Y_TRUE, Y_PRED, 3)
    assert macro == pytest.approx((2 / 3 + 0.8 + 0.0) / 3)  # 22/45
    assert weighted == pytest.approx((3 * 2 / 3 + 2 * 0.8 + 1 * 0.0) / 6)  # 0.6
    assert type(macro) is float and type(weighted) is float


def test_a_class_absent_from_labels_and_predictions_has_no_f1() -> None:
    """A declared class that neither occurs nor is predicted is left out of the macro average (it has no F1); the
    classes that occur or are predicted count, a present class never predicted scoring 0."""
    macro, weighted = f1_pair(Y_TRUE, Y_PRED, 4)
    assert (macro, weighted) == pytest.approx(f1_pair(Y_TRUE, Y_PRED, 3))
    assert macro == pytest.approx((2 / 3 + 0.8 + 0.0) / 3)
    assert weighted == pytest.approx(0.6)


def test_perfect_predictions_score_one_and_all_wrong_score_zero() -> None:
    labels = np.array([0, 1, 2, 1])
    assert f1_pair(labels, labels, 3) == pytest.approx((1.0, 1.0))
    assert f1_pair(labels, np.array([1, 2, 0, 0]), 3) == (0.0, 0.0)


def test_the_pair_is_scikit_learns_f1_to_the_bit_on_many_random_predictions() -> None:
    from sklearn.metrics import f1_score

    rng = np.random.default_rng(49)
    for _ in range(300):
        num_classes, n = int(rng.integers(2, 12)), int(rng.integers(1, 200))
        y_true = rng.integers(0, num_classes, size=n)
        right = rng.random(n) < rng.random()  # from hopeless to near perfect
        y_pred = np.where(right, y_true, rng.integers(0, int(rng.integers(1, num_classes + 1)), size=n))
        labels = [k for k in range(num_classes) if np.any(y_true == k) or np.any(y_pred == k)]
        expected = tuple(float(f1_score(y_true, y_pred, labels=labels, average=average, zero_division=0))
                         for average in ("macro", "weighted"))
        assert f1_pair(y_true, y_pred, num_classes) == expected


def test_no_records_to_score_is_an_error() -> None:
    with pytest.raises(ValueError, match="no records to score"):
        f1_pair(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 3)


def test_summarise_gives_the_median_and_the_linearly_interpolated_tenth_percentile() -> None:
    assert summarise([5.0, 1.0, 4.0, 2.0, 3.0]) == {"median": 3.0, "q10": pytest.approx(1.4)}
    assert summarise((4.0, 1.0, 3.0, 2.0)) == {"median": 2.5, "q10": pytest.approx(1.3)}
    assert summarise(np.array([0.5])) == {"median": 0.5, "q10": 0.5}


def test_summarise_returns_plain_floats() -> None:
    summary = summarise(np.array([0.25, 0.75], dtype=np.float32))
    assert summary == {"median": 0.5, "q10": pytest.approx(0.3)}
    assert all(type(value) is float for value in summary.values())


@pytest.mark.parametrize("empty", [[], (), np.array([])])
def test_summarise_of_no_draws_is_nan(empty: object) -> None:
    summary = summarise(empty)  # type: ignore[arg-type]
    assert list(summary) == ["median", "q10"] and all(math.isnan(value) for value in summary.values())


def test_the_class_report_holds_per_class_scores_under_the_class_names() -> None:
    report = class_report(Y_TRUE, Y_PRED, class_names=["a", "b", "c", "d"], train_counts=np.array([5, 50, 20, 1]),
                          min_records=0)
    per_class = report["per_class"]
    assert list(per_class) == ["a", "b", "c", "d", "accuracy", "macro avg", "weighted avg"]
    assert per_class["a"] == pytest.approx({"precision": 2 / 3, "recall": 2 / 3, "f1-score": 2 / 3, "support": 3})
    assert per_class["b"] == pytest.approx({"precision": 2 / 3, "recall": 1.0, "f1-score": 0.8, "support": 2})
    assert per_class["c"] == {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 1}
    assert per_class["d"] == {"precision": 0.0, "recall": 0.0, "f1-score": 0.0, "support": 0}
    assert per_class["accuracy"] == pytest.approx(4 / 6)
    assert per_class["macro avg"]["f1-score"] == pytest.approx(11 / 30)
    assert per_class["weighted avg"]["f1-score"] == pytest.approx(0.6)


def test_the_confusion_matrix_has_a_row_and_column_for_every_class_even_an_unseen_one() -> None:
    report = class_report(Y_TRUE, Y_PRED, class_names=["a", "b", "c", "d"], train_counts=np.array([5, 50, 20, 1]),
                          min_records=0)
    assert report["confusion_matrix"] == [[2, 1, 0, 0], [0, 2, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]]


def test_the_quartiles_are_the_largest_and_smallest_classes_by_training_count() -> None:
    """Four classes: a quartile is one class; "b" has most training records, "d" fewest."""
    report = class_report(Y_TRUE, Y_PRED, class_names=["a", "b", "c", "d"], train_counts=np.array([5, 50, 20, 1]))
    assert report["top_quartile_classes"] == ["b"] and report["f1_top_quartile"] == pytest.approx(0.8)
    assert report["bottom_quartile_classes"] == ["d"] and report["f1_bottom_quartile"] == 0.0


def test_a_quartile_of_eight_classes_is_two_and_ties_keep_the_class_order() -> None:
    """Counts 9, 9, 9 tie at the top and 1, 1 at the bottom: the earlier classes come first."""
    y_true = np.array([0, 1, 2, 3, 4, 5, 6, 7, 1, 2])
    y_pred = np.array([0, 1, 0, 3, 4, 4, 6, 1, 1, 2])
    # per-class F1 by hand: c0 2/3, c1 0.8, c2 2/3, c3 1, c4 2/3, c5 0, c6 1, c7 0
    names = [f"c{i}" for i in range(8)]
    report = class_report(y_true, y_pred, class_names=names, train_counts=np.array([3, 9, 9, 1, 9, 2, 5, 1]))
    assert report["top_quartile_classes"] == ["c1", "c2"]
    assert report["f1_top_quartile"] == pytest.approx((0.8 + 2 / 3) / 2)
    assert report["bottom_quartile_classes"] == ["c3", "c7"]
    assert report["f1_bottom_quartile"] == pytest.approx(0.5)


def test_fewer_than_four_classes_still_have_one_class_per_quartile() -> None:
    report = class_report(np.array([0, 1, 1, 1]), np.array([0, 1, 1, 0]), class_names=["x", "y"],
                          train_counts=np.array([2, 7]))
    assert report["top_quartile_classes"] == ["y"] and report["bottom_quartile_classes"] == ["x"]
    assert report["f1_top_quartile"] == pytest.approx(0.8) and report["f1_bottom_quartile"] == pytest.approx(2 / 3)


def test_the_class_report_is_plain_json() -> None:
    """It goes into a release's report as is: no numpy types, and it reads back equal."""
    report = class_report(Y_TRUE, Y_PRED, class_names=["a", "b", "c", "d"], train_counts=np.array([5, 50, 20, 1]),
                          min_records=0)
    assert json.loads(json.dumps(report)) == report
    assert type(report["f1_top_quartile"]) is float and type(report["confusion_matrix"][0][0]) is int


def test_classes_with_fewer_test_records_than_the_public_minimum_are_not_shown_on_their_own() -> None:
    """Class "rare" has one test record (its label and prediction would be that record's), "few" nine: neither has a
    per-class entry or a confusion-matrix row; their columns are summed into the last one, and the totals stay."""
    y_true = np.array([0] * 12 + [1] * 10 + [2] + [3] * 9)
    y_pred = np.array([0] * 10 + [2, 3] + [1] * 9 + [0] + [1] + [3] * 9)
    names = ["big", "also", "rare", "few"]
    report = class_report(y_true, y_pred, class_names=names, train_counts=np.array([40, 30, 2, 20]))
    assert MIN_REPORTED_CLASS_RECORDS == 10
    assert list(report["per_class"]) == ["big", "also", "accuracy", "macro avg", "weighted avg"]
    assert report["confusion_rows"] == ["big", "also"]
    assert report["confusion_columns"] == ["big", "also", SUPPRESSED_COLUMN]
    assert report["confusion_matrix"] == [[10, 0, 2], [1, 9, 0]]  # big's records predicted rare (1) and few (1)
    assert report["suppressed"] == {"classes": 2, "min_test_records": 10}
    assert report["per_class"]["accuracy"] == pytest.approx((10 + 9 + 0 + 9) / 32)  # every record still counts
    assert report["per_class"]["macro avg"]["support"] == 32


def test_a_report_with_no_small_class_has_no_suppressed_column() -> None:
    y = np.array([0] * 10 + [1] * 10)
    report = class_report(y, y, class_names=["a", "b"], train_counts=np.array([1, 1]))
    assert report["confusion_columns"] == ["a", "b"] and report["confusion_matrix"] == [[10, 0], [0, 10]]
    assert report["suppressed"] == {"classes": 0, "min_test_records": 10}
