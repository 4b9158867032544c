"""How fast the command line answers: `swagppm-tune --help` and `status` on a 30-trial study, as whole processes.

--help imports no verb (each verb's module is loaded when that verb runs) and status
only what reading a study needs: no plotting, fitting or training library (targets
on an idle 2-core machine: --help <= 0.3 s, status <= 0.8 s). The study is built in
a temporary folder from synthetic trial records (no fit is run), so the script takes
seconds; the machine's load average is printed with the figures, since start-up
times grow with it:

    python -m benchmarks.cli.bench_cli [--runs 5] [--json benchmarks/cli/results/cli_startup.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial

from benchmarks import rerun_command
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


def seconds(command: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=False, capture_output=True)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--trials", type=int, default=30)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    cli = [sys.executable, "-m", "tuner.cli"]
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        path = build_study(Path(folder), args.trials)
        for name, command, target in (("--help", [*cli, "--help"], 0.3),
                                      (f"status ({args.trials} trials)", [*cli, "status", str(path)], 0.8)):
            times = seconds(command, args.runs)
            median = statistics.median(times)
            rows.append({"verb": name, "runs": args.runs, "min_s": round(min(times), 3),
                         "median_s": round(median, 3), "max_s": round(max(times), 3), "target_s": target,
                         "met": median <= target})
            print(f"{name:<22} min {min(times):.2f} s  median {median:.2f} s  "
                  f"max {max(times):.2f} s  (target <= {target} s: {'met' if median <= target else 'MISSED'})")
    load = [round(value, 2) for value in os.getloadavg()]
    print(f"load average (1, 5, 15 min): {load[0]}, {load[1]}, {load[2]} on {os.cpu_count()} CPU threads: the targets "
          "hold for idle cores")
    if args.json is not None:
        report = {"command": rerun_command(__file__, argv), "date": time.strftime("%Y-%m-%d"),
                  "machine": {"cpu_threads": os.cpu_count(), "python": platform.python_version(), "load": load},
                  "rows": rows}
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
