"""``swagppm-tune demo`` writes the shipped demo study and prints the next commands; ``--help`` names every verb."""

from __future__ import annotations

from pathlib import Path

import pytest

from tuner.cli import COMMANDS, build_parser, main
from tuner.cli.demo import demo_text
from tuner.cli.explain import plain
from tuner.config import StudyConfig
from tuner.outcome import GLOSSARY

ROOT = Path(__file__).resolve().parents[2]
VERBS = ("run", "create", "worker", "launch", "jobs", "proxy", "fit", "status", "export", "release", "audit",
         "compare", "rejudge", "report", "dashboard", "clean", "demo", "init", "explain")


def test_help_lists_every_verb_once_in_plain_text_and_points_at_explain(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    paragraph = text.split("Verbs:", 1)[1].split("\n\n", 1)[0]
    listed = [line.split()[0] for line in paragraph.splitlines() if line.startswith("  ")]
    assert listed == list(COMMANDS) and sorted(listed) == sorted(VERBS)
    assert [command.name for command in build_parser()[1].values()] == listed
    for verb in VERBS:  # once: argparse does not list the verbs a second time
        assert sum(line.split()[:1] == [verb] for line in text.splitlines()) == 1, verb
    assert "``" not in text and ":class:" not in text and "swagppm-tune explain WORD" in text
    assert "docs/" not in text  # a wheel has no docs folder
    assert "not a bound (no\ndifferential-privacy guarantee is proven)" in text and "--quiet" in text


def test_the_glossary_explains_the_words_the_lines_print() -> None:
    glossary = (ROOT / "docs" / "glossary.md").read_text()
    for word in ("**ε (epsilon)**", "**ε\\* ", "**δ (delta)**", "**max-delta", "**c**", "**g**", "**E, epochs**",
                 "**feasible", "**not_judged**", "**well_fit**", "**unaccounted**", "**accounted**",
                 "**public-proxy**", "**audit bound", "**AUC bound e^ε/(1+e^ε)**", "**draws**"):
        assert word in glossary, word
    assert "the choice among trials is\nnot counted in ε" in glossary
    assert "an estimate from finitely many posterior draws, not a bound" in glossary
    for word in ("**estimate**", "**proven**", "**ceiling (of the audit)**", "**prior_scale (s)**",
                 "**nll_bound (B)**", "**public risks**", "**split-R-hat, ESS**", "**below the baseline**"):
        assert word in glossary, word


def test_explain_prints_the_entries_a_word_names_and_refuses_an_unknown_word(
        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "not_judged"]) == 0
    assert capsys.readouterr().out.startswith("not_judged — the series was not judged")  # plain text, no Markdown
    assert main(["explain", "AUDIT BOUND"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("audit bound (empirical ε lower bound") and "AUC — the attack" not in out  # named only
    assert main(["explain", "membership"]) == 0  # no term names it: the entries that mention it
    assert "audit — a membership-inference attack" in capsys.readouterr().out
    assert main(["explain", "target"]) == 0
    assert capsys.readouterr().out.startswith("ε* (the target, the cap) — ")  # the escape is gone
    assert main(["explain"]) == 0
    assert capsys.readouterr().out.strip() == plain((ROOT / "docs" / "glossary.md").read_text()).strip()
    assert main(["explain", "zzz"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert "explain 'zzz': no glossary entry names or mentions it; the entries are: ε (epsilon), " in line


def test_plain_text_keeps_the_words_and_drops_the_markup() -> None:
    assert plain("**ε\\* (cap)** — see [method.md](method.md), `[targets]`") == \
        "ε* (cap) — see method.md (docs/method.md), `[targets]`"


def test_the_repository_demo_is_the_shipped_one() -> None:
    """studies/demo.toml (the README's) is the file the package ships: one home."""
    assert (ROOT / "studies" / "demo.toml").read_text() == demo_text()


def test_demo_writes_the_study_and_prints_the_next_commands(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "here"
    assert main(["demo", "--dir", str(folder)]) == 0
    out = capsys.readouterr().out
    study = folder / "demo.toml"
    assert study.read_text() == demo_text()
    assert f"swagppm-tune run {study}" in out and f"swagppm-tune export {study} -o {folder / 'best.json'}" in out
    assert GLOSSARY in out
    config = StudyConfig.from_toml(study)  # a valid study whose outputs all stay in the folder
    assert config.storage_url == f"sqlite:///{folder / 'demo.db'}" and config.artifact_dir.parent == folder
    assert Path(config.fit.cache_dir or "").parent == folder and config.fit.data.source == "synthetic"
    assert main(["demo", "--dir", str(folder)]) == 0  # the same file again: kept


def test_demo_refuses_to_overwrite_a_different_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "demo.toml").write_text("[study]\nname = 'mine'\n")
    assert main(["demo", "--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "demo.toml exists and differs from the shipped demo" in err and "Traceback" not in err
    assert (tmp_path / "demo.toml").read_text() == "[study]\nname = 'mine'\n"


def test_a_linked_study_file_keeps_its_outputs_beside_the_link(tmp_path: Path) -> None:
    (tmp_path / "link.toml").symlink_to(ROOT / "studies" / "demo.toml")
    config = StudyConfig.from_toml(tmp_path / "link.toml")
    assert config.storage_url == f"sqlite:///{tmp_path / 'link.db'}"


def test_counts_read_as_sentences() -> None:
    from tuner.outcome import counted

    assert (counted(1, "epoch"), counted(7, "epoch"), counted(0, "trial")) == ("1 epoch", "7 epochs", "0 trials")


def test_demo_run_runs_the_written_study_with_the_run_verbs_defaults(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from tuner.cli.study import RunCommand

    seen: list[object] = []
    monkeypatch.setattr(RunCommand, "run", lambda self, args: seen.append(args) or 0)
    assert main(["demo", "--dir", str(tmp_path), "--run"]) == 0
    (args,) = seen
    assert args.study == tmp_path / "demo.toml" and args.workers == 1 and args.n_trials is None  # type: ignore[attr-defined]
