"""The benchmarks' results: each is cited by a results page, records its command, and a replay reproduces."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from benchmarks.tuning import bench_samplers

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
PAGES = REPO / "docs" / "results"
RESULTS = sorted([*BENCHMARKS.glob("*/results/*.json"), *BENCHMARKS.glob("tuning/grids/*.json"),
                  *BENCHMARKS.glob("tuning/replays/*.json")])


def recorded_command(path: Path) -> str:
    document = json.loads(path.read_text())
    return str(document["metadata"]["command"] if "metadata" in document else document["command"])


def runner_of(command: str) -> Path:
    """The runner a recorded command starts: ``python -m benchmarks.x.y ...`` or ``python benchmarks/x/y.py ...``."""
    words = shlex.split(command)
    assert words[0] == "python", command
    if words[1] == "-m":
        return REPO.joinpath(*words[2].split(".")).with_suffix(".py")
    return REPO / words[1]


def test_every_result_file_is_cited_by_a_results_page_and_the_index() -> None:
    pages = "\n".join(page.read_text() for page in PAGES.glob("*.md"))
    index = (BENCHMARKS / "README.md").read_text()
    assert len(RESULTS) > 20
    uncited = [str(path.relative_to(REPO)) for path in RESULTS if path.stem not in pages]
    assert uncited == []
    for folder in {path.parent.relative_to(BENCHMARKS) for path in RESULTS}:
        assert str(folder) in index


@pytest.mark.parametrize("path", RESULTS, ids=lambda path: str(path.relative_to(BENCHMARKS)))
def test_every_result_file_records_the_runner_that_regenerates_it(path: Path) -> None:
    runner = runner_of(recorded_command(path))
    assert runner.is_file(), runner
    assert runner.is_relative_to(BENCHMARKS)


def test_every_results_page_names_a_runner_and_a_command() -> None:
    for page in PAGES.glob("*.md"):
        if page.name == "README.md":
            continue
        text = page.read_text()
        assert "benchmarks/" in text and ("python -m benchmarks." in text or "python benchmarks/" in text), page.name


@pytest.mark.fits
def test_a_stored_replay_is_what_its_command_writes(tmp_path: Path) -> None:
    """The frozen-head replay's recorded command, rerun for the fast samplers, gives the stored figures."""
    stored_path = BENCHMARKS / "tuning" / "replays" / "minilm_head.json"
    stored = json.loads(stored_path.read_text())
    words = shlex.split(stored["command"])
    argv = words[words.index("-m") + 2:]
    argv[argv.index("--table") + 1] = str(REPO / argv[argv.index("--table") + 1])
    argv[argv.index("--json") + 1] = str(tmp_path / "replay.json")
    assert bench_samplers.main([*argv, "--samplers", "flowchart", "random", "tpe"]) == 0
    rerun = json.loads((tmp_path / "replay.json").read_text())
    assert rerun["targets"].keys() == stored["targets"].keys()
    for target, found in rerun["targets"].items():
        assert found["feasible_cells"] == stored["targets"][target]["feasible_cells"]
        for sampler, figures in found["samplers"].items():
            expected = stored["targets"][target]["samplers"][sampler]
            assert {k: v for k, v in figures.items() if k != "seconds_per_study"} == \
                   {k: v for k, v in expected.items() if k != "seconds_per_study"}, (target, sampler)
