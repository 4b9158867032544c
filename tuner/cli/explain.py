"""``swagppm-tune explain [WORD]``: the glossary of every word the verbs print, shipped inside the package.

The glossary's home is ``docs/glossary.md``; the package carries it (``tuner/glossary.md``
links to it and the wheel holds a copy), so a user who installed a wheel and has no
repository can still look up "not_judged" or "audit bound" from the terminal.
"""

from __future__ import annotations

import argparse
import re
from importlib import resources

from swagppm import ConfigError
from tuner.cli.base import EXIT_OK, Command

ENTRY = re.compile(r"^\*\*(?P<term>.+?)\*\*")
LINK = re.compile(r"\[(?P<text>[^\]]+)\]\((?P<target>[^)]+)\)")


def glossary_text() -> str:
    """The glossary as the package ships it (Markdown)."""
    return resources.files("tuner").joinpath("glossary.md").read_text(encoding="utf-8")


def plain(markdown: str) -> str:
    """The glossary's Markdown as a terminal shows it best: no bold marks or escapes, links as their text."""
    text = LINK.sub(lambda link: f"{link['text']} (docs/{link['target']})", markdown)
    return text.replace("**", "").replace("\\*", "*")


def entries(text: str) -> dict[str, str]:
    """Each entry (a paragraph that opens with a bold term) by its term, in the glossary's order."""
    paragraphs = (part.strip() for part in text.split("\n\n"))
    return {match["term"].replace("\\", ""): part for part in paragraphs if (match := ENTRY.match(part))}


def explain(word: str) -> list[str]:
    """The entries whose term names ``word``, else those whose text mentions it; refused when none does."""
    found = entries(glossary_text())
    needle = word.casefold()
    named = [text for term, text in found.items() if needle in term.casefold()]
    mentioned = named or [text for text in found.values() if needle in text.casefold()]
    if not mentioned:
        raise ConfigError(f"explain {word!r}: no glossary entry names or mentions it; the entries are: "
                          + ", ".join(found))
    return mentioned


class ExplainCommand(Command):
    name = "explain"
    help = "what a printed word means and what to do about it (the glossary; no WORD: all of it)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("word", nargs="?", default=None,
                            help="a word the verbs print, e.g. not_judged, eps>=, unaccounted, 'audit bound'")

    def run(self, args: argparse.Namespace) -> int:
        print(plain(glossary_text() if args.word is None else "\n\n".join(explain(args.word))))
        return EXIT_OK
