"""``[data] public = true`` is checked where it can be: a public-proxy study enters its records' ledger, its choice is
released only from a fit on other records, and those are never the records it tuned on (the same file, or the same
records in another file and order)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

import swagppm
from swagppm import ConfigError, TrialParams
from swagppm.claim import SealedClaim, StudyClaim
from tests.tuner.helpers import one_error_line
from tuner import StudyConfig
from tuner.cli import main
from tuner.cli.arguments import data_override
from tuner.export import Chosen
from tuner.ledger import STUDY_ENTRY, ledger_dir


def write_records(path: Path, *, size: int, seed: int, reverse: bool = False) -> Path:
    """Synthetic records (four classes) as JSONL; ``reverse``: the same records, last first."""
    texts, labels = swagppm.synthetic_corpus(size, num_classes=4, seed=seed)
    lines = [json.dumps({"text": text, "label": label}) + "\n" for text, label in zip(texts, labels)]
    path.write_text("".join(reversed(lines) if reverse else lines))
    return path


def public_choice(study_file: Callable[..., Path], tmp_path: Path, source: Path) -> Chosen:
    fit = StudyConfig.from_toml(study_file(data={"source": str(source), "public": True})).fit
    claim = StudyClaim(epsilon_cap=50.0, mode="public-proxy", data_public=True, delta=None, max_records=None,
                       accounting=None, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False,
                       data_set="public", study_id="proxy-id")
    key = bytes(range(32))
    return Chosen(config=fit, params=TrialParams(c=0.8, ft_epochs=6), epsilon=6.2, trials_run=3,
                  path=tmp_path / "best.json", claim=SealedClaim.of(claim, key).verify(key))


def test_a_public_proxy_choice_is_not_moved_onto_the_very_file_it_was_tuned_on(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    public = write_records(tmp_path / "public.jsonl", size=40, seed=3)
    (tmp_path / "link.jsonl").symlink_to(public)
    monkeypatch.chdir(tmp_path)
    chosen = public_choice(study_file, tmp_path, public)
    for given in ("public.jsonl", "./public.jsonl", "link.jsonl"):
        with pytest.raises(ConfigError) as refused:
            data_override(argparse.Namespace(data=given), chosen)
        assert str(refused.value) == (f"--data {given}: these are the records {tmp_path / 'best.json'} was tuned on "
                                      "(declared public there); a public-proxy choice is fitted once on other "
                                      "records, the private ones")
    private = write_records(tmp_path / "private.jsonl", size=40, seed=5)
    assert data_override(argparse.Namespace(data=str(private)), chosen).config.data.source == str(private)


def test_records_declared_public_are_not_released_without_data(study_file: Callable[..., Path], tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    """A release claims privacy for one fit on the private records; on the public-proxy study's own records it was
    the way to put "public-proxy, tuning cost 0" on a card for records that were never public."""
    public = write_records(tmp_path / "public.jsonl", size=40, seed=3)
    path = study_file(data={"source": str(public), "public": True, "synthetic_size": None, "synthetic_classes": None})
    assert main(["fit", str(path), "--release", str(tmp_path / "out"), "--force"]) == 2
    assert one_error_line(capsys.readouterr().err) == (
        f"swagppm-tune: error: {public}: these records are declared public ([data] public = true), and a release is "
        "one fit on the private records under a privacy claim: pass --data PRIVATE (a public-proxy choice is fitted "
        "once on the private data)")
    assert not (tmp_path / "cache").exists() and not (tmp_path / "out").exists()  # before any work


@pytest.mark.fits
def test_a_public_proxy_study_enters_the_ledger_and_its_records_in_another_file_are_refused(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("SWAGPPM_TUNE_LEDGER", str(tmp_path / "ledger"))  # other tests' studies share seed 3's records
    public = write_records(tmp_path / "public.jsonl", size=240, seed=3)
    labels = sorted(set(swagppm.synthetic_corpus(240, num_classes=4, seed=3)[1]))
    path = study_file(name="proxy", data={"source": str(public), "public": True, "synthetic_size": None,
                                          "synthetic_classes": None, "labels": labels},
                      study={"name": "proxy", "n_trials": 1}, search={"probe": False})
    assert main(["run", str(path)]) in (0, 1)
    entries = [json.loads(line) for ledger in ledger_dir().glob("*.jsonl") for line in ledger.read_text().splitlines()]
    assert [e for e in entries if e["kind"] == STUDY_ENTRY and e.get("study") == "proxy"
            and e["mode"] == "public-proxy"]  # it entered as a study (it adds nothing to any total)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json"), "--trial", "0"]) == 0
    (tmp_path / "elsewhere").mkdir()
    copy = write_records(tmp_path / "elsewhere" / "private.jsonl", size=240, seed=3, reverse=True)
    capsys.readouterr()
    assert main(["fit", "--from", str(tmp_path / "best.json"), "--data", str(copy),
                 "--release", str(tmp_path / "out"), "--force"]) == 2
    out = capsys.readouterr()
    assert one_error_line(out.err) == (
        "swagppm-tune: error: these records are the ones public-proxy study 'proxy' tuned on (declared public there; "
        f"its entry is in the privacy ledger {ledger_dir() / 'public.jsonl'}): a public-proxy choice is released on "
        "other records, the private ones; name them with --data")
    assert "stage1" not in out.err and "eps=" not in out.out and not (tmp_path / "out").exists()  # before any fit
