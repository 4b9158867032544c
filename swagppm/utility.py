"""Utility metrics: F1 per draw (numpy), and the class-level release report (scikit-learn)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def f1_pair(y_true: np.ndarray, y_pred: np.ndarray, num_classes: int) -> tuple[float, float]:
    """(macro F1, weighted F1) over the classes ``0..num_classes-1`` that occur in the test labels or the predictions
    (a declared class absent from both has no F1; one predicted but absent, or present but never predicted, scores
    0).

    The numbers of scikit-learn's ``f1_score(labels=those classes, average="macro" or
    "weighted", zero_division=0)``, to the bit (the same counts, the same float
    operations), without importing it: scikit-learn loads SciPy, pandas and pyarrow,
    seconds of every run's start, for what a few counts give.
    """
    y_true, y_pred = np.asarray(y_true), np.asarray(y_pred)
    if y_true.size == 0:
        raise ValueError("f1_pair: no records to score")
    true_sum = np.bincount(y_true, minlength=num_classes)[:num_classes]
    pred_sum = np.bincount(y_pred, minlength=num_classes)[:num_classes]
    tp_sum = np.bincount(y_true[y_true == y_pred], minlength=num_classes)[:num_classes]
    labels = np.flatnonzero(true_sum + pred_sum)
    f1 = 2.0 * tp_sum[labels].astype(np.float64) / (true_sum[labels].astype(np.float64)
                                                      + pred_sum[labels].astype(np.float64))
    return float(np.nanmean(f1)), float(np.average(f1, weights=true_sum[labels]))


def summarise(values: Sequence[float]) -> dict[str, float]:
    """Median and 10th percentile across draws (NaN when there are no draws)."""
    if len(values) == 0:
        return {"median": float("nan"), "q10": float("nan")}
    array = np.asarray(values, dtype=float)
    return {"median": float(np.median(array)), "q10": float(np.quantile(array, 0.1))}


# Classes with fewer test records than this get no row of their own in a class report (the owner report's per-class
# figures and confusion matrix): a small cell shows single records' labels. Public: it depends on no data.
MIN_REPORTED_CLASS_RECORDS = 10
SUPPRESSED_COLUMN = "any class of fewer test records"  # the confusion matrix's column for the suppressed classes


def quartile_size(num_classes: int) -> int:
    """How many classes each class-size quartile of ``class_report`` holds (at least one)."""
    return max(1, num_classes // 4)


def class_report(
    y_true: np.ndarray, y_pred: np.ndarray, *, class_names: Sequence[str], train_counts: np.ndarray,
    min_records: int = MIN_REPORTED_CLASS_RECORDS,
) -> dict[str, Any]:
    """Per-class precision/recall/F1, the confusion matrix, and macro F1 of the top and
    bottom quartiles of classes by training-set size (the paper's Table 2 view).

    Class-level aggregates only, and no class of fewer than ``min_records`` test
    records (``MIN_REPORTED_CLASS_RECORDS``, a public constant) is shown on its own: a
    class of one test record would show that record's label and its prediction, which
    even the owner-side report must not hold. Such a class has no ``per_class`` entry
    and no confusion-matrix row; its column is summed into the last column, records of
    the reported classes predicted as any suppressed class. ``suppressed`` counts them.
    The overall figures (accuracy, macro and weighted averages, the quartiles) cover
    every class.
    """
    from sklearn.metrics import classification_report, confusion_matrix, f1_score  # a release's report only

    labels = list(range(len(class_names)))
    report = classification_report(
        y_true, y_pred, labels=labels, target_names=list(class_names), output_dict=True, zero_division=0
    )
    support = np.bincount(np.asarray(y_true), minlength=len(labels))[:len(labels)]
    shown = [k for k in labels if support[k] >= min_records]
    hidden = [k for k in labels if support[k] < min_records]
    matrix = confusion_matrix(y_true, y_pred, labels=labels)
    rows = [[int(matrix[i, j]) for j in shown] + ([int(matrix[i, hidden].sum())] if hidden else []) for i in shown]
    order = np.argsort(-np.asarray(train_counts), kind="stable")
    quarter = quartile_size(len(order))
    per_class = f1_score(y_true, y_pred, labels=labels, average=None, zero_division=0)
    hidden_names = {class_names[k] for k in hidden}
    return {
        "per_class": {name: value for name, value in report.items() if name not in hidden_names},
        "confusion_matrix": rows,
        "confusion_rows": [class_names[k] for k in shown],
        "confusion_columns": [class_names[k] for k in shown] + ([SUPPRESSED_COLUMN] if hidden else []),
        "suppressed": {"classes": len(hidden), "min_test_records": min_records},
        "f1_top_quartile": float(np.mean(per_class[order[:quarter]])),
        "f1_bottom_quartile": float(np.mean(per_class[order[-quarter:]])),
        "top_quartile_classes": [class_names[i] for i in order[:quarter]],
        "bottom_quartile_classes": [class_names[i] for i in order[-quarter:]],
    }
