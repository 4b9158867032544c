"""Replay tuner studies on a table of real fits: fits and compute to the first feasible configuration.

Each study proposes (c, epochs) with one of the tuner's samplers; the point snaps
to the nearest cell of the table (``benchmarks.tuning.build_table``) and the cell's
recorded fit is judged exactly as a live trial is (``tuner.outcome.judge``), its
constraints and recommendation recorded on the trial (``tuner``'s own
``record_outcome``), and its recorded time counted as the trial's cost. A study
stops at its first feasible trial or after ``--budget`` trials.

Variants: with the ε early stop (a fit whose series crosses target/2 at draw k
costs fine-tune + SWAG + k/n of the privacy draws and reports a lower bound, as in
a live study) or without; compute counted with stage 1 cached (paid once per
study) or recomputed per fit. The ``flowchart`` runs whole series, as in the
tuner. Targets: ``--epsilon`` (default: chosen so that a few cells are feasible;
printed), F1 within ``--max-degradation`` of the baseline, and a well-fit series
unless ``--no-well-fit`` (the guide's own targets: ε and F1 only).

The JSON (``--json``) records the command that regenerates it; the replays kept in
``benchmarks/tuning/replays/`` each carry theirs.

Usage::

    python -m benchmarks.tuning.bench_samplers --table benchmarks/tuning/grids/osha_grid_minilm_head.json \
        --epsilon 0.82 1.5
    python -m benchmarks.tuning.bench_samplers --table benchmarks/tuning/grids/osha_grid_tiny_full.json \
        --model tiny-full --no-well-fit --epsilon 7 10
    python -m benchmarks.tuning.bench_samplers --samplers tpe flowchart --seeds 5 --budget 16
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import optuna
from optuna.samplers import BaseSampler
from scipy import stats

from benchmarks import rerun_command
from benchmarks.tuning.build_table import stage1_keys
from swagppm import SWAGPPMResult
from tuner import SearchSpace, StartPoint, Targets, make_sampler
from tuner.objective import record_outcome
from tuner.outcome import Outcome, judge
from tuner.samplers import FlowchartSampler

TABLE = Path(__file__).resolve().parent / "grids" / "osha_grid_minilm_head.json"
SAMPLERS = ("flowchart", "random", "tpe", "gp")
START = StartPoint(1.0, 7)  # the guide's start point: enqueued first (then the probe), as in a live study


@dataclass(frozen=True)
class Cell:
    """One recorded fit and its costs (seconds)."""

    fit: dict[str, Any]
    stage1: float

    @property
    def key(self) -> tuple[float, int]:
        return self.fit["c"], self.fit["ft_epochs"]

    def result(self, *, stop_above: float | None) -> tuple[SWAGPPMResult, float]:
        """The fit as ``run_fit`` would have returned it (early-stopped when ``stop_above``), and its cost."""
        fit, timings = self.fit, self.fit["timings"]
        series = [math.inf if v is None else v for v in fit["max_delta"]]
        train = timings.get("finetune", 0.0) + timings.get("swag", 0.0)
        crossing = next((i for i, v in enumerate(series) if v > stop_above), None) if stop_above else None
        common = dict(c=fit["c"], g=fit["g"], ft_epochs=fit["ft_epochs"], seed=fit["seed"],
                      baseline_f1_macro=fit["baseline_f1_macro"], baseline_f1_weighted=fit["baseline_f1_weighted"],
                      majority_rate=fit["majority_rate"], failure=fit["failure"])
        if crossing is not None and fit["failure"] is None:
            drawn = series[: crossing + 1]
            cost = train + timings.get("privacy", 0.0) * len(drawn) / len(series)
            return SWAGPPMResult(epsilon=2 * max(drawn), max_delta=drawn, f1_macro=[], f1_weighted=[],
                                 epsilon_is_lower_bound=True, draws_skipped=len(series) - len(drawn),
                                 **common), cost
        cost = train + timings.get("privacy", 0.0) + timings.get("utility", 0.0)
        epsilon = math.inf if fit["epsilon"] is None else fit["epsilon"]
        return SWAGPPMResult(epsilon=epsilon, max_delta=series, f1_macro=fit["f1_macro"],
                             f1_weighted=fit["f1_weighted"], **common), cost


def load_cells(path: Path, model: str, *, one_stage1: bool = False,
               ) -> tuple[dict[tuple[float, int], Cell], dict[str, Any]]:
    """The table's cells of ``model``; with ``one_stage1``, only those of its most common stage 1."""
    table = json.loads(path.read_text())
    fits = [f for f in table["fits"] if f["model"] == model]
    if not fits:
        raise SystemExit(f"bench_samplers: no fits of model {model!r} in {path}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for fit, key in zip(fits, stage1_keys(fits), strict=True):
        groups.setdefault(key, []).append(fit)
    if len(groups) > 1:
        sizes = ", ".join(f"{len(group)} ({key})" for key, group in groups.items())
        print(f"bench_samplers: {path.name} mixes {len(groups)} stage 1s: {sizes}; "
              + ("keeping the largest" if one_stage1 else "--one-stage1 keeps the largest"), file=sys.stderr)
        if one_stage1:
            fits = max(groups.values(), key=len)
    # stage 1's cost: from the fit that computed it (the first of a run; the cache started empty)
    first = next((f["timings"] for f in fits if any(k.startswith("stage1_") for k in f["timings"])), fits[0]["timings"])
    stage1 = sum(v for k, v in first.items() if k.startswith("stage1_")) + first.get("setup", 0.0)
    cells = {(f["c"], f["ft_epochs"]): Cell(f, stage1) for f in fits}
    cs, epochs = {c for c, _ in cells}, {e for _, e in cells}
    if len(cells) < len(cs) * len(epochs):  # a table still being built: proposals snap to the recorded cells
        print(f"bench_samplers: {path.name} is partial ({len(cells)} of {len(cs) * len(epochs)} cells); proposals "
              "snap to the nearest recorded cell", file=sys.stderr)
    return cells, table["metadata"]


def table_search(cells: dict[tuple[float, int], Cell], *, probe: bool = True) -> SearchSpace:
    """The search a replay runs: the table's ranges of c and epochs, the guide's start point (then the probe)."""
    cs, epochs = [c for c, _ in cells], [e for _, e in cells]
    return SearchSpace(c_min=min(cs), c_max=max(cs), ft_epochs_min=min(epochs), ft_epochs_max=max(epochs),
                       start=(START,), probe=probe)


def nearest(cells: Sequence[tuple[float, int]], c: float, epochs: int, search: SearchSpace) -> tuple[float, int]:
    """The recorded cell nearest to (c, epochs), each axis scaled by its search range (ties: the smaller c, epochs).

    On a complete grid this is the nearest value on each axis; on a partial one, the
    nearest cell that exists.
    """
    span_c = (search.c_max - search.c_min) or 1.0
    span_e = (search.ft_epochs_max - search.ft_epochs_min) or 1
    return min(sorted(cells), key=lambda k: abs(k[0] - c) / span_c + abs(k[1] - epochs) / span_e)


def outcomes(cells: dict[tuple[float, int], Cell], targets: Targets, search: SearchSpace,
             *, early_stop: bool) -> dict[tuple[float, int], tuple[Outcome, float]]:
    stop_above = targets.epsilon_cap / 2 if early_stop else None
    judged = {}
    for key, cell in cells.items():
        result, cost = cell.result(stop_above=stop_above)
        judged[key] = (judge(result, targets=targets, search=search), cost)
    return judged


def auto_epsilon(cells: dict[tuple[float, int], Cell], search: SearchSpace, max_degradation: float,
                 feasible_cells: int, well_fit: bool) -> float:
    """The smallest ε target with at least ``feasible_cells`` feasible cells (rounded up to 0.01)."""
    loose = Targets(epsilon_cap=1e9, max_f1_degradation=max_degradation, require_well_fit=well_fit)
    candidates = sorted(o.result.epsilon for o, _ in outcomes(cells, loose, search, early_stop=False).values()
                        if o.feasible)
    if not candidates:
        raise SystemExit("bench_samplers: no cell meets the F1 and fit targets at any epsilon"
                         + ("; try --no-well-fit (the guide's targets: epsilon and F1 only)" if well_fit else ""))
    return math.ceil(candidates[min(feasible_cells, len(candidates)) - 1] * 100) / 100


def replay(sampler: BaseSampler, judged: dict[tuple[float, int], tuple[Outcome, float]], search: SearchSpace,
           budget: int) -> list[tuple[bool, float]]:
    """One study: (feasible, cost) of every trial until the first feasible one or the budget.

    Every sampler but the flowchart evaluates ``search.start_points()`` first, as in the tuner.
    """
    recorded = sorted(judged)
    trials: list[tuple[bool, float]] = []
    storage = optuna.storages.InMemoryStorage()
    study = optuna.create_study(sampler=sampler, storage=storage)
    if not isinstance(sampler, FlowchartSampler):
        for params in search.start_params():  # the tuner's own start points
            study.enqueue_trial(params)

    def objective(trial: optuna.Trial) -> float:
        params = search.suggest(trial)  # the tuner's own rule
        outcome, cost = judged[nearest(recorded, params.c, params.ft_epochs, search)]
        record_outcome(trial, outcome, storage=storage)
        trials.append((outcome.feasible, cost))
        if outcome.catastrophic:
            raise optuna.TrialPruned()
        return outcome.objective_values("epsilon")  # type: ignore[return-value]

    def after_trial(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        """As the tuner's run: stop at the first feasible trial, or when the flowchart has no move left."""
        if trials[-1][0] or (isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study)):
            study.stop()

    study.optimize(objective, n_trials=budget, callbacks=[after_trial])
    return trials


def median_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median: the order statistics whose ranks the binomial
    distribution of "how many values fall below the median" puts at (1 - level)/2 from each end.

    Fits to the first feasible configuration are bimodal (a quick hit or a long tail), so a median over 50 seeds
    moves by several fits with the seeds; one-fit differences between samplers need this interval.
    """
    ordered, n = sorted(values), len(values)
    lower = max(int(stats.binom.ppf((1 - level) / 2, n, 0.5)), 1)  # 1-based rank
    return float(ordered[lower - 1]), float(ordered[n - lower])


def summarise(runs: list[list[tuple[bool, float]]], stage1: float) -> dict[str, Any]:
    fits: list[float] = []
    cached: list[float] = []
    uncached: list[float] = []
    for trials in runs:
        hit = next((i for i, (ok, _) in enumerate(trials) if ok), None)
        if hit is None:
            for values in (fits, cached, uncached):
                values.append(math.inf)
            continue
        spent = sum(cost for _, cost in trials[: hit + 1])
        fits.append(hit + 1)
        cached.append(stage1 + spent)
        uncached.append(stage1 * (hit + 1) + spent)

    def q(values: list[float], p: float) -> float:
        return float(np.percentile(values, p, method="lower"))

    return {"fits_median": q(fits, 50), "fits_median_ci95": list(median_ci(fits)), "fits_p90": q(fits, 90),
            "compute_median": q(cached, 50), "compute_p90": q(cached, 90),
            "compute_uncached_median": q(uncached, 50), "compute_uncached_p90": q(uncached, 90),
            "compute_fits_only_median": q([c - stage1 for c in cached], 50),
            "within_8": float(np.mean([f <= 8 for f in fits])), "within_16": float(np.mean([f <= 16 for f in fits])),
            "runs": len(runs)}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--table", type=Path, default=TABLE, help="table of real fits (default: %(default)s)")
    parser.add_argument("--model", default="minilm-head", help="model of the table to replay (default: %(default)s)")
    parser.add_argument("--samplers", nargs="+", choices=SAMPLERS, default=list(SAMPLERS))
    parser.add_argument("--seeds", type=int, default=50, help="studies per sampler (default: %(default)s)")
    parser.add_argument("--budget", type=int, default=30, help="trials per study at most (default: %(default)s)")
    parser.add_argument("--epsilon", type=float, nargs="+", default=None,
                        help="epsilon targets, one comparison each (default: automatic)")
    parser.add_argument("--startup", type=int, default=2,
                        help="TPE/GP startup trials, the start point included (default: %(default)s, the tuner's)")
    parser.add_argument("--no-probe", dest="probe", action="store_false",
                        help="enqueue the guide's start point only, not the tuner's private-side probe after it")
    parser.add_argument("--feasible-cells", type=int, default=4,
                        help="with the automatic target: the target admits this many cells (default: %(default)s)")
    parser.add_argument("--max-degradation", type=float, default=0.10, help="F1 target (default: %(default)s)")
    parser.add_argument("--no-well-fit", dest="well_fit", action="store_false",
                        help="targets epsilon and F1 only, as the guide's (default: also a well-fit series)")
    parser.add_argument("--one-stage1", action="store_true",
                        help="replay only the fits of the table's most common stage 1 (a table resumed on other "
                             "CPUs mixes several; fits on different ones do not compare)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    return parser.parse_args(argv)


def strict(value: Any) -> Any:
    """JSON-ready: "never" (inf) becomes null."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict(v) for v in value]
    return None if isinstance(value, float) and math.isinf(value) else value


def fmt(value: float, unit: str = "") -> str:
    return "never" if math.isinf(value) else f"{value:.0f}{unit}" if unit == "" else f"{value:.1f}{unit}"


def fmt_ci(interval: Sequence[float]) -> str:
    """A median's interval, e.g. "3-7" or "5-never"."""
    return f"{fmt(interval[0])}-{fmt(interval[1])}"


def compare(args: argparse.Namespace, cells: dict[tuple[float, int], Cell], search: SearchSpace, epsilon: float,
            stage1: float) -> dict[str, Any]:
    """Every sampler on one ε target: printed as a table and returned."""
    targets = Targets(epsilon_cap=epsilon, max_f1_degradation=args.max_degradation, require_well_fit=args.well_fit)
    judged = {stop: outcomes(cells, targets, search, early_stop=stop) for stop in (True, False)}
    feasible = sorted(k for k, (o, _) in judged[False].items() if o.feasible)
    labels: dict[str, int] = {}
    for outcome, _ in judged[False].values():
        labels[outcome.label] = labels.get(outcome.label, 0) + 1
    fit_target = "well fit" if args.well_fit else "any fit"
    print(f"\ntargets: epsilon <= {epsilon:g}, F1 within {args.max_degradation:.0%} of the baseline, {fit_target}; "
          f"feasible cells (c, epochs): {feasible}; verdicts of the cells: {labels}")
    header = (f"{'sampler':<10} {'early stop':<10} {'fits med':>8} {'95% CI':>9} {'fits p90':>8} {'<=8':>5} "
              f"{'<=16':>5} {'compute med':>11} {'p90':>8} {'no cache med':>12} {'p90':>8} {'s/study':>8}")
    print(header)
    print("-" * len(header))
    found: dict[str, Any] = {"feasible_cells": feasible, "samplers": {}}
    for name in args.samplers:
        for stop in (True, False):
            if name == "flowchart" and stop:
                continue  # the flowchart reads whole series
            seeds = 1 if name == "flowchart" else args.seeds  # the flowchart is deterministic
            start = time.perf_counter()
            runs = [replay(make_sampler(name, seed=seed, search=search, n_startup_trials=args.startup), judged[stop],
                           search, args.budget) for seed in range(seeds)]
            figures = summarise(runs, stage1)
            figures["seconds_per_study"] = (time.perf_counter() - start) / seeds
            found["samplers"][f"{name}{'+early-stop' if stop else ''}"] = figures
            print(f"{name:<10} {'yes' if stop else 'no':<10} {fmt(figures['fits_median']):>8} "
                  f"{fmt_ci(figures['fits_median_ci95']):>9} {fmt(figures['fits_p90']):>8} {figures['within_8']:5.0%} "
                  f"{figures['within_16']:5.0%} "
                  f"{fmt(figures['compute_median'], 's'):>11} {fmt(figures['compute_p90'], 's'):>8} "
                  f"{fmt(figures['compute_uncached_median'], 's'):>12} {fmt(figures['compute_uncached_p90'], 's'):>8} "
                  f"{figures['seconds_per_study']:8.2f}", flush=True)
    return found


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if not args.table.exists():
        print(f"bench_samplers: {args.table} not found; build it with python -m benchmarks.tuning.build_table",
              file=sys.stderr)
        return 2
    cells, metadata = load_cells(args.table, args.model, one_stage1=args.one_stage1)
    cs, epochs = sorted({c for c, _ in cells}), sorted({e for _, e in cells})
    search = table_search(cells, probe=args.probe)
    targets_list = args.epsilon or [auto_epsilon(cells, search, args.max_degradation, args.feasible_cells,
                                                          args.well_fit)]
    stage1 = next(iter(cells.values())).stage1
    print(f"table {args.table.name}, model {args.model}: {len(cells)} cells (c {cs}, epochs {epochs}); "
          f"stage 1 {stage1:.1f}s; built in {metadata.get('wall_seconds', {}).get(args.model, '?')}s; "
          f"{args.seeds} seeds, budget {args.budget} fits, {args.startup} startup trials, start points "
          f"{[(p.c, p.ft_epochs) for p in search.start_points()]}")
    results: dict[str, Any] = {"command": rerun_command(__file__, argv), "table": args.table.name,
                               "model": args.model, "stage1_seconds": stage1,
                               "max_f1_degradation": args.max_degradation, "require_well_fit": args.well_fit,
                               "max_bulk_spread": Targets.max_bulk_spread,
                               "one_stage1": args.one_stage1, "cells": len(cells),
                               "seeds": args.seeds, "budget": args.budget, "startup": args.startup,
                               "start_points": [[p.c, p.ft_epochs] for p in search.start_points()], "targets": {}}
    for epsilon in targets_list:
        results["targets"][str(epsilon)] = compare(args, cells, search, epsilon, stage1)
    if args.json is not None:
        args.json.write_text(json.dumps(strict(results), indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
