"""The paper's comparison on one study's data and model: non-private, SWAG-PPM, reweighted SWAG-PPM and DP-SGD.

Every method trains on the study's own split, tokenizer, model and ``trainable``
mode, and is scored on its test split: macro- and weighted-F1 and the macro-F1 of
the largest and smallest quarter of classes by training-set size. Rows hold
class-level aggregates only, and a quartile's F1 only when each quartile holds at
least ``MIN_QUARTILE_CLASSES`` classes: with fewer it is (nearly) one class's own
F1, so it is withheld everywhere (table, files, figure) and the table says why.
SWAG-PPM's ε is its measured estimate (δ not quantified), or its proven bound; DP-SGD's (ε, δ)
comes from Opacus's accountant.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
import math
import statistics
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import swagppm
from swagppm import ConfigError, SWAGPPMConfig, TrialParams
from swagppm.config import check_value
from swagppm.utility import quartile_size
from tuner.extras import require
from tuner.outputs import write_atomic

NOT_QUANTIFIED = "not quantified"
MIN_QUARTILE_CLASSES = 3  # fewer classes in a quartile: its F1 is (nearly) one class's own figure, withheld
QUARTILES_WITHHELD = (f"the F1 of the largest and smallest 25% of classes is withheld (-): a quartile holds fewer "
                      f"than {MIN_QUARTILE_CLASSES} classes, so its F1 would be (nearly) one class's own figure")
COMPARISON_FILES = ("comparison.json", "comparison.csv", "f1_by_class_size.html")  # what `compare -o` writes


@dataclass(frozen=True, kw_only=True)
class ComparisonRow:
    """One method's privacy terms and test-set F1 (overall and by class size)."""

    method: str
    epsilon: float | None
    delta: float | str | None
    f1_macro: float
    f1_weighted: float
    f1_top_quartile: float | None  # None: withheld (a quartile of fewer than MIN_QUARTILE_CLASSES classes)
    f1_bottom_quartile: float | None
    note: str = ""
    remark: str = ""  # what the table says under itself: the target asked for, and why it was not reached


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """What to compare: the chosen (c, epochs, g), the variants, and DP-SGD's recipe (the paper's by default).

    ``stricter_epsilon`` (default: half of SWAG-PPM's ε) gives DP-SGD a second,
    stricter target; ``long_epochs`` adds a longer non-private fine-tune (the paper
    used 30 epochs); ``delta=None`` is 1/n.
    """

    params: TrialParams
    reweight_k: float = 0.95
    long_epochs: int | None = None
    stricter_epsilon: float | None = None
    delta: float | None = None
    dpsgd_batch_size: int = 512
    dpsgd_learning_rate: float = 1e-3
    dpsgd_max_grad_norm: float = 1.0
    dpsgd_epochs: int = 30

    def __post_init__(self) -> None:
        """Every setting checked before any fit (a comparison runs for minutes to hours)."""
        positive = {"stricter_epsilon": self.stricter_epsilon, "dpsgd_learning_rate":
                    self.dpsgd_learning_rate, "dpsgd_max_grad_norm": self.dpsgd_max_grad_norm}
        for name, value in positive.items():
            check_value(value is None or (value > 0 and math.isfinite(value)), name, value, "positive and finite")
        for name, count in {"long_epochs": self.long_epochs,
                            "dpsgd_batch_size": self.dpsgd_batch_size, "dpsgd_epochs": self.dpsgd_epochs}.items():
            check_value(count is None or count >= 1, name, count, "at least 1")
        check_value(0 < self.reweight_k <= 1, "reweight_k", self.reweight_k, "in (0, 1]")
        check_value(self.delta is None or 0 < self.delta < 1, "delta", self.delta, "in (0, 1)")


def _row(method: str, scores: dict[str, float], *, epsilon: float | None, delta: float | str | None,
         note: str = "", remark: str = "") -> ComparisonRow:
    return ComparisonRow(method=method, epsilon=epsilon, delta=delta, note=note, remark=remark, **scores)


def _percentile_row(
    method: str, draws: list[dict[str, float]], *, epsilon: float, q: float, note: str
) -> ComparisonRow:
    """Each score at quantile ``q`` over the draws (0.5: the median)."""
    def at(key: str) -> float:
        values = sorted(d[key] for d in draws)
        return statistics.quantiles(values, n=10, method="inclusive")[0] if q == 0.1 else statistics.median(values)

    return _row(method, {key: at(key) for key in draws[0]}, epsilon=epsilon, delta=NOT_QUANTIFIED, note=note)


def _swagppm_rows(session: swagppm.Session, settings: CompareSettings, *, label: str) -> list[ComparisonRow]:
    params = settings.params
    fit = session.fit(params)
    if fit.result.failure:
        raise ConfigError(f"{label} at c = {params.c:g}, {params.ft_epochs} epochs failed: {fit.result.failure}")
    epsilon, draws = fit.result.epsilon, session.draw_scores(fit, draws=session.config.draws_utility)
    return [
        _percentile_row(label, draws, epsilon=epsilon, q=0.5, note=f"median of {len(draws)} posterior draws"),
        _percentile_row(f"{label} (10th percentile)", draws, epsilon=epsilon, q=0.1,
                        note=f"10th percentile of {len(draws)} draws"),
        _row(f"{label} (one released draw)", session.secret_draw_scores(fit), epsilon=epsilon, delta=NOT_QUANTIFIED,
             note="one draw with secret noise, as release draws it"),
    ]


def _dpsgd_rows(session: swagppm.Session, settings: CompareSettings, targets: Sequence[float], *,
                echo: Callable[[str], None]) -> list[ComparisonRow]:
    """One DP-SGD row per distinct run: a target asked twice, or two targets that give the same run (the same
    noise multiplier and steps), are one row whose remark says so; a target not reached is said, with why."""
    from swagppm.evaluate.dpsgd import DPSGDSettings, dpsgd_fit  # Opacus: checked by ``compare`` before any fit
    rows: list[ComparisonRow] = []
    runs: dict[tuple[float, float, int], int] = {}  # (ε, noise multiplier, steps) -> its row
    for target in dict.fromkeys(targets):
        asked = f"asked for epsilon {target:.3g}" + (" twice" if list(targets).count(target) > 1 else "")
        try:
            result = dpsgd_fit(session, DPSGDSettings(
                target_epsilon=target, delta=settings.delta, batch_size=settings.dpsgd_batch_size,
                learning_rate=settings.dpsgd_learning_rate, max_grad_norm=settings.dpsgd_max_grad_norm,
                epochs=settings.dpsgd_epochs, seed=session.config.seed))
        except ValueError as error:  # Opacus: no noise multiplier up to its maximum reaches the target
            if "privacy budget is too low" not in str(error):
                raise
            echo(f"DP-SGD {asked}: not run: no noise multiplier Opacus allows reaches it in "
                 f"{settings.dpsgd_epochs} epochs")
            continue
        key = (result.epsilon, result.noise_multiplier, result.steps)
        if key in runs:
            row = rows[runs[key]]
            rows[runs[key]] = dataclasses.replace(row, remark=f"{row.remark}; {asked} gave this same run (one row)")
            continue
        scores = {key: getattr(result, key) for key in ("f1_macro", "f1_weighted", "f1_top_quartile",
                                                         "f1_bottom_quartile")}
        runs[key] = len(rows)
        rows.append(_row("DP-SGD", scores, epsilon=result.epsilon, delta=result.delta,
                         note=f"Opacus, {result.accountant} accountant, "
                              f"noise multiplier {result.noise_multiplier:.3g}, {result.steps} steps",
                         remark=asked + _shortfall(target, result.epsilon, result.noise_multiplier, result.steps)))
    return rows


def _shortfall(target: float, epsilon: float, noise: float, steps: int) -> str:
    """Why a DP-SGD run's ε is not its target (empty when it is, within the search's tolerance)."""
    from swagppm.evaluate.dpsgd import EPSILON_TOLERANCE  # loaded already: the run used it

    if epsilon > target * (1 + 1e-9):
        return (f", not reached: the accountant gives {epsilon:.3g} at noise multiplier {noise:.3g} over {steps} "
                "steps")
    if epsilon < target * (1 - 2 * EPSILON_TOLERANCE):
        return (f", got {epsilon:.3g}: the noise-multiplier search stopped at {noise:.3g} for {steps} steps, so "
                "this run is more private (and noisier) than asked")
    return ""


@contextlib.contextmanager
def understood_warnings() -> Iterator[None]:
    """Silence the library warnings a comparison raises and the table already accounts for: Opacus's accountants
    at the large noise multipliers a small ε needs (RDP's orders run out, the PRV's logarithms of zero)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Optimal order is the (largest|smallest) alpha")
        warnings.filterwarnings("ignore", category=RuntimeWarning, module=r"opacus\.accountants")
        warnings.filterwarnings("ignore", message="Secure RNG turned off")
        yield


def check_dependencies() -> None:
    """Opacus (the compare extra), checked before anything is made or fitted: one line naming the install."""
    require("compare", needed_by="compare (its DP-SGD side, through Opacus)")


def compare(config: SWAGPPMConfig, settings: CompareSettings, *,
            echo: Callable[[str], None] = print) -> list[ComparisonRow]:
    """Train and score every method on ``config``'s data and model; returns the table's rows. Opacus (the compare
    extra) is checked first: without it nothing is fitted."""
    check_dependencies()
    with understood_warnings():
        return _compare(config, settings, echo=echo)


def _compare(config: SWAGPPMConfig, settings: CompareSettings, *, echo: Callable[[str], None]) -> list[ComparisonRow]:
    with swagppm.Session(config) as session:
        num_classes = session.data.num_classes
        echo("non-private baseline (stage 1) ...")
        rows = [_row("non-private (stage 1)", session.baseline_scores(), epsilon=None, delta=None,
                     note=f"{config.stage1_epochs} epochs")]
        if settings.long_epochs is not None:
            echo(f"non-private, {settings.long_epochs} epochs ...")
            rows.append(_row(f"non-private ({settings.long_epochs} epochs)",
                             session.non_private_scores(epochs=settings.long_epochs), epsilon=None, delta=None))
        echo(f"SWAG-PPM at c = {settings.params.c:g}, {settings.params.ft_epochs} epochs ...")
        rows += _swagppm_rows(session, settings, label="SWAG-PPM")
        epsilon = rows[-1].epsilon
        assert epsilon is not None
        stricter = epsilon / 2 if settings.stricter_epsilon is None else settings.stricter_epsilon
        echo(f"DP-SGD at epsilon {epsilon:.3g} and {stricter:.3g} ...")
        rows += _dpsgd_rows(session, settings, (epsilon, stricter), echo=echo)
    with swagppm.Session(config.replace(reweight_k=settings.reweight_k)) as session:
        echo(f"reweighted SWAG-PPM (k = {settings.reweight_k:g}) ...")
        rows += _swagppm_rows(session, settings, label=f"reweighted SWAG-PPM k={settings.reweight_k:g}")
    return rows if quartiles_shown(num_classes) else [withhold_quartiles(row) for row in rows]


def quartiles_shown(num_classes: int) -> bool:
    """Whether each class-size quartile holds at least ``MIN_QUARTILE_CLASSES`` classes."""
    return quartile_size(num_classes) >= MIN_QUARTILE_CLASSES


def withhold_quartiles(row: ComparisonRow) -> ComparisonRow:
    return dataclasses.replace(row, f1_top_quartile=None, f1_bottom_quartile=None)


def comparison_about(config: SWAGPPMConfig, settings: CompareSettings) -> dict[str, Any]:
    """What was compared, for comparison.json: the settings, the fit's configuration and where it was scored."""
    return {"configuration": dataclasses.asdict(settings), "swagppm": config.to_dict(),
            "data_note": "scored on the study's own test split; class-level aggregates only"}


def comparison_table(rows: Sequence[ComparisonRow]) -> str:
    """The rows as fixed-width text."""
    header = (f"{'method':<50} {'epsilon':>8} {'delta':>14} {'F1 mac':>7} {'F1 wtd':>7} "
              f"{'top 25%':>8} {'bottom 25%':>10}")
    lines = [header, "-" * len(header)]
    for row in rows:
        eps = "-" if row.epsilon is None else f"{row.epsilon:.3g}"
        delta = "-" if row.delta is None else (row.delta if isinstance(row.delta, str) else f"{row.delta:.3g}")
        top, bottom = (f"{value:.3f}" if value is not None else "-"
                       for value in (row.f1_top_quartile, row.f1_bottom_quartile))
        lines.append(f"{row.method:<50} {eps:>8} {delta:>14} {row.f1_macro:>7.3f} {row.f1_weighted:>7.3f} "
                     f"{top:>8} {bottom:>10}")
    lines += [f"  {row.method}: {row.remark}" for row in rows if row.remark]
    if any(row.f1_bottom_quartile is None for row in rows):
        lines.append(f"  {QUARTILES_WITHHELD}")
    return "\n".join(lines)


def write_comparison(rows: Sequence[ComparisonRow], folder: Path, *, about: dict[str, Any]) -> list[Path]:
    """comparison.json (the rows and what was compared), comparison.csv and the F1-by-class-size figure (HTML), each
    written atomically."""
    import scorers.plots

    records = [dataclasses.asdict(row) for row in rows]
    table = io.StringIO(newline="")
    writer = csv.DictWriter(table, fieldnames=list(records[0]))
    writer.writeheader()
    writer.writerows(records)
    figure = scorers.plots.f1_by_class_size_figure(records)
    if any(row.f1_bottom_quartile is None for row in rows):
        about = {**about, "quartiles": QUARTILES_WITHHELD}
    contents = (json.dumps({"about": about, "rows": records}, indent=2) + "\n", table.getvalue(),
                figure.to_html(include_plotlyjs=True, full_html=True))
    return [write_atomic(folder / name, text) for name, text in zip(COMPARISON_FILES, contents, strict=True)]


def read_comparison(path: Path) -> list[ComparisonRow]:
    """The rows of a comparison.json, each field checked; errors name the file (and the row and field)."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        rows = [ComparisonRow(**row) for row in document["rows"]]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ConfigError(f"{path}: not a comparison written by `swagppm-tune compare` "
                          f"({type(error).__name__})") from None
    if not rows:
        raise ConfigError(f"{path}: a comparison without rows")
    for number, row in enumerate(rows, start=1):
        problem = _row_problem(row)
        if problem is not None:
            raise ConfigError(f"{path}: row {number}: {problem}")
    return rows


def _row_problem(row: ComparisonRow) -> str | None:
    """What is wrong with one read row (None: nothing)."""
    if not isinstance(row.method, str) or not isinstance(row.note, str):
        return "method and note must be text"
    for key in ("f1_macro", "f1_weighted", "f1_top_quartile", "f1_bottom_quartile"):
        value = getattr(row, key)
        if value is None and key.endswith("quartile"):
            continue  # withheld
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1):
            return f"{key} = {value!r}: must be an F1 score in [0, 1]"
    if row.epsilon is not None and not (isinstance(row.epsilon, (int, float)) and row.epsilon >= 0):
        return f"epsilon = {row.epsilon!r}: must be a number of at least 0 (or null)"
    if row.delta is not None and not isinstance(row.delta, (int, float, str)):
        return f"delta = {row.delta!r}: must be a number, text or null"
    return None
