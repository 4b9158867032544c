"""What every registered data source must do, checked through the registry.

Each kind of source is read from a small example of its own (``EXAMPLES``); a kind
registered without an example fails here, so a new source comes with its
conformance case.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from swagppm import DataConfig
from swagppm.data import sources
from swagppm.data.sources import Records, source_for

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


def saved_dataset(folder: Path) -> str:
    if importlib.util.find_spec("datasets") is None:
        pytest.skip("the datasets extra is not installed")
    import datasets

    datasets.Dataset.from_list(ROWS).save_to_disk(str(folder / "saved"))
    return str(folder / "saved")


EXAMPLES: dict[str, Callable[[Path], str]] = {
    "synthetic": lambda folder: "synthetic",
    "file": jsonl,
    "folder": a_folder,
    "huggingface": saved_dataset,
}


@pytest.fixture(params=[kind.name for kind in sources._SOURCES])
def example(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    name = request.param
    assert name in EXAMPLES, f"the data source {name!r} has no conformance example"
    return name, EXAMPLES[name](tmp_path)


def test_a_source_claims_its_example_and_reads_aligned_string_records(example: tuple[str, str]) -> None:
    name, source = example
    kind = source_for(source)
    if name != "huggingface":  # a save_to_disk folder is a folder, which the folder kind may claim first
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
