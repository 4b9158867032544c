"""Public-proxy tuning on the real workload: tune on one half of the OSHA sample declared public, fit and release the
choice once on the other half.

The sample's records are shuffled (seed 0) and split in two halves: "public" (the
study's data, ``[data] public = true``) and "private". A small random study runs on
the public half (all-MiniLM-L6-v2, last layer private, reduced counts so that the
whole run fits in minutes on one CPU core), then ``fit --from best.json --data
PRIVATE --release DIR --json FIT`` fits the chosen (c, E) once on the private half and
releases one draw of it, with the membership audit. The result file keeps each
step's exit status, seconds and printed lines (aggregates only) and the tuning
mapping of the export.

    python -m benchmarks.tuning.public_proxy --out benchmarks/tuning/results/public_proxy_osha_cpu.json
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from tuner.cli import main

REPO = Path(__file__).resolve().parents[2]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "osha_sample.jsonl"
COMMAND = "python -m benchmarks.tuning.public_proxy --out benchmarks/tuning/results/public_proxy_osha_cpu.json"

STUDY = """[study]
name = "public_proxy"
sampler = "random"
n_trials = {trials}
seed = 0

[search]
c_min = 0.3
c_max = 1.2
ft_epochs_min = 2
ft_epochs_max = 7
start = []
probe = false

[targets]
epsilon_cap = 10.0
max_f1_degradation = 0.25
require_well_fit = false

[data]
source = "{source}"
text_column = "text"
label_column = "nature"
test_size = 0.5
public = true

[model]
name_or_path = "all-MiniLM-L6-v2"
trainable = "last_n_layers"
n_layers = 1

[swagppm]
seed = 0
stage1_epochs = 3
batch_size = 8
finetune_lr = 1e-3
swag_lr = 0.02
swag_epochs = 4
draws_risk = 20
draws_privacy = 20
draws_utility = 5
device = "cpu"
cache_dir = "{cache}"
"""


def split_halves(source: Path, folder: Path) -> tuple[Path, Path]:
    """The sample's records shuffled with seed 0 and written as two JSONL halves: public, private."""
    lines = [line for line in source.read_text().splitlines() if line.strip()]
    random.Random(0).shuffle(lines)
    half = len(lines) // 2
    paths = folder / "public.jsonl", folder / "private.jsonl"
    for path, part in zip(paths, (lines[:half], lines[half:])):
        path.write_text("\n".join(part) + "\n")
    return paths


def step(name: str, argv: list[str]) -> dict[str, Any]:
    """One command of the flow: its exit status, seconds and printed lines."""
    out, err = io.StringIO(), io.StringIO()
    start = time.perf_counter()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    seconds = time.perf_counter() - start
    print(f"{name}: exit {status} in {seconds:.0f}s", file=sys.stderr, flush=True)
    return {"step": name, "command": ["swagppm-tune", *argv[:1]], "status": status, "seconds": round(seconds, 1),
            "stdout": out.getvalue().splitlines(), "stderr": err.getvalue().splitlines()}


def run(data: Path, trials: int, folder: Path) -> dict[str, Any]:
    """The whole flow in ``folder``: split, study on the public half, one fit and release on the private half."""
    public, private = split_halves(data, folder)
    study = folder / "public_proxy.toml"
    study.write_text(STUDY.format(trials=trials, source=public, cache=folder / "cache"))
    best, fit, released = folder / "best.json", folder / "fit.json", folder / "released"
    steps = [step("study on the public half", ["run", str(study)]),
             step("export", ["export", str(study), "-o", str(best)])]
    if steps[-1]["status"] == 0:
        steps.append(step("fit and release on the private half",
                          ["fit", "--from", str(best), "--data", str(private), "--json", str(fit),
                           "--release", str(released)]))
    export = json.loads(best.read_text()) if best.exists() else {}
    refit = json.loads(fit.read_text()) if fit.exists() else {}
    records = {"public": _count(public), "private": _count(private)}
    return {"command": COMMAND, "data": str(data.name), "records": records,
            "steps": steps, "chosen": export.get("params"), "tuning": export.get("tuning"),
            "private_fit": _summary(refit),
            "total_seconds": round(sum(s["seconds"] for s in steps), 1)}


def _summary(result: dict[str, Any]) -> dict[str, Any]:
    """The private fit's ε, its median F1s over the utility draws and the baseline's (the result JSON's lists)."""
    medians = {f"{key}_median": statistics.median(result[key]) if result.get(key) else None
               for key in ("f1_macro", "f1_weighted")}
    return {"epsilon": result.get("epsilon"), **medians,
            **{key: result.get(key) for key in ("baseline_f1_macro", "baseline_f1_weighted")}}


def _count(path: Path) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.strip())


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the OSHA sample (JSONL)")
    parser.add_argument("--trials", type=int, default=3, help="trials of the public study (default 3)")
    parser.add_argument("--out", type=Path, required=True, help="result JSON to write")
    args = parser.parse_args()
    if not args.data.is_file():
        parser.error(f"--data {args.data}: no such file")
    with tempfile.TemporaryDirectory() as folder:
        document = run(args.data, args.trials, Path(folder))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    cli()
