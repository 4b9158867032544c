"""Plotly figures of SWAG-PPM fits: the pictures the practical guide reads by eye.

Each function returns a ``plotly.graph_objects.Figure`` whose traces and shapes
carry the numbers behind the picture (named traces, exact x/y values), so the
figures can be checked as data and shown on a dashboard or in a report.

- ``max_delta_figure``: the max-delta series of one fit, with the bulk band, the
  spikes and the ε target (METHOD.md, "Reading the max-delta series").
- ``f1_violin_figure``: macro- and weighted-F1 across posterior draws against the
  non-private baseline and the allowed degradation.
- ``search_grid_figure``: the fits of a search over (c, fine-tuning epochs),
  coloured by ε and shaped by diagnosis (the guide's hand-drawn search).
- ``tradeoff_figure``: ε against macro-F1, the feasible fits marked as such and the box the two targets draw.
- ``write_html``: one self-contained HTML file per figure (works offline).

Only numpy and plotly are used (no torch). Only aggregate values are drawn: a
series of per-draw maxima, F1 per draw and per-fit summaries, never anything per
training record (METHOD.md, "What may be stored where").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go

from scorers._scores import MIN_DRAWS, MaxDeltaScores, score_max_delta, spike_mask

__all__ = [
    "LABEL_SYMBOLS",
    "NONFINITE_COLOR",
    "f1_by_class_size_figure",
    "f1_violin_figure",
    "max_delta_figure",
    "search_grid_figure",
    "tradeoff_figure",
    "write_html",
]

LABEL_SYMBOLS: dict[str, str] = {
    "underfit": "triangle-down",
    "well_fit": "circle",
    "overfit": "triangle-up",
    "catastrophic": "x",
    "not_judged": "diamond",
}
"""Marker symbol of each diagnosis label (``scorers.diagnose``), the same in every figure.

``not_judged`` marks a fit whose privacy draws stopped once ε exceeded its target
(ε is then a lower bound and the fit's shape is not judged)."""

NONFINITE_COLOR = "#8c8c8c"
"""Grey for fits whose ε is infinite or NaN (they have no place on an ε colour scale)."""

_SERIES_COLOR = "#1f77b4"
_SPIKE_COLOR = "#d62728"
_TARGET_COLOR = "#2ca02c"
_FEASIBLE_COLOR = "#2ca02c"
_BAND_FILL = "rgba(31, 119, 180, 0.15)"


def _fmt(value: float | None) -> str:
    """A number for a title or label: two decimals in the usual range, else 3 significant digits."""
    if value is None:
        return "—"
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "−∞"
    if value != 0 and (abs(value) < 0.01 or abs(value) >= 1e5):
        return f"{value:.3g}"
    return f"{value:.2f}"


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(float(value))
    except (TypeError, ValueError):
        return False


def max_delta_figure(
    series: Sequence[float],
    *,
    scores: MaxDeltaScores | None = None,
    epsilon_cap: float | None = None,
    title: str | None = None,
    epsilon_is_lower_bound: bool = False,
) -> go.Figure:
    """The max-delta series m_d against the draw d, as a practitioner reads it.

    Draws are markers only (no connecting line: the draws are independent, their
    order means nothing). Traces, back to front: ``"bulk IQR"`` (filled band from
    the 25th to the 75th percentile of the finite non-spike draws), ``"bulk
    median"``, ``"max delta"`` (every finite draw) and ``"spikes"`` (only the draws
    that ``spike_mask`` marks). Shapes: the spike threshold and, when a target is
    known, a horizontal line at target/2 (ε = 2 · max delta, so a series staying
    below the line meets the target). The title gives ε (``epsilon_is_lower_bound``
    adds "(lower bound)", e.g. for a partial series) and how many non-finite values
    were left out; the subtitle the bulk spread and the spike count.

    ``scores`` default to ``score_max_delta(series, epsilon_cap=epsilon_cap)``;
    when given without ``epsilon_cap`` the target is taken from them.
    """
    values = np.asarray(series, dtype=float).ravel()
    if scores is None:
        scores = score_max_delta(values, epsilon_cap=epsilon_cap)
    if epsilon_cap is None:
        epsilon_cap = scores.epsilon_cap
    finite = np.isfinite(values)
    spikes = spike_mask(values, scores)
    figure = go.Figure()
    _bulk_traces(figure, values[finite & ~spikes], width=max(len(values), 1))
    _draw_traces(figure, values, finite=finite, spikes=spikes, scores=scores)
    if len(values) >= MIN_DRAWS and _finite(scores.spike_threshold):
        figure.add_hline(
            y=scores.spike_threshold, name="spike threshold", line={"color": _SPIKE_COLOR, "width": 1, "dash": "dot"},
            annotation_text=f"spike threshold (median + {scores.spike_z:g} robust SD) = {_fmt(scores.spike_threshold)}",
            annotation_position="bottom right", annotation_font_color=_SPIKE_COLOR,
        )
    if epsilon_cap is not None:
        _target_line(figure, values[finite], epsilon_cap / 2)
    spread = "n/a" if not _finite(scores.bulk_spread) else f"{scores.bulk_spread:.1%}"
    subtitle = (f"{scores.num_draws} draws · bulk spread (IQR/median) {spread} · "
                f"{_plural(scores.spike_count, 'spike')} above {scores.spike_z:g} robust SDs")
    heading = _max_delta_heading(title, scores=scores, epsilon_cap=epsilon_cap,
                                 lower_bound=epsilon_is_lower_bound, nonfinite=int((~finite).sum()))
    figure.update_layout(
        title={"text": heading, "subtitle": {"text": subtitle}},
        xaxis={"title": {"text": "posterior draw d"}},
        yaxis={"title": {"text": "max delta m_d = max_i w_i · NLL_i(θ_d)"}},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1},
        margin={"t": 110},
    )
    return figure


def _bulk_traces(figure: go.Figure, bulk: np.ndarray, *, width: int) -> None:
    """The bulk's IQR band and median across the draws 1..``width`` (nothing when every draw is a spike)."""
    if not len(bulk):
        return
    q25, q50, q75 = (float(q) for q in np.percentile(bulk, [25, 50, 75]))
    figure.add_trace(go.Scatter(
        x=[1, width, width, 1, 1], y=[q25, q25, q75, q75, q25], name="bulk IQR",
        mode="lines", fill="toself", fillcolor=_BAND_FILL, line={"width": 0},
        hoveron="fills", hoverinfo="text", text=f"bulk IQR {q25:.4g} – {q75:.4g}",
    ))
    figure.add_trace(go.Scatter(
        x=[1, width], y=[q50, q50], name="bulk median", mode="lines",
        line={"color": _SERIES_COLOR, "width": 1, "dash": "dash"},
        hovertemplate=f"bulk median {q50:.4g}<extra></extra>",
    ))


def _draw_traces(figure: go.Figure, values: np.ndarray, *, finite: np.ndarray, spikes: np.ndarray,
                 scores: MaxDeltaScores) -> None:
    """Every finite draw as a marker, and the spikes over them with their robust z in the hover text."""
    draws = np.arange(1, len(values) + 1)
    figure.add_trace(go.Scatter(
        x=draws[finite], y=values[finite], name="max delta", mode="markers",
        marker={"color": _SERIES_COLOR, "size": 5, "opacity": 0.8},
        hovertemplate="draw %{x}<br>max delta %{y:.4g}<extra></extra>",
    ))
    robust_sd = scores.robust_sd
    z = (values[spikes] - scores.median) / robust_sd if _finite(robust_sd) and robust_sd > 0 else None
    figure.add_trace(go.Scatter(
        x=draws[spikes], y=values[spikes], name="spikes", mode="markers",
        marker={"color": _SPIKE_COLOR, "size": 10, "line": {"color": "black", "width": 1}},
        customdata=z, hovertemplate="spike: draw %{x}<br>max delta %{y:.4g}"
        + ("<br>%{customdata:.1f} robust SDs above the median" if z is not None else "") + "<extra></extra>",
    ))


def _max_delta_heading(title: str | None, *, scores: MaxDeltaScores, epsilon_cap: float | None,
                       lower_bound: bool, nonfinite: int) -> str:
    """The figure's title: its name, ε (a lower bound or not), the target, and the non-finite values left out."""
    heading = f"{title if title is not None else 'max delta per draw'} — ε = {_fmt(scores.epsilon)}"
    if lower_bound:
        heading += " (lower bound)"
    if epsilon_cap is not None:
        heading += f" (target {_fmt(epsilon_cap)})"
    if nonfinite:
        heading += f" — {nonfinite} non-finite value{'' if nonfinite == 1 else 's'} not drawn"
    return heading


def series_range(values: Sequence[float] | np.ndarray, level: float | None = None) -> tuple[float, float, bool]:
    """The y range that shows a series' draws, and whether ``level`` (a target) belongs on it.

    A level farther from the draws than their own span is left off the axis: drawn
    to scale, the draws would sit in a flat row on one edge. The range then keeps
    to the draws (10% margins); otherwise it also reaches the level.
    """
    finite = [float(v) for v in values if math.isfinite(float(v))]
    lo, hi = (min(finite), max(finite)) if finite else (level or 0.0, level or 0.0)
    span = hi - lo or abs(hi) * 0.1 or 1.0
    on_scale = level is not None and lo - span <= level <= hi + span
    if level is not None and on_scale:
        lo, hi = min(lo, level), max(hi, level)
    return lo - 0.1 * span, hi + 0.1 * span, on_scale


def off_scale_note(level: float, values: Sequence[float] | np.ndarray) -> str:
    """``↑ ε target / 2 = 5.00 (above the plot, 1e+03× the largest draw)``: where an off-scale target is."""
    top = max((float(v) for v in values if math.isfinite(float(v))), default=0.0)
    above = level > top
    factor = f", {level / top:.3g}× the largest draw" if above and top > 0 else ""
    return f"{'↑' if above else '↓'} ε target / 2 = {_fmt(level)} ({'above' if above else 'below'} the plot{factor})"


def _target_line(figure: go.Figure, values: np.ndarray, level: float) -> None:
    """The ε target / 2 as a line when it lies near the series; far off, the axis keeps to the data and a note
    at the edge says where the target is (see ``series_range``)."""
    low, high, on_scale = series_range(values, level)
    if on_scale:
        figure.add_hline(y=level, name="epsilon target / 2", line={"color": _TARGET_COLOR, "width": 2},
                         annotation_text=f"ε target / 2 = {_fmt(level)}", annotation_position="top left",
                         annotation_font_color=_TARGET_COLOR)
        return
    above = level > high
    figure.update_yaxes(range=[low, high])
    figure.add_annotation(
        name="epsilon target / 2", xref="paper", yref="paper", x=0.0, y=1.0 if above else 0.0,
        xanchor="left", yanchor="top" if above else "bottom", text=off_scale_note(level, values),
        showarrow=False, font={"color": _TARGET_COLOR}, bgcolor="rgba(255, 255, 255, 0.8)",
    )


def f1_violin_figure(
    f1_macro: Sequence[float],
    f1_weighted: Sequence[float],
    *,
    baseline_macro: float,
    baseline_weighted: float,
    max_degradation: float = 0.10,
) -> go.Figure:
    """Macro- and weighted-F1 across posterior draws against the non-private baseline.

    Two violins (traces ``"macro-F1"`` at x = 0 and ``"weighted-F1"`` at x = 1, every
    draw shown as a point) and, across each violin only, a solid baseline line
    (``"<metric> baseline"``) and a dashed threshold line at
    ``(1 − max_degradation) · baseline`` (``"<metric> threshold"``): the target is
    met when the bulk of a violin sits above its dashed line. Non-finite F1 values
    are left out and counted in the title.
    """
    if not 0.0 <= max_degradation < 1.0:
        raise ValueError(f"max_degradation must be in [0, 1), got {max_degradation}")
    figure = go.Figure()
    colors = ("#1f77b4", "#ff7f0e")
    dropped = 0
    metrics = (("macro-F1", f1_macro, baseline_macro), ("weighted-F1", f1_weighted, baseline_weighted))
    for position, ((name, raw, baseline), color) in enumerate(zip(metrics, colors)):
        values = np.asarray(raw, dtype=float).ravel()
        keep = np.isfinite(values)
        dropped += int((~keep).sum())
        figure.add_trace(go.Violin(
            y=values[keep], x0=position, name=name, points="all", pointpos=0, jitter=0.3,
            box={"visible": True}, meanline={"visible": False}, line={"color": color}, opacity=0.75,
            hovertemplate=f"{name} %{{y:.4f}}<extra></extra>", width=0.7,
        ))
        _baseline_marks(figure, name=name, position=position, baseline=baseline, max_degradation=max_degradation)
    num_draws = max(len(np.asarray(f1_macro).ravel()), len(np.asarray(f1_weighted).ravel()))
    heading = f"F1 across {_plural(num_draws, 'posterior draw')} — threshold (1 − {max_degradation:g}) · baseline"
    if dropped:
        heading += f" — {dropped} non-finite value{'' if dropped == 1 else 's'} not drawn"
    figure.update_layout(
        title={"text": heading},
        xaxis={"tickvals": [0, 1], "ticktext": ["macro-F1", "weighted-F1"], "range": [-0.6, 1.9]},
        yaxis={"title": {"text": "F1 on the test set"}},
        violinmode="overlay",
    )
    return figure


def _baseline_marks(figure: go.Figure, *, name: str, position: int, baseline: float,
                    max_degradation: float) -> None:
    """Across one violin: the baseline (solid) and the threshold (1 − max_degradation) · baseline (dashed)."""
    threshold = (1 - max_degradation) * baseline
    span = [position - 0.4, position + 0.4]
    figure.add_trace(go.Scatter(
        x=span, y=[baseline, baseline], name=f"{name} baseline", mode="lines",
        line={"color": "black", "width": 2}, legendgroup=name,
        hovertemplate=f"{name} non-private baseline {baseline:.4f}<extra></extra>",
    ))
    figure.add_trace(go.Scatter(
        x=span, y=[threshold, threshold], name=f"{name} threshold", mode="lines",
        line={"color": _SPIKE_COLOR, "width": 2, "dash": "dash"}, legendgroup=name,
        hovertemplate=f"{name} threshold (1 − {max_degradation:g}) · baseline = {threshold:.4f}<extra></extra>",
    ))
    figure.add_annotation(x=position + 0.4, y=baseline, text=f"baseline {baseline:.3f}", showarrow=False,
                          xanchor="left", yanchor="bottom", font={"size": 11})
    figure.add_annotation(x=position + 0.4, y=threshold, text=f"(1 − {max_degradation:g}) · baseline = "
                          f"{threshold:.3f}", showarrow=False, xanchor="left", yanchor="top",
                          font={"size": 11, "color": _SPIKE_COLOR})


def _fit_hover(fit: Mapping[str, Any]) -> str:
    parts = []
    if fit.get("number") is not None:
        parts.append(f"trial {fit['number']}")
    for key, text in (("c", "c"), ("ft_epochs", "epochs")):
        if fit.get(key) is not None:
            parts.append(f"{text} = {fit[key]:g}")
    parts.append(f"ε = {_fmt(fit.get('epsilon'))}")
    if fit.get("f1_macro") is not None:
        parts.append(f"macro-F1 = {float(fit['f1_macro']):.3f}")
    if fit.get("label") is not None:
        parts.append(str(fit["label"]))
    if fit.get("feasible"):
        parts.append("feasible")
    elif fit.get("missed"):
        parts.append(f"infeasible: missed {fit['missed']}")
    return "<br>".join(parts)


def _check_labels(fits: Sequence[Mapping[str, Any]]) -> None:
    for fit in fits:
        label = fit.get("label")
        if label is not None and label not in LABEL_SYMBOLS:
            raise ValueError(f"unknown diagnosis label {label!r}; expected one of {sorted(LABEL_SYMBOLS)}")


def _epsilon_coloraxis(epsilons: Sequence[float | None], epsilon_cap: float | None) -> dict[str, Any]:
    """Continuous ε colours; with a target, white at the target on a 0 to 2·target scale
    (blue below, red above, saturated beyond twice the target)."""
    axis: dict[str, Any] = {"colorbar": {"title": {"text": "ε" if epsilon_cap is None
                                                   else f"ε (target {_fmt(epsilon_cap)})"}}}
    finite = [e for e in epsilons if e is not None and _finite(e)]
    if epsilon_cap is not None:
        axis.update(colorscale="RdBu_r", cmin=0.0, cmax=2.0 * float(epsilon_cap))
        return axis
    axis.update(colorscale="Viridis")
    if finite and min(finite) == max(finite):  # one colour value: give the scale some width
        axis.update(cmin=min(finite) - 0.5, cmax=max(finite) + 0.5)
    return axis


def search_grid_figure(fits: Sequence[Mapping[str, Any]], *, epsilon_cap: float | None = None) -> go.Figure:
    """The search over (c, fine-tuning epochs): one marker per fit.

    ``fits`` are mappings with ``c``, ``ft_epochs``, ``epsilon``, ``label``
    (underfit / well_fit / overfit / catastrophic / not_judged), ``feasible`` and optionally
    ``number`` (trial number). x = epochs, y = c. One trace per label present,
    named by the label and drawn with its ``LABEL_SYMBOLS`` symbol, coloured by ε
    on a shared colour axis (``marker.color`` holds the ε values); fits with an
    infinite or NaN ε go into a grey trace ``"<label> (ε not finite)"`` of the same
    legend group. A ring trace ``"feasible"`` marks the feasible fits, and, when
    trial numbers are given, a dotted ``"search order"`` line joins the fits in
    trial order with the numbers written next to them: the guide's picture of its
    search (1, 7) → (1, 10) → (0.85, 7) → ….
    """
    fits = list(fits)
    _check_labels(fits)
    figure = go.Figure()
    _search_order_trace(figure, [f for f in fits if f.get("number") is not None])
    for label, symbol in LABEL_SYMBOLS.items():
        _label_traces(figure, [f for f in fits if f.get("label") == label], label=label, symbol=symbol)
    unlabelled = [f for f in fits if f.get("label") is None]
    if unlabelled:
        figure.add_trace(go.Scatter(
            x=[f["ft_epochs"] for f in unlabelled], y=[f["c"] for f in unlabelled], name="no diagnosis",
            mode="markers", text=[_fit_hover(f) for f in unlabelled], hovertemplate="%{text}<extra></extra>",
            marker={"symbol": "square", "size": 12,
                    "color": [NONFINITE_COLOR if not _finite(f.get("epsilon")) else "white" for f in unlabelled],
                    "line": {"color": "black", "width": 1}},
        ))
    feasible = [f for f in fits if f.get("feasible")]
    if feasible:
        figure.add_trace(go.Scatter(
            x=[f["ft_epochs"] for f in feasible], y=[f["c"] for f in feasible], name="feasible", mode="markers",
            text=[_fit_hover(f) for f in feasible], hovertemplate="%{text}<extra></extra>",
            marker={"symbol": "circle-open", "size": 26, "color": _FEASIBLE_COLOR, "line": {"width": 3}},
        ))

    counts = f"{_plural(len(fits), 'fit')}, {len(feasible)} feasible"
    if epsilon_cap is not None:
        counts += f" (ε target {_fmt(epsilon_cap)})"
    figure.update_layout(
        title={"text": f"search over (c, fine-tuning epochs)<br><sup>{counts}</sup>"},
        xaxis={"title": {"text": "fine-tuning epochs E"}, **_ticks(f["ft_epochs"] for f in fits)},
        yaxis={"title": {"text": "c (slope of the privacy weights)"}, **_ticks(f["c"] for f in fits)},
        coloraxis=_epsilon_coloraxis([f.get("epsilon") for f in fits], epsilon_cap),
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0.0},  # below: the colour bar is on the right
    )
    return figure


def _search_order_trace(figure: go.Figure, numbered: list[Mapping[str, Any]]) -> None:
    """A dotted line through the numbered fits in trial order, each marked with its number."""
    if not numbered:
        return
    ordered = sorted(numbered, key=lambda f: f["number"])
    figure.add_trace(go.Scatter(
        x=[f["ft_epochs"] for f in ordered], y=[f["c"] for f in ordered], name="search order",
        mode="lines+text", text=[f"#{f['number']}" for f in ordered], textposition="top right",
        line={"color": "rgba(80, 80, 80, 0.5)", "width": 1, "dash": "dot"}, hoverinfo="skip",
    ))


def _label_traces(figure: go.Figure, group: list[Mapping[str, Any]], *, label: str, symbol: str) -> None:
    """One diagnosis label's fits: coloured by ε on the shared axis, those with a non-finite ε in grey."""
    finite = [f for f in group if _finite(f.get("epsilon"))]
    other = [f for f in group if not _finite(f.get("epsilon"))]
    common = {"mode": "markers", "legendgroup": label, "hovertemplate": "%{text}<extra></extra>"}
    if finite:
        figure.add_trace(go.Scatter(
            x=[f["ft_epochs"] for f in finite], y=[f["c"] for f in finite], name=label,
            text=[_fit_hover(f) for f in finite],
            marker={"symbol": symbol, "size": 14, "color": [float(f["epsilon"]) for f in finite],
                    "coloraxis": "coloraxis", "line": {"color": "black", "width": 1}},
            **common,
        ))
    if other:
        figure.add_trace(go.Scatter(
            x=[f["ft_epochs"] for f in other], y=[f["c"] for f in other], name=f"{label} (ε not finite)",
            text=[_fit_hover(f) for f in other],
            marker={"symbol": symbol, "size": 14, "color": NONFINITE_COLOR, "line": {"color": "black", "width": 1}},
            **common,
        ))


def _ticks(values: Any, *, most: int = 12) -> dict[str, Any]:
    """A tick at each searched value when they are few and far enough apart not to overlap; else plotly's own."""
    ticks = sorted(set(values))
    if not 0 < len(ticks) <= most:
        return {}
    span = ticks[-1] - ticks[0]
    if len(ticks) > 1 and min(b - a for a, b in zip(ticks, ticks[1:])) < span / (2 * most):
        return {}
    return {"tickvals": ticks, "ticktext": [f"{v:.3g}" for v in ticks]}


def tradeoff_figure(
    fits: Sequence[Mapping[str, Any]],
    *,
    epsilon_cap: float | None = None,
    f1_macro_threshold: float | None = None,
    statistic: str = "median",
) -> go.Figure:
    """ε (x) against macro-F1 (y), one point per fit, green stars for the feasible ones only.

    ``fits`` are mappings with ``epsilon``, ``f1_macro`` (the ``statistic`` the
    targets judge, ``median`` or ``q10``), ``feasible`` and optionally ``missed``
    (what an infeasible fit missed, shown on hover), ``c``, ``ft_epochs``,
    ``label``, ``number``. Traces: ``"feasible"`` (every target met),
    ``"infeasible"`` and ``"infeasible inside the box"`` (ε and macro-F1 within
    the box, yet a target the axes do not show was missed: weighted-F1, the fit's
    shape, or an audit that refuted ε). A vertical line marks the ε target and a
    horizontal one the macro-F1 threshold; with both, the box ε ∈ [0, target],
    macro-F1 ∈ [threshold, 1] is shaded grey (shape ``"epsilon and macro-F1
    box"``): it is what the two axes show, not the feasible set. Fits with a
    non-finite ε or macro-F1 have no place on the axes: they are left out and
    counted in the title.
    """
    fits = list(fits)
    drawable = [f for f in fits if _finite(f.get("epsilon")) and _finite(f.get("f1_macro"))]
    left_out = len(fits) - len(drawable)
    figure = go.Figure()

    def in_box(fit: Mapping[str, Any]) -> bool:
        return (epsilon_cap is not None and f1_macro_threshold is not None
                and float(fit["epsilon"]) <= epsilon_cap and float(fit["f1_macro"]) >= f1_macro_threshold)

    infeasible = [f for f in drawable if not f.get("feasible")]
    for name, group, marker in (
        ("infeasible", [f for f in infeasible if not in_box(f)],
         {"symbol": "circle", "size": 10, "color": _SERIES_COLOR, "opacity": 0.8}),
        ("infeasible inside the box", [f for f in infeasible if in_box(f)],
         {"symbol": "circle-x-open", "size": 12, "color": _SPIKE_COLOR}),
        ("feasible", [f for f in drawable if f.get("feasible")],
         {"symbol": "star", "size": 16, "color": _FEASIBLE_COLOR, "line": {"color": "black", "width": 1}}),
    ):
        if group:
            figure.add_trace(go.Scatter(
                x=[float(f["epsilon"]) for f in group], y=[float(f["f1_macro"]) for f in group], name=name,
                mode="markers", marker=marker, text=[_fit_hover(f) for f in group],
                hovertemplate="%{text}<extra></extra>",
            ))
    _target_marks(figure, epsilon_cap=epsilon_cap, f1_macro_threshold=f1_macro_threshold, statistic=statistic)
    num_feasible = sum(bool(f.get("feasible")) for f in fits)
    counts = f"{_plural(len(fits), 'fit')}, {num_feasible} feasible (★)"
    if left_out:
        counts += f" — {left_out} with non-finite ε or F1 not drawn"
    figure.update_layout(
        title={"text": f"privacy–utility trade-off<br><sup>{counts}</sup>"},
        xaxis={"title": {"text": "ε (lower is more private)"}},
        yaxis={"title": {"text": f"macro-F1 {statistic} (test set)"}},
    )
    return figure


def _target_marks(figure: go.Figure, *, epsilon_cap: float | None, f1_macro_threshold: float | None,
                  statistic: str) -> None:
    """The ε target (vertical), the macro-F1 threshold (horizontal) and, with both, the box inside the two (grey:
    feasibility also needs the targets the axes do not show)."""
    if epsilon_cap is not None and f1_macro_threshold is not None:
        figure.add_shape(
            type="rect", name="epsilon and macro-F1 box", x0=0.0, x1=float(epsilon_cap),
            y0=float(f1_macro_threshold), y1=1.0, xref="x", yref="y", fillcolor="rgba(128, 128, 128, 0.12)",
            line={"width": 0}, layer="below",
        )
        figure.add_annotation(x=0.0, y=1.0, xanchor="left", yanchor="top", showarrow=False,
                              text=f"ε ≤ target and macro-F1 {statistic} ≥ threshold; feasible (★) also needs "
                                   "every other target", font={"color": "#555555"})
    if epsilon_cap is not None:
        figure.add_vline(x=epsilon_cap, name="epsilon target", line={"color": _TARGET_COLOR, "dash": "dash"},
                         annotation_text=f"ε target = {_fmt(epsilon_cap)}", annotation_position="top right")
    if f1_macro_threshold is not None:
        figure.add_hline(y=f1_macro_threshold, name="macro-F1 threshold", line={"color": _SPIKE_COLOR, "dash": "dash"},
                         annotation_text=f"macro-F1 {statistic} threshold = {f1_macro_threshold:.3f}",
                         annotation_position="bottom right")


def f1_by_class_size_figure(rows: Sequence[Mapping[str, Any]]) -> go.Figure:
    """Macro-F1 of each method overall and on the top and bottom quartiles of classes by training-set size.

    ``rows`` are mappings with ``method``, ``f1_macro``, ``f1_top_quartile`` and
    ``f1_bottom_quartile`` (and optionally ``epsilon``, shown in the legend): one
    trace per group of classes, one bar per method. The bottom quartile is where
    down-weighting risky (rare) records costs utility. A quartile whose F1 is
    withheld (None: too few classes in it) gets no trace, and the subtitle says so.
    """
    methods = [f"{row['method']}" + (f"<br>(ε {_fmt(row['epsilon'])})" if row.get("epsilon") is not None else "")
               for row in rows]
    figure = go.Figure()
    withheld = False
    for key, name in (("f1_macro", "all classes"), ("f1_top_quartile", "largest 25% of classes"),
                      ("f1_bottom_quartile", "smallest 25% of classes")):
        if any(row.get(key) is None for row in rows):
            withheld = True
            continue
        figure.add_trace(go.Bar(x=methods, y=[float(row[key]) for row in rows], name=name,
                                hovertemplate="%{x}<br>" + name + ": %{y:.3f}<extra></extra>"))
    subtitle = "macro-F1 on the test set" + ("; by quartile withheld: too few classes in each" if withheld else "")
    figure.update_layout(  # the legend above the bars, the method names below them: they cannot overlap
        barmode="group", title={"text": f"F1 by class size<br><sup>{subtitle}</sup>"},
        yaxis={"title": {"text": "macro-F1"}, "range": [0, 1]}, xaxis={"automargin": True},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "xanchor": "right", "x": 1.0},
        margin={"t": 110},
    )
    return figure


def write_html(figure: go.Figure, path: str | PathLike[str]) -> Path:
    """Write ``figure`` as a self-contained HTML file (plotly.js embedded, so it opens offline).

    Parent folders are created; returns the path written.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    figure.write_html(target, include_plotlyjs=True, full_html=True)
    return target
