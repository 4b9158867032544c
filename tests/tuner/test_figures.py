"""``tuner.figures`` directly: which figures a trial and a study get, from which stored values, titled how."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import plotly.graph_objects as go
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from plotly.offline import get_plotlyjs

from swagppm import SWAGPPMResult
from tests.tuner.helpers import result, tight
from tuner.config import StudyConfig
from tuner.figures import figures_html, fits_for_figures, study_figures, trial_figures
from tuner.outcome import judge
from tuner.record import FAILURE, TrialRecord, constraint_attrs
from tuner.study import open_study

DISTRIBUTIONS = {"c": FloatDistribution(0.3, 1.2), "ft_epochs": IntDistribution(4, 8)}
SERIES = tight(3.0, n=40)
EPSILON = 2 * max(SERIES)  # the feasible fit's ε: about 6.1, below the target 10
PLOTLY_JS = get_plotlyjs()  # the library every page embeds once


@pytest.fixture
def config(study_file: Callable[..., Path], tmp_path: Path) -> StudyConfig:
    """The small study with target ε 10 in a journal file."""
    path = study_file(targets={"epsilon_cap": 10.0})
    return StudyConfig.from_toml(path).with_storage(f"journal:{tmp_path / 's.log'}")


def early_stop() -> SWAGPPMResult:
    return result([10.0] * 3, c=1.1, epochs=5, epsilon=20.0, epsilon_is_lower_bound=True, draws_skipped=9,
                  f1_macro=[], f1_weighted=[])


def crashed() -> SWAGPPMResult:
    return result([], c=0.9, epochs=8, epsilon=math.inf, failure="training diverged", f1_macro=[], f1_weighted=[])


def record_of(config: StudyConfig, fit: SWAGPPMResult) -> TrialRecord:
    return judge(fit, targets=config.targets, search=config.search).record()


def add_judged(study: optuna.Study, config: StudyConfig, fit: SWAGPPMResult) -> None:
    outcome = judge(fit, targets=config.targets, search=config.search)
    state = TrialState.PRUNED if outcome.catastrophic else TrialState.COMPLETE
    study.add_trial(create_trial(
        state=state, values=None if outcome.catastrophic else [min(fit.epsilon, 1e12)],
        params={"c": fit.c, "ft_epochs": fit.ft_epochs}, distributions=DISTRIBUTIONS,
        user_attrs=outcome.attributes(), system_attrs=constraint_attrs(outcome.constraints)))


def a_study(config: StudyConfig, *, baseline: float | None = 0.82) -> optuna.Study:
    """0 feasible (c 0.5, 6 epochs), 1 stopped early at ε ≥ 20, 2 crashed (FAIL), 3 running, 4 catastrophic,
    5 finished without a record; ``baseline``: the non-private macro-F1 stage 1 stored (None: no stage 1 yet)."""
    study = open_study(config)
    if baseline is not None:
        study.set_user_attr("baseline_f1_macro", baseline)
    add_judged(study, config, result(SERIES, c=0.5, epochs=6))
    add_judged(study, config, early_stop())
    study.add_trial(create_trial(state=TrialState.FAIL, params={"c": 0.7, "ft_epochs": 5},
                                 distributions=DISTRIBUTIONS, user_attrs={FAILURE: "RuntimeError: out of memory"}))
    study.ask()
    add_judged(study, config, crashed())
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=1.0, params={"c": 0.6, "ft_epochs": 4},
                                 distributions=DISTRIBUTIONS))
    return study


def trace(figure: go.Figure, name: str) -> Any:
    (found,) = [t for t in figure.data if t.name == name]
    return found


# --- trial_figures -----------------------------------------------------------------------------------------------


def test_a_judged_fit_gets_its_max_delta_series_and_its_f1_violins(config: StudyConfig) -> None:
    record = record_of(config, result(SERIES))
    max_delta, violins = trial_figures(record, config)
    assert [t.name for t in max_delta.data] == ["bulk IQR", "bulk median", "max delta", "spikes"]
    assert list(trace(max_delta, "max delta").y) == list(record.max_delta_series)
    assert list(trace(max_delta, "max delta").x) == list(range(1, 41))
    assert max_delta.layout.title.text == f"well fit — ε = {EPSILON:.2f} (target 10.00)"
    assert [t.name for t in violins.data] == ["macro-F1", "macro-F1 baseline", "macro-F1 threshold", "weighted-F1",
                                             "weighted-F1 baseline", "weighted-F1 threshold"]
    assert list(trace(violins, "macro-F1").y) == list(record.f1_macro_draws)
    assert list(trace(violins, "weighted-F1").y) == list(record.f1_weighted_draws)
    assert list(trace(violins, "macro-F1 baseline").y) == [0.82, 0.82]
    assert list(trace(violins, "weighted-F1 threshold").y) == [0.5 * 0.87, 0.5 * 0.87]  # max_f1_degradation 0.5


def test_an_early_stop_gets_only_its_max_delta_series_titled_as_a_lower_bound(config: StudyConfig) -> None:
    (figure,) = trial_figures(record_of(config, early_stop()), config)
    assert figure.layout.title.text == "not judged — ε = 20.00 (lower bound) (target 10.00)"
    assert list(trace(figure, "max delta").y) == [10.0, 10.0, 10.0]
    assert [a.text for a in figure.layout.annotations] == ["↓ ε target / 2 = 5.00 (below the plot)"]


def test_a_fit_without_draws_gets_an_empty_max_delta_figure(config: StudyConfig) -> None:
    (figure,) = trial_figures(record_of(config, crashed()), config)
    assert figure.layout.title.text.startswith("catastrophic — ε = ")
    assert list(trace(figure, "max delta").y) == []


def test_the_figures_draw_the_targets_of_the_config_given_not_those_of_the_judging(config: StudyConfig) -> None:
    record = record_of(config, result(SERIES))
    stricter = dataclasses.replace(config, targets=dataclasses.replace(config.targets, epsilon_cap=4.0,
                                                                       max_f1_degradation=0.1))
    max_delta, violins = trial_figures(record, stricter)
    assert max_delta.layout.title.text.endswith("(target 4.00)")
    assert trace(violins, "macro-F1 threshold").y[0] == pytest.approx(0.9 * 0.82)


# --- figures_html ------------------------------------------------------------------------------------------------


def test_a_trials_page_holds_its_figures_and_plotly_js_once(config: StudyConfig) -> None:
    page = figures_html(record_of(config, result(SERIES)), config, title="Fit c = 1, 7 epochs")
    assert page.startswith("<!doctype html><html><head><meta charset='utf-8'><title>Fit c = 1, 7 epochs</title>"
                           "</head><body><h1>Fit c = 1, 7 epochs</h1><div")
    assert page.endswith("</body></html>") and page.count("<html") == 1
    assert page.count(PLOTLY_JS) == 1  # opens offline, and the library is not repeated per figure
    assert page.count('class="plotly-graph-div"') == 2


def test_an_early_stops_page_holds_one_figure(config: StudyConfig) -> None:
    page = figures_html(record_of(config, early_stop()), config, title="Fit")
    assert page.count('class="plotly-graph-div"') == 1 and page.count(PLOTLY_JS) == 1


# --- fits_for_figures --------------------------------------------------------------------------------------------


def test_one_fit_per_finished_judged_trial(config: StudyConfig) -> None:
    study = a_study(config)
    record = TrialRecord.of(study.trials[0])
    assert record is not None
    median = record.f1_macro_median
    assert fits_for_figures(study) == [
        {"number": 0, "c": 0.5, "ft_epochs": 6, "epsilon": EPSILON, "f1_macro": median, "label": "well_fit",
         "feasible": True, "missed": None},
        {"number": 1, "c": 1.1, "ft_epochs": 5, "epsilon": 20.0, "f1_macro": None, "label": "not_judged",
         "feasible": False, "missed": "epsilon +1.000; not measured: f1_macro, f1_weighted, fit_spread, fit_spikes"},
        {"number": 4, "c": 0.9, "ft_epochs": 8, "epsilon": None, "f1_macro": None, "label": "catastrophic",
         "feasible": False, "missed": "epsilon +10.000, f1_macro +10.000, f1_weighted +10.000, fit_spread +10.000, "
                                     "fit_spikes +10.000"},
    ]
    assert [fit["f1_macro"] for fit in fits_for_figures(study, statistic="q10")] == [record.f1_macro_q10, None, None]


def test_feasibility_is_read_from_the_stored_constraints(config: StudyConfig) -> None:
    study = open_study(config)
    outcome = judge(result(SERIES), targets=config.targets, search=config.search)
    violated = {**outcome.constraints, "f1_macro": 0.3}  # as a sampler or a later judgement would see it
    study.add_trial(create_trial(state=TrialState.COMPLETE, value=EPSILON, params={"c": 1.0, "ft_epochs": 7},
                                 distributions=DISTRIBUTIONS, user_attrs=outcome.attributes(),
                                 system_attrs=constraint_attrs(violated)))
    assert outcome.record().feasible and fits_for_figures(study)[0]["feasible"] is False


def test_a_study_without_trials_has_no_fits(config: StudyConfig) -> None:
    assert fits_for_figures(open_study(config)) == []


# --- study_figures -----------------------------------------------------------------------------------------------


def test_a_study_gets_its_search_grid_trade_off_and_feasibility_table(config: StudyConfig) -> None:
    figures = study_figures(a_study(config), config)
    assert list(figures) == ["search-grid", "tradeoff", "feasibility"]
    grid = figures["search-grid"]
    assert [t.name for t in grid.data] == ["search order", "well_fit", "catastrophic (ε not finite)", "not_judged",
                                          "feasible"]
    assert list(trace(grid, "search order").text) == ["#0", "#1", "#4"]
    assert grid.layout.title.text == "search over (c, fine-tuning epochs)<br><sup>3 fits, 1 feasible (ε target " \
                                     "10.00)</sup>"
    table = figures["feasibility"].data[0]
    assert list(table.cells.values[0]) == [0, 1, 4]
    assert list(table.cells.values[6]) == ["yes", "no", "no"]


def test_the_trade_off_shades_what_the_stored_baseline_and_the_targets_allow(config: StudyConfig) -> None:
    tradeoff = study_figures(a_study(config, baseline=0.82), config)["tradeoff"]
    assert tradeoff.layout.title.text == ("privacy–utility trade-off<br><sup>3 fits, 1 feasible (★) — 2 with "
                                          "non-finite ε or F1 not drawn</sup>")
    assert [t.name for t in tradeoff.data] == ["feasible"] and list(tradeoff.data[0].x) == [EPSILON]
    shapes = {s.name: s for s in tradeoff.layout.shapes}
    assert list(shapes) == ["epsilon and macro-F1 box", "epsilon target", "macro-F1 threshold"]
    region = shapes["epsilon and macro-F1 box"]
    assert (region.x0, region.x1, region.y0, region.y1) == (0.0, 10.0, pytest.approx(0.41), 1.0)
    assert shapes["macro-F1 threshold"].y0 == pytest.approx((1 - 0.5) * 0.82)


def test_before_stage_1_stored_a_baseline_the_trade_off_marks_only_the_epsilon_target(config: StudyConfig) -> None:
    tradeoff = study_figures(a_study(config, baseline=None), config)["tradeoff"]
    assert [s.name for s in tradeoff.layout.shapes] == ["epsilon target"]
    assert tradeoff.layout.shapes[0].x0 == 10.0


def test_an_empty_study_gets_empty_figures(config: StudyConfig) -> None:
    figures = study_figures(open_study(config), config)
    assert figures["search-grid"].layout.title.text.endswith("<sup>0 fits, 0 feasible (ε target 10.00)</sup>")
    assert list(figures["search-grid"].data) == [] and list(figures["tradeoff"].data) == []
    assert list(figures["feasibility"].data[0].cells.values[0]) == []


def test_the_study_figures_hold_one_value_per_fit_and_no_series(config: StudyConfig) -> None:
    """A study's figures summarise each trial: no max-delta series or F1 draws (those are the trial figures')."""
    figures = study_figures(a_study(config), config)
    for name in ("search-grid", "tradeoff"):
        for t in figures[name].data:
            assert len(t.x) <= 3 and len(t.y) <= 3, (name, t.name)
    for column in figures["feasibility"].data[0].cells.values:
        assert len(column) == 3
