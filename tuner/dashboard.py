"""What optuna-dashboard shows of a study beyond Optuna's own views: feasibility first, readable constraints, plots.

optuna-dashboard's trial list shows only a trial's number and state, so each
trial's note leads with ``feasible: yes/no`` and what it violates, with every
constraint named and explained, and the study page gets a trial table whose
columns include feasibility (a plotly table, saved with
``optuna_dashboard.save_plotly_graph_object``). ``swagppm-tune dashboard``
serves the study through ``DashboardView``: its trial tables (the Smart
Selection page) show a few named columns (``dashboard_columns``: feasible, the
sortable violation, ε, the judged F1s, the verdict, what was missed) instead of
every stored aggregate, and the study page says that what it shows is owner-side.
Plotly figures attach only to a study, but a trial's image artifacts render in
its page, so each trial's max-delta series and F1 draws are uploaded as one SVG
picture. Everything shown is an aggregate (hyperparameters, ε, the max-delta
series, F1 per draw), but of the private data: owner-side, never published.
"""

from __future__ import annotations

import copy
import math
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.sax.saxutils import escape

import optuna
import plotly.graph_objects as go
from optuna.artifacts import upload_artifact
from optuna.storages import BaseStorage
from optuna.study._frozen import FrozenStudy
from optuna.trial import FrozenTrial

from scorers.plots import off_scale_note, series_range
from swagppm.statement import MEASURED_SHORT, PROVEN_SHORT
from tuner.config import StudyConfig
from tuner.outcome import GLOSSARY, Outcome
from tuner.queries import FINISHED, describe_violations, is_feasible, violation
from tuner.record import CONSTRAINT_KEYS, FAILURE, TrialRecord, measured_violations

if TYPE_CHECKING:
    from optuna.artifacts._protocol import ArtifactStore
    from optuna.trial import Trial

# What each constraint measures (Optuna's convention: a value <= 0 is met).
CONSTRAINT_MEANINGS = {
    "epsilon": "ε / target − 1: above 0, ε exceeds the target",
    "f1_macro": "(allowed macro-F1 − macro-F1) / baseline: above 0, macro-F1 lost more than allowed",
    "f1_weighted": "(allowed weighted-F1 − weighted-F1) / baseline: above 0, weighted-F1 lost more than allowed",
    "fit_spread": "bulk spread / max_bulk_spread − 1: above 0, the max-delta series wanders (underfit)",
    "fit_spikes": "largest robust z / spike_z − 1: above 0, the max-delta series has spikes (overfit)",
}
PICTURE_ALT = "max-delta series and F1 draws of trial {number}"
# What every page of the dashboard is: said on the study page, under the feasibility table and in each trial's note.
OWNER_SIDE = ("owner-side: these pages show each trial's exact epsilon and F1, measured on the private data; never "
              "publish them or a screenshot of them (only the release folder is public)")
_TARGET, _SERIES, _MISS, _MACRO, _WEIGHTED = "#2ca02c", "#1f77b4", "#d62728", "#1f77b4", "#ff7f0e"


def trial_note(number: int, outcome: Outcome, *, picture: str | None = None) -> str:
    """The trial's note (markdown): feasibility and violations first, the figures (``picture``: the URL of their
    image), the constraints named and explained, the reasons and the next move."""
    missed = measured_violations(outcome.constraints, outcome.unmeasured)
    violated = ", ".join(missed) or "nothing"
    unmeasured = f"; not measured: {', '.join(outcome.unmeasured)}" if outcome.unmeasured else ""
    lines = [f"## Trial {number}: {outcome.label.replace('_', ' ')} — "
             f"{'feasible' if outcome.feasible else 'not feasible'}", "",
             f"**feasible: {'yes' if outcome.feasible else 'no'}** — violated: {violated}{unmeasured}", ""]
    if picture is not None:
        lines += [f"![{PICTURE_ALT.format(number=number)}]({picture})", ""]
    lines += [f"- {reason}" for reason in outcome.reasons]
    lines += ["", f"**Next (the guide's flowchart):** {outcome.recommendation.sentence}", "",
              "**Constraints** (met when ≤ 0):", ""]
    lines += [f"- {key} = {outcome.constraints[key]:+.3f} ({_met(key, outcome)}): {CONSTRAINT_MEANINGS[key]}"
              for key in CONSTRAINT_KEYS]
    kind = (f"ε ≤ {outcome.result.proven_epsilon:.4g} is {PROVEN_SHORT}" if outcome.result.proven_epsilon is not None
            else f"ε is {MEASURED_SHORT} (no differential-privacy guarantee is proven for it); the audit is its check")
    lines += ["", f"{kind}. Every word: {GLOSSARY}.", "", f"*{OWNER_SIDE[0].upper()}{OWNER_SIDE[1:]}.*"]
    return "\n".join(lines)


def _met(key: str, outcome: Outcome) -> str:
    if key in outcome.unmeasured:
        return "not measured"
    return "met" if outcome.constraints[key] <= 0 else "violated"


def publish_trial(trial: Trial, outcome: Outcome, artifacts: ArtifactStore, config: StudyConfig) -> None:
    """The trial's figures picture as an artifact, and its note showing that picture (raises ``OSError``)."""
    import optuna_dashboard  # here: the command line's read-only verbs start without it

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"trial-{trial.number}-figures.svg"
        path.write_text(figures_svg(outcome.record(), config), encoding="utf-8")
        artifact = upload_artifact(artifact_store=artifacts, file_path=str(path), study_or_trial=trial,
                                   mimetype="image/svg+xml")
    # the URL optuna-dashboard's own "Insert an image" button writes into a note; Optuna has no public trial id
    picture = f"/artifacts/{trial.study._study_id}/{trial._trial_id}/{artifact}"
    optuna_dashboard.save_note(trial, trial_note(trial.number, outcome, picture=picture))


def feasibility_table(study: optuna.Study) -> go.Figure:
    """Every finished trial with its feasibility and violations: the column the dashboard's trial list lacks
    (E: fine-tuning epochs, F1: median macro-F1)."""
    rows = [(t, r) for t in study.get_trials(deepcopy=False, states=FINISHED) if (r := TrialRecord.of(t)) is not None]
    header = ["trial", "c", "E", "ε", "F1", "verdict", "feasible", "violated"]
    cells = [[t.number for t, _ in rows], [f"{t.params.get('c', 0.0):.4g}" for t, _ in rows],
             [t.params.get("ft_epochs") for t, _ in rows],
             [("≥ " if r.epsilon_is_lower_bound else "") + f"{r.epsilon_or_inf:.4g}" for _, r in rows],
             ["-" if r.f1_macro_median is None else f"{r.f1_macro_median:.3f}" for _, r in rows],
             [r.diagnosis for _, r in rows], ["yes" if is_feasible(t) else "no" for t, _ in rows],
             [describe_violations(t) or "-" for t, _ in rows]]
    shade = ["#e8f5e9" if is_feasible(t) else "#fdecea" for t, _ in rows]
    figure = go.Figure(go.Table(
        columnwidth=[35, 45, 25, 55, 45, 75, 60, 200],
        header={"values": header, "align": "left", "fill_color": "#eeeeee"},
        cells={"values": cells, "align": "left", "fill_color": [shade] * len(header)}))
    feasible = sum(is_feasible(t) for t, _ in rows)
    figure.update_layout(title={"text": f"trials: feasibility<br><sup>{feasible} of {len(rows)} feasible; "
                                        f"constraints explained by {GLOSSARY}; owner-side: the exact ε of the "
                                        "private data, never published</sup>"},
                         height=min(120 + 30 * (len(rows) + 1), 700), margin={"t": 80, "b": 10, "l": 10, "r": 10})
    return figure


# --- what `swagppm-tune dashboard` serves: the study through a view with named columns ----------------------------

def dashboard_columns(trial: FrozenTrial, *, statistic: str) -> dict[str, Any]:
    """The user attributes a trial shows in optuna-dashboard's tables: a few named columns, not every stored aggregate
    (series and draws made each row hundreds of pixels tall). ``violation`` is a number, so it sorts: 0 for a
    feasible trial, else how far it misses its targets (the closest first)."""
    record = TrialRecord.of(trial)
    columns: dict[str, Any] = {"feasible": "yes" if is_feasible(trial) else "no"}
    if trial.constraints:
        columns["violation"] = round(violation(trial), 4)
    if record is None:
        return columns | ({"failure": trial.user_attrs[FAILURE]} if FAILURE in trial.user_attrs else {})
    median = statistic == "median"
    judged = {"epsilon": record.epsilon,
              f"f1_macro_{statistic}": record.f1_macro_median if median else record.f1_macro_q10,
              f"f1_weighted_{statistic}": record.f1_weighted_median if median else record.f1_weighted_q10}
    columns |= {key: round(value, 4) for key, value in judged.items() if value is not None and math.isfinite(value)}
    return columns | {"diagnosis": record.diagnosis, "violated": describe_violations(trial) or "-"}


def _delegated(name: str) -> Callable[..., Any]:
    def call(self: _Delegating, *args: Any, **kwargs: Any) -> Any:
        return getattr(self.storage, name)(*args, **kwargs)

    call.__name__ = name
    return call


class _Delegating(BaseStorage):
    """A storage that sends every call to ``storage`` (its methods are made from ``BaseStorage``'s names below)."""

    def __init__(self, storage: BaseStorage) -> None:
        self.storage = storage


for _name in [name for name in dir(BaseStorage) if not name.startswith("_")]:
    setattr(_Delegating, _name, _delegated(_name))
_Delegating.__abstractmethods__ = frozenset()


class DashboardView(_Delegating):
    """The study's storage as optuna-dashboard reads it: reads and writes go to the storage, but each trial shows its
    ``dashboard_columns`` as user attributes and each study says first that it is owner-side (``OWNER_SIDE``)."""

    def __init__(self, storage: BaseStorage, *, statistic: str) -> None:
        super().__init__(storage)
        self.statistic = statistic

    def _shown(self, trial: FrozenTrial) -> FrozenTrial:
        shown = copy.copy(trial)
        shown.user_attrs = dashboard_columns(trial, statistic=self.statistic)
        return shown

    def get_all_trials(self, study_id: int, deepcopy: bool = True, states: Any = None) -> list[FrozenTrial]:
        return [self._shown(t) for t in self.storage.get_all_trials(study_id, deepcopy=deepcopy, states=states)]

    def get_trial(self, trial_id: int) -> FrozenTrial:
        return self._shown(self.storage.get_trial(trial_id))

    def get_best_trial(self, study_id: int) -> FrozenTrial:
        return self._shown(self.storage.get_best_trial(study_id))

    def get_trial_user_attrs(self, trial_id: int) -> dict[str, Any]:
        return self.get_trial(trial_id).user_attrs

    def get_study_user_attrs(self, study_id: int) -> dict[str, Any]:
        return {"privacy": OWNER_SIDE, **self.storage.get_study_user_attrs(study_id)}

    def get_all_studies(self) -> list[FrozenStudy]:
        return [FrozenStudy(study_name=s.study_name, direction=None, user_attrs={"privacy": OWNER_SIDE, **s.user_attrs},
                            system_attrs=s.system_attrs, study_id=s._study_id, directions=s.directions)
                for s in self.storage.get_all_studies()]


# --- the trial's picture: hand-drawn SVG (plotly cannot render a static image without a browser) ---------------

def figures_svg(record: TrialRecord, config: StudyConfig) -> str:
    """The max-delta series (with the ε target) and, when measured, the F1 draws against the baseline, as SVG."""
    width, height = 960, 360
    bound = "≥ " if record.epsilon_is_lower_bound else ""
    parts = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' "
             f"viewBox='0 0 {width} {height}' font-family='sans-serif' font-size='12'>",
             f"<rect width='{width}' height='{height}' fill='white'/>",
             _text(16, 22, f"{record.diagnosis.replace('_', ' ')}, {'feasible' if record.feasible else 'not feasible'}"
                           f" — ε = {bound}{record.epsilon_or_inf:.4g} (target {config.targets.epsilon_cap:g})",
                   size=15, weight="bold")]
    parts += _max_delta_panel(record.max_delta_series, config.targets.epsilon_cap / 2, x0=70, y0=50, w=520, h=240)
    parts += _f1_panel(record, config.targets.max_f1_degradation, x0=690, y0=50, w=240, h=240)
    return "".join(parts) + "</svg>"


def _max_delta_panel(series: Sequence[float], level: float, *, x0: float, y0: float, w: float,
                     h: float) -> list[str]:
    low, high, on_scale = series_range(series, level)
    y = _scale(low, high, y0 + h, y0)
    x = _scale(0.5, len(series) + 0.5, x0, x0 + w)
    parts = _axes(x0, y0, w, h, low, high, y, title="max delta per posterior draw", x_label="posterior draw",
                  y_label="max delta (ε = 2 · max)")
    parts += [f"<circle cx='{x(d):.1f}' cy='{y(v):.1f}' r='2.5' fill='{_SERIES}' fill-opacity='0.8'/>"
              for d, v in enumerate(series, start=1)]
    if on_scale:
        parts += [_line(x0, y(level), x0 + w, y(level), _TARGET, width=2),
                  _text(x0 + 4, y(level) - 4, f"ε target / 2 = {level:.4g}", color=_TARGET)]
    else:
        parts.append(_text(x0 + 4, y0 + 14 if level > high else y0 + h - 6, off_scale_note(level, series),
                           color=_TARGET))
    return parts


def _f1_panel(record: TrialRecord, max_degradation: float, *, x0: float, y0: float, w: float,
              h: float) -> list[str]:
    metrics = (("macro", record.f1_macro_draws, record.baseline_f1_macro, _MACRO),
               ("weighted", record.f1_weighted_draws, record.baseline_f1_weighted, _WEIGHTED))
    if not record.f1_macro_draws:
        return [_text(x0, y0 + h / 2, "F1 not measured", size=14),
                _text(x0, y0 + h / 2 + 18, "(the privacy draws stopped early)")]
    values = [v for _, draws, baseline, _ in metrics for v in (*draws, baseline, (1 - max_degradation) * baseline)]
    low, high, _ = series_range(values)
    y = _scale(low, high, y0 + h, y0)
    parts = _axes(x0, y0, w, h, low, high, y, title="F1 per utility draw", x_label="", y_label="F1 (test split)")
    for slot, (name, draws, baseline, color) in enumerate(metrics):
        left, middle = x0 + slot * w / 2 + 12, x0 + slot * w / 2 + w / 4
        parts += [f"<circle cx='{middle + 4 * ((i % 7) - 3):.1f}' cy='{y(v):.1f}' r='2.5' fill='{color}'/>"
                  for i, v in enumerate(draws)]
        threshold = (1 - max_degradation) * baseline
        parts += [_line(left, y(baseline), left + w / 2 - 24, y(baseline), "black", width=2),
                  _line(left, y(threshold), left + w / 2 - 24, y(threshold), _MISS, width=2, dash=True),
                  _text(middle, y0 + h + 16, name, anchor="middle")]
    parts += [_text(x0, y0 + h + 36, "black: non-private baseline", size=11),
              _text(x0, y0 + h + 52, f"red dashed: (1 − {max_degradation:g}) · baseline", size=11)]
    return parts


def _axes(x0: float, y0: float, w: float, h: float, low: float, high: float, y: Any, *, title: str, x_label: str,
          y_label: str) -> list[str]:
    ticks = [low + (high - low) * i / 4 for i in range(5)]
    parts = [f"<rect x='{x0}' y='{y0}' width='{w}' height='{h}' fill='none' stroke='#999'/>",
             _text(x0, y0 - 8, title, size=13), _text(x0 + w / 2, y0 + h + 16, x_label, anchor="middle"),
             f"<text x='{x0 - 52}' y='{y0 + h / 2}' transform='rotate(-90 {x0 - 52} {y0 + h / 2})' "
             f"text-anchor='middle'>{escape(y_label)}</text>"]
    for tick in ticks:
        parts += [_line(x0 - 4, y(tick), x0, y(tick), "#999"), _text(x0 - 6, y(tick) + 4, f"{tick:.3g}",
                                                                     anchor="end", size=10)]
    return parts


def _scale(lo: float, hi: float, out_lo: float, out_hi: float) -> Any:
    span = hi - lo or 1.0
    return lambda value: out_lo + (value - lo) / span * (out_hi - out_lo)


def _line(x1: float, y1: float, x2: float, y2: float, color: str, *, width: float = 1, dash: bool = False) -> str:
    pattern = " stroke-dasharray='6 4'" if dash else ""
    return (f"<line x1='{x1:.1f}' y1='{y1:.1f}' x2='{x2:.1f}' y2='{y2:.1f}' stroke='{color}' "
            f"stroke-width='{width}'{pattern}/>")


def _text(x: float, y: float, text: str, *, size: int = 12, color: str = "black", anchor: str = "start",
          weight: str = "normal") -> str:
    return (f"<text x='{x:.1f}' y='{y:.1f}' font-size='{size}' fill='{color}' text-anchor='{anchor}' "
            f"font-weight='{weight}'>{escape(text)}</text>")
