"""How long the README's first command takes: `swagppm-tune run studies/demo.toml`, stage 1 not cached, as a process.

Each run copies the tree's own demo study into a fresh temporary folder (its private cache
empty, so stage 1 is computed) and runs it whole (six trials, the study's epochs and
draws) with ``--quiet``. ``--baseline CHECKOUT`` runs another checkout's demo in the same
call, the two trees in turn, and prints the ratio of the medians and the median of the
pairs' ratios (the figure that carries over from a busy machine to idle cores), with the
peak memory of each run (``/usr/bin/time``) and the load average. ``--stages`` runs this
tree's demo once more with its progress lines and sums their seconds by stage (stage 1's
steps, each stage-2 step over the six trials), the rest of the wall time being start-up,
the sampler, judging and writing. Target: at most 60 s on two idle cores.

    python -m benchmarks.cli.bench_demo [--runs 3] [--baseline /path/to/checkout] [--stages] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import ROOT, rerun_command
from benchmarks.cli.bench_cli import Timing, Tree, ratio, row

TARGET_S = 60.0
TIME = shutil.which("time") or ("/usr/bin/time" if Path("/usr/bin/time").exists() else None)


# a progress line's end (swagppm.progress, off a terminal): "LABEL DONE/TOTAL (SECONDS s, done)"
STAGE_END = re.compile(r"^(?P<label>.+?) \d+/\d+ \((?P<value>[0-9.]+) (?P<unit>s|min), (?:done|stopped early)\)$")


def stage_seconds(progress: str) -> dict[str, float]:
    """The seconds of a run's progress lines summed by stage (both splits' encoding as one), largest first."""
    totals: dict[str, float] = {}
    for line in progress.splitlines():
        if (match := STAGE_END.match(line.strip())) is None:
            continue
        label = re.sub(r"^encoding the \w+ records.*", "encoding the records (frozen layers, once)", match["label"])
        seconds = float(match["value"]) * (60 if match["unit"] == "min" else 1)
        totals[label] = totals.get(label, 0.0) + seconds
    return dict(sorted(totals.items(), key=lambda item: -item[1]))


def run_demo(tree: Tree, *, quiet: bool = True) -> tuple[float, float, float | None, str]:
    """One demo run of ``tree`` from a fresh folder: (wall s, CPU s, peak resident MiB or None, its stderr)."""
    with tempfile.TemporaryDirectory() as folder:
        study = Path(folder) / "demo.toml"
        study.write_text((tree.root / "studies" / "demo.toml").read_text())
        command = [sys.executable, "-m", "tuner.cli", "run", str(study), *(["--quiet"] if quiet else [])]
        if TIME is not None:
            command = [TIME, "-f", "peak-kib %M", *command]
        env = {**os.environ, "PYTHONPATH": str(tree.root)}
        before = os.times()
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=folder, check=False)
        wall = time.perf_counter() - start
        after = os.times()
        if done.returncode not in (0, 1):
            raise SystemExit(f"bench_demo: the {tree.label} tree's demo failed ({done.returncode}): "
                             f"{done.stderr[-2000:]}")
    peak = re.search(r"peak-kib (\d+)", done.stderr)
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return wall, cpu, int(peak[1]) / 1024 if peak else None, done.stderr


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None,
                        help="another checkout (its root) whose demo is timed in the same call, in turn")
    parser.add_argument("--stages", action="store_true",
                        help="one more run of this tree with its progress lines: the seconds by stage")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    if args.baseline is not None and not (args.baseline / "studies" / "demo.toml").is_file():
        parser.error(f"--baseline {args.baseline}: not the root of a swagppm-tuner checkout (no studies/demo.toml)")
    trees = [Tree(label="this", root=ROOT)]
    if args.baseline is not None:
        trees.append(Tree(label="baseline", root=args.baseline.resolve()))
    walls: dict[str, list[float]] = {tree.label: [] for tree in trees}
    cpus: dict[str, list[float]] = {tree.label: [] for tree in trees}
    peaks: dict[str, list[float]] = {tree.label: [] for tree in trees}
    for _ in range(args.runs):
        for tree in trees:
            wall, cpu, peak, _ = run_demo(tree)
            walls[tree.label].append(wall)
            cpus[tree.label].append(cpu)
            if peak is not None:
                peaks[tree.label].append(peak)
            print(f"{tree.label:<9} run: {wall:.1f} s wall, {cpu:.1f} s CPU"
                  + (f", peak {peak:.0f} MiB" if peak is not None else ""), flush=True)
    timings = {label: Timing(wall=tuple(walls[label]), cpu=tuple(cpus[label])) for label in walls}
    rows = [row("demo (6 trials)", label, timing, TARGET_S) | {
        "peak_mib": round(max(peaks[label]), 0) if peaks[label] else None} for label, timing in timings.items()]
    ratios = [ratio("demo (6 trials)", timings["this"], timings["baseline"])] if args.baseline is not None else []
    stages = print_stages(trees[0]) if args.stages else None
    load = [round(value, 2) for value in os.getloadavg()]
    print(f"load average (1, 5, 15 min): {load[0]}, {load[1]}, {load[2]} on {os.cpu_count()} CPU threads: the target "
          "holds for idle cores")
    if args.json is not None:
        report = {"command": rerun_command(__file__, argv), "date": time.strftime("%Y-%m-%d"),
                  "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version(), "load": load},
                  "baseline": str(args.baseline) if args.baseline else None, "rows": rows, "ratios": ratios,
                  "median_s": {label: statistics.median(values) for label, values in walls.items()},
                  "stages_s": stages}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


def print_stages(tree: Tree) -> dict[str, float]:
    """One run of ``tree``'s demo with its progress lines; its seconds by stage, and the rest of its wall time."""
    wall, _, _, progress = run_demo(tree, quiet=False)
    stages = stage_seconds(progress)
    stages["start-up, sampler, judging, writing (the rest)"] = wall - sum(stages.values())
    print(f"{tree.label} run with progress: {wall:.1f} s wall, by stage:")
    for label, seconds in stages.items():
        print(f"  {label:<50} {seconds:6.1f} s  {seconds / wall:4.0%}")
    return {label: round(seconds, 1) for label, seconds in stages.items()}


if __name__ == "__main__":
    main()
