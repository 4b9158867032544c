"""One self-contained HTML report of a study: search grid, trade-off, every trial's figures, the table, the caveats."""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Sequence
from pathlib import Path

import optuna

import scorers.plots
from swagppm.statement import MEASURED_SHORT, privacy_statement
from tuner.compare import ComparisonRow
from tuner.config import StudyConfig
from tuner.figures import study_figures, trial_figures
from tuner.outcome import counted
from tuner.outputs import write_atomic
from tuner.queries import (
    FINISHED,
    best_feasible,
    closest_trial,
    describe_violations,
    epsilon_cap_of,
    trial_rows,
    trials_run,
    trials_run_words,
)
from tuner.record import TrialRecord, audit_bounds, refuted_note
from tuner.storage import masked_url
from tuner.study import study_caveats
from tuner.tuning import tuning_cost, tuning_line

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1150px; color: #222; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border-bottom: 1px solid #ddd; padding: 0.25em 0.6em; text-align: right; }
th { background: #f4f4f4; } td.text { text-align: left; }
tr.feasible td { background: #eaf6ea; }
.caveats { background: #fff8e1; border-left: 4px solid #f0ad4e; padding: 0.5em 1em; }
details { margin: 0.6em 0; } summary { cursor: pointer; font-weight: 600; }
"""


def _number(value: object, digits: int = 3) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "–"


def report_html(study: optuna.Study, config: StudyConfig, *,
                comparison: Sequence[ComparisonRow] | None = None) -> str:
    """The report as one HTML string (plotly.js embedded once; opens offline), with ``compare``'s table if given."""
    esc = html.escape
    counts = trials_run(study)
    best = best_feasible(study)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>SWAG-PPM study {esc(study.study_name)}</title>"
             f"<style>{_STYLE}</style></head><body>",
             f"<h1>SWAG-PPM study <code>{esc(study.study_name)}</code></h1>",
             f"<p>Storage {esc(masked_url(config.storage_url))} · sampler {esc(config.study.sampler)} · "
             f"{trials_run_words(counts)} · targets: ε ≤ {config.targets.epsilon_cap:g}, macro- and weighted-F1 "
             f"({config.targets.statistic}) "
             f"within {config.targets.max_f1_degradation:.0%} of the non-private baseline"
             f"{', a well-fit max-delta series' if config.targets.require_well_fit else ''}.</p>"]
    if best is not None:
        chosen = TrialRecord.of(best)
        assert chosen is not None  # a feasible trial was judged
        statement = privacy_statement(epsilon=chosen.epsilon, trainable=config.fit.model.trainable,
                                      posterior=chosen.posterior, proven=chosen.proven_epsilon,
                                      tuning=tuning_cost(study, config))
        refuted = refuted_note(chosen.epsilon, audit_bounds(study.user_attrs, best.number, chosen))
        parts.append(f"<p><b>Chosen configuration:</b> trial {best.number}, c = {best.params['c']:.4g}, "
                     f"{counted(best.params['ft_epochs'], 'fine-tuning epoch')}, ε = {_number(chosen.epsilon)}"
                     f"{esc(refuted)}, "
                     f"macro-F1 {_number(chosen.f1_macro_median)}, weighted-F1 "
                     f"{_number(chosen.f1_weighted_median)}.</p>"
                     "<h2>Privacy statement</h2><ul>" + "".join(f"<li>{esc(line)}</li>" for line in statement)
                     + "</ul>")
    else:
        closest = closest_trial(study)
        text = "<p><b>No feasible configuration yet.</b>"
        if closest is not None:
            missed = describe_violations(closest, epsilon_cap=epsilon_cap_of(study))
            text += f" Closest: trial {closest.number} (violates {esc(missed)})."
        parts.append(text + "</p>")
    cost = tuning_cost(study, config)
    parts.append("<div class='caveats'><h2>Caveats and the privacy of the procedure</h2><ul>"
                 + f"<li>{esc(tuning_line(cost))}.</li><li>{esc(cost['statement'])}.</li>"
                 + "".join(f"<li>{esc(c)}</li>" for c in study_caveats(config)) + "</ul></div>")
    figures = study_figures(study, config)
    parts.append("<h2>Search grid</h2>" + figures["search-grid"].to_html(full_html=False, include_plotlyjs=True))
    parts.append("<h2>Privacy–utility trade-off</h2>" + figures["tradeoff"].to_html(full_html=False,
                                                                                    include_plotlyjs=False))
    if comparison:
        parts.append(_comparison_section(comparison))
    parts.append(_audit_section(study))
    parts.append("<h2>Trials</h2>" + _table(study))
    parts.append("<h2>Each trial's max-delta series and F1</h2>")
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is None:
            continue
        summary = (f"Trial {trial.number}: c = {trial.params['c']:.4g}, "
                   f"{counted(trial.params['ft_epochs'], 'epoch')} — "
                   f"{record.diagnosis.replace('_', ' ')}, {'feasible' if record.feasible else 'not feasible'}")
        reasons = "".join(f"<li>{esc(r)}</li>" for r in record.reasons)
        body = "".join(f.to_html(full_html=False, include_plotlyjs=False) for f in trial_figures(record, config))
        parts.append(f"<details{' open' if best is not None and trial.number == best.number else ''}>"
                     f"<summary>{esc(summary)}</summary><ul>{reasons}</ul>"
                     f"<p>Next: {esc(record.recommendation)}</p>{body}</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _table(study: optuna.Study) -> str:
    head = ("#", "state", "c", "epochs", "ε", "macro-F1", "weighted-F1", "macro q10", "weighted q10", "diagnosis",
            "feasible", "time (s)")
    rows = []
    for row in trial_rows(study):
        eps = _number(row["epsilon"])
        if row["epsilon_is_lower_bound"] and row["epsilon"] is not None:
            eps = "≥ " + eps
        cells = (str(row["number"]), row["state"].lower(), _number(row["c"]),
                 "–" if row["ft_epochs"] is None else str(row["ft_epochs"]), eps, _number(row["f1_macro"]),
                 _number(row["f1_weighted"]), _number(row["f1_macro_q10"]), _number(row["f1_weighted_q10"]),
                 str(row["diagnosis"]).replace("_", " "), {True: "yes", False: "no"}.get(row["feasible"], "–"),
                 _number(row["seconds"], 1))
        css = " class='feasible'" if row["feasible"] else ""
        rows.append(f"<tr{css}>" + "".join(
            f"<td{' class=text' if i in (1, 9) else ''}>{html.escape(c)}</td>" for i, c in enumerate(cells)) + "</tr>")
    return ("<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows) + "</table>")


def _audit_section(study: optuna.Study) -> str:
    """Every audited trial's measured ε beside the audit's ε lower bound (``require_audit``, or `audit` and `release`
    run on it), and whether the audit refutes the measured ε."""
    esc = html.escape
    rows = []
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        bound = audit_bounds(study.user_attrs, trial.number, record)
        if record is None or bound is None:
            continue
        note = refuted_note(record.epsilon, bound).removeprefix(", ")
        rows.append(f"<tr><td>{trial.number}</td><td>{_number(record.epsilon)}</td><td>{_number(bound)}</td>"
                    f"<td class='text'>{esc(note or 'not refuted')}</td></tr>")
    text = ("<h2>Audit</h2><p>The membership-inference audit (95% family-wise, δ = 0) of a secret draw of each "
            f"audited trial, against its measured ε: {MEASURED_SHORT}, which the audit's lower bound refutes when it "
            "lies above it.</p>")
    if not rows:
        return text + ("<p>No trial of this study has been audited yet: <code>swagppm-tune audit STUDY</code> audits "
                       "the chosen one, <code>release</code> always does, and <code>[targets] require_audit</code> "
                       "audits every trial.</p>")
    return (text + "<table><tr><th>trial</th><th>measured ε</th><th>audit's ε lower bound</th><th>verdict</th></tr>"
            + "".join(rows) + "</table>")


def _comparison_section(rows: Sequence[ComparisonRow]) -> str:
    """The paper's comparison: one row per method, and the F1-by-class-size figure."""
    esc = html.escape
    head = ("method", "ε", "δ", "macro-F1", "weighted-F1", "largest 25% of classes", "smallest 25% of classes", "")
    body = "".join(
        f"<tr><td class='text'>{esc(r.method)}</td><td>{_number(r.epsilon)}</td>"
        f"<td>{esc(r.delta) if isinstance(r.delta, str) else _number(r.delta, 6) if r.delta else '–'}</td>"
        f"<td>{_number(r.f1_macro)}</td><td>{_number(r.f1_weighted)}</td><td>{_number(r.f1_top_quartile)}</td>"
        f"<td>{_number(r.f1_bottom_quartile)}</td><td class='text'>{esc(r.note)}</td></tr>" for r in rows)
    figure = scorers.plots.f1_by_class_size_figure([dataclasses.asdict(r) for r in rows])
    return ("<h2>Comparison with DP-SGD and the non-private model</h2><table><tr>"
            + "".join(f"<th>{esc(h)}</th>" for h in head) + f"</tr>{body}</table>"
            + figure.to_html(full_html=False, include_plotlyjs=False))


def write_report(study: optuna.Study, config: StudyConfig, path: str | Path, *,
                 comparison: Sequence[ComparisonRow] | None = None) -> Path:
    """The report written atomically to ``path`` (a failed write leaves no half page)."""
    return write_atomic(path, report_html(study, config, comparison=comparison))

