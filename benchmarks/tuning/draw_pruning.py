"""Privacy draws saved by pruning trials as their draws come in (``tuner.pruning``), replayed on tables of real fits.

Each study runs ``--trials`` trials (no stop at the first feasible one: a study that
minimises ε goes on looking for a lower one); each proposal snaps to a recorded cell
(``benchmarks.tuning.bench_samplers``), whose recorded max-delta series is fed draw by
draw to the trial's ``DrawPruner``, as ``swagppm.stage2.fit`` feeds a live one. Three
rules, on the same sampler and seed:

* ``none``: every trial runs all its draws;
* ``cap``: the draws stop once the running ε exceeds ε* (the ε early stop);
* ``cap+best``: also once it exceeds the best feasible trial's ε so far.

With the random sampler the proposals do not depend on the outcomes, so the three
rules run the same trials and must choose the same best feasible trial (checked:
``same_choice``); TPE's proposals follow the outcomes, so its rules run different
trials. Reported per target: privacy draws and seconds (privacy and utility, from
the recorded timings) summed over the studies, and the share ``cap+best`` saves.

Usage::

    python -m benchmarks.tuning.draw_pruning --json benchmarks/tuning/results/draw_pruning.json
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

from benchmarks import rerun_command
from benchmarks.tuning.bench_samplers import Cell, load_cells, nearest, table_search
from swagppm import SWAGPPMResult
from tuner import SearchSpace, Targets, make_sampler
from tuner.objective import record_outcome
from tuner.outcome import judge
from tuner.pruning import DrawPruner, best_epsilon, pruned_outcome
from tuner.queries import best_feasible

GRIDS = Path(__file__).resolve().parent / "grids"
# (table, model, ε targets, require_well_fit): the replays of benchmarks/tuning/replays
CASES: tuple[tuple[str, str, tuple[float, ...], bool], ...] = (
    ("osha_grid_minilm_head.json", "minilm-head", (0.82, 1.5), True),
    ("osha_grid_minilm_last2.json", "minilm-last2", (1.0, 2.0), True),
    ("osha_grid_minilm_all_gpu.json", "minilm-all", (4.0,), True),
    ("osha_grid_minilm_all.json", "minilm-all", (5.5, 11.0), False),
    ("osha_grid_tiny_full.json", "tiny-full", (7.0, 10.0), False),
)
RULES = ("none", "cap", "cap+best")


@dataclass(kw_only=True)
class Tally:
    """What one study's trials cost under one rule."""

    draws: int = 0
    seconds: float = 0.0
    stopped_by_best: int = 0
    best: tuple[float, int] | None = None


def replayed(cell: Cell, pruner: DrawPruner) -> tuple[SWAGPPMResult, float]:
    """The cell's fit as ``stage2.fit`` returns it with ``pruner`` as ``on_draws``, and its seconds."""
    fit, timings = cell.fit, cell.fit["timings"]
    series = [math.inf if v is None else float(v) for v in fit["max_delta"]]
    drawn = len(series)
    if fit["failure"] is None:
        drawn = next((d for d in range(1, len(series) + 1) if pruner(d, 2 * max(series[:d]))), len(series))
    stopped = drawn < len(series)
    seconds = timings.get("finetune", 0.0) + timings.get("swag", 0.0) + timings.get("privacy", 0.0) * drawn / len(
        series) + (0.0 if stopped else timings.get("utility", 0.0))
    common = dict(c=fit["c"], g=fit["g"], ft_epochs=fit["ft_epochs"], seed=fit["seed"],
                  baseline_f1_macro=fit["baseline_f1_macro"], baseline_f1_weighted=fit["baseline_f1_weighted"],
                  majority_rate=fit["majority_rate"], failure=fit["failure"])
    if stopped:
        return SWAGPPMResult(epsilon=2 * max(series[:drawn]), max_delta=series[:drawn], f1_macro=[], f1_weighted=[],
                             epsilon_is_lower_bound=True, draws_skipped=len(series) - drawn, **common), seconds
    epsilon = math.inf if fit["epsilon"] is None else fit["epsilon"]
    return SWAGPPMResult(epsilon=epsilon, max_delta=series, f1_macro=fit["f1_macro"], f1_weighted=fit["f1_weighted"],
                         **common), seconds


def study(cells: dict[tuple[float, int], Cell], search: SearchSpace, targets: Targets, *, sampler: str, seed: int,
          trials: int, rule: str) -> Tally:
    """One replayed study under ``rule``: its draws, seconds and best feasible cell."""
    tally = Tally()
    storage = optuna.storages.InMemoryStorage()
    optuna_study = optuna.create_study(sampler=make_sampler(sampler, seed=seed, search=search), storage=storage)
    for params in search.start_params():  # the tuner's own start points
        optuna_study.enqueue_trial(params)
    recorded = sorted(cells)

    def objective(trial: optuna.Trial) -> float:
        params = search.suggest(trial)  # the tuner's own rule
        best = best_epsilon(optuna_study) if rule == "cap+best" else None
        pruner = DrawPruner(cap=None if rule == "none" else targets.epsilon_cap, best=best, trial=trial)
        result, seconds = replayed(cells[nearest(recorded, params.c, params.ft_epochs, search)], pruner)
        outcome = pruned_outcome(judge(result, targets=targets, search=search), pruner, search)
        record_outcome(trial, outcome, storage=storage)
        tally.draws += len(result.max_delta)
        tally.seconds += seconds
        tally.stopped_by_best += pruner.stopped_by == "best"
        if outcome.catastrophic:
            raise optuna.TrialPruned()
        return outcome.objective_values("epsilon")  # type: ignore[return-value]

    optuna_study.optimize(objective, n_trials=trials)
    chosen = best_feasible(optuna_study)
    tally.best = None if chosen is None else (chosen.params["c"], chosen.params["ft_epochs"])
    return tally


def compare(table: str, model: str, epsilon: float, well_fit: bool, args: argparse.Namespace) -> dict[str, Any]:
    """Every rule on one table and target, per sampler: totals over the seeds."""
    cells, _ = load_cells(GRIDS / table, model)
    search: SearchSpace = table_search(cells)
    targets = Targets(epsilon_cap=epsilon, max_f1_degradation=0.10, require_well_fit=well_fit)
    rows: dict[str, Any] = {}
    for sampler in args.samplers:
        runs = {rule: [study(cells, search, targets, sampler=sampler, seed=seed, trials=args.trials, rule=rule)
                       for seed in range(args.seeds)] for rule in RULES}
        totals = {rule: {"draws": sum(t.draws for t in tallies), "seconds": round(sum(t.seconds for t in tallies), 1),
                         "stopped_by_best": sum(t.stopped_by_best for t in tallies)}
                  for rule, tallies in runs.items()}
        cap, best = totals["cap"], totals["cap+best"]
        rows[sampler] = {
            **totals, "studies": args.seeds, "trials_per_study": args.trials,
            "draws_saved_vs_cap": 1 - best["draws"] / cap["draws"],
            "draws_saved_vs_none": 1 - best["draws"] / totals["none"]["draws"],
            "seconds_saved_vs_cap": 1 - best["seconds"] / cap["seconds"],
            "same_choice": all(a.best == b.best == c.best for a, b, c in zip(*runs.values(), strict=True)),
        }
        print(f"{model:<13} eps*={epsilon:<5g} {sampler:<7} draws none {totals['none']['draws']:>7} "
              f"cap {cap['draws']:>7} cap+best {best['draws']:>7} (saved {rows[sampler]['draws_saved_vs_cap']:.0%} "
              f"vs cap, {rows[sampler]['draws_saved_vs_none']:.0%} vs none; seconds saved vs cap "
              f"{rows[sampler]['seconds_saved_vs_cap']:.0%}; same choice {rows[sampler]['same_choice']})", flush=True)
    return {"table": table, "model": model, "epsilon": epsilon, "require_well_fit": well_fit, "samplers": rows}


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samplers", nargs="+", default=["random", "tpe"], choices=["random", "tpe"])
    parser.add_argument("--seeds", type=int, default=10, help="studies per sampler and rule (default: %(default)s)")
    parser.add_argument("--trials", type=int, default=20, help="trials per study (default: %(default)s)")
    parser.add_argument("--models", nargs="+", default=None, help="only these models' tables (default: all)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [compare(table, model, epsilon, well_fit, args) for table, model, epsilons, well_fit in CASES
            if args.models is None or model in args.models for epsilon in epsilons]
    if args.json is not None:
        args.json.write_text(json.dumps({"command": rerun_command(__file__, argv),
                                         "cases": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
