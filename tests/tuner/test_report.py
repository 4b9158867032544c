"""``tuner.report`` directly: what the study report holds, what it never holds, and how it is written."""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.trial import TrialState, create_trial
from plotly.offline import get_plotlyjs

from swagppm import SWAGPPMResult
from tests.tuner.helpers import merged, result, tight, write_study
from tuner.compare import ComparisonRow
from tuner.config import StudyConfig
from tuner.outcome import judge
from tuner.queries import is_feasible
from tuner.record import AUDITED, FAILURE, TrialRecord, constraint_attrs
from tuner.report import report_html, write_report
from tuner.study import open_study, study_caveats

DISTRIBUTIONS = {"c": FloatDistribution(0.3, 1.2), "ft_epochs": IntDistribution(4, 8)}
SERIES = tight(3.0, n=40)
EPSILON = 2 * max(SERIES)  # the feasible fit's ε: about 6.13, below the target 10
FIGURE = 'class="plotly-graph-div"'
PLOTLY_JS = get_plotlyjs()  # the library every page embeds once
PLOTLY_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # each figure's random id
ROWS = [
    ComparisonRow(method="SWAG-PPM (one released draw)", epsilon=6.5, delta="not quantified", f1_macro=0.7,
                  f1_weighted=0.75, f1_top_quartile=0.8, f1_bottom_quartile=0.5, note="one draw with secret noise"),
    ComparisonRow(method="DP-SGD", epsilon=3.0, delta=1e-5, f1_macro=0.6, f1_weighted=0.65, f1_top_quartile=0.7,
                  f1_bottom_quartile=0.3, note="Opacus, rdp accountant"),
    ComparisonRow(method="non-private (stage 1)", epsilon=None, delta=None, f1_macro=0.82, f1_weighted=0.87,
                  f1_top_quartile=0.9, f1_bottom_quartile=0.6),
]


def early_stop() -> SWAGPPMResult:
    return result([10.0] * 3, c=1.1, epochs=5, epsilon=20.0, epsilon_is_lower_bound=True, draws_skipped=9,
                  f1_macro=[], f1_weighted=[])


def add_judged(study: optuna.Study, config: StudyConfig, fit: SWAGPPMResult, **user_attrs: object) -> None:
    outcome = judge(fit, targets=config.targets, search=config.search)
    state = TrialState.PRUNED if outcome.catastrophic else TrialState.COMPLETE
    distributions = DISTRIBUTIONS | {"ft_epochs": IntDistribution(1, 8)}
    study.add_trial(create_trial(
        state=state, values=None if outcome.catastrophic else [min(fit.epsilon, 1e12)],
        params={"c": fit.c, "ft_epochs": fit.ft_epochs}, distributions=distributions,
        user_attrs=outcome.attributes() | user_attrs, system_attrs=constraint_attrs(outcome.constraints)))


def journal(path: Path) -> StudyConfig:
    return StudyConfig.from_toml(path).with_storage(f"journal:{path.parent / 's.log'}")


def a_study(config: StudyConfig) -> optuna.Study:
    """0 feasible (c 0.5, 6 epochs), 1 stopped early at ε ≥ 20, 2 crashed (FAIL), 3 running, 4 catastrophic."""
    study = open_study(config)
    study.set_user_attr("baseline_f1_macro", 0.82)
    add_judged(study, config, result(SERIES, c=0.5, epochs=6))
    add_judged(study, config, early_stop())
    study.add_trial(create_trial(state=TrialState.FAIL, params={"c": 0.7, "ft_epochs": 5},
                                 distributions=DISTRIBUTIONS, user_attrs={FAILURE: "RuntimeError: out of memory"}))
    study.ask()
    add_judged(study, config, result([], c=0.9, epochs=8, epsilon=math.inf, failure="training diverged",
                                     f1_macro=[], f1_weighted=[]))
    return study


def without_plotly(page: str) -> str:
    return page.replace(PLOTLY_JS, "")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[optuna.Study, StudyConfig, str]:
    """The five-trial study (target ε 10, F1 within 50%) in a journal file, and its report."""
    folder = tmp_path_factory.mktemp("report")
    config = journal(write_study(folder / "small.toml", merged(targets={"epsilon_cap": 10.0})))
    study = a_study(config)
    return study, config, report_html(study, config)


@pytest.fixture
def config(study_file: Callable[..., Path]) -> StudyConfig:
    """The small study with target ε 10 in a journal file (a fresh one per test)."""
    return journal(study_file(targets={"epsilon_cap": 10.0}))


# --- what the report holds -----------------------------------------------------------------------------------------


def test_the_report_names_the_study_its_storage_sampler_counts_and_targets(
        report: tuple[optuna.Study, StudyConfig, str]) -> None:
    _, config, page = report
    assert page.startswith("<!doctype html><html><head><meta charset='utf-8'><title>SWAG-PPM study small</title>")
    assert "\n<h1>SWAG-PPM study <code>small</code></h1>\n" in page
    assert (f"\n<p>Storage journal:{config.path.parent / 's.log'} · sampler tpe · 4 trials run: 2 complete, "
            "1 pruned, 1 failed; 1 running, 0 waiting · targets: ε ≤ 10, macro- and weighted-F1 (median) within 50% "
            "of the non-private baseline, a well-fit max-delta series.</p>\n") in page
    assert page.endswith("\n</body></html>")


def test_the_chosen_configuration_and_its_privacy_statement(report: tuple[optuna.Study, StudyConfig, str]) -> None:
    study, _, page = report
    record = TrialRecord.of(study.trials[0])
    assert record is not None
    assert (f"<p><b>Chosen configuration:</b> trial 0, c = 0.5, 6 fine-tuning epochs, ε = {EPSILON:.3f}, macro-F1 "
            f"{record.f1_macro_median:.3f}, weighted-F1 {record.f1_weighted_median:.3f}.</p><h2>Privacy statement</h2>"
            "<ul><li>Claim: no differential-privacy guarantee is proven for this release; measured epsilon = "
            f"{EPSILON:.4g} (estimate), an estimate") in page
    assert "<li>Mechanism: SWAG-PPM: " in page and "<li>Unit of privacy: one training record.</li>" in page
    assert "(trainable = &#x27;all&#x27;)" in page  # every line escaped
    assert "No feasible configuration" not in page


def test_the_caveats_hold_the_tuning_cost_and_every_study_caveat(
        report: tuple[optuna.Study, StudyConfig, str]) -> None:
    page = report[2]
    caveats = page[page.index("<div class='caveats'>"):page.index("</div>", page.index("<div class='caveats'>"))]
    assert caveats.startswith("<div class='caveats'><h2>Caveats and the privacy of the procedure</h2><ul><li>tuning: "
                              "5 trials run, largest trial epsilon ")
    assert "; unaccounted (tpe sampler): the choice among configurations by their scores on the private data" in caveats
    assert "<li>unaccounted: the tpe sampler chose among configurations" in caveats
    for caveat in study_caveats(report[1]):
        assert f"<li>{html.escape(caveat)}</li>" in caveats


def test_the_sections_come_in_order_with_plotly_js_embedded_once(
        report: tuple[optuna.Study, StudyConfig, str]) -> None:
    page = report[2]
    headings = re.findall(r"<h2>([^<]*)</h2>", without_plotly(page))
    assert headings == ["Privacy statement", "Caveats and the privacy of the procedure", "Search grid",
                        "Privacy–utility trade-off", "Audit", "Trials", "Each trial's max-delta series and F1"]
    assert page.count(PLOTLY_JS) == 1 and page.count("<html") == 1
    # the grid, the trade-off, trial 0's series and violins, trial 1's series, trial 4's series
    assert page.count(FIGURE) == 6


def figure_data(page: str, title: str) -> dict[str, Any]:
    """The data and layout of the report's figure whose title starts with ``title``, as the page embeds them."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        if layout.get("title", {}).get("text", "").startswith(title):
            return {"data": data, "layout": layout}
    raise AssertionError(f"no figure titled {title!r}")


def test_the_audit_section_holds_each_audited_trials_measured_epsilon_beside_the_audits_bound(
        config: StudyConfig) -> None:
    """An audit (here one `audit` or `release` remembered on trial 0) that refutes the measured ε is shown beside it,
    in the section and in the chosen configuration's line; a study never audited says how to audit it."""
    study = a_study(config)
    assert "No trial of this study has been audited yet" in report_html(study, config)
    study.set_user_attr(AUDITED, {"0": 9.5})
    page = report_html(study, config)
    section = page[page.index("<h2>Audit</h2>"):page.index("<h2>Trials</h2>")]
    assert (f"<tr><td>0</td><td>{EPSILON:.3f}</td><td>9.500</td><td class='text'>refuted: the audit shows epsilon "
            "&gt;= 9.5</td></tr>") in section
    assert f"ε = {EPSILON:.3f}, refuted: the audit shows epsilon &gt;= 9.5, macro-F1" in page


def test_the_trade_off_tells_the_verdict_s_story_point_by_point(study_file: Callable[..., Path]) -> None:
    """Each trial's point sits where its judged statistic puts it, only feasible trials are green stars, and a trial
    inside the box drawn by the two targets but infeasible says what it missed (the audit included)."""
    from tuner.outcome import DrawChecks

    config = journal(study_file(targets={"epsilon_cap": 10.0, "max_f1_degradation": 0.1, "statistic": "q10"}))
    study = open_study(config)
    study.set_user_attr("baseline_f1_macro", 0.82)  # the macro-F1 q10 threshold: 0.9 · 0.82 = 0.738
    spread = [0.70] * 5 + [0.78] * 25  # median 0.78 clears the threshold, the 10th percentile 0.70 does not
    fits = {"feasible": result(SERIES, c=0.5, epochs=6),
            "q10 missed": result(SERIES, c=0.6, epochs=6, f1_macro=spread),
            "weighted missed": result(SERIES, c=0.7, epochs=6, f1_weighted=[0.5] * 30),
            "audit refuted": result(SERIES, c=0.8, epochs=6),
            "epsilon missed": result(tight(6.0, n=40), c=1.1, epochs=6)}
    for name, fit in fits.items():
        checks = DrawChecks(audit_epsilon_bound=12.0 if name == "audit refuted" else None)
        outcome = judge(fit, targets=config.targets, search=config.search, checks=checks)
        study.add_trial(create_trial(
            state=TrialState.COMPLETE, value=fit.epsilon, params={"c": fit.c, "ft_epochs": fit.ft_epochs},
            distributions=DISTRIBUTIONS, user_attrs=outcome.attributes(),
            system_attrs=constraint_attrs(outcome.constraints)))
    figure = figure_data(report_html(study, config), "privacy–utility trade-off")
    points = {int(re.match(r"trial (\d+)", text)[1]): (trace["name"], x, y, text)  # type: ignore[index]
              for trace in figure["data"] for x, y, text in zip(trace["x"], trace["y"], trace["text"])}
    trials = {name: study.trials[number] for number, name in enumerate(fits)}
    for name, trial in trials.items():
        record = TrialRecord.of(trial)
        assert record is not None
        trace, x, y, text = points[trial.number]
        assert (x, y) == (record.epsilon, record.f1_macro_q10)  # the statistic the targets judge
        assert (trace == "feasible") == is_feasible(trial) == (name == "feasible"), name
    assert points[trials["q10 missed"].number][2] < 0.738 < TrialRecord.of(trials["q10 missed"]).f1_macro_median
    assert points[trials["q10 missed"].number][0] == "infeasible"  # below the box: its q10 missed the threshold
    weighted, audited = points[trials["weighted missed"].number], points[trials["audit refuted"].number]
    assert weighted[0] == audited[0] == "infeasible inside the box"
    assert "infeasible: missed f1_weighted +" in weighted[3]
    assert "infeasible: missed epsilon +0.200 (the membership audit's epsilon lower bound: 12)" in audited[3]
    (box,) = [shape for shape in figure["layout"]["shapes"] if shape.get("type") == "rect"]
    assert box["name"] == "epsilon and macro-F1 box" and box["fillcolor"] == "rgba(128, 128, 128, 0.12)"
    notes = [note["text"] for note in figure["layout"]["annotations"]]
    assert "ε ≤ target and macro-F1 q10 ≥ threshold; feasible (★) also needs every other target" in notes
    assert not any("targets met" in note or "feasible region" in note for note in notes)
    assert figure["layout"]["yaxis"]["title"]["text"] == "macro-F1 q10 (test set)"


def test_the_table_has_a_row_per_trial_of_every_state(report: tuple[optuna.Study, StudyConfig, str]) -> None:
    study, _, page = report
    table = page[page.index("<h2>Trials</h2><table>"):page.index("</table>")]
    rows = re.findall(r"<tr[^>]*>.*?</tr>", table)
    assert rows[0] == ("<tr><th>#</th><th>state</th><th>c</th><th>epochs</th><th>ε</th><th>macro-F1</th>"
                       "<th>weighted-F1</th><th>macro q10</th><th>weighted q10</th><th>diagnosis</th><th>feasible</th>"
                       "<th>time (s)</th></tr>")
    record = TrialRecord.of(study.trials[0])
    assert record is not None
    f1 = "".join(f"<td>{value:.3f}</td>" for value in (record.f1_macro_median, record.f1_weighted_median,
                                                      record.f1_macro_q10, record.f1_weighted_q10))
    assert rows[1:] == [
        f"<tr class='feasible'><td>0</td><td class=text>complete</td><td>0.500</td><td>6</td><td>{EPSILON:.3f}</td>"
        f"{f1}<td class=text>well fit</td><td>yes</td><td>12.5</td></tr>",
        "<tr><td>1</td><td class=text>complete</td><td>1.100</td><td>5</td><td>≥ 20.000</td>" + "<td>–</td>" * 4
        + "<td class=text>not judged</td><td>no</td><td>12.5</td></tr>",
        "<tr><td>2</td><td class=text>fail</td><td>0.700</td><td>5</td>" + "<td>–</td>" * 5
        + "<td class=text>RuntimeError: out of memory</td><td>no</td><td>–</td></tr>",
        "<tr><td>3</td><td class=text>running</td>" + "<td>–</td>" * 7 + "<td class=text></td><td>–</td><td>–</td>"
        "</tr>",
        "<tr><td>4</td><td class=text>pruned</td><td>0.900</td><td>8</td>" + "<td>–</td>" * 5
        + "<td class=text>catastrophic</td><td>no</td><td>12.5</td></tr>",
    ]


def test_each_judged_trial_has_its_details_and_the_chosen_one_is_open(
        report: tuple[optuna.Study, StudyConfig, str]) -> None:
    page = report[2]
    summaries = re.findall(r"<details( open)?><summary>([^<]*)</summary>", page)
    assert summaries == [(" open", "Trial 0: c = 0.5, 6 epochs — well fit, feasible"),
                         ("", "Trial 1: c = 1.1, 5 epochs — not judged, not feasible"),
                         ("", "Trial 4: c = 0.9, 8 epochs — catastrophic, not feasible")]
    assert ("<summary>Trial 1: c = 1.1, 5 epochs — not judged, not feasible</summary><ul><li>privacy draws stopped "
            "after 3 of 12: epsilon &gt;= 20.00 already exceeds the target 10.00; fit and utility not measured</li>"
            "</ul><p>Next: epsilon above target: lower c by 0.15 and restart at 6 epochs</p>") in page
    assert "<p>Next: well fit and every target met: stop here</p>" in page


def test_without_a_feasible_trial_the_report_names_the_closest_and_states_nothing(config: StudyConfig) -> None:
    study = open_study(config)
    add_judged(study, config, early_stop())
    page = without_plotly(report_html(study, config))
    assert ("<p><b>No feasible configuration yet.</b> Closest: trial 0 (violates epsilon +1.000; not measured: "
            "f1_macro, f1_weighted, fit_spread, fit_spikes).</p>") in page
    assert "Chosen configuration" not in page and "Privacy statement" not in page
    assert "<details><summary>Trial 0:" in page and "<details open>" not in page


def test_a_study_without_trials_gets_a_report_that_says_so(config: StudyConfig) -> None:
    page = without_plotly(report_html(open_study(config), config))
    assert "· 0 trials run: 0 complete, 0 pruned, 0 failed ·" in page
    assert "\n<p><b>No feasible configuration yet.</b></p>\n" in page
    assert "largest trial epsilon -;" in page
    assert page.count(FIGURE) == 2 and "<details" not in page


def test_the_targets_line_follows_the_study_files_targets(study_file: Callable[..., Path]) -> None:
    config = journal(study_file(targets={"epsilon_cap": 2.5, "max_f1_degradation": 0.15, "statistic": "q10",
                                         "require_well_fit": False}))
    page = report_html(open_study(config), config)
    assert ("· targets: ε ≤ 2.5, macro- and weighted-F1 (q10) within 15% of the non-private baseline.</p>") in page


def test_a_comparison_adds_its_table_and_figure_before_the_trials(config: StudyConfig) -> None:
    study = open_study(config)
    page = without_plotly(report_html(study, config, comparison=ROWS))
    section = page[page.index("<h2>Comparison with DP-SGD"):page.index("<h2>Trials</h2>")]
    assert page.index("<h2>Privacy–utility trade-off</h2>") < page.index("<h2>Comparison with DP-SGD")
    assert section.startswith(
        "<h2>Comparison with DP-SGD and the non-private model</h2><table><tr><th>method</th><th>ε</th><th>δ</th>"
        "<th>macro-F1</th><th>weighted-F1</th><th>largest 25% of classes</th><th>smallest 25% of classes</th><th></th>"
        "</tr><tr><td class='text'>SWAG-PPM (one released draw)</td><td>6.500</td><td>not quantified</td>"
        "<td>0.700</td><td>0.750</td><td>0.800</td><td>0.500</td><td class='text'>one draw with secret noise</td></tr>"
        "<tr><td class='text'>DP-SGD</td><td>3.000</td><td>0.000010</td><td>0.600</td><td>0.650</td><td>0.700</td>"
        "<td>0.300</td><td class='text'>Opacus, rdp accountant</td></tr><tr><td class='text'>non-private (stage 1)"
        "</td><td>–</td><td>–</td><td>0.820</td><td>0.870</td><td>0.900</td><td>0.600</td><td class='text'></td></tr>"
        "</table>")
    assert section.count(FIGURE) == 1 and "F1 by class size" in section
    for nothing in (None, []):
        assert "Comparison with DP-SGD" not in report_html(study, config, comparison=nothing)


def test_one_fine_tuning_epoch_is_said_in_the_singular(config: StudyConfig) -> None:
    study = open_study(config)
    add_judged(study, config, result(SERIES, c=0.5, epochs=1))
    page = report_html(study, config)
    assert "Trial 0: c = 0.5, 1 epoch — well fit, feasible" in page
    assert "trial 0, c = 0.5, 1 fine-tuning epoch, ε = " in page


def test_a_study_whose_running_trial_is_halfway_through_storing_its_record_is_reported(
        config: StudyConfig) -> None:
    study = open_study(config)
    add_judged(study, config, result(SERIES, c=0.5, epochs=6))
    running = study.ask()
    running.set_user_attr("feasible", True)
    running.set_user_attr("diagnosis", "well_fit")
    assert "<td>1</td><td class=text>running</td>" in report_html(study, config)


# --- what the report never holds -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("url", "shown"), [
    ("postgresql://tuner:s3cret@db.internal:5432/studies", "postgresql://tuner:***@db.internal:5432/studies"),
    ("postgresql://tuner@db.internal/studies?sslmode=require&password=s3cret",
     "postgresql://tuner@db.internal/studies?sslmode=require&amp;password=***"),
    ("mysql+pymysql://tuner@db.internal/studies?api_token=s3cret", "mysql+pymysql://tuner@db.internal/studies?"
                                                                    "api_token=***"),
    ("redis://:s3cret@cache.internal:6379/0", "redis://:***@cache.internal:6379/0"),
])
def test_the_storage_is_shown_with_its_host_and_every_credential_masked(config: StudyConfig, url: str,
                                                                        shown: str) -> None:
    study = open_study(config)
    add_judged(study, config, result(SERIES, c=0.5, epochs=6))
    page = report_html(study, config.with_storage(url))
    assert f"<p>Storage {shown} · sampler tpe ·" in page
    assert "s3cret" not in page


def test_the_report_holds_no_record_of_the_data_and_no_attribute_outside_the_trial_record(
        study_file: Callable[..., Path], tmp_path: Path) -> None:
    texts = [f"Quokka-{7731 + i} fell from the scaffold at Zanzibar pier" for i in range(8)]
    labels = ["Label-Xylophone", "Label-Marimba"]
    (tmp_path / "records.jsonl").write_text("".join(
        json.dumps({"text": text, "label": labels[i % 2]}) + "\n" for i, text in enumerate(texts)))
    config = journal(study_file(targets={"epsilon_cap": 10.0}, data={"source": "records.jsonl", "synthetic_size": None,
                                                                  "synthetic_classes": None}))
    study = open_study(config)
    losses = [0.7310585786, 0.2689414214, 0.8807970779]  # per-record values a careless caller stored on a trial
    add_judged(study, config, result(SERIES, c=0.5, epochs=6), record_losses=losses, first_text=texts[0])
    page = report_html(study, config)
    for secret in (*texts, *labels, "Quokka", "Zanzibar", "Xylophone", "record_losses", *map(str, losses)):
        assert secret not in page, secret
    assert "Chosen configuration:</b> trial 0" in page


def test_text_from_the_storage_url_and_a_comparison_is_escaped(tmp_path: Path, config: StudyConfig) -> None:
    odd = tmp_path / "a<b>&'c"
    odd.mkdir()
    config = config.with_storage(f"journal:{odd / 's.log'}")
    rows = [ComparisonRow(method="<script>alert(1)</script>", epsilon=1.0, delta="<i>x</i>", f1_macro=0.5,
                          f1_weighted=0.5, f1_top_quartile=0.5, f1_bottom_quartile=0.5, note="a & b")]
    page = report_html(open_study(config), config, comparison=rows)
    assert f"<p>Storage journal:{html.escape(str(odd))}/s.log · " in page and "a<b>&" not in page
    assert "<td class='text'>&lt;script&gt;alert(1)&lt;/script&gt;</td><td>1.000</td><td>&lt;i&gt;x&lt;/i&gt;</td>" \
           in page and "<script>alert(1)" not in page
    assert "<td class='text'>a &amp; b</td>" in page


# --- write_report --------------------------------------------------------------------------------------------------


def same_report(one: str, other: str) -> bool:
    """Two renderings of one report are the same but for plotly's random figure ids."""
    return PLOTLY_ID.sub("ID", without_plotly(one)) == PLOTLY_ID.sub("ID", without_plotly(other))


def test_write_report_writes_the_report_into_missing_folders_and_returns_its_path(config: StudyConfig,
                                                                                tmp_path: Path) -> None:
    study = open_study(config)
    add_judged(study, config, result(SERIES, c=0.5, epochs=6))
    target = tmp_path / "out" / "deeper" / "report.html"
    assert write_report(study, config, target) == target
    assert same_report(target.read_text(encoding="utf-8"), report_html(study, config))
    assert sorted(p.name for p in target.parent.iterdir()) == ["report.html"]


def test_write_report_takes_a_string_path_and_a_comparison(config: StudyConfig, tmp_path: Path) -> None:
    study = open_study(config)
    written = write_report(study, config, str(tmp_path / "report.html"), comparison=ROWS)
    assert written == tmp_path / "report.html" and "Comparison with DP-SGD" in written.read_text(encoding="utf-8")


def test_an_existing_report_is_replaced_whole(config: StudyConfig, tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("an older report")
    study = open_study(config)
    add_judged(study, config, early_stop())
    write_report(study, config, target)
    text = target.read_text(encoding="utf-8")
    assert text.startswith("<!doctype html>") and "an older report" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.html", "small.toml", "s.log"])


def test_a_report_that_cannot_be_rendered_leaves_the_old_one_and_no_partial_file(config: StudyConfig,
                                                                                 tmp_path: Path) -> None:
    target = tmp_path / "report.html"
    target.write_text("an older report")
    broken = [ComparisonRow(method="DP-SGD", epsilon=1.0, delta=None, f1_macro="n/a",  # type: ignore[arg-type]
                            f1_weighted=0.5, f1_top_quartile=0.5, f1_bottom_quartile=0.5)]
    with pytest.raises(ValueError, match="could not convert string to float: 'n/a'"):
        write_report(open_study(config), config, target, comparison=broken)
    assert target.read_text() == "an older report"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["report.html", "small.toml", "s.log"])
