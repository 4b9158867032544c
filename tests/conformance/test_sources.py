"""What every registered data source must do, checked through the registry.

Each kind of source is read from a small example of its own (``EXAMPLES``); a kind
registered without an example fails here, so a new source comes with its
conformance case.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from swagppm import DataConfig
from swagppm.data import sources
from swagppm.data.sources import Records, source_for
from tests.swagppm.helpers import local_hub_dataset, offline_hub, parquet_bytes

ROWS = [{"text": f"worker {i} hurt a {'hand' if i % 2 else 'foot'} on a ladder", "label": f"k{i % 3}"}
        for i in range(30)]


def jsonl(folder: Path) -> str:
    path = folder / "records.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    return str(path)


def a_folder(folder: Path) -> str:
    (folder / "parts").mkdir()
    pd.DataFrame(ROWS[:15]).to_csv(folder / "parts" / "a.csv", index=False)
    pd.DataFrame(ROWS[15:]).to_csv(folder / "parts" / "b.csv", index=False)
    return str(folder / "parts")


def hub_name(folder: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``owner/injuries`` in an offline Hugging Face hub cache (a parquet file of its train split)."""
    commit = "c" * 40
    local_hub_dataset(folder / "hub", "owner/injuries", {commit: {"data/train.parquet": parquet_bytes(ROWS)}},
                      refs={"main": commit})
    offline_hub(folder / "hub", monkeypatch)
    return "owner/injuries"


EXAMPLES: dict[str, Callable[[Path, pytest.MonkeyPatch], str]] = {
    "synthetic": lambda folder, _: "synthetic",
    "file": lambda folder, _: jsonl(folder),
    "folder": lambda folder, _: a_folder(folder),
    "huggingface": hub_name,
}


@pytest.fixture(params=[kind.name for kind in sources._SOURCES])
def example(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    name = request.param
    assert name in EXAMPLES, f"the data source {name!r} has no conformance example"
    return name, EXAMPLES[name](tmp_path, monkeypatch)


def test_a_source_claims_its_example_and_reads_aligned_string_records(example: tuple[str, str]) -> None:
    name, source = example
    kind = source_for(source)
    assert kind.name == name
    records = kind.read(DataConfig(source=source, synthetic_size=40), seed=0)
    assert isinstance(records, Records)
    assert len(records.texts) == len(records.labels) > 0
    assert all(isinstance(text, str) and text.strip() for text in records.texts)
    assert all(isinstance(label, str) for label in records.labels)


def test_a_source_reads_the_same_records_twice(example: tuple[str, str]) -> None:
    _, source = example
    config = DataConfig(source=source, synthetic_size=40)
    first, second = (source_for(source).read(config, seed=0) for _ in range(2))
    assert first == second
