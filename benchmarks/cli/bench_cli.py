"""How fast the command line answers: `swagppm-tune --help` and `status` on a 30-trial study, as whole processes.

--help imports no verb (each verb's module is loaded when that verb runs) and status
only what reading a study needs: no plotting, fitting or training library, no Alembic
(targets on an idle 2-core machine: --help <= 0.3 s, status <= 0.8 s). The study is
built in a temporary folder from synthetic trial records (no fit is run), so the script
takes seconds. ``--baseline CHECKOUT`` times the same commands of another checkout (run
with it on PYTHONPATH) in the same call, each pair in turn, and prints the ratio of the
medians and the median of the pairs' ratios: the figure that carries over from a busy
machine to idle cores. The machine's load average is printed with the figures, since
start-up times grow with it:

    python -m benchmarks.cli.bench_cli [--runs 15] [--baseline /path/to/checkout] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from benchmarks import ROOT, rerun_command
from tuner import StudyConfig, open_study
from tuner.record import CONSTRAINT_KEYS, TrialRecord, constraint_attrs

STUDY = """[study]
name = "bench-cli"
[model]
name_or_path = "tiny"
[swagppm]
device = "cpu"
"""


def _record(number: int) -> dict[str, object]:
    epsilon = 1.0 + 0.1 * number
    constraints = dict.fromkeys(CONSTRAINT_KEYS, -0.1 if number % 3 else 0.2)
    return TrialRecord(
        feasible=number % 3 != 0, diagnosis="well_fit", reasons=("synthetic",), recommendation="stop",
        next_action="stop", next_c=None, next_ft_epochs=None, epsilon=epsilon, epsilon_is_lower_bound=False,
        draws_privacy=500, draws_skipped=0, failure=None, max_delta_median=epsilon / 2.2, bulk_spread=0.02,
        max_robust_z=2.0, spike_count=0, baseline_f1_macro=0.9, baseline_f1_weighted=0.9, f1_macro_median=0.88,
        f1_macro_q10=0.87, f1_weighted_median=0.89, f1_weighted_q10=0.88, stage1_cache_hit=True, data_hash="x",
        seed=0, device="cpu", threads=2, timings={"total": 10.0}, max_delta_series=(epsilon / 2.0,) * 500,
        f1_macro_draws=(0.88,) * 30, f1_weighted_draws=(0.89,) * 30, constraints=constraints).attrs()


def build_study(folder: Path, trials: int) -> Path:
    path = folder / "bench-cli.toml"
    path.write_text(STUDY)
    study = open_study(StudyConfig.from_toml(path))
    for number in range(trials):
        constraints = dict.fromkeys(CONSTRAINT_KEYS, -0.1 if number % 3 else 0.2)
        study.add_trial(create_trial(
            state=TrialState.COMPLETE, value=1.0 + 0.1 * number, params={"c": 0.1 + 0.04 * number, "ft_epochs": 7},
            distributions={"c": FloatDistribution(0.1, 1.5), "ft_epochs": IntDistribution(1, 16)},
            user_attrs=_record(number), system_attrs=constraint_attrs(constraints)))
    return path


@dataclass(frozen=True, kw_only=True)
class Tree:
    """A checkout whose command line is timed: its label and its root (put on PYTHONPATH)."""

    label: str
    root: Path


@dataclass(frozen=True, kw_only=True)
class Timing:
    """One command of one tree, run ``runs`` times: wall-clock and CPU (user + system) seconds of each run."""

    wall: tuple[float, ...]
    cpu: tuple[float, ...]


def timed(command: list[str], *, root: Path, cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one run of ``command``, with ``root`` alone on PYTHONPATH, from ``cwd``
    (outside every checkout: ``python -m`` puts the working folder first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, check=False, capture_output=True, env=env, cwd=cwd)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def time_in_turn(command: list[str], trees: list[Tree], *, runs: int, cwd: Path) -> dict[str, Timing]:
    """``command`` of every tree, in turn ``runs`` times after one warm-up each: load that comes and goes falls
    on every tree alike."""
    for tree in trees:
        timed(command, root=tree.root, cwd=cwd)
    walls: dict[str, list[float]] = {tree.label: [] for tree in trees}
    cpus: dict[str, list[float]] = {tree.label: [] for tree in trees}
    for _ in range(runs):
        for tree in trees:
            wall, cpu = timed(command, root=tree.root, cwd=cwd)
            walls[tree.label].append(wall)
            cpus[tree.label].append(cpu)
    return {label: Timing(wall=tuple(walls[label]), cpu=tuple(cpus[label])) for label in walls}


def row(verb: str, label: str, timing: Timing, target: float) -> dict[str, object]:
    median = statistics.median(timing.wall)
    print(f"{verb:<22} {label:<9} wall min {min(timing.wall):.3f} s  median {median:.3f} s  "
          f"max {max(timing.wall):.3f} s  CPU median {statistics.median(timing.cpu):.3f} s"
          + (f"  (target <= {target} s: {'met' if median <= target else 'MISSED'})" if label == "this" else ""))
    return {"verb": verb, "tree": label, "runs": len(timing.wall), "min_s": round(min(timing.wall), 3),
            "median_s": round(median, 3), "max_s": round(max(timing.wall), 3),
            "cpu_median_s": round(statistics.median(timing.cpu), 3), "target_s": target, "met": median <= target}


def ratio(verb: str, this: Timing, baseline: Timing) -> dict[str, object]:
    """This tree against the baseline: the ratio of the medians and the median of the pairs' ratios."""
    of_medians = statistics.median(this.wall) / statistics.median(baseline.wall)
    of_pairs = statistics.median(a / b for a, b in zip(this.wall, baseline.wall, strict=True))
    cpu = statistics.median(this.cpu) / statistics.median(baseline.cpu)
    print(f"{verb:<22} this / baseline: {of_medians:.3f} (medians), {of_pairs:.3f} (median of the pairs), "
          f"{cpu:.3f} (CPU medians)")
    return {"verb": verb, "ratio_of_medians": round(of_medians, 3), "median_pair_ratio": round(of_pairs, 3),
            "cpu_ratio": round(cpu, 3)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout (its root) whose commands are timed in the same call")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "tuner" / "cli" / "__init__.py").is_file():
        parser.error(f"--baseline {args.baseline}: not the root of a swagppm-tuner checkout (no tuner/cli there)")
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    trees = [Tree(label="this", root=ROOT)]
    if args.baseline is not None:
        trees.append(Tree(label="baseline", root=args.baseline.resolve()))
    cli = [sys.executable, "-m", "tuner.cli"]
    rows, ratios = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = build_study(Path(folder), args.trials)
        for verb, command, target in (("--help", [*cli, "--help"], 0.3),
                                      (f"status ({args.trials} trials)", [*cli, "status", str(path)], 0.8)):
            timings = time_in_turn(command, trees, runs=args.runs, cwd=Path(folder))
            rows += [row(verb, label, timing, target) for label, timing in timings.items()]
            if args.baseline is not None:
                ratios.append(ratio(verb, timings["this"], timings["baseline"]))
    load = [round(value, 2) for value in os.getloadavg()]
    print(f"load average (1, 5, 15 min): {load[0]}, {load[1]}, {load[2]} on {os.cpu_count()} CPU threads: the targets "
          "hold for idle cores")
    if args.json is not None:
        report = {"command": rerun_command(__file__, argv), "date": time.strftime("%Y-%m-%d"),
                  "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version(), "load": load},
                  "baseline": str(args.baseline) if args.baseline else None, "rows": rows, "ratios": ratios}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
