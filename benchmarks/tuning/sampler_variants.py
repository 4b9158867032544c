"""Variants of the default sampler replayed on every table and target of the sampler comparison.

Why this exists: the goal is a median of at most 4 fits to the first feasible
configuration, and no more than the flowchart's, on every table. This script
measures the default (multivariate TPE that never repeats a fit, after the guide's
start point and the probe) against the variants tried, with ``bench_samplers``'s
replay (same snapping, same judging, same early stop), so that the figures of
``docs/results/sampler-comparison.md`` for them can be reproduced:

- ``no-repeat tpe`` with Optuna's 24 expected-improvement candidates (instead of
  ``EI_CANDIDATES``) or with 100;
- ``plain tpe``: Optuna's multivariate TPE, which may propose a fit already run;
- ``plain tpe`` with more expected-improvement candidates (``n_ei_candidates``;
  Optuna's default is 24);
- ``guided``: the guide's move from the last trial when it leads to an unseen point,
  TPE otherwise;
- ``flowchart-first``: the flowchart (whole series, no early stop) until it stops or
  repeats a point, then the probe, then TPE with everything seen so far.

With ``--gp`` (slow: GP refits its models at every proposal) also the tuner's GP,
GP with ``deterministic_objective`` (the fits are deterministic), and TPE that hands
its trials to GP after 3 or 5 fits without a feasible one.

Usage::

    python -m benchmarks.tuning.sampler_variants --seeds 100 --json benchmarks/tuning/replays/sampler_variants.json
    python -m benchmarks.tuning.sampler_variants --gp --seeds 20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, TPESampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState

from benchmarks import rerun_command
from benchmarks.tuning.bench_samplers import fmt, fmt_ci, load_cells, outcomes, replay, strict, summarise, table_search
from tuner import SearchSpace, Targets, make_sampler
from tuner.samplers import DistinctTPESampler, FlowchartSampler

TABLES = Path(__file__).resolve().parent / "grids"
# (table, model, one stage 1 only, well fit required, ε targets): the rows of the sampler comparison's replays
ROWS = (
    ("osha_grid_minilm_head.json", "minilm-head", False, True, (0.82, 1.5)),
    ("osha_grid_tiny_full.json", "tiny-full", False, False, (7.0, 10.0)),
    ("osha_grid_minilm_last2.json", "minilm-last2", False, True, (1.0, 2.0)),
    ("osha_grid_minilm_last2.json", "minilm-last2", True, True, (6.0,)),
    ("osha_grid_minilm_last2.json", "minilm-last2", False, False, (1.0, 4.0)),
    ("osha_grid_minilm_last2.json", "minilm-last2", True, False, (1.0, 4.0)),
    ("osha_grid_minilm_all.json", "minilm-all", False, False, (5.5, 11.0)),
    ("osha_grid_minilm_all_gpu.json", "minilm-all", False, True, (4.0,)),
    ("osha_grid_minilm_all_gpu.json", "minilm-all", False, False, (3.0, 4.0)),
)


class _Hybrid(BaseSampler):
    """The default TPE (which does not repeat fits), except where ``propose`` returns a point (the guide's move
    or GP's proposal)."""

    def __init__(self, *, seed: int, search: SearchSpace) -> None:
        self.flowchart = FlowchartSampler(search=search, seed=seed)
        self.tpe = make_sampler("tpe", seed=seed, search=search)

    def propose(self, study: Study, trial: FrozenTrial, seen: set[tuple[Any, Any]]) -> dict[str, Any] | None:
        raise NotImplementedError

    def reseed_rng(self) -> None:
        self.tpe.reseed_rng()

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.tpe.infer_relative_search_space(study, trial)

    def sample_relative(self, study: Study, trial: FrozenTrial,
                        search_space: dict[str, BaseDistribution]) -> dict[str, Any]:
        seen = {(t.params.get("c"), t.params.get("ft_epochs")) for t in study.get_trials(deepcopy=False)}
        point = self.propose(study, trial, seen)
        return point if point is not None else self.tpe.sample_relative(study, trial, search_space)

    def sample_independent(self, study: Study, trial: FrozenTrial, param_name: str,
                           param_distribution: BaseDistribution) -> Any:
        return self.tpe.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        self.tpe.before_trial(study, trial)

    def after_trial(self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None) -> None:
        self.tpe.after_trial(study, trial, state, values)


class Guided(_Hybrid):
    """The guide's move from the last trial when it leads to a point not yet seen; TPE otherwise."""

    def propose(self, study: Study, trial: FrozenTrial, seen: set[tuple[Any, Any]]) -> dict[str, Any] | None:
        point = self.flowchart.next_point(study)
        return point if point is not None and (point["c"], point["ft_epochs"]) not in seen else None


class FlowchartFirst(_Hybrid):
    """The flowchart until it stops or repeats a point, then the probe, then TPE."""

    def __init__(self, *, seed: int, search: SearchSpace) -> None:
        super().__init__(seed=seed, search=search)
        self.probe = dataclasses.replace(search, probe=True).start_points()[-1]
        self.handed_over = False

    def propose(self, study: Study, trial: FrozenTrial, seen: set[tuple[Any, Any]]) -> dict[str, Any] | None:
        point = None if self.handed_over else self.flowchart.next_point(study)
        if point is not None and (point["c"], point["ft_epochs"]) not in seen:
            return point
        self.handed_over = True
        return None if (self.probe.c, self.probe.ft_epochs) in seen else {"c": self.probe.c,
                                                                          "ft_epochs": self.probe.ft_epochs}


class TPEThenGP(_Hybrid):
    """The default TPE for the first ``after`` finished fits, then GP (which models each constraint) with all of
    them; a replay stops at the first feasible fit, so GP takes over only from studies that have none."""

    def __init__(self, *, seed: int, search: SearchSpace, after: int) -> None:
        super().__init__(seed=seed, search=search)
        self.gp = make_sampler("gp", seed=seed, search=search)
        self.after = after

    def propose(self, study: Study, trial: FrozenTrial, seen: set[tuple[Any, Any]]) -> dict[str, Any] | None:
        if len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))) < self.after:
            return None
        return self.gp.sample_relative(study, trial, self.gp.infer_relative_search_space(study, trial)) or None


@dataclasses.dataclass(frozen=True)
class Variant:
    """A sampler to replay: how to make it, and whether it reads whole series and enqueues the probe itself."""

    make: Callable[[int, SearchSpace], BaseSampler]
    early_stop: bool = True
    probe: bool = True
    seeds: int | None = None  # None: the run's --seeds


def _plain_tpe(n_ei_candidates: int = 24) -> Callable[[int, SearchSpace], BaseSampler]:
    return lambda seed, search: TPESampler(seed=seed, multivariate=True, n_startup_trials=2,
                                           n_ei_candidates=n_ei_candidates)


def _no_repeat_tpe(n_ei_candidates: int) -> Callable[[int, SearchSpace], BaseSampler]:
    return lambda seed, search: DistinctTPESampler(search=search, seed=seed, n_ei_candidates=n_ei_candidates)


def _tpe_then_gp(after: int) -> Callable[[int, SearchSpace], BaseSampler]:
    return lambda seed, search: TPEThenGP(seed=seed, search=search, after=after)


VARIANTS = {
    "flowchart": Variant(lambda seed, search: FlowchartSampler(search=search, seed=seed), early_stop=False, seeds=1),
    "tpe (default)": Variant(lambda seed, search: make_sampler("tpe", seed=seed, search=search)),
    **{f"no-repeat tpe, {n} EI": Variant(_no_repeat_tpe(n)) for n in (24, 100)},
    "plain tpe": Variant(_plain_tpe()),
    **{f"plain tpe, {n} EI cand.": Variant(_plain_tpe(n)) for n in (48, 100, 200)},
    "guided": Variant(lambda seed, search: Guided(seed=seed, search=search)),
    "flowchart-first": Variant(lambda seed, search: FlowchartFirst(seed=seed, search=search), early_stop=False,
                               probe=False),
}
GP_VARIANTS = {  # with --gp
    "gp": Variant(lambda seed, search: make_sampler("gp", seed=seed, search=search)),
    "gp, deterministic": Variant(lambda seed, search: optuna.samplers.GPSampler(
        seed=seed, n_startup_trials=2, deterministic_objective=True)),
    **{f"tpe, gp after {n}": Variant(_tpe_then_gp(n)) for n in (3, 5)},
}


def replay_row(table: str, model: str, one_stage1: bool, well_fit: bool, epsilon: float, *, seeds: int,
               budget: int, variants: dict[str, Variant]) -> dict[str, dict[str, Any]]:
    """Every variant's fits to the first feasible configuration on one table and target."""
    cells, _ = load_cells(TABLES / table, model, one_stage1=one_stage1)
    search = table_search(cells)
    targets = Targets(epsilon_cap=epsilon, max_f1_degradation=0.10, require_well_fit=well_fit)
    judged = {stop: outcomes(cells, targets, search, early_stop=stop) for stop in (True, False)}
    stage1 = next(iter(cells.values())).stage1
    found = {}
    for name, variant in variants.items():
        space = search if variant.probe else table_search(cells, probe=False)
        runs = [replay(variant.make(seed, search), judged[variant.early_stop], space, budget)
                for seed in range(variant.seeds or seeds)]
        figures = summarise(runs, stage1)
        found[name] = {key: figures[key] for key in ("fits_median", "fits_median_ci95", "fits_p90")}
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=50, help="studies per variant (default: %(default)s)")
    parser.add_argument("--budget", type=int, default=30, help="trials per study at most (default: %(default)s)")
    parser.add_argument("--gp", action="store_true", help="also the GP variants (slow)")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    variants = {**VARIANTS, **(GP_VARIANTS if args.gp else {})}
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    print("fits to the first feasible configuration, median (95% CI) / p90, with the early stop where the variant "
          "uses it")
    print(f"{'table, targets':<48}" + "".join(f"{name:>24}" for name in variants))
    rows = []
    for table, model, one_stage1, well_fit, epsilons in ROWS:
        for epsilon in epsilons:
            found = replay_row(table, model, one_stage1, well_fit, epsilon, seeds=args.seeds, budget=args.budget,
                               variants=variants)
            label = (f"{model}{', one stage 1' if one_stage1 else ''}, eps <= {epsilon:g}, "
                     f"{'well fit' if well_fit else 'guide'}")
            cells = (f"{fmt(f['fits_median'])} ({fmt_ci(f['fits_median_ci95'])}) / {fmt(f['fits_p90'])}"
                     for f in found.values())
            print(f"{label:<48}" + "".join(f"{cell:>24}" for cell in cells), flush=True)
            rows.append({"table": table, "model": model, "one_stage1": one_stage1, "require_well_fit": well_fit,
                         "epsilon": epsilon, "variants": found})
    if args.json is not None:
        args.json.write_text(json.dumps(strict({"command": rerun_command(__file__, argv), "seeds": args.seeds,
                                                "budget": args.budget,
                                                "max_bulk_spread": Targets.max_bulk_spread, "rows": rows}),
                                        indent=2, allow_nan=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
