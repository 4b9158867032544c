"""The project's layers: no import cycle, no private module of another package, and a light ``import swagppm``.

Imports are read from the source with ``ast``, every one of them: at module
level, inside functions and under ``TYPE_CHECKING`` alike.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests import PATIENCE

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("swagppm", "scorers", "tuner", "benchmarks")
# Packages whose imports of another package must name its public modules only.
IMPORTERS = PACKAGES


def _modules() -> dict[str, Path]:
    """Every module of the project's packages by dotted name (a package by its own name)."""
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path) -> set[str]:
    """The dotted names ``name`` imports (relative imports resolved), each with its imported attributes."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            names |= {base} | {f"{base}.{alias.name}" for alias in node.names}
    return names


def _graph() -> dict[str, set[str]]:
    """Each module's imports of the project's own modules (the deepest module each imported name lies in)."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        graph[name] = set()
        for target in _imported(name, path):
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return groups


def _package(module: str) -> str:
    return module.partition(".")[0]


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycle_not_even_under_type_checking() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("importer", IMPORTERS)
def test_no_private_module_of_another_package_is_imported(importer: str) -> None:
    private = sorted(f"{name} imports {target}" for name, path in _modules().items() if _package(name) == importer
                     for target in _imported(name, path)
                     if _package(target) in PACKAGES and _package(target) != importer
                     and any(part.startswith("_") for part in target.split(".")[1:]))
    assert private == []


@pytest.mark.parametrize(("lower", "forbidden"), [("swagppm", {"scorers", "tuner", "optuna"}),
                                                  ("scorers", {"swagppm", "tuner", "torch"})])
def test_the_lower_layers_never_import_each_other_or_above(lower: str, forbidden: set[str]) -> None:
    wrong = sorted(f"{name} imports {target}" for name, path in _modules().items() if _package(name) == lower
                   for target in _imported(name, path) if _package(target) in forbidden)
    assert wrong == []


def test_importing_swagppm_and_its_statement_loads_no_training_stack() -> None:
    script = ("import sys, swagppm, swagppm.statement\n"
              "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'sklearn') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


@pytest.mark.slow  # a fresh interpreter imports torch and transformers
def test_the_fit_modules_and_a_synthetic_corpus_load_no_scikit_learn_or_pandas() -> None:
    """What a run on the demo's data loads before its first fit: scikit-learn (with SciPy's statistics, pandas and
    pyarrow) is left to a release's class report, pandas to data files."""
    script = ("import sys, swagppm.session\n"
              "from swagppm import DataConfig, prepare_data\n"
              "prepare_data(DataConfig(source='synthetic', synthetic_size=120, synthetic_classes=3))\n"
              "print(sorted(m for m in ('sklearn', 'pandas', 'pyarrow', 'scipy.stats') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=PATIENCE, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_no_test_module_imports_another() -> None:
    """What tests share lives in a folder's ``helpers.py`` or ``conftest.py``, never in another test module."""
    wrong = sorted(f"{path.relative_to(ROOT)} imports {target}" for path in sorted((ROOT / "tests").rglob("test_*.py"))
                   for target in _imported(".".join(path.relative_to(ROOT).with_suffix("").parts), path)
                   if target.startswith("tests.") and any(part.startswith("test_") for part in target.split(".")))
    assert wrong == []
