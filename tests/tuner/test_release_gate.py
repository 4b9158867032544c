"""Every release through one gate (``tuner.release``): the library's and the command line's alike enter the attempt in
the data set's ledger, state the verified claim, and audit (or say plainly that they did not); nothing on the card is
read from a field the seal does not cover."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tuner
from swagppm import ReleaseRefused
from swagppm.releases.staging import owner_report_path
from swagppm.statement import tuning_section
from tests.tuner.helpers import one_error_line, with_a_feasible_trial
from tuner.cli import main
from tuner.faults import held_signals
from tuner.ledger import LEDGER_ENV
from tuner.release import ReleaseRequest, release_chosen


@pytest.fixture
def exported(study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An export of the small study's feasible trial, its study entered in a ledger of this test's own."""
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "ledgers"))
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == 0
    return tmp_path / "best.json"


def entries(tmp_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (tmp_path / "ledgers" / "synthetic.jsonl").read_text().splitlines()][1:]


def card_of(folder: Path) -> dict[str, Any]:
    return dict(json.loads((folder / "release_card.json").read_text()))


@pytest.mark.fits
def test_the_librarys_release_goes_through_the_gate_audited_or_saying_it_was_not(exported: Path,
                                                                                 tmp_path: Path) -> None:
    """Issue 48, finding 5: ``swagppm.release`` wrote a card with no ledger entry and no audit. The library's entry
    point is the command line's gate: ledger entries before and after the draw, the sealed claim, the audit, or an
    explicit ``audit=False`` that the card states."""
    chosen = tuner.read_export(exported)
    released = tuner.release_chosen(chosen, tmp_path / "audited", ReleaseRequest.of(chosen, force=True))
    card = card_of(released.path)
    assert released.audit is not None and "a membership-inference audit of the released draw" in card["audit"]
    assert card["privacy_claim"]["epsilon_at_most"] == 50.0 == chosen.claim.claim.epsilon_cap
    assert card["tuning"] == tuning_section(chosen.claim.claim, None) and released.card.to_dict() == card
    report = json.loads(owner_report_path(released.path).read_text())
    assert report["study_claim"] == chosen.claim.claim.to_dict() and report["ledger"]["attempts"] == {"started": 1}
    unaudited = release_chosen(chosen, tmp_path / "unaudited", ReleaseRequest.of(chosen, audit=False, force=True))
    assert unaudited.audit is None and card_of(unaudited.path)["audit"] == "none was run before this release"
    releases = [(e["outcome"], e["source"]) for e in entries(tmp_path) if e["kind"] == "release"]
    assert releases == [("started", str(exported)), ("released", str(exported))] * 2
    assert [e["outcome"] for e in entries(tmp_path) if e["kind"] == "audit"] == ["released"]


@pytest.mark.fits
def test_an_edited_tuning_field_of_an_export_never_reaches_the_card(exported: Path, tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48, finding 3: the seal did not cover the export's tuning field, and editing it made a card say
    "accounted, epsilon <= 0.05" for an unaccounted study. The card's tuning now comes from the sealed claim."""
    document = json.loads(exported.read_text())
    forged = {"mode": "accounted", "total_epsilon": 0.0517, "delta": 1e-6, "statement": "accounted: epsilon <= 0.0517",
              "outside_the_total": []}
    exported.write_text(json.dumps(document | {"tuning": document["tuning"] | forged}))
    assert main(["release", "--from", str(exported), "-o", str(tmp_path / "model"), "--force"]) == 0
    card = card_of(tmp_path / "model")
    assert card["tuning"]["mode"] == "unaccounted" and card["tuning"]["total_epsilon"] is None
    assert "0.0517" not in (tmp_path / "model" / "release_card.json").read_text() + \
        (tmp_path / "model" / "README.md").read_text()
    capsys.readouterr()


@pytest.mark.slow
def test_an_export_whose_fit_settings_left_its_claim_is_refused_before_the_fit(
        exported: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The export's fit settings are not sealed, the claim is: settings it does not cover release nothing."""
    document = json.loads(exported.read_text())
    exported.write_text(json.dumps(document | {"swagppm": document["swagppm"] | {"prior_scale": 0.5}}))
    assert main(["release", "--from", str(exported), "-o", str(tmp_path / "model"), "--force"]) == 2
    out = capsys.readouterr()
    assert "the configuration is not the one its claim covers (prior_scale = 0.5 (the claim: 1.0))" in \
        one_error_line(out.err)
    assert "stage 1" not in out.out and not (tmp_path / "model").exists()
    chosen = tuner.read_export(exported)
    with pytest.raises(ReleaseRefused, match="not the one its claim covers"):
        release_chosen(chosen, tmp_path / "model", ReleaseRequest.of(chosen, force=True))


def test_a_signal_while_a_release_is_put_in_place_is_held_until_it_is() -> None:
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with held_signals() as held:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True
    assert finished and held.caught == "SIGINT"  # the last one to come, raised by nobody: the caller reads it
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
