"""Calibrate the scorers' default thresholds on synthetic and real max-delta series.

1. Synthetic series of 500 draws with a known shape and label, over many seeds:
   Gaussian bulks of increasing relative spread (well fit when tight, underfit when
   wide), tight bulks with k planted spikes of h robust SDs (overfit), heavy-tailed
   and skewed bulks (labelled by their spread), and mixtures (a wide bulk with
   spikes: underfit; a two-level band: underfit; a tight bulk with mild outliers:
   well fit). Prints the confusion matrix of ``scorers.diagnose`` and the three
   targets: recall of spikes of at least 6 robust SDs (≥ 95%), the share of pure
   Gaussian series flagged as spiky (< 1%) and the overall accuracy (≥ 90%).
2. Real series: the SWAG-PPM fits on the OSHA sample of every table in
   ``benchmarks/tuning/grids/`` (made by ``benchmarks.tuning.build_table``), or of the
   tables given with ``--table``: the scores and verdicts per model, c and fine-tuning
   epochs, and whether the practical guide's story shows up (few epochs → wide band;
   many epochs at high c → spikes).
3. Real series with a reference label read by hand from the series
   (``real_series_labels.json`` beside this script, each with its reason): the confusion
   matrix of ``scorers.diagnose`` on those of the tables given.

``--sweep`` also prints the synthetic targets for a grid of candidate thresholds.

    python -m benchmarks.scorers.calibrate_scorers [--seeds 100] [--sweep] [--table T1.json T2.json ...]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy import stats

import scorers
from benchmarks import ROOT

LABELS = ("underfit", "well_fit", "overfit", "catastrophic")
LENGTH = 500
LEVEL = 5.0  # the bulk's median; every score used is relative, so the level is arbitrary
GRIDS = ROOT / "benchmarks" / "tuning" / "grids"
LABELS_FILE = Path(__file__).resolve().parent / "real_series_labels.json"


@dataclass(frozen=True)
class Shape:
    """A family of synthetic series with its true label."""

    name: str
    label: str
    make: Callable[[np.random.Generator], np.ndarray]
    spikes_of_at_least_6_sd: int = 0  # planted spikes counted for the recall target


def gaussian(rel_sd: float) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: LEVEL * (1 + rel_sd * rng.standard_normal(LENGTH))


def student_t(df: int, rel_scale: float) -> Callable[[np.random.Generator], np.ndarray]:
    return lambda rng: LEVEL * (1 + rel_scale * rng.standard_t(df, LENGTH))


def gumbel(rel_scale: float) -> Callable[[np.random.Generator], np.ndarray]:
    """Right-skewed like a maximum over records (extreme-value shape)."""
    return lambda rng: LEVEL * (1 + rel_scale * rng.gumbel(size=LENGTH))


def with_spikes(rel_sd: float, k: int, height: float) -> Callable[[np.random.Generator], np.ndarray]:
    """A Gaussian bulk with k draws raised to ``height`` robust SDs above the median."""

    def make(rng: np.random.Generator) -> np.ndarray:
        series = LEVEL * (1 + rel_sd * rng.standard_normal(LENGTH))
        where = rng.choice(LENGTH, size=k, replace=False)
        series[where] = LEVEL * (1 + rel_sd * height * (1 + 0.1 * rng.random(k)))
        return series

    return make


def two_levels(gap: float) -> Callable[[np.random.Generator], np.ndarray]:
    """Half the draws at one level, half ``gap`` higher: a wandering band."""

    def make(rng: np.random.Generator) -> np.ndarray:
        series = LEVEL * (1 + 0.01 * rng.standard_normal(LENGTH))
        series[rng.random(LENGTH) < 0.5] *= 1 + gap
        return series

    return make


def synthetic_shapes() -> list[Shape]:
    shapes = [Shape(f"gaussian sd {s:.1%}", "well_fit", gaussian(s)) for s in (0.005, 0.01, 0.02, 0.03)]
    shapes += [Shape(f"gaussian sd {s:.0%}", "underfit", gaussian(s)) for s in (0.07, 0.1, 0.15, 0.25)]
    for k in (1, 3, 10, 25):
        for h in (6, 8, 12, 20, 50):
            shapes += [Shape(f"spikes k={k} h={h} sd {s:.0%}", "overfit", with_spikes(s, k, h), k)
                       for s in (0.01, 0.03)]
    shapes += [Shape(f"t(df={df}) scale {s:.0%}", "well_fit", student_t(df, s)) for df in (5, 10) for s in (0.01, 0.02)]
    shapes += [Shape(f"t(df={df}) scale {s:.0%}", "underfit", student_t(df, s)) for df in (5, 10) for s in (0.08, 0.15)]
    shapes += [Shape(f"gumbel scale {s:.0%}", "well_fit", gumbel(s)) for s in (0.01, 0.02)]
    shapes += [Shape(f"gumbel scale {s:.0%}", "underfit", gumbel(s)) for s in (0.08, 0.15)]
    shapes += [Shape(f"wide sd 12% + {k} spikes", "underfit", with_spikes(0.12, k, 8)) for k in (3, 10)]
    shapes += [Shape(f"two levels {g:.0%} apart", "underfit", two_levels(g)) for g in (0.12, 0.2)]
    shapes += [Shape("tight + 5 outliers at 3 SD", "well_fit", with_spikes(0.02, 5, 3))]
    return shapes


@dataclass
class SyntheticReport:
    confusion: dict[str, Counter]
    by_shape: dict[str, Counter]
    spikes_found: int
    spikes_planted: int
    gaussian_flagged: int
    gaussian_series: int

    @property
    def accuracy(self) -> float:
        total = sum(sum(row.values()) for row in self.confusion.values())
        return sum(row[label] for label, row in self.confusion.items()) / total

    @property
    def recall(self) -> float:
        return self.spikes_found / self.spikes_planted

    @property
    def gaussian_false_positive(self) -> float:
        return self.gaussian_flagged / self.gaussian_series


def run_synthetic(seeds: int, spike_z: float, thresholds: scorers.DiagnosisThresholds) -> SyntheticReport:
    confusion = {label: Counter() for label in LABELS}
    by_shape: dict[str, Counter] = {}
    found = planted = flagged = gaussians = 0
    for index, shape in enumerate(synthetic_shapes()):
        by_shape[shape.name] = Counter()
        for seed in range(seeds):
            rng = np.random.default_rng([index, seed])
            series = shape.make(rng)
            scores = scorers.score_max_delta(series, spike_z=spike_z)
            label = scorers.diagnose(scores, thresholds=thresholds).label
            confusion[shape.label][label] += 1
            by_shape[shape.name][label] += 1
            if shape.spikes_of_at_least_6_sd:
                planted += shape.spikes_of_at_least_6_sd
                found += min(scores.spike_count, shape.spikes_of_at_least_6_sd)
            if shape.name.startswith("gaussian"):
                gaussians += 1
                flagged += scores.spike_count > 0
    return SyntheticReport(confusion, by_shape, found, planted, flagged, gaussians)


def print_synthetic(report: SyntheticReport, seeds: int) -> None:
    print(f"Synthetic series: {len(report.by_shape)} shapes x {seeds} seeds, {LENGTH} draws each")
    print(f"{'true / diagnosed':<18}" + "".join(f"{label:>14}" for label in LABELS))
    for truth in LABELS[:3]:
        row = report.confusion[truth]
        print(f"{truth:<18}" + "".join(f"{row[label]:>14}" for label in LABELS))
    print(f"spike recall (planted >= 6 robust SDs) {report.recall:7.2%}   target >= 95%")
    print(f"pure Gaussian series flagged spiky     {report.gaussian_false_positive:7.2%}   target < 1%")
    print(f"overall accuracy                       {report.accuracy:7.2%}   target >= 90%")
    misread = [(name, counts) for name, counts in report.by_shape.items() if len(counts) > 1 or
               next(iter(counts)) != next(s.label for s in synthetic_shapes() if s.name == name)]
    if misread:
        print("shapes not always read as their label:")
        for name, counts in misread:
            print(f"  {name:<32} " + ", ".join(f"{label} {n}" for label, n in counts.most_common()))


def sweep(seeds: int) -> None:
    print("\nThreshold sweep (synthetic targets)")
    print(f"{'spike z':>8} {'max spread':>11} {'recall':>8} {'gauss FP':>9} {'accuracy':>9}")
    for spike_z in (4.0, 4.5, 5.0, 5.5, 6.0):
        for spread in (0.04, 0.05, 0.06, 0.07, 0.08, 0.09):
            report = run_synthetic(seeds, spike_z, scorers.DiagnosisThresholds(max_bulk_spread=spread))
            print(f"{spike_z:8.1f} {spread:11.0%} {report.recall:8.2%} {report.gaussian_false_positive:9.2%} "
                  f"{report.accuracy:9.2%}")


def real_fits(path: Path) -> Iterator[dict]:
    table = json.loads(path.read_text())
    yield from table["fits"]


def print_real(path: Path, thresholds: scorers.DiagnosisThresholds) -> None:
    if not path.exists():
        print(f"\nReal series: {path} not found (tables are made by python -m benchmarks.tuning.build_table)")
        return
    fits = list(real_fits(path))
    print(f"\nReal series: {len(fits)} SWAG-PPM fits on the OSHA sample ({path.name})")
    for model in sorted({f["model"] for f in fits}):
        rows = [f for f in fits if f["model"] == model]
        cs = sorted({f["c"] for f in rows}, reverse=True)
        epochs = sorted({f["ft_epochs"] for f in rows})
        print(f"\n{model}: verdict (bulk spread IQR/median, largest robust z, spikes) per c and fine-tuning epochs")
        print(f"{'epochs':>6} " + "".join(f"{'c = ' + format(c, 'g'):>34}" for c in cs))
        scored = {}
        for e in epochs:
            cells = []
            for c in cs:
                fit = next((f for f in rows if f["c"] == c and f["ft_epochs"] == e), None)
                if fit is None:
                    cells.append(f"{'-':>34}")
                    continue
                s = scorers.score_max_delta(fit["max_delta"])
                d = scorers.diagnose(s, thresholds=thresholds, failure=fit.get("failure"))
                scored[(c, e)] = (s, d)
                cells.append(f"{d.label:>12} ({s.bulk_spread:5.1%}, {s.max_robust_z:5.1f}, {s.spike_count:3d})")
            print(f"{e:>6} " + "".join(cells))
        story(scored, cs, epochs)


def story(scored: dict, cs: list[float], epochs: list[int]) -> None:
    """Say plainly whether the guide's story shows up: wide bands at few epochs; spikes at many epochs and high c."""
    spread = {key: s.bulk_spread for key, (s, _) in scored.items()}
    few_values = [v for (_, e), v in spread.items() if e <= 2]
    many_values = [v for (_, e), v in spread.items() if e >= 5]
    if len(spread) < 3 or not few_values or not many_values:
        print("  spread vs epochs: too few cells at <= 2 and >= 5 epochs to say")
    else:
        rho = stats.spearmanr([e for _, e in spread], list(spread.values())).statistic
        few, many = float(np.median(few_values)), float(np.median(many_values))
        verdict = "yes" if few >= 1.5 * many and rho < -0.3 else "weakly" if few > many else "no"
        print(f"  spread vs epochs: Spearman rho {rho:+.2f}; median bulk spread {few:.1%} at <= 2 epochs, {many:.1%} "
              f"at >= 5 epochs -> few epochs give a wider band: {verdict}")
    high = cs[0]
    at_high = {e: scored[(high, e)] for e in epochs if (high, e) in scored}
    groups = {"<= 3": lambda e: e <= 3, "5-10": lambda e: 5 <= e <= 10, ">= 13": lambda e: e >= 13}
    overfit = {name: [d.label == "overfit" for e, (_, d) in at_high.items() if keep(e)]
               for name, keep in groups.items()}
    later, early = overfit["5-10"] + overfit[">= 13"], overfit["<= 3"]
    # "yes": most later fits are overfit, and a larger share of them than of the early ones
    shows = bool(later) and sum(later) >= len(later) / 2 and sum(later) / len(later) > sum(early) / max(len(early), 1)
    spikes = ", ".join(f"{e}: {s.spike_count}" for e, (s, _) in at_high.items())
    counts = ", ".join(f"{name} epochs {sum(v)}/{len(v)}" for name, v in overfit.items())
    first = next((e for e, (_, d) in at_high.items() if d.label == "overfit"), None)
    onset = f" (the first at {first} epochs)" if first is not None else ""
    print(f"  spikes per fit at c = {high:g} by epochs ({spikes}); overfit verdicts at {counts}{onset} -> many "
          f"epochs (5 or more) at high c give spikes: {'yes' if shows else 'no'}")


def print_real_confusion(paths: list[Path], labels_file: Path, thresholds: scorers.DiagnosisThresholds) -> None:
    """The scorers' verdicts against the hand-read labels of the real series in ``paths``."""
    if not labels_file.exists():
        print(f"\nReal series with a reference label: {labels_file} not found")
        return
    fits = {(path.name, f["model"], f["c"], f["ft_epochs"]): f for path in paths if path.exists()
            for f in real_fits(path)}
    labelled = [(entry, fits[key]) for entry in json.loads(labels_file.read_text())["series"]
                if (key := (entry["table"], entry["model"], entry["c"], entry["ft_epochs"])) in fits]
    print(f"\nReal series with a reference label read by hand ({labels_file.name}): {len(labelled)} series in "
          "these tables")
    if not labelled:
        return
    confusion = {label: Counter() for label in LABELS}
    misread = []
    for entry, fit in labelled:
        verdict = scorers.diagnose(scorers.score_max_delta(fit["max_delta"]), thresholds=thresholds,
                                   failure=fit.get("failure")).label
        confusion[entry["label"]][verdict] += 1
        if verdict != entry["label"]:
            misread.append(f"  {entry['model']} c = {entry['c']:g}, {entry['ft_epochs']} epochs: read "
                           f"{entry['label']} ({entry['why']}), diagnosed {verdict}")
    print(f"{'label / diagnosed':<18}" + "".join(f"{label:>14}" for label in LABELS))
    for truth in LABELS[:3]:
        print(f"{truth:<18}" + "".join(f"{confusion[truth][label]:>14}" for label in LABELS))
    print("\n".join(misread) if misread else "every labelled series diagnosed as read")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=100, help="seeds per synthetic shape (default 100)")
    parser.add_argument("--sweep", action="store_true", help="also print the targets for candidate thresholds")
    parser.add_argument("--table", type=Path, nargs="+", default=sorted(GRIDS.glob("*.json")),
                        help=f"the real-series tables (default: every table in {GRIDS.relative_to(ROOT)})")
    parser.add_argument("--labels", type=Path, default=LABELS_FILE,
                        help="hand-read reference labels of real series (default: %(default)s)")
    args = parser.parse_args()
    thresholds = scorers.DiagnosisThresholds()
    print(f"Defaults: spike z {scorers.DEFAULT_SPIKE_Z:g} robust SDs, max bulk spread "
          f"{thresholds.max_bulk_spread:.1%} (IQR/median), min spikes {thresholds.min_spikes}\n")
    print_synthetic(run_synthetic(args.seeds, scorers.DEFAULT_SPIKE_Z, thresholds), args.seeds)
    if args.sweep:
        sweep(max(10, args.seeds // 4))
    for table in args.table:
        print_real(table, thresholds)
    print_real_confusion(args.table, args.labels, thresholds)


if __name__ == "__main__":
    main()
