"""The study's claim is fixed and sealed when it is created: an edited cap or public flag is refused by every verb, a
claim edited in the database (and the file to match) breaks its seal, an owner key that is missing or another is
refused and never made again, a rejudged cap ranks but never becomes the released claim, an accounted study proposes
from secret randomness, refuses every data-dependent stop and releases only once exactly its K trials finished, and δ
comes from a public bound."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from swagppm import ConfigError
from swagppm.claim import Accounting, SealedClaim, StudyClaim
from tests.tuner.helpers import merged, one_error_line, result, tight, with_a_feasible_trial, write_study
from tuner import StudyConfig
from tuner.cli import main
from tuner.keys import KEY_ENV, key_path, owner_key
from tuner.ledger import LEDGER_ENV
from tuner.outcome import DrawChecks, judge
from tuner.record import constraint_attrs
from tuner.study import check_record_bound, open_study
from tuner.tuning import ACCOUNTED_TRIALS, CLAIM, claim_of, default_delta, study_claim

pytestmark = pytest.mark.slow

ACCOUNTED = {"accounted": True, "sampler": "random", "public_eval": "public.jsonl", "max_records": 1000}


def _refused_by_every_verb(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> list[str]:
    """The one line each verb that reads the study's claim prints for ``path`` (all exit 2, before any fit)."""
    lines = []
    for argv in (["status", str(path)], ["export", str(path), "-o", str(tmp_path / "best.json")],
                 ["release", str(path), "-o", str(tmp_path / "released"), "--force"], ["audit", str(path)],
                 ["fit", str(path), "--release", str(tmp_path / "out"), "--force"]):
        assert main(argv) == 2, argv
        out = capsys.readouterr()
        lines.append(one_error_line(out.err))
        assert "stage 1" not in out.out and not (tmp_path / "released").exists() and not (tmp_path / "out").exists()
    return lines


@pytest.mark.parametrize(("edit", "says"), [
    ({"targets": {"epsilon_cap": 51.0}}, "was created with [targets] epsilon_cap = 50.0, but the file now says "
                                         "[targets] epsilon_cap = 51.0"),
    ({"data": {"public": True}}, "was created with mode = unaccounted, [data] public = false, but the file now says "
                                 "mode = public-proxy, [data] public = true"),
])
def test_an_edited_cap_or_public_flag_is_refused_by_every_verb_before_any_fit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str],
        edit: dict[str, dict[str, object]], says: str) -> None:
    with_a_feasible_trial(study_file())
    path = study_file(**edit)
    for line in _refused_by_every_verb(path, tmp_path, capsys):
        assert says in line and "fixed when a study is created" in line
        assert "a cap chosen after results were seen is not one declared before any fit" in line


def test_a_rejudged_cap_ranks_but_a_release_of_it_claims_the_cap_fixed_at_creation(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    assert main(["rejudge", str(path), "--name", "looser", "--epsilon-cap", "80"]) == 0
    assert main(["export", str(path), "--study-name", "looser", "-o", str(tmp_path / "best.json")]) == 0
    document = json.loads((tmp_path / "best.json").read_text())
    assert document["targets"]["epsilon_cap"] == 80.0  # what it was ranked against
    assert document["claim"]["terms"]["epsilon_cap"] == 50.0 and document["claim"]["terms"]["ranked_at"] == 80.0
    capsys.readouterr()
    assert main(["status", str(path), "--study-name", "looser"]) == 0  # the rejudged study opens at its own cap


def test_an_export_whose_claim_was_edited_is_refused_before_any_fit(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file()
    with_a_feasible_trial(path)
    best = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(best)]) == 0
    document = json.loads(best.read_text())
    document["claim"]["terms"]["epsilon_cap"] = 0.011
    best.write_text(json.dumps(document))
    capsys.readouterr()
    assert main(["release", "--from", str(best), "-o", str(tmp_path / "released"), "--force"]) == 2
    out = capsys.readouterr()
    assert "the claim (cap, mode, public flag, posterior, data set) does not match its seal" in one_error_line(out.err)
    assert "stage 1" not in out.out and not (tmp_path / "released").exists()


def _rewrite_stored_claim(database: Path, name: str, **terms: object) -> None:
    """What an owner-side adversary does with one SQL update: the study's stored claim, its terms changed."""
    with sqlite3.connect(database) as connection:
        [(study_id,)] = connection.execute("SELECT study_id FROM studies WHERE study_name = ?", (name,))
        [(value,)] = connection.execute("SELECT value_json FROM study_user_attributes WHERE study_id = ? AND key = ?",
                                        (study_id, CLAIM))
        stored = json.loads(value)
        stored["terms"] |= terms
        connection.execute("UPDATE study_user_attributes SET value_json = ? WHERE study_id = ? AND key = ?",
                           (json.dumps(stored), study_id, CLAIM))


def test_a_claim_rewritten_in_the_database_and_the_study_file_is_refused_by_export_and_release(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48, finding 1: the cap, mode and public flag rewritten in the database, and the study file edited to
    match, so that nothing disagrees with the file: the seal made at creation no longer matches, and no verb reads it
    (the export would have sealed the new claim, and the card read "public-proxy, tuning cost 0")."""
    with_a_feasible_trial(study_file())
    _rewrite_stored_claim(tmp_path / "small.db", "small", epsilon_cap=0.9, mode="public-proxy", data_public=True)
    path = study_file(targets={"epsilon_cap": 0.9}, data={"public": True})
    for argv in (["export", str(path), "-o", str(tmp_path / "best.json")],
                 ["release", str(path), "-o", str(tmp_path / "released"), "--force"], ["status", str(path)]):
        assert main(argv) == 2, argv
        line = one_error_line(capsys.readouterr().err)
        assert "the claim of the study 'small' does not match its seal" in line
        assert "edited in the study database" in line
    assert not (tmp_path / "best.json").exists() and not (tmp_path / "released").exists()


def test_an_owner_key_pointed_at_a_fresh_folder_cannot_seal_or_release_an_existing_study(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48, finding 2: a key made afresh where a study was sealed would verify a re-sealed claim; the tool refuses
    and never makes that key (nor does pointing the ledger folder elsewhere bring one)."""
    path = study_file()
    with_a_feasible_trial(path)
    sealed = owner_key().id
    fresh = tmp_path / "mine" / "owner.key"
    monkeypatch.setenv(KEY_ENV, str(fresh))
    for argv in (["status", str(path)], ["export", str(path), "-o", str(tmp_path / "best.json")],
                 ["release", str(path), "-o", str(tmp_path / "released"), "--force"], ["run", str(path)]):
        assert main(argv) == 2, argv
        line = one_error_line(capsys.readouterr().err)
        assert f"the owner key {fresh} is missing" in line and f"sealed with owner key {sealed}" in line, line
        assert "restore the key file from a backup" in line and "restart the privacy accounting" in line
    assert not fresh.exists() and not (tmp_path / "released").exists() and not (tmp_path / "best.json").exists()
    fresh.parent.mkdir()
    fresh.write_bytes(bytes(32))  # a key of one's own, put there by hand: another key
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == 2
    assert f"the study 'small' was sealed with owner key {sealed}, but the owner key {fresh} is another one" in \
        one_error_line(capsys.readouterr().err)


def test_a_ledger_folder_pointed_at_a_fresh_folder_cannot_release_or_resume_an_existing_study(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 48, findings 2 and 4: a ledger variable pointed elsewhere started the data set's accounting from zero (a
    total of 5.0 came back as 1.0). The study was entered in its data set's ledger: anywhere else, it is refused before
    any fit, and no ledger is made there."""
    path = study_file()
    with_a_feasible_trial(path)
    export = tmp_path / "best.json"
    assert main(["export", str(path), "-o", str(export)]) == 0
    fresh = tmp_path / "fresh-ledgers"
    monkeypatch.setenv(LEDGER_ENV, str(fresh))
    for argv in (["release", str(path), "-o", str(tmp_path / "released"), "--force"],
                 ["release", "--from", str(export), "-o", str(tmp_path / "released"), "--force"],
                 ["audit", str(path)], ["run", str(path), "--n-trials", "2"]):
        assert main(argv) == 2, argv
        out = capsys.readouterr()
        line = one_error_line(out.err)
        assert f"the privacy ledger of data set 'synthetic' is missing ({fresh / 'synthetic.jsonl'} is not there)" \
            in line and "a new ledger would restart the accounting" in line, line
        assert "stage 1" not in out.out
    assert not (tmp_path / "released").exists() and not fresh.exists()  # nothing made where the ledger is not


def test_no_new_owner_key_is_made_where_a_study_or_a_ledger_was_sealed(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    with_a_feasible_trial(study_file())  # its study in small.db, and its ledger entry
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "gone.key"))
    other = study_file("other", study={"name": "other", "storage": f"sqlite:///{tmp_path / 'small.db'}"})
    assert main(["create", str(other)]) == 2  # a new study in a storage holding a sealed one
    assert "but the study 'small' in its storage was sealed with owner key" in one_error_line(capsys.readouterr().err)
    alone = study_file("alone", study={"name": "alone"})
    assert main(["create", str(alone)]) == 2  # a new storage, but the ledger folder holds a sealed ledger
    assert "but the privacy ledger" in one_error_line(capsys.readouterr().err)
    assert not (tmp_path / "gone.key").exists()


def test_an_owner_key_is_made_once_owner_only_and_two_processes_starting_together_share_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from concurrent.futures import ProcessPoolExecutor

    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "owner.key"))
    with ProcessPoolExecutor(4) as pool:
        ids = set(pool.map(_new_key_id, range(8)))
    assert len(ids) == 1 and owner_key().id in ids and key_path().stat().st_mode & 0o777 == 0o600
    folder = tmp_path / "keys"
    assert folder.stat().st_mode & 0o777 == 0o700 and sorted(p.name for p in folder.iterdir()) == ["owner.key"]


def _new_key_id(_: int) -> str:
    from tuner.keys import owner_key_for

    return owner_key_for(()).id


def test_an_owner_key_that_cannot_be_made_is_one_line_and_no_study_is_created(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.swagppm.helpers import read_only

    (tmp_path / "keys").mkdir()
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "keys" / "owner.key"))
    monkeypatch.setenv(LEDGER_ENV, str(tmp_path / "no-ledgers"))
    path = study_file()
    with read_only(tmp_path / "keys"):
        assert main(["create", str(path)]) == 2
    line = one_error_line(capsys.readouterr().err)
    assert f"the owner key {tmp_path / 'keys' / 'owner.key'} cannot be created" in line and KEY_ENV in line
    assert sorted(p.name for p in (tmp_path / "keys").iterdir()) == []
    assert main(["create", str(path)]) == 0  # the folder writable again: the key is made, then the study


@pytest.mark.parametrize("content", [b"", b"short", bytes(33)])
def test_a_damaged_owner_key_is_refused_in_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     content: bytes) -> None:
    (tmp_path / "owner.key").write_bytes(content)
    monkeypatch.setenv(KEY_ENV, str(tmp_path / "owner.key"))
    with pytest.raises(ConfigError, match=r"owner.key is damaged \(not 32 bytes\): restore the key file"):
        owner_key()


def _asked(study: optuna.Study, config: StudyConfig) -> dict[str, float]:
    trial = study.ask({"c": optuna.distributions.FloatDistribution(config.search.c_min, config.search.c_max),
                       "ft_epochs": optuna.distributions.IntDistribution(config.search.ft_epochs_min,
                                                                        config.search.ft_epochs_max)})
    return trial.params


def test_an_accounted_studys_proposals_differ_between_two_runs_with_the_same_seed(
        study_file: Callable[..., Path]) -> None:
    """A recorded seed would make the published c name the trial that proposed it: accounted proposals come from
    fresh OS entropy (the same seed still gives the same proposals to a study that is not accounted)."""
    accounted = StudyConfig.from_toml(study_file(study=ACCOUNTED))
    plain = StudyConfig.from_toml(study_file("plain", study={"sampler": "random"}))
    proposals = {kind: [_asked(open_study(dataclasses.replace(config, study=dataclasses.replace(
        config.study, name=f"{kind}{run}"))), config) for run in range(2)]
        for kind, config in (("accounted", accounted), ("plain", plain))}
    assert proposals["accounted"][0] != proposals["accounted"][1]
    assert proposals["plain"][0] == proposals["plain"][1]


@pytest.mark.parametrize(("key", "value"), [("stop_on_first_feasible", True), ("timeout", 60.0)])
def test_an_accounted_study_refuses_a_data_dependent_stop(study_file: Callable[..., Path], key: str,
                                                          value: object) -> None:
    with pytest.raises(ConfigError, match=rf"study.{key} = .* cannot be used with study.accounted = true"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, key: value}))


def test_an_accounted_run_refuses_a_timeout_before_any_fit(study_file: Callable[..., Path],
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study=ACCOUNTED)
    assert main(["run", str(path), "--timeout", "30"]) == 2
    out = capsys.readouterr()
    assert "--timeout 30 cannot be used on the accounted study 'small'" in one_error_line(out.err)
    assert "stage 1" not in out.out


def test_an_accounted_study_needs_a_public_record_bound_or_a_delta(study_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match="needs study.max_records = N .* or study.accounting_delta"):
        StudyConfig.from_toml(study_file(study={**ACCOUNTED, "max_records": None}))
    config = StudyConfig.from_toml(study_file(study={**ACCOUNTED, "max_records": None, "accounting_delta": 1e-7}))
    assert study_claim(config).delta == 1e-7


def test_delta_comes_from_the_public_bound_so_neighbouring_data_sets_state_the_same() -> None:
    """The default δ is a function of the declared bound only: 1,000 and 1,001 records state the same δ."""
    assert default_delta(1000) == 1e-6 and default_delta(1001) == 1e-9 and default_delta(10**6) == 1e-12


def test_more_records_than_the_declared_bound_are_refused(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(study={"max_records": 100}))
    study = open_study(config)
    check_record_bound(study, 100, config)
    with pytest.raises(ConfigError, match=r"max_records = 100: the data hold more training records than the declared"):
        check_record_bound(study, 101, config)


def _accounted_with(study_file: Callable[..., Path], *, finished: int, planned: int) -> Path:
    path = study_file(study=ACCOUNTED)
    config = StudyConfig.from_toml(path)
    study = open_study(config)
    study.set_user_attr(ACCOUNTED_TRIALS, planned)
    for number in range(finished):
        outcome = judge(result(tight(3.0), c=0.5 + 0.1 * number), targets=config.targets, search=config.search,
                        accounted=True, checks=DrawChecks(public_score=0.5))
        study.add_trial(optuna.trial.create_trial(
            state=optuna.trial.TrialState.COMPLETE, values=[outcome.objective_values("epsilon")],
            params={"c": 0.5 + 0.1 * number, "ft_epochs": 7},
            distributions={"c": optuna.distributions.FloatDistribution(0.3, 1.2),
                           "ft_epochs": optuna.distributions.IntDistribution(4, 8)},
            user_attrs=outcome.attributes(), system_attrs=constraint_attrs(outcome.constraints)))
    return path


@pytest.mark.parametrize(("finished", "planned", "code"), [(2, 3, 2), (3, 3, 0), (4, 3, 2)])
def test_an_accounted_study_exports_and_releases_only_once_exactly_its_k_trials_finished(
        study_file: Callable[..., Path], tmp_path: Path, capsys: pytest.CaptureFixture[str], finished: int,
        planned: int, code: int) -> None:
    path = _accounted_with(study_file, finished=finished, planned=planned)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == code
    err = capsys.readouterr().err
    if code:
        assert f"has {finished} finished trial(s) of the {planned} it drew" in one_error_line(err)
        assert main(["release", str(path), "-o", str(tmp_path / "released"), "--force"]) == 2
        assert f"nothing released: the accounted study 'small' has {finished}" in one_error_line(
            capsys.readouterr().err)


def test_the_claim_is_stored_sealed_as_created_and_a_study_without_one_is_refused(
        study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file())
    study = open_study(config)
    sealed = SealedClaim.from_dict(study.user_attrs[CLAIM])
    assert sealed.claim == StudyClaim(epsilon_cap=50.0, mode="unaccounted", data_public=False, delta=None,
                                      max_records=None, accounting=None, posterior="swag", prior_scale=1.0,
                                      nll_bound=None, public_risks=False, data_set="synthetic",
                                      study_id=sealed.claim.study_id)
    assert sealed.key == owner_key().id and claim_of(study).claim == sealed.claim
    study.set_user_attr(CLAIM, sealed.claim.to_dict())  # a claim stored unsealed, as older versions did
    with pytest.raises(ConfigError, match="was created by an older swagppm-tune, which did not seal its claim"):
        open_study(config, create=False)


def test_an_accounted_claim_holds_its_terms_and_a_declared_data_set(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(study={**ACCOUNTED, "data_set": "osha-2024"}))
    claim = study_claim(config)
    assert (claim.mode, claim.delta, claim.max_records, claim.data_set) == ("accounted", 1e-6, 1000, "osha-2024")
    assert claim.accounting == Accounting(trials_shape=1.0, trials_mean=10.0)


@pytest.mark.parametrize(("source", "data_set"), [("records.jsonl", "records"), ("data/osha.sample.csv", "osha"),
                                                    ("owner/name", "name"), ("synthetic", "synthetic"),
                                                    ("my records!.jsonl", "my-records")])
def test_a_study_without_a_declared_data_set_takes_its_sources_name(tmp_path: Path, source: str,
                                                                    data_set: str) -> None:
    path = write_study(tmp_path / "s.toml", merged(data={"source": source, "synthetic_size": None,
                                                        "synthetic_classes": None}))
    assert StudyConfig.from_toml(path).study.data_set == data_set


def test_a_data_set_that_cannot_name_a_ledger_is_refused(study_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError, match=r"study.data_set = '../x': must be letters, digits"):
        StudyConfig.from_toml(study_file(study={"data_set": "../x"}))


def test_a_changed_data_set_is_refused_as_a_changed_claim(study_file: Callable[..., Path],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    with_a_feasible_trial(study_file())
    assert main(["status", str(study_file(study={"data_set": "elsewhere"}))]) == 2
    assert "was created with [study] data_set = synthetic, but the file now says [study] data_set = elsewhere" in \
        one_error_line(capsys.readouterr().err)
