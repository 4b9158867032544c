"""Does ``scorers.privacy_audit`` keep its promise? False refutations of exactly ε-DP mechanisms, and power.

1. Level. Scores from mechanisms that are exactly ε-DP per record, over random
   fixed-size splits of the records into members and non-members (as the project
   splits training and test records), each record in one of three classes with a
   public offset (so both attacks run):
   - ``laplace``: score = 0.7 · class + [non-member] + Laplace(1/ε);
   - ``randomized_response``: score = 0.7 · class + a bit that says "member" with
     probability e^ε / (1 + e^ε) for a member and 1 / (1 + e^ε) for a non-member
     (the tight mechanism: its ROC is the edge of the ε-DP region).
   For each (mechanism, ε, records, members) it prints the rate of runs where the
   audit refutes the true ε (the family promises at most 1 − confidence), with a
   one-sided 95% Clopper–Pearson upper bound, the rate per test and attack, and the
   mean family ε bound. Two counterfactuals show why the family is built as it is:
   ``per_attack_95`` (each attack's threshold bound at 95% on its own, as
   ``membership_audit`` gives it) and ``delong_in_family`` (DeLong's interval in
   place of the distribution-free one, at the same share of the family).
2. Power. Two mechanisms that are not DP: ``demo_like`` (150 members, 735
   non-members, five classes of different difficulty, members' log-loss 0.38 lower:
   class-calibrated AUC about 0.65) at a stated ε of 0.0097, and ``tail_memorised``
   (10% of 1500 members with a hundredth of the loss, 735 non-members) at a stated
   ε of 0.95: the share of runs refuted, and by which test.

Every run is seeded from its case and its index, so the figures do not depend on
``--workers``. The JSON written holds the command that made it.

    python benchmarks/scorers/audit_simulation.py [--quick] [--runs N] [--workers W] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import scorers  # noqa: E402  (once the repository root is on the path)

CONFIDENCE = 0.95
CLASS_OFFSET = 0.7
EPSILONS = (0.01, 0.5, 1.0, 2.0, 4.0)
SIZES = ((885, 150), (1000, 500), (2000, 1000))  # (records, members)
QUICK_EPSILONS = (0.5, 2.0)
QUICK_SIZES = ((885, 150), (1000, 500))


@dataclass(frozen=True)
class Case:
    mechanism: str
    epsilon: float  # the true ε of an exactly ε-DP mechanism, or the stated ε of a power case
    records: int
    members: int
    index: int  # seeds every run of the case


def split(rng: np.random.Generator, records: int, members: int) -> np.ndarray:
    member = np.zeros(records, dtype=bool)
    member[rng.choice(records, members, replace=False)] = True
    return member


def scores(case: Case, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(member indicator, scores, classes) of one run."""
    if case.mechanism == "demo_like":
        member = split(rng, case.records, case.members)
        classes = rng.integers(0, 5, case.records)
        level = np.array([0.3, 0.8, 1.4, 2.0, 2.6])[classes]
        return member, np.exp(level - 0.38 * member + rng.normal(0.0, 0.7, case.records)), classes
    if case.mechanism == "tail_memorised":
        member = split(rng, case.records, case.members)
        classes = rng.integers(0, 3, case.records)
        losses = rng.gamma(2.0, 0.5, case.records) * (1 + 0.5 * classes)
        memorised = member & (rng.random(case.records) < 0.1)
        return member, np.where(memorised, losses / 100, losses), classes
    member = split(rng, case.records, case.members)
    classes = rng.integers(0, 3, case.records)
    if case.mechanism == "laplace":
        noise = (~member) + rng.laplace(0.0, 1.0 / case.epsilon, case.records)
    else:
        truthful = rng.random(case.records) < math.exp(case.epsilon) / (1 + math.exp(case.epsilon))
        noise = np.where(truthful == member, 0.0, 1.0)
    return member, CLASS_OFFSET * classes + noise, classes


def one_run(case: Case, run: int) -> dict[str, Any]:
    """One audit: which tests exceed the case's ε, the family bound, and the two counterfactuals."""
    member, score, classes = scores(case, np.random.default_rng([case.index, run]))
    sides = (score[member], score[~member], classes[member], classes[~member])
    audit = scorers.privacy_audit(*sides, confidence=CONFIDENCE)
    per_test = (1 - CONFIDENCE) / (3 * len(audit.attacks))
    # DeLong's interval of each attack, both ends inside the AUC test's share of the family
    delong = [result.auc_interval for result in scorers.membership_audit(
        *sides[:2], member_classes=sides[2], non_member_classes=sides[3], confidence=1 - per_test)]
    alone = scorers.membership_audit(*sides[:2], member_classes=sides[2], non_member_classes=sides[3],
                                     confidence=CONFIDENCE)
    allowed = scorers.max_auc(case.epsilon)
    refutation = audit.refutation(case.epsilon)
    return {
        "refuted": refutation is not None,
        "strongest": None if refutation is None else f"{refutation.test}/{refutation.attack}",
        "exceeding": [f"{test}/{a.attack}" for a in audit.attacks for test, bound in a.epsilon_lower_bounds.items()
                      if bound > case.epsilon],
        "bound": audit.epsilon_lower_bound,
        "per_attack_95": any(r.epsilon_lower_bound > case.epsilon for r in alone),
        "delong_in_family": any(low > allowed or high < 1 - allowed for low, high in delong),
    }


def upper_95(count: int, runs: int) -> float:
    """One-sided 95% Clopper–Pearson upper bound on a rate seen in count of runs."""
    from scipy import stats

    return 1.0 if count == runs else float(stats.beta.ppf(0.95, count + 1, runs - count))


def summarise(case: Case, results: list[dict[str, Any]]) -> dict[str, Any]:
    runs = len(results)
    refuted = sum(r["refuted"] for r in results)
    exceeding = Counter(name for r in results for name in r["exceeding"])
    bounds = np.array([r["bound"] for r in results])
    return {"mechanism": case.mechanism, "epsilon": case.epsilon, "records": case.records, "members": case.members,
            "runs": runs, "refuted": refuted / runs, "refuted_upper_95": upper_95(refuted, runs),
            "by_test": {name: count / runs for name, count in sorted(exceeding.items())},
            "strongest": dict(Counter(r["strongest"] for r in results if r["strongest"])),
            "mean_bound": float(bounds.mean()), "median_bound": float(np.median(bounds)),
            "per_attack_95": sum(r["per_attack_95"] for r in results) / runs,
            "delong_in_family": sum(r["delong_in_family"] for r in results) / runs}


def run_case(case: Case, runs: int, pool: ProcessPoolExecutor | None) -> dict[str, Any]:
    cases = [case] * runs
    results = list(pool.map(one_run, cases, range(runs), chunksize=max(1, runs // 32)) if pool
                   else map(one_run, cases, range(runs)))
    return summarise(case, results)


def level_cases(quick: bool) -> list[Case]:
    epsilons, sizes = (QUICK_EPSILONS, QUICK_SIZES) if quick else (EPSILONS, SIZES)
    return [Case(mechanism, epsilon, records, members, index)
            for index, (mechanism, epsilon, (records, members)) in enumerate(
                (m, e, s) for m in ("laplace", "randomized_response") for e in epsilons for s in sizes)]


POWER_CASES = (Case("demo_like", 0.0097, 885, 150, 1000), Case("tail_memorised", 0.95, 2235, 1500, 1001))


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="2 epsilons, 2 sizes, 100 runs (about a minute)")
    parser.add_argument("--runs", type=int, help="runs per case (default 1000, or 100 with --quick)")
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--json", type=Path, default=Path("audit_simulation.json"), help="where to write the figures")
    return parser.parse_args(argv)


def line(summary: dict[str, Any]) -> str:
    by_test = ", ".join(f"{name} {rate:.3f}" for name, rate in summary["by_test"].items()) or "none"
    return (f"{summary['mechanism']:<20} eps {summary['epsilon']:<6g} {summary['members']:>5}/{summary['records']:<5} "
            f"refuted {summary['refuted']:.3f} (95% upper {summary['refuted_upper_95']:.3f})  mean bound "
            f"{summary['mean_bound']:.3f}  per-attack-95% {summary['per_attack_95']:.3f}  DeLong-in-family "
            f"{summary['delong_in_family']:.3f}  by test: {by_test}")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    runs = args.runs or (100 if args.quick else 1000)
    started = time.perf_counter()
    report: dict[str, Any] = {"command": " ".join([Path(sys.executable).name, *sys.argv]), "confidence": CONFIDENCE,
                              "runs": runs, "quick": args.quick, "level": [], "power": []}
    pool = ProcessPoolExecutor(args.workers) if args.workers > 1 else None
    try:
        print(f"level: exactly eps-DP mechanisms, {runs} runs a case; the family promises refuted <= "
              f"{1 - CONFIDENCE:.2f}")
        for case in level_cases(args.quick):
            report["level"].append(run_case(case, runs, pool))
            print(line(report["level"][-1]), flush=True)
        print("power: mechanisms that are not DP, at a stated epsilon")
        for case in POWER_CASES:
            report["power"].append(run_case(case, runs, pool))
            print(line(report["power"][-1]) + f"  strongest: {report['power'][-1]['strongest']}", flush=True)
    finally:
        if pool:
            pool.shutdown()
    worst = max(summary["refuted"] for summary in report["level"])
    report["worst_level"] = worst
    report["wall_seconds"] = round(time.perf_counter() - started, 1)
    print(f"worst false-refutation rate {worst:.3f} (promised <= {1 - CONFIDENCE:.2f}); "
          f"{report['wall_seconds']} s; figures in {args.json}")
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if worst <= 1 - CONFIDENCE else 1


if __name__ == "__main__":
    sys.exit(main())
