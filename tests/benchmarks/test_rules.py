"""The benchmarks replay the tuner's own rules: parameters come from ``SearchSpace.suggest`` and start points from
``SearchSpace.start_params``, never from a copy of them, so a benchmark measures what a study does."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
COPIES = {"suggest_float", "suggest_int", "suggest_categorical", "suggest_uniform", "suggest_loguniform"}


def copied_rules(source: str) -> list[str]:
    """The calls in ``source`` that spell a rule of the tuner again: a trial's ``suggest_*`` or a start point
    enqueued from a literal."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        if name in COPIES or (name == "enqueue_trial" and node.args and isinstance(node.args[0], ast.Dict)):
            found.append((node.lineno, name))
    return [f"line {line}: {name}" for line, name in sorted(found)]


@pytest.mark.unit
def test_the_check_finds_a_copied_rule() -> None:
    copy = ('def objective(trial):\n    c = trial.suggest_float("c", 0.3, 1.2)\n'
            'study.enqueue_trial({"c": 1.0, "ft_epochs": 7})\n')
    assert copied_rules(copy) == ["line 2: suggest_float", "line 3: enqueue_trial"]
    assert copied_rules("params = search.suggest(trial)\nstudy.enqueue_trial(params)\n") == []


@pytest.mark.unit
@pytest.mark.parametrize("path", sorted(BENCHMARKS.rglob("*.py")), ids=lambda path: str(path.relative_to(BENCHMARKS)))
def test_no_benchmark_spells_the_tuners_suggest_or_start_rule_again(path: Path) -> None:
    assert copied_rules(path.read_text()) == []
