"""Throughput of 1, 2, 4, ... tuner workers sharing one machine (or one GPU): trials per hour.

For each worker count the study is started fresh (same name, deleted in between)
and ``tuner.executors.run_workers`` runs that many ``swagppm-tune worker`` processes until
``--trials`` trials have finished, exactly as ``swagppm-tune run --workers N`` does.
Stage 1 is computed once beforehand (``swagppm.prepare``), so every run reads it from
the private cache (a temporary folder, deleted at the end, unless the study sets
``cache_dir``). Throughput is read back from the study: finished trials over the
span from the first trial's start to the last one's end (worker start-up excluded);
the wall time of the whole run, start-up included, is printed beside it.

The default study, ``bench_workers.toml`` beside this script, is the demo's tiny fit with
the epochs fixed at 7 and a loose ε target, so every trial does the same work; it
runs from a copy in the temporary folder, so its trial figures are deleted too (a
study of yours keeps its ``artifacts`` folder).
Storage: a journal file in a temporary folder unless ``--storage`` names a database
(PostgreSQL or MySQL, as for several machines). CPU workers split the cores
(``OMP_NUM_THREADS``); with ``--gpus 0`` all workers share GPU 0.

Usage::

    python -m benchmarks.cli.bench_workers --workers 1 2 --trials 8        # 2-core CPU, about 4 minutes
    python -m benchmarks.cli.bench_workers STUDY.toml --workers 1 2 4 8 --trials 32 --gpus 0
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import optuna

import swagppm
from benchmarks import rerun_command
from tuner import StudyConfig, open_study
from tuner.executors import run_workers
from tuner.storage import make_storage

STUDY = Path(__file__).resolve().parent / "bench_workers.toml"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("study", type=Path, nargs="?", default=STUDY, help="study file (default: %(default)s)")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="worker counts (default: 1 2)")
    parser.add_argument("--trials", type=int, default=8, help="finished trials per run (default: %(default)s)")
    parser.add_argument("--gpus", default="", help="GPU ids shared round-robin by the workers, e.g. 0")
    parser.add_argument("--storage", default=None, help="database URL (default: a temporary journal file)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if any(n < 1 for n in args.workers) or args.trials < 1:
        parser.error("worker counts and --trials must be at least 1")
    return args


def delete(config: StudyConfig) -> None:
    """Remove the benchmark's study from its storage, if there."""
    try:
        optuna.delete_study(study_name=config.study.name, storage=make_storage(config.storage_url))
    except KeyError:
        pass


def measure(config: StudyConfig, workers: int, trials: int, gpus: Sequence[str]) -> dict[str, Any]:
    """One fresh study run by ``workers`` processes; figures from the stored trials."""
    delete(config)
    start = time.perf_counter()
    codes = run_workers(config, workers=workers, gpus=gpus, n_trials=trials, echo=lambda line: None)
    wall = time.perf_counter() - start
    finished = [t for t in open_study(config).get_trials(deepcopy=False)
                if t.state.is_finished() and t.datetime_start and t.datetime_complete]
    if not finished:
        raise SystemExit(f"bench_workers: {workers} worker(s) finished no trial (exit codes {codes})")
    span = (max(t.datetime_complete for t in finished) - min(t.datetime_start for t in finished)).total_seconds()
    trial_s = [(t.datetime_complete - t.datetime_start).total_seconds() for t in finished]
    return {"workers": workers, "trials": len(finished), "wall_s": wall, "span_s": span,
            "mean_trial_s": sum(trial_s) / len(trial_s), "trials_per_hour": 3600 * len(finished) / span,
            "exit_codes": codes}


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    folder = Path(tempfile.mkdtemp(prefix="swagppm-bench-workers-"))
    os.environ["XDG_CACHE_HOME"] = str(folder)  # the default private cache, inherited by the workers
    try:
        study_file = args.study
        if study_file.resolve() == STUDY:  # run the shipped study from the temporary folder: its artifacts land there
            study_file = Path(shutil.copy(STUDY, folder / STUDY.name))
        config = StudyConfig.from_toml(study_file)
        config = config.with_storage(args.storage or f"journal:{folder / 'study.log'}")
        gpus = [g for g in args.gpus.split(",") if g]
        print(f"bench_workers: {config.path.name}, {args.trials} trials per run; stage 1 ...", file=sys.stderr)
        swagppm.prepare(config.fit)
        rows = []
        for workers in args.workers:
            print(f"bench_workers: {workers} worker(s) ...", file=sys.stderr, flush=True)
            rows.append(measure(config, workers, args.trials, gpus))
        delete(config)
    except swagppm.ConfigError as error:
        print(f"bench_workers: error: {error}", file=sys.stderr)
        return 2
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    base = rows[0]["trials_per_hour"]
    where = f"GPU(s) {','.join(gpus)}" if gpus else "CPU (cores split between the workers)"
    print(f"Workers sharing {where}; study {config.path.name}; stage 1 cached")
    print(f"{'workers':>7} {'trials':>6} {'wall [s]':>9} {'mean trial [s]':>15} {'trials/hour':>12} {'vs first':>9}")
    for row in rows:
        print(f"{row['workers']:>7} {row['trials']:>6} {row['wall_s']:>9.1f} {row['mean_trial_s']:>15.1f} "
              f"{row['trials_per_hour']:>12.0f} {row['trials_per_hour'] / base:>8.2f}x")
    if args.json is not None:
        report = {"command": rerun_command(__file__, argv), "date": time.strftime("%Y-%m-%d"),
                  "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version()},
                  "study": config.path.name, "gpus": gpus, "runs": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
