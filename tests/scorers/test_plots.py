"""The figures of ``scorers.plots`` checked as data (trace names, values, shapes), not as pixels."""

from __future__ import annotations

import json
import math

import numpy as np
import plotly.graph_objects as go
import pytest

from scorers import score_max_delta, spike_mask
from scorers.plots import (
    LABEL_SYMBOLS,
    NONFINITE_COLOR,
    f1_by_class_size_figure,
    f1_violin_figure,
    max_delta_figure,
    search_grid_figure,
    tradeoff_figure,
    write_html,
)

SPIKES = (17, 250, 481)  # 0-based indices of the planted spikes


def _trace(figure: go.Figure, name: str) -> go.BaseTraceType:
    matches = [t for t in figure.data if t.name == name]
    assert len(matches) == 1, f"expected one trace named {name!r}, got {[t.name for t in figure.data]}"
    return matches[0]


def _shape(figure: go.Figure, name: str) -> object:
    matches = [s for s in figure.layout.shapes if s.name == name]
    assert len(matches) == 1, f"expected one shape named {name!r}, got {[s.name for s in figure.layout.shapes]}"
    return matches[0]


@pytest.fixture
def spiky_series() -> np.ndarray:
    """500 draws of N(10, 0.2) with three values raised by +3 (15 robust SDs: unmistakable spikes)."""
    series = np.random.default_rng(0).normal(10.0, 0.2, size=500)
    series[list(SPIKES)] += 3.0
    return series


# --- max_delta_figure -----------------------------------------------------------------------------------------

def test_max_delta_series_trace_holds_every_draw(spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series)
    series = _trace(figure, "max delta")
    assert series.type == "scatter" and series.mode == "markers"
    np.testing.assert_array_equal(series.x, np.arange(1, 501))
    np.testing.assert_array_equal(series.y, spiky_series)


def test_spike_trace_holds_exactly_the_planted_spikes(spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series)
    spikes = _trace(figure, "spikes")
    np.testing.assert_array_equal(spikes.x, np.array(SPIKES) + 1)  # draws are numbered from 1
    np.testing.assert_array_equal(spikes.y, spiky_series[list(SPIKES)])
    assert figure.layout.title.subtitle.text.count("3 spikes") == 1


def test_bulk_band_spans_the_quartiles_of_the_non_spike_draws(spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series)
    scores = score_max_delta(spiky_series)
    bulk = spiky_series[~spike_mask(spiky_series, scores)]
    q25, q50, q75 = np.percentile(bulk, [25, 50, 75])
    band = _trace(figure, "bulk IQR")
    assert band.fill == "toself"
    assert min(band.y) == pytest.approx(q25) and max(band.y) == pytest.approx(q75)
    assert (min(band.x), max(band.x)) == (1, 500)
    median = _trace(figure, "bulk median")
    assert list(median.y) == pytest.approx([q50, q50])


def test_target_line_at_half_the_target_and_epsilon_in_title(spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series, epsilon_cap=30.0)
    line = _shape(figure, "epsilon target / 2")
    assert line.y0 == line.y1 == 15.0
    assert any(a.text == "ε target / 2 = 15.00" for a in figure.layout.annotations)
    epsilon = 2 * spiky_series.max()
    title = figure.layout.title.text
    assert f"ε = {epsilon:.2f}" in title and "max delta per draw" in title
    assert "lower bound" not in title and "non-finite" not in title


def test_target_taken_from_given_scores_and_custom_title(spiky_series: np.ndarray) -> None:
    scores = score_max_delta(spiky_series, epsilon_cap=20.0)
    figure = max_delta_figure(spiky_series, scores=scores, title="trial 4", epsilon_is_lower_bound=True)
    assert _shape(figure, "epsilon target / 2").y0 == 10.0
    title = figure.layout.title.text
    assert title.startswith("trial 4 — ε = ") and "(lower bound)" in title


def test_a_target_far_above_the_series_does_not_flatten_it() -> None:
    """The demo's series (about 0.005) against a target of 10: the axis keeps to the data, the target is a note."""
    series = 0.005 + 0.0002 * np.random.default_rng(3).standard_normal(60)
    figure = max_delta_figure(series, epsilon_cap=10.0)
    assert "epsilon target / 2" not in [s.name for s in figure.layout.shapes]
    low, high = figure.layout.yaxis.range
    assert series.min() - 0.0005 < low < series.min() and series.max() < high < series.max() + 0.0005
    (note,) = [a for a in figure.layout.annotations if a.name == "epsilon target / 2"]
    assert note.text.startswith("↑ ε target / 2 = 5.00 (above the plot, ") and note.yref == "paper"


def test_a_target_far_below_the_series_is_noted_below() -> None:
    series = 10 + 0.1 * np.random.default_rng(4).standard_normal(40)
    figure = max_delta_figure(series, epsilon_cap=0.02)
    (note,) = [a for a in figure.layout.annotations if a.name == "epsilon target / 2"]
    assert note.text == "↓ ε target / 2 = 0.01 (below the plot)"
    assert figure.layout.yaxis.range[0] > 9


def test_no_target_no_target_line(spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series)
    assert [s.name for s in figure.layout.shapes] == ["spike threshold"]
    assert _shape(figure, "spike threshold").y0 == pytest.approx(score_max_delta(spiky_series).spike_threshold)


def test_non_finite_values_are_skipped_and_counted(spiky_series: np.ndarray) -> None:
    series = spiky_series.copy()
    series[[3, 40]] = np.nan
    series[99] = np.inf
    figure = max_delta_figure(series, epsilon_cap=25.0)
    drawn = _trace(figure, "max delta")
    assert len(drawn.x) == 497 and np.isfinite(drawn.y).all()
    assert not {4, 41, 100} & set(drawn.x)
    assert "3 non-finite values not drawn" in figure.layout.title.text
    assert "ε = NaN" in figure.layout.title.text
    np.testing.assert_array_equal(_trace(figure, "spikes").x, np.array(SPIKES) + 1)


@pytest.mark.parametrize("series", [[], [math.nan] * 5, [math.inf, 1.0, 2.0], [3.0], [5.0] * 20])
def test_degenerate_series_do_not_crash(series: list[float]) -> None:
    figure = max_delta_figure(series, epsilon_cap=10.0)
    assert "ε = " in figure.layout.title.text
    assert len(_trace(figure, "spikes").x) == 0
    figure.to_json()  # serialisable


# --- f1_violin_figure -----------------------------------------------------------------------------------------

def test_violins_hold_the_f1_values_and_threshold_lines() -> None:
    rng = np.random.default_rng(1)
    macro, weighted = rng.uniform(0.15, 0.2, 30), rng.uniform(0.65, 0.7, 30)
    figure = f1_violin_figure(macro, weighted, baseline_macro=0.2, baseline_weighted=0.71, max_degradation=0.1)
    for name, values, x, baseline in (("macro-F1", macro, 0, 0.2), ("weighted-F1", weighted, 1, 0.71)):
        violin = _trace(figure, name)
        assert violin.type == "violin" and violin.points == "all" and violin.x0 == x
        np.testing.assert_array_equal(violin.y, values)
        base = _trace(figure, f"{name} baseline")
        threshold = _trace(figure, f"{name} threshold")
        assert list(base.y) == [baseline, baseline]
        assert list(threshold.y) == pytest.approx([0.9 * baseline] * 2)
        assert min(threshold.x) > x - 0.5 and max(threshold.x) < x + 0.5  # limited to its violin
    assert "(1 − 0.1) · baseline" in figure.layout.title.text


def test_violin_drops_non_finite_and_checks_degradation() -> None:
    figure = f1_violin_figure([0.1, math.nan, 0.2], [0.5, 0.6, 0.7], baseline_macro=0.2, baseline_weighted=0.7,
                              max_degradation=0.25)
    assert list(_trace(figure, "macro-F1").y) == [0.1, 0.2]
    assert list(_trace(figure, "weighted-F1 threshold").y) == pytest.approx([0.525, 0.525])
    assert "1 non-finite value not drawn" in figure.layout.title.text
    with pytest.raises(ValueError):
        f1_violin_figure([0.1], [0.5], baseline_macro=0.2, baseline_weighted=0.7, max_degradation=1.0)


# --- search_grid_figure ---------------------------------------------------------------------------------------

# The practical guide's case study: 8 fits, the last meets every target.
GUIDE_FITS = [
    {"number": 0, "c": 1.0, "ft_epochs": 7, "epsilon": 18.5, "label": "underfit", "feasible": False},
    {"number": 1, "c": 1.0, "ft_epochs": 10, "epsilon": 14.2, "label": "overfit", "feasible": False},
    {"number": 2, "c": 0.85, "ft_epochs": 7, "epsilon": 13.1, "label": "underfit", "feasible": False},
    {"number": 3, "c": 0.85, "ft_epochs": 10, "epsilon": math.inf, "label": "catastrophic", "feasible": False},
    {"number": 4, "c": 0.85, "ft_epochs": 13, "epsilon": 11.7, "label": "overfit", "feasible": False},
    {"number": 5, "c": 0.7, "ft_epochs": 7, "epsilon": 12.0, "label": "underfit", "feasible": False},
    {"number": 6, "c": 0.7, "ft_epochs": 10, "epsilon": math.nan, "label": "catastrophic", "feasible": False},
    {"number": 7, "c": 0.7, "ft_epochs": 13, "epsilon": 9.4, "label": "well_fit", "feasible": True},
]


def test_grid_symbols_by_label_and_colours_are_epsilon() -> None:
    figure = search_grid_figure(GUIDE_FITS, epsilon_cap=10.0)
    for label in ("underfit", "overfit", "well_fit"):
        trace = _trace(figure, label)
        fits = [f for f in GUIDE_FITS if f["label"] == label]
        assert trace.marker.symbol == LABEL_SYMBOLS[label]
        assert list(trace.x) == [f["ft_epochs"] for f in fits]
        assert list(trace.y) == [f["c"] for f in fits]
        assert list(trace.marker.color) == [f["epsilon"] for f in fits]
        assert trace.marker.coloraxis == "coloraxis"
    assert len(set(LABEL_SYMBOLS.values())) == len(LABEL_SYMBOLS)
    axis = figure.layout.coloraxis
    assert (axis.cmin, axis.cmax) == (0.0, 20.0)  # white at the target of 10
    assert axis.colorbar.title.text.startswith("ε")
    assert "8 fits, 1 feasible" in figure.layout.title.text


def test_grid_non_finite_epsilon_is_grey() -> None:
    figure = search_grid_figure(GUIDE_FITS)
    grey = _trace(figure, "catastrophic (ε not finite)")
    assert grey.marker.color == NONFINITE_COLOR and grey.marker.symbol == LABEL_SYMBOLS["catastrophic"]
    assert list(zip(grey.x, grey.y)) == [(10, 0.85), (10, 0.7)]
    assert "catastrophic" not in [t.name for t in figure.data]  # no finite-ε catastrophic fit
    for trace in figure.data:  # no non-finite value reaches a colour scale
        if trace.marker.coloraxis:
            assert np.isfinite(np.asarray(trace.marker.color, dtype=float)).all()


def test_grid_feasible_highlight_hover_and_search_order() -> None:
    figure = search_grid_figure(GUIDE_FITS, epsilon_cap=10.0)
    feasible = _trace(figure, "feasible")
    assert list(zip(feasible.x, feasible.y)) == [(13, 0.7)]
    assert feasible.marker.symbol == "circle-open"
    hover = feasible.text[0]
    assert all(part in hover for part in ("c = 0.7", "epochs = 13", "ε = 9.40", "well_fit", "trial 7"))
    path = _trace(figure, "search order")
    assert list(path.x) == [f["ft_epochs"] for f in GUIDE_FITS] and list(path.text)[-1] == "#7"
    assert list(figure.layout.xaxis.tickvals) == [7, 10, 13]


def test_grid_rejects_unknown_label_and_handles_no_numbers() -> None:
    with pytest.raises(ValueError, match="unknown diagnosis label"):
        search_grid_figure([{"c": 1.0, "ft_epochs": 7, "epsilon": 5.0, "label": "great", "feasible": True}])
    fits = [{k: v for k, v in f.items() if k != "number"} for f in GUIDE_FITS]
    figure = search_grid_figure(fits)
    assert "search order" not in [t.name for t in figure.data]
    assert "feasible" in [t.name for t in figure.data]
    assert len(search_grid_figure([]).data) == 0


# --- tradeoff_figure ------------------------------------------------------------------------------------------

TRADEOFF_FITS = [
    {"epsilon": 18.5, "f1_macro": 0.19, "feasible": False, "c": 1.0, "ft_epochs": 7, "label": "underfit"},
    {"epsilon": 9.4, "f1_macro": 0.185, "feasible": True, "c": 0.7, "ft_epochs": 13, "label": "well_fit"},
    {"epsilon": 8.0, "f1_macro": 0.12, "feasible": False},
    {"epsilon": math.inf, "f1_macro": 0.05, "feasible": False, "label": "catastrophic"},
]


def test_tradeoff_points_and_feasible_rectangle() -> None:
    figure = tradeoff_figure(TRADEOFF_FITS, epsilon_cap=10.0, f1_macro_threshold=0.18)
    assert list(zip(_trace(figure, "infeasible").x, _trace(figure, "infeasible").y)) == [(18.5, 0.19), (8.0, 0.12)]
    feasible = _trace(figure, "feasible")
    assert list(zip(feasible.x, feasible.y)) == [(9.4, 0.185)]
    assert feasible.marker.symbol != _trace(figure, "infeasible").marker.symbol
    rect = _shape(figure, "epsilon and macro-F1 box")
    assert rect.type == "rect" and (rect.x0, rect.x1, rect.y0, rect.y1) == (0.0, 10.0, 0.18, 1.0)
    assert _shape(figure, "epsilon target").x0 == 10.0
    assert _shape(figure, "macro-F1 threshold").y0 == 0.18
    assert "1 with non-finite ε or F1 not drawn" in figure.layout.title.text
    assert "c = 0.7" in feasible.text[0]


def test_tradeoff_rectangle_only_with_both_bounds() -> None:
    figure = tradeoff_figure(TRADEOFF_FITS, epsilon_cap=10.0)
    assert [s.name for s in figure.layout.shapes] == ["epsilon target"]
    assert len(tradeoff_figure(TRADEOFF_FITS).layout.shapes) == 0


# --- write_html -----------------------------------------------------------------------------------------------

def test_write_html_is_self_contained(tmp_path, spiky_series: np.ndarray) -> None:
    figure = max_delta_figure(spiky_series, epsilon_cap=30.0, title="trial 12")
    path = write_html(figure, tmp_path / "deep" / "folder" / "max_delta.html")
    assert path == tmp_path / "deep" / "folder" / "max_delta.html" and path.is_file()
    html = path.read_text(encoding="utf-8")
    assert "plotly" in html
    assert json.dumps(figure.layout.title.text) in html  # the title, as plotly's JSON escapes it
    assert figure.layout.title.text.startswith("trial 12 — ε = ")
    assert "plotly.js v" in html and path.stat().st_size > 1_000_000  # plotly.js embedded: opens offline
    assert '<script src="http' not in html


def test_grid_ticks_only_where_they_cannot_overlap_and_legend_clear_of_the_colour_bar() -> None:
    close = [{"c": c, "ft_epochs": 7, "epsilon": 1.0, "label": "well_fit", "feasible": False}
             for c in (0.110, 0.113, 0.5, 1.2)]
    figure = search_grid_figure(close)
    assert figure.layout.yaxis.tickvals is None  # 0.110 and 0.113 would print on top of each other
    assert list(search_grid_figure(GUIDE_FITS).layout.yaxis.ticktext) == ["0.7", "0.85", "1"]
    assert figure.layout.legend.orientation == "h" and figure.layout.legend.y < 0


def test_tradeoff_marks_infeasible_fits_inside_the_shaded_box_with_what_they_missed() -> None:
    inside = {"epsilon": 5.0, "f1_macro": 0.5, "feasible": False, "label": "overfit", "missed": "fit_spikes +0.4"}
    figure = tradeoff_figure([*TRADEOFF_FITS, inside], epsilon_cap=10.0, f1_macro_threshold=0.18)
    marked = _trace(figure, "infeasible inside the box")
    assert list(zip(marked.x, marked.y)) == [(5.0, 0.5)]
    assert marked.text[0].endswith("infeasible: missed fit_spikes +0.4")
    assert (5.0, 0.5) not in list(zip(_trace(figure, "infeasible").x, _trace(figure, "infeasible").y))
    assert "<br>" in figure.layout.title.text  # counts on a second line: the title is not cut off
    assert _shape(figure, "epsilon and macro-F1 box").fillcolor == "rgba(128, 128, 128, 0.12)"  # grey: not "feasible"
    assert [a.text for a in figure.layout.annotations][0] == ("ε ≤ target and macro-F1 median ≥ threshold; feasible "
                                                              "(★) also needs every other target")


def test_class_size_chart_keeps_labels_and_legend_apart() -> None:
    """Method names (with ε on a second line) below the bars, the legend above them, margins made to fit."""
    rows = [{"method": "reweighted SWAG-PPM (k = 0.95) (one released draw)", "epsilon": 0.0097, "f1_macro": 0.6,
             "f1_top_quartile": 0.7, "f1_bottom_quartile": 0.4},
            {"method": "non-private (stage 1)", "epsilon": None, "f1_macro": 0.7, "f1_top_quartile": 0.8,
             "f1_bottom_quartile": 0.5}]
    figure = f1_by_class_size_figure(rows)
    assert list(figure.data[0].x) == ["reweighted SWAG-PPM (k = 0.95) (one released draw)<br>(ε 0.0097)",
                                      "non-private (stage 1)"]
    assert figure.layout.legend.y >= 1 and figure.layout.legend.yanchor == "bottom"
    assert figure.layout.xaxis.automargin is True
