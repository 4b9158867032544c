"""The privacy ledger of a declared data set: one file per data set whatever version of its records a study read,
owner-only, kept under the owner key, appended whole under a lock (a cut tail set aside, a refused write undone), and
composed by dp-accounting into the one total an accounted card states, which refused attempts do not move."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from dp_accounting import NeighboringRelation, RandomizedResponseDpEvent
from dp_accounting.dp_event import RepeatAndSelectDpEvent
from dp_accounting.rdp import RdpAccountant

from swagppm import ConfigError
from swagppm.claim import Accounting, SealedClaim, StudyClaim
from swagppm.statement import AuditVerdict, PrivacyClaim, release_statement, tuning_section
from tests import PATIENCE
from tests.swagppm.helpers import read_only
from tests.tuner.helpers import REPO, MadeUpRecords
from tuner.accounting import rdp_orders
from tuner.keys import OwnerKey
from tuner.ledger import LEDGER_ENV, Ledger, ledger_dir, sealed_ledgers
from tuner.release import Attempt, ReleaseRequest, with_ledger_total

KEY = OwnerKey(path=Path("owner.key"), secret=bytes(range(32)))
ACCOUNTED = {"mode": "accounted", "epsilon_cap": 1.0, "trials_shape": 1.0, "trials_mean": 10.0}


def ledger(folder: Path, digest: str = "records", *, data_set: str = "cases", key: OwnerKey = KEY) -> Ledger:
    return Ledger.of(data_set, MadeUpRecords(digest), key=key, folder=folder)


def _run(epsilon: float) -> RandomizedResponseDpEvent:
    return RandomizedResponseDpEvent(noise_parameter=2.0 / (1.0 + math.exp(epsilon)), num_buckets=2)


def attempt(book: Ledger, outcome: str, *, cap: float = 1.0, stop: float | None = None) -> None:
    """One release attempt as ``tuner.release.Attempt`` enters it: started, then its end (None: killed first)."""
    number = os.urandom(4).hex()
    entry = {"kind": "release", "attempt": number, "epsilon_cap": cap, "selection_stop_probability": stop}
    book.append(entry | {"outcome": "started"})
    if outcome != "killed":
        book.append(entry | {"outcome": outcome})


def test_a_ledger_is_named_by_its_data_set_kept_owner_only_and_opens_with_its_header(tmp_path: Path) -> None:
    folder = tmp_path / "ledgers"
    book = ledger(folder)
    book.append({"kind": "audit", "outcome": "passed"})
    assert book.path == folder / "cases.jsonl" and stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE(book.path.stat().st_mode) == 0o600
    header, entry = (json.loads(line) for line in book.path.read_text().splitlines())
    assert header["kind"] == "header" and header["data_set"] == "cases" and header["key"] == KEY.id
    assert len(header["ledger"]) == 32 and book.uid() == header["ledger"]
    assert entry["version"] == book.version != "records" and len(entry["version"]) == 32
    assert book.entries() == [entry] and sealed_ledgers(folder) == [(f"the privacy ledger {book.path}", KEY.id)]


def test_ledger_dir_follows_the_environment_and_defaults_to_the_users_data_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "mine"))
    assert ledger_dir() == tmp_path / "mine"
    monkeypatch.delenv(LEDGER_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert ledger_dir() == tmp_path / "data" / "swagppm-tune" / "ledger"


@pytest.mark.slow
def test_one_changed_record_is_a_new_version_of_the_same_data_set_and_keeps_the_same_total(tmp_path: Path) -> None:
    """Issue 48, finding 4: a trailing space in one record made a new ledger and a total of 5.0 came back as 1.0.
    Here two versions of the data set (``prepare_data``'s record digests of two files one space apart) enter one
    ledger, and the total composes both."""
    from swagppm.data.prepare import prepare_data
    from tests.swagppm.helpers import small_config

    digests = []
    for number, tail in enumerate(("", " ")):
        data = tmp_path / f"v{number}.jsonl"
        data.write_text("".join(json.dumps({"text": f"record {i}{tail if i == 3 else ''}", "label": i % 2}) + "\n"
                                for i in range(8)))
        digests.append(prepare_data(small_config(tmp_path / "cache", data={"source": str(data)}).data).records_hash)
    assert digests[0] != digests[1]
    first, second = (ledger(tmp_path, digest) for digest in digests)
    assert first.path == second.path and first.version != second.version
    first.record_study({"id": "a", "study": "before", **ACCOUNTED})
    before = first.total(delta=1e-6, pending=(1.0, None))
    second.record_study({"id": "b", "study": "after", **ACCOUNTED})
    after = second.total(delta=1e-6, pending=(1.0, None))
    alone = ledger(tmp_path / "alone", digests[1])
    alone.record_study({"id": "b", "study": "after", **ACCOUNTED})
    assert after > before and after > alone.total(delta=1e-6, pending=(1.0, None))  # both studies count, once
    assert second.summary()["versions"] == 2


def test_records_entered_under_one_data_set_are_refused_under_another_name(tmp_path: Path) -> None:
    ledger(tmp_path, "same records").record_study({"id": "a", "study": "s", **ACCOUNTED})
    renamed = ledger(tmp_path, "same records", data_set="cases-copy")
    with pytest.raises(ConfigError, match=r"these records were entered in the privacy ledger of data set 'cases' "
                                          r".*declare \[study\] data_set = \"cases\""):
        renamed.record_study({"id": "b", "study": "t", **ACCOUNTED})
    assert not renamed.path.exists()


def test_a_ledger_kept_under_another_key_is_refused_naming_both_keys(tmp_path: Path) -> None:
    """Issue 48, finding 4: a deleted ledger.key was made again without a word and the old ledger orphaned."""
    ledger(tmp_path).record_study({"id": "a", "study": "s", **ACCOUNTED})
    other = OwnerKey(path=tmp_path / "new.key", secret=bytes(32))
    for action in (lambda book: book.entries(), lambda book: book.append({"kind": "audit"})):
        with pytest.raises(ConfigError) as info:
            action(ledger(tmp_path, key=other))
        assert str(info.value).startswith(f"the privacy ledger {tmp_path / 'cases.jsonl'} is kept under owner key "
                                          f"{KEY.id}, but the owner key {other.path} is another one (id {other.id})")


def test_a_study_entered_in_a_ledger_that_is_gone_or_another_is_refused(tmp_path: Path) -> None:
    """Issue 48, finding 4: a ledger variable pointed elsewhere started the accounting again from zero."""
    ledger(tmp_path / "kept").record_study({"id": "a", "study": "s", **ACCOUNTED})
    with pytest.raises(ConfigError) as info:
        ledger(tmp_path / "elsewhere").require_study("a", "the study 's'")
    gone = tmp_path / "elsewhere" / "cases.jsonl"
    assert str(info.value) == (f"the privacy ledger of data set 'cases' is missing ({gone} is not there), but the "
                               "study 's' was entered in it: restore it from a backup, or "
                               f"point ${LEDGER_ENV} at the folder that holds it (a new ledger would restart the "
                               "accounting of these data)")
    other = ledger(tmp_path / "other")
    other.record_study({"id": "z", "study": "another", **ACCOUNTED})
    with pytest.raises(ConfigError, match="holds no entry of the study 's', which was entered in the ledger of data "
                                          "set 'cases': this is another ledger"):
        other.require_study("a", "the study 's'")
    ledger(tmp_path / "kept").require_study("a", "the study 's'")
    assert not (tmp_path / "elsewhere").exists()


def test_a_cut_last_line_is_set_aside_and_the_next_entry_is_recorded_whole(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48, faults: a ledger whose last line was cut got the next entry glued onto it and was refused from then
    on (and launched jobs died with a raw JSONDecodeError)."""
    book = ledger(tmp_path)
    book.record_study({"id": "a", "study": "s", **ACCOUNTED})
    with book.path.open("a") as handle:
        handle.write('{"kind": "release", "attempt": "x", "outc')
    book.record_study({"id": "b", "study": "t", **ACCOUNTED})  # what a launched job's stage 1 does
    err = capsys.readouterr().err
    [aside] = tmp_path.glob("cases.jsonl.cut-*")
    assert aside.read_text() == '{"kind": "release", "attempt": "x", "outc' and stat.S_IMODE(aside.stat().st_mode) \
        == 0o600
    assert f"warning: the privacy ledger {book.path} ended in a line cut mid-write" in err and str(aside) in err
    assert [entry["id"] for entry in book.entries()] == ["a", "b"]
    assert all(json.loads(line) for line in book.path.read_text().splitlines())


def test_a_damaged_line_inside_is_named_in_one_line(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    book.append({"kind": "audit"})
    with book.path.open("a") as handle:
        handle.write('{"kind": "rel\n{"kind": "audit"}\n')
    with pytest.raises(ConfigError, match=r"cases.jsonl is damaged at line 3 \(not one whole entry\): restore it"):
        book.entries()


def test_a_file_that_is_not_a_ledger_is_refused(tmp_path: Path) -> None:
    (tmp_path / "cases.jsonl").write_text('{"kind": "study", "id": "old"}\n')  # an older ledger: no header
    with pytest.raises(ConfigError, match="is not a ledger of this swagppm-tune"):
        ledger(tmp_path).entries()


def test_refused_failed_and_interrupted_attempts_do_not_move_the_published_total(tmp_path: Path) -> None:
    """Issue 48, finding 6: the next accounted card's total was 4, 5, 6, 7 after 0 to 3 refusals. Only attempts that
    published a draw count (and one whose end was never written, its process killed, as if it had)."""
    totals = []
    for refusals in range(4):
        book = ledger(tmp_path / str(refusals))
        book.record_study({"id": "a", "study": "s", **ACCOUNTED})
        for _ in range(refusals):
            attempt(book, "refused")
        attempt(book, "failed")
        attempt(book, "interrupted")
        attempt(book, "not selected")
        totals.append(book.total(delta=1e-6, pending=(1.0, None)))
        assert book.summary()["attempts"].get("refused", 0) == refusals
        assert book.summary()["not_in_the_total"] == refusals + 3
    assert len(set(totals)) == 1
    published, killed = ledger(tmp_path / "p"), ledger(tmp_path / "k")
    for book, end in ((published, "released"), (killed, "killed")):
        book.record_study({"id": "a", "study": "s", **ACCOUNTED})
        attempt(book, end)
        assert book.total(delta=1e-6, pending=(1.0, None)) > totals[0]


def test_the_total_composes_every_accounted_study_and_every_published_attempt(tmp_path: Path) -> None:
    """Two accounted studies on the same data set and two published attempts, one with a private selection: one
    accountant, the dp-accounting figure by hand."""
    book = ledger(tmp_path)
    for number, (cap, mean) in enumerate(((1.0, 10.0), (2.0, 5.0))):
        book.record_study({"id": str(number), "study": f"s{number}", "mode": "accounted", "epsilon_cap": cap,
                           "trials_shape": 1.0, "trials_mean": mean})
    book.record_study({"id": "u", "study": "adaptive", "mode": "unaccounted", "epsilon_cap": 5.0})
    attempt(book, "forced")
    attempt(book, "refused", cap=9.0)
    book.append({"kind": "audit", "outcome": "refused"})
    total = book.total(delta=1e-6, pending=(2.0, 0.1))
    accountant = RdpAccountant(rdp_orders(), NeighboringRelation.REPLACE_ONE)
    accountant.compose(RepeatAndSelectDpEvent(event=_run(1.0), mean=10.0, shape=1.0))
    accountant.compose(RepeatAndSelectDpEvent(event=_run(2.0), mean=5.0, shape=1.0))
    accountant.compose(_run(1.0))
    accountant.compose(RepeatAndSelectDpEvent(event=_run(2.0), mean=10.0, shape=1.0))  # the pending selection
    assert total == pytest.approx(accountant.get_epsilon(1e-6), rel=1e-12)
    assert book.unaccounted_studies() and ledger(tmp_path, data_set="new").total(delta=1e-6) is None


def _accounted_spec(book: Ledger, *, selection: object = None) -> object:
    from swagppm.releases.writer import ReleaseSpec

    claim = StudyClaim(epsilon_cap=1.0, mode="accounted", data_public=False, delta=1e-6, max_records=1000,
                       accounting=Accounting(trials_shape=1.0, trials_mean=10.0), posterior="swag", prior_scale=1.0,
                       nll_bound=None, public_risks=False, data_set="cases", study_id="a")
    return ReleaseSpec(claim=SealedClaim.of(claim, KEY.secret).verify(KEY.secret), selection=selection)  # type: ignore[arg-type]


def test_an_accounted_card_states_the_ledgers_total_which_refusals_do_not_move_and_names_the_audit_gate(
        tmp_path: Path) -> None:
    """One composed figure on the card (a selection composed into it, never partial totals side by side), the same
    after refused attempts, and the audit gate among the steps outside it."""
    from swagppm.releases.selection import Selection

    book = ledger(tmp_path)
    book.record_study({"id": "a", "study": "s", **ACCOUNTED})
    selection = Selection(source="public.csv", threshold=0.5, rounds=3, stop_probability=0.1,
                          cost={"epsilon": 3.1, "delta": 1e-6, "accountant": "dp-accounting"})
    spec = _accounted_spec(book, selection=selection)
    priced = with_ledger_total(spec, book, ReleaseRequest(spec=spec))  # type: ignore[arg-type]
    assert priced.total is not None and priced.selection is not None
    total = book.total(delta=1e-6, pending=(1.0, 0.1))
    assert priced.total.epsilon == total and priced.selection.cost["composed_into_total"] is True
    for _ in range(3):
        attempt(book, "refused")
        again = with_ledger_total(spec, book, ReleaseRequest(spec=spec))  # type: ignore[arg-type]
        assert again.total is not None and again.total.epsilon == total
    tuning = tuning_section(priced.claim.claim, priced.total)
    assert f"{total:.4g}" in tuning["statement"] and "every accounted study and every published release attempt" in \
        tuning["statement"]
    description = {"procedure": "threshold", "metric": "f1_macro", "threshold": 0.5, "stop_probability": 0.1,
                   "selection_set": "30 public records", "released_draw_score": 0.7, "accounted": True,
                   "unaccounted_because": None, "cost": dict(priced.selection.cost)}
    claim = PrivacyClaim(epsilon_cap=1.0, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False)
    text = "\n".join(release_statement(claim=claim, trainable="head", private_parameters=2, tuning=tuning,
                                       selection=description, audit=AuditVerdict(outcome="passed")))
    assert "3.1" not in text  # no partial total beside the composed one
    assert "its cost is composed into the one total stated under Tuning" in text
    assert "outside that total, read from the private data without noise: the feasibility test" in text
    assert "the release's membership-inference audit gate reads every record's loss" in text
    assert "a refused attempt publishes nothing and is not counted in the total" in text
    unaccounted = dataclasses.replace(spec, claim=dataclasses.replace(  # type: ignore[type-var]
        spec.claim, claim=dataclasses.replace(spec.claim.claim, mode="unaccounted", accounting=None)))  # type: ignore[attr-defined]
    assert with_ledger_total(unaccounted, book, ReleaseRequest(spec=unaccounted)) is unaccounted


def test_an_attempt_is_entered_before_its_draw_and_again_with_how_it_ended(tmp_path: Path) -> None:
    from swagppm.releases.selection import SelectionFailed

    book = ledger(tmp_path)
    spec = _accounted_spec(book)
    request = ReleaseRequest(spec=spec, source="best.json")  # type: ignore[arg-type]
    ends = []
    for error in (None, SelectionFailed("no draw reached it"), KeyboardInterrupt(), RuntimeError("disk")):
        with pytest.raises(type(error)) if error is not None else _nothing():
            with Attempt(ledger=book, request=request, spec=spec) as entered:  # type: ignore[arg-type]
                assert book.entries()[-1]["outcome"] == "started"  # before anything is drawn
                if error is None:
                    entered.finish("released")
                else:
                    raise error
        ends.append(book.entries()[-1]["outcome"])
    assert ends == ["released", "not selected", "interrupted", "failed"]
    assert {entry["source"] for entry in book.entries()} == {"best.json"}


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


# The ledger appended under a file-size limit: a write past LIMIT fails partway, as on a full disk (EFBIG).
LIMITED = """
import json, resource, signal, sys
from pathlib import Path
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from swagppm.provenance import keyed_fingerprint
from tuner.keys import OwnerKey
from tuner.ledger import Ledger
class Records:
    def records_fingerprint(self, key):
        return keyed_fingerprint(key, "records")
book = Ledger.of("cases", Records(), key=OwnerKey(path=Path("k"), secret=bytes(range(32))), folder=Path(sys.argv[1]))
resource.setrlimit(resource.RLIMIT_FSIZE, (book.path.stat().st_size + 40, resource.RLIM_INFINITY))
try:
    book.append({"kind": "audit", "outcome": "passed", "padding": "x" * 200})
except Exception as error:
    print(type(error).__name__, error)
"""


@pytest.mark.slow
def test_a_write_the_disk_refuses_partway_is_undone_and_said_in_one_line(tmp_path: Path) -> None:
    book = ledger(tmp_path)
    book.append({"kind": "audit", "outcome": "passed"})
    before = book.path.read_bytes()
    done = subprocess.run([sys.executable, "-c", LIMITED, str(tmp_path)], capture_output=True, text=True, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=PATIENCE)
    assert done.stdout.startswith(f"ConfigError the privacy ledger {book.path} could not be written (File too "
                                  "large): the entry was not made"), done.stdout + done.stderr
    assert book.path.read_bytes() == before and len(book.entries()) == 1


def test_a_read_only_ledger_folder_is_refused_before_any_work(tmp_path: Path) -> None:
    book = ledger(tmp_path / "ledgers")
    book.append({"kind": "audit"})
    with read_only(tmp_path / "ledgers"):
        with pytest.raises(ConfigError, match=r"cases.jsonl cannot be written \(.*\); every release attempt must be "
                                              "entered in it"):
            book.check_writable()
    book.check_writable()


def _append_many(folder: str, start: int) -> None:
    book = ledger(Path(folder))
    for number in range(start, start + 20):
        book.append({"kind": "audit", "n": number})


@pytest.mark.slow
def test_processes_appending_at_once_leave_every_entry_whole(tmp_path: Path) -> None:
    from concurrent.futures import ProcessPoolExecutor

    with ProcessPoolExecutor(4) as pool:
        list(pool.map(_append_many, [str(tmp_path)] * 4, range(0, 80, 20)))
    book = ledger(tmp_path)
    assert sorted(entry["n"] for entry in book.entries()) == list(range(80))
    assert sum(json.loads(line)["kind"] == "header" for line in book.path.read_text().splitlines()) == 1
