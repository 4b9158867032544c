"""The privacy ledger of a data set: named by a keyed fingerprint, owner-only, appended under a lock, and composed by
dp-accounting into the one total an accounted card states (a private selection included)."""

from __future__ import annotations

import dataclasses
import math
import stat
from pathlib import Path

import pytest
from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import RdpAccountant

from swagppm import ConfigError
from swagppm.provenance import keyed_fingerprint
from swagppm.statement import AuditVerdict, PrivacyClaim, release_statement
from tuner.accounting import rdp_orders
from tuner.ledger import LEDGER_ENV, Ledger, ledger_dir, seal
from tuner.release import ReleaseRequest, with_ledger_total


class Records:
    """What a session offers the ledger: the keyed fingerprint of its records."""

    def __init__(self, digest: str) -> None:
        self.digest = digest

    def records_fingerprint(self, key: bytes) -> str:
        return keyed_fingerprint(key, self.digest)


def _run(epsilon: float) -> RandomizedResponseDpEvent:
    return RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2)


def test_a_ledger_is_named_by_a_keyed_fingerprint_and_kept_owner_only(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    first, again, other = (Ledger.of(Records(digest), folder=folder) for digest in ("aaa", "aaa", "bbb"))
    assert first.path == again.path != other.path and first.path.parent == folder
    assert "aaa" not in first.path.name and len(first.path.stem) == 32
    first.append({"kind": "audit", "outcome": "passed"})
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(first.path.stat().st_mode) == stat.S_IMODE((folder / "ledger.key").stat().st_mode) == 0o600
    assert Ledger.of(Records("aaa"), folder=tmp_path / "elsewhere").path.name != first.path.name  # another key


def test_ledger_dir_follows_the_environment_and_defaults_to_the_users_data_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "mine"))
    assert ledger_dir() == tmp_path / "mine"
    monkeypatch.delenv(LEDGER_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert ledger_dir() == tmp_path / "data" / "swagppm-tune" / "ledger"


def test_a_study_is_entered_once_and_every_release_attempt_each_time(tmp_path: Path) -> None:
    ledger = Ledger.of(Records("records"), folder=tmp_path)
    study = {"id": "abc", "study": "s", "mode": "accounted", "epsilon_cap": 1.0, "trials_shape": 1.0,
             "trials_mean": 10.0}
    ledger.record_study(study)
    ledger.record_study(study)
    for outcome in ("refused", "forced", "released"):
        ledger.append({"kind": "release", "outcome": outcome, "epsilon_cap": 1.0, "selection_stop_probability": None})
    assert [entry["kind"] for entry in ledger.entries()] == ["study", "release", "release", "release"]
    assert ledger.summary()["entries"] == {"release:forced": 1, "release:refused": 1, "release:released": 1,
                                           "study:accounted": 1}


def test_the_total_composes_every_accounted_study_and_every_release_attempt(tmp_path: Path) -> None:
    """Two accounted studies on the same records (another name does not start a new ledger) and two release
    attempts, one with a private selection: one accountant, the dp-accounting figure by hand."""
    ledger = Ledger.of(Records("records"), folder=tmp_path)
    for number, (cap, mean) in enumerate(((1.0, 10.0), (2.0, 5.0))):
        ledger.record_study({"id": str(number), "study": f"s{number}", "mode": "accounted", "epsilon_cap": cap,
                             "trials_shape": 1.0, "trials_mean": mean})
    ledger.record_study({"id": "u", "study": "adaptive", "mode": "unaccounted", "epsilon_cap": 5.0})
    ledger.append({"kind": "release", "outcome": "refused", "epsilon_cap": 1.0, "selection_stop_probability": None})
    ledger.append({"kind": "audit", "outcome": "refused"})
    total = ledger.total(delta=1e-6, pending=(2.0, 0.1))
    accountant = RdpAccountant(rdp_orders(), NeighboringRelation.REPLACE_ONE)
    accountant.compose(RepeatAndSelectDpEvent(event=_run(1.0), mean=10.0, shape=1.0))
    accountant.compose(RepeatAndSelectDpEvent(event=_run(2.0), mean=5.0, shape=1.0))
    accountant.compose(RepeatAndSelectDpEvent(event=_run(2.0), mean=10.0, shape=1.0))  # the pending selection
    accountant.compose(_run(1.0))
    assert total == pytest.approx(accountant.get_epsilon(1e-6), rel=1e-12)
    assert ledger.unaccounted_studies() and Ledger.of(Records("new"), folder=tmp_path).total(delta=1e-6) is None


def test_a_damaged_ledger_is_named_in_one_line(tmp_path: Path) -> None:
    ledger = Ledger.of(Records("records"), folder=tmp_path)
    ledger.append({"kind": "audit"})
    with ledger.path.open("a") as handle:
        handle.write('{"kind": "rel')
    with pytest.raises(ConfigError, match=r"is damaged \(a line is not JSON\); restore it from a backup"):
        ledger.entries()


def test_an_accounted_card_states_the_ledgers_total_and_a_selection_composed_into_it(tmp_path: Path) -> None:
    """One composed figure on the card, never the study's and the selection's partial totals side by side."""
    from swagppm.releases.selection import Selection
    from swagppm.releases.writer import ReleaseSpec

    ledger = Ledger.of(Records("records"), folder=tmp_path)
    ledger.record_study({"id": "a", "study": "s", "mode": "accounted", "epsilon_cap": 1.0, "trials_shape": 1.0,
                         "trials_mean": 10.0})
    selection = Selection(source="public.csv", threshold=0.5, rounds=3, stop_probability=0.1,
                          cost={"epsilon": 3.1, "delta": 1e-6, "accountant": "dp-accounting"})
    tuning = {"mode": "accounted", "total_epsilon": 9.9, "delta": 1e-6, "statement": "partial",
              "outside_the_total": ["the feasibility test"]}
    spec = ReleaseSpec(epsilon_cap=1.0, tuning=tuning, selection=selection)
    priced = with_ledger_total(spec, ledger, ReleaseRequest(spec=spec, delta=1e-6))
    assert priced.tuning is not None and priced.selection is not None
    total = ledger.total(delta=1e-6, pending=(1.0, 0.1))
    assert priced.tuning["total_epsilon"] == total and f"{total:.4g}" in priced.tuning["statement"]
    assert "every accounted study and every release attempt on these data" in priced.tuning["statement"]
    assert priced.selection.cost["composed_into_total"] is True
    description = {"procedure": "threshold", "metric": "f1_macro", "threshold": 0.5, "stop_probability": 0.1,
                   "selection_set": "30 public records", "released_draw_score": 0.7, "accounted": True,
                   "unaccounted_because": None, "cost": dict(priced.selection.cost)}
    claim = PrivacyClaim(epsilon_cap=1.0, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False)
    lines = release_statement(claim=claim, trainable="head", private_parameters=2, tuning=priced.tuning,
                              selection=description, audit=AuditVerdict(outcome="passed"))
    text = "\n".join(lines)
    assert "3.1" not in text and "9.9" not in text  # no partial total beside the composed one
    assert "its cost is composed into the one total stated under Tuning" in text
    assert "outside that total, read from the private data without noise: the feasibility test" in text
    unaccounted = dataclasses.replace(spec, tuning={**tuning, "mode": "unaccounted"})
    assert with_ledger_total(unaccounted, ledger, ReleaseRequest(spec=unaccounted, delta=1e-6)) is unaccounted


def test_a_seal_changes_with_any_field_of_the_claim() -> None:
    claim = {"epsilon_cap": 1.0, "mode": "accounted", "data_public": False}
    assert seal(claim) == seal(dict(reversed(list(claim.items()))))  # the order of the keys does not matter
    assert len({seal(claim), seal({**claim, "epsilon_cap": 1.5}), seal({**claim, "data_public": True})}) == 3
