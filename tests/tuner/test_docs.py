"""Documentation that cannot drift: every study-file key is in docs/study-file.md, and every exit status in the
README's table, docs/cli.md's and ``swagppm-tune --help``."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from swagppm import DataConfig, ModelConfig, SWAGPPMConfig
from tuner.cli import base, build_parser
from tuner.config import StudySettings, Targets, Tracking
from tuner.search import SearchSpace

ROOT = Path(__file__).resolve().parents[2]
TABLES = {"study": StudySettings, "search": SearchSpace, "targets": Targets, "data": DataConfig,
          "model": ModelConfig, "swagppm": SWAGPPMConfig, "tracking": Tracking}
NESTED = {"data", "model"}  # [swagppm]'s own fields that are tables of their own


def documented_keys() -> dict[str, set[str]]:
    """The keys docs/study-file.md's tables name, by table (a row's table is the last one named above it)."""
    keys: dict[str, set[str]] = {}
    table = None
    for line in (ROOT / "docs" / "study-file.md").read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")[1:-1]]
        if len(cells) < 2 or not cells[1].startswith("`"):
            continue
        named = re.fullmatch(r"`\[(\w+)\]`", cells[0])
        table = named.group(1) if named else table
        assert table is not None, line
        keys.setdefault(table, set()).update(re.findall(r"`(\w+)`", cells[1]))
    return keys


@pytest.mark.parametrize("table", sorted(TABLES))
def test_every_key_of_every_study_file_table_is_documented(table: str) -> None:
    fields = {field.name for field in dataclasses.fields(TABLES[table])} - (NESTED if table == "swagppm" else set())
    missing = sorted(fields - documented_keys().get(table, set()))
    assert not missing, f"[{table}] keys missing from docs/study-file.md: {missing}"


def _statuses(text: str) -> set[int]:
    return {int(number) for number in re.findall(r"^\|\s*(\d+)\s*\|", text, flags=re.MULTILINE)}


def test_every_exit_status_is_documented_in_the_readme_the_cli_page_and_the_help() -> None:
    statuses = {value for name, value in vars(base).items() if name.startswith("EXIT_")}
    assert _statuses((ROOT / "README.md").read_text()) == statuses
    assert _statuses((ROOT / "docs" / "cli.md").read_text()) == statuses
    helped = {int(number) for number in re.findall(r"^\s{2}(\d+)\s{2,}", build_parser()[0].format_help(),
                                                    flags=re.MULTILINE)}
    assert helped == statuses


def test_the_caveats_docs_privacy_lists_are_the_cards_word_for_word() -> None:
    from swagppm.statement import CAVEATS, TOKENIZER_CAVEAT

    text = (ROOT / "docs" / "privacy.md").read_text().split("## Caveats the card states")[1].split("\n## ")[0]
    listed = [" ".join(item.split()) for item in text.split("\n- ")[1:]]
    assert listed == [" ".join(caveat.split()) for caveat in (*CAVEATS, TOKENIZER_CAVEAT)]


def test_every_flag_of_every_verb_is_in_the_cli_pages_flag_table() -> None:
    """docs/cli.md's "Every flag, by verb" holds exactly the parser's (verb, flag) pairs: none missing, none stale."""
    import argparse

    parser, _ = build_parser()
    verbs = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    parsed = {(verb, flag) for verb, sub in verbs.choices.items() for action in sub._actions
              for flag in action.option_strings if flag not in ("-h", "--help")}
    text = (ROOT / "docs" / "cli.md").read_text()
    table = text[text.index("## Every flag, by verb"):text.index("## Exit codes")]
    documented = {(row[0].strip("` "), flag) for line in table.splitlines()
                  if len(row := line.split("|")[1:-1]) == 3 and row[0].strip().startswith("`")
                  for flag in re.findall(r"`(-[-\w]+)`", row[1])}
    assert documented == parsed
