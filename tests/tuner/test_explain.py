"""``swagppm-tune explain`` knows every word the command line, the report and the dashboard print.

The words are collected from real outputs of a tiny study (its run lines, status, the audit table, the report's text
and figures, the dashboard's notes and columns) by their shapes, not from a list: snake_case words, bracketed notes,
words with ``@`` or ``%``, and a letter with a number (``q10``). A new line that prints a new word of these shapes
fails here until the glossary explains it.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

from swagppm import ConfigError
from tuner.cli import main
from tuner.cli.explain import explain

WORD_SHAPES = re.compile(
    r"(?<![\w./-])(?:"
    r"[a-z][a-z0-9]*(?:_[a-z0-9]+)+"  # snake_case: not_judged, f1_macro, released_draw
    r"|\[[a-z][^\]\[]*\]"  # a bracketed note: [stage 1 cached]
    r"|[A-Za-z]+@[0-9.]+%"  # TPR@1%
    r"|[a-z][0-9]+"  # a letter and a number: q10
    r")(?![\w/-])")
PATH = re.compile(r"\S*/\S*")  # paths and URLs name the user's files, not words of the tool


def words(text: str) -> set[str]:
    """The words of ``text`` that have one of the shapes above (paths and URLs left out)."""
    return set(WORD_SHAPES.findall(PATH.sub(" ", text)))


def unexplained(found: Iterable[str]) -> list[str]:
    missing = []
    for word in sorted(set(found)):
        try:
            explain(word)
        except ConfigError:
            missing.append(word)
    return missing


def test_the_shapes_find_the_words_a_line_prints_and_skip_paths_and_numbers() -> None:
    line = ("trial   1  c=0.700 epochs= 6  eps=  6.1  F1 macro q10 0.8 (baseline 0.82)  well_fit  infeasible "
            "(f1_macro, fit_spikes)  3.1s  [stage 1 cached]; TPR@1% at 95% [0.512, 0.634]; see /tmp/my_study/s.toml "
            "and sqlite:///run_2.db, all-MiniLM-L6-v2")
    assert words(line) == {"q10", "well_fit", "f1_macro", "fit_spikes", "[stage 1 cached]", "TPR@1%"}


def test_explain_knows_the_words_the_issue_found_unexplained() -> None:
    assert unexplained(["class_calibrated", "loss_threshold", "TPR@1%", "TPR@0.1%", "family-wise", "q10",
                        "[stage 1 cached]", "released_draw", "non_private_baseline"]) == []


def test_an_unknown_word_is_reported() -> None:
    assert unexplained(["well_fit", "frobnicated_widget"]) == ["frobnicated_widget"]


def report_words(page: str) -> set[str]:
    """The words a reader sees in the report: its text, and its figures' titles, names, notes and hover texts."""
    found = set()
    decoder = json.JSONDecoder()
    for match in re.finditer(r"Plotly\.newPlot\(\s*\"[^\"]+\",\s*", page):
        data, end = decoder.raw_decode(page, match.end())
        layout, _ = decoder.raw_decode(page, page.index("{", end))
        texts = [layout.get("title", {}).get("text", ""), *(a.get("text", "") for a in layout.get("annotations", []))]
        for key in ("xaxis", "yaxis"):
            texts.append(layout.get(key, {}).get("title", {}).get("text", ""))
        for trace in data:
            texts += [trace.get("name", ""), *(t for t in trace.get("text") or [] if isinstance(t, str))]
        found |= words(html.unescape(" ".join(texts)))
    visible = re.sub(r"<script.*?</script>|<style.*?</style>", " ", page, flags=re.DOTALL)
    return found | words(html.unescape(re.sub(r"<[^>]+>", " ", visible)))


@pytest.mark.fits
def test_every_word_the_verbs_the_report_and_the_dashboard_print_is_explained(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from optuna_dashboard._note import get_note_from_system_attrs  # the note as the dashboard reads it

    from tuner import StudyConfig, open_study
    from tuner.dashboard import OWNER_SIDE, dashboard_columns

    path = study_file(study={"n_trials": 2})
    printed = []
    for argv in (["run", str(path)], ["status", str(path)], ["audit", str(path)],
                 ["report", str(path), "-o", str(tmp_path / "report.html")]):
        assert main(argv) in (0, 1), argv
        out, err = capsys.readouterr()
        printed.append(out + err)
    found = words("\n".join(printed))
    assert {"well_fit", "released_draw", "class_calibrated", "TPR@1%"} <= found  # it reads them
    found |= report_words((tmp_path / "report.html").read_text())
    study = open_study(StudyConfig.from_toml(path), create=False)
    attrs = study._storage.get_study_system_attrs(study._study_id)
    for trial in study.trials:
        found |= words(get_note_from_system_attrs(attrs, trial._trial_id)["body"])
        found |= words(" ".join(f"{key} {value}" for key, value in dashboard_columns(trial, statistic="q10").items()))
    found |= words(OWNER_SIDE)
    assert unexplained(found) == []


def test_every_word_init_prints_is_explained(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps({"text": f"record {i}", "nature": ("a", "b")[i % 2]}) + "\n" for i in range(8)))
    printed = []
    for number, labels in enumerate((["--labels", "a", "b"], ["--labels-from-data"])):
        out_file = str(tmp_path / f"{number}.toml")
        assert main(["init", str(data), "--label-column", "nature", *labels, "-o", out_file]) == 0
        out, err = capsys.readouterr()
        printed.append(out + err)
    assert "exploration only" in printed[1]
    assert unexplained(words("\n".join(printed)) | {"exploration only"}) == []
