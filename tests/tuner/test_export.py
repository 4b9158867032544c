"""``tuner.export`` directly: reading exports back, their field checks, versions, refit suspects, the chosen trial."""

from __future__ import annotations

import dataclasses
import json
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest
import torch

from swagppm import ConfigError, SWAGPPMConfig, TrialParams
from swagppm.claim import SealedClaim, StudyClaim, key_id
from tests.tuner.helpers import result, tight, with_a_feasible_trial
from tuner.config import StudyConfig
from tuner.export import (
    FORMAT,
    Chosen,
    check_export_fields,
    chosen_from_study,
    library_versions,
    read_export,
    refit_suspects,
)
from tuner.keys import owner_key_for
from tuner.study import open_storage, open_study

FIT = SWAGPPMConfig.from_dict({"data": {"source": "synthetic", "synthetic_size": 240}, "device": "cpu"})
TERMS = StudyClaim(epsilon_cap=5.0, mode="unaccounted", data_public=False, delta=None, max_records=None,
                   accounting=None, posterior="swag", prior_scale=1.0, nll_bound=None, public_risks=False,
                   data_set="synthetic", study_id="s0")
KEY = owner_key_for(())  # the test session's owner key (tests/conftest.py)
SEALED = SealedClaim.of(TERMS, KEY.secret)
CLAIM = SEALED.verify(KEY.secret)
MINIMAL: dict[str, Any] = {"format": FORMAT, "params": {"c": 1.0, "ft_epochs": 7}, "swagppm": FIT.to_dict(),
                           "claim": SEALED.to_dict()}


def exported(tmp_path: Path, document: object = None, *, text: str | None = None) -> Path:
    """``document`` (``MINIMAL`` by default) as JSON, or ``text`` as it is, in ``tmp_path/best.json``."""
    path = tmp_path / "best.json"
    path.write_text(json.dumps(MINIMAL if document is None else document) if text is None else text)
    return path


def refused(path: Path) -> str:
    with pytest.raises(ConfigError) as info:
        read_export(path)
    return str(info.value)


# --- read_export -----------------------------------------------------------------------------------------------------


def test_a_minimal_export_reads_with_every_optional_field_unset(tmp_path: Path) -> None:
    path = exported(tmp_path)
    assert read_export(path) == Chosen(config=FIT, params=TrialParams(c=1.0, ft_epochs=7), epsilon=None,
                                       trials_run=None, path=path, claim=CLAIM, entered=True)


def test_every_field_of_a_full_export_is_read_back(tmp_path: Path) -> None:
    document = MINIMAL | {
        "params": {"c": 0.75, "ft_epochs": 9, "g": -0.25}, "metrics": {"epsilon": 3.5}, "trials_run": {"total": 12},
        "device": "cpu", "threads": 4, "cpu_kernels": "AVX2", "stage1_fingerprint": "0123456789abcdef",
        "versions": {"torch": "2.13.0"}, "tuning": {"mode": "unaccounted"}, "targets": {"epsilon_cap": 5}, "trial": 4}
    path = exported(tmp_path, document)
    assert read_export(path) == Chosen(
        config=FIT, params=TrialParams(c=0.75, ft_epochs=9, g=-0.25), epsilon=3.5, trials_run=12, path=path,
        device="cpu", threads=4, cpu_kernels="AVX2", stage1_fingerprint="0123456789abcdef",
        versions={"torch": "2.13.0"}, tuning={"mode": "unaccounted"}, claim=CLAIM, trial=4, entered=True)
    assert read_export(path).epsilon_cap == 5.0 and isinstance(read_export(path).epsilon_cap, float)


def test_integer_parameters_are_read_as_numbers_of_their_kind(tmp_path: Path) -> None:
    chosen = read_export(exported(tmp_path, MINIMAL | {"params": {"c": 1, "ft_epochs": 7, "g": 0}}))
    assert (chosen.params.c, chosen.params.ft_epochs, chosen.params.g) == (1.0, 7, 0.0)
    assert isinstance(chosen.params.c, float) and isinstance(chosen.params.g, float)


def test_unusable_run_facts_are_read_as_not_recorded(tmp_path: Path) -> None:
    for facts in ({"threads": 0, "cpu_kernels": "", "stage1_fingerprint": ""},
                  {"threads": "4", "cpu_kernels": 3, "stage1_fingerprint": 5},
                  {"threads": -2, "cpu_kernels": None, "stage1_fingerprint": None}):
        chosen = read_export(exported(tmp_path, MINIMAL | facts))
        assert (chosen.threads, chosen.cpu_kernels, chosen.stage1_fingerprint) == (None, None, None)


def test_a_boolean_thread_count_is_not_recorded(tmp_path: Path) -> None:
    assert read_export(exported(tmp_path, MINIMAL | {"threads": True})).threads is None


@pytest.mark.parametrize("claim", [None, [50.0], "50"])
def test_an_export_without_its_claim_is_refused(tmp_path: Path, claim: object) -> None:
    path = exported(tmp_path, MINIMAL | {"claim": claim})
    assert refused(path) == (f"{path}: field claim is missing (an export of an older swagppm-tune, or edited): export "
                             "the study again")


def test_an_export_of_an_older_unsealed_claim_is_refused_naming_the_field(tmp_path: Path) -> None:
    path = exported(tmp_path, MINIMAL | {"claim": TERMS.to_dict()})  # the claim as it was stored before seals
    assert refused(path).startswith(f"{path}: field claim: must be a table of terms, seal and key")


@pytest.mark.parametrize("edit", [{"epsilon_cap": 5.5}, {"mode": "public-proxy"}, {"data_public": True},
                                  {"posterior": "exact"}, {"nll_bound": 4.0}, {"data_set": "elsewhere"},
                                  {"study_id": "another"}, {"max_records": 1000}])
def test_a_claim_edited_after_the_study_fixed_it_is_refused(tmp_path: Path, edit: dict[str, object]) -> None:
    """Every field a release claims is the study's as created; an edited export does not pass its seal."""
    document = MINIMAL | {"claim": SEALED.to_dict() | {"terms": TERMS.to_dict() | edit}}
    path = exported(tmp_path, document)
    assert refused(path) == (f"{path}: the claim (cap, mode, public flag, posterior, data set) does not match its "
                             "seal: it was edited after the study fixed it; export the study again")


def test_a_claim_sealed_under_another_key_is_refused_naming_both_keys(tmp_path: Path) -> None:
    other = bytes(32)
    path = exported(tmp_path, MINIMAL | {"claim": SealedClaim.of(TERMS, other).to_dict()})
    message = refused(path)
    assert message.startswith(f"the claim of {path} was sealed with owner key {key_id(other)}, but the owner key "
                              f"{KEY.path} is another one (id {KEY.id}): restore the key file from a backup")


@pytest.mark.parametrize(("value", "shown"), [(0, "0"), (-1.5, "-1.5"), (float("inf"), "inf"), (True, "true")])
def test_a_cap_that_is_not_a_positive_number_is_refused(tmp_path: Path, value: object, shown: str) -> None:
    claim = SEALED.to_dict() | {"terms": TERMS.to_dict() | {"epsilon_cap": value}}
    path = exported(tmp_path, MINIMAL | {"claim": claim})
    assert refused(path) == (f"{path}: field claim.terms.epsilon_cap = {shown}: must be a positive number (an export "
                             "of an older swagppm-tune, or edited): export the study again")


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    assert refused(tmp_path / "best.json") == f"{tmp_path / 'best.json'}: export file not found"


def test_a_folder_is_not_a_readable_export(tmp_path: Path) -> None:
    assert refused(tmp_path).startswith(f"{tmp_path}: not a readable export JSON file: [Errno 21] Is a directory")


def test_broken_json_and_broken_utf8_are_not_readable_exports(tmp_path: Path) -> None:
    path = exported(tmp_path, text="{not json")
    assert refused(path) == (f"{path}: not a readable export JSON file: Expecting property name enclosed in double "
                             "quotes: line 1 column 2 (char 1)")
    path.write_bytes(b"\xff\xfe{}")
    assert refused(path).startswith(f"{path}: not a readable export JSON file: 'utf-8' codec can't decode byte 0xff")


@pytest.mark.parametrize("document", [[MINIMAL], MINIMAL | {"format": "swagppm-tuner/export-0"},
                                      {k: v for k, v in MINIMAL.items() if k != "format"}])
def test_json_that_is_not_an_export_says_which_format_it_expects(tmp_path: Path, document: object) -> None:
    path = exported(tmp_path, document)
    assert refused(path) == f'{path}: not an export of swagppm-tune (expected "format": "swagppm-tuner/export-1")'


@pytest.mark.parametrize(("document", "field"), [
    ({k: v for k, v in MINIMAL.items() if k != "params"}, "params"),
    ({k: v for k, v in MINIMAL.items() if k != "swagppm"}, "swagppm"),
    (MINIMAL | {"swagppm": None}, "swagppm"),
    (MINIMAL | {"params": {"ft_epochs": 7}}, "params.c"),
    (MINIMAL | {"params": {"c": 1.0}}, "params.ft_epochs"),
])
def test_a_missing_field_is_named(tmp_path: Path, document: dict[str, Any], field: str) -> None:
    path = exported(tmp_path, document)
    assert refused(path) == f"{path}: field {field} is missing"


@pytest.mark.parametrize(("params", "field"), [({"c": "abc", "ft_epochs": 7}, "params.c"),
                                               ({"c": 1.0, "ft_epochs": 7, "g": None}, "params.g"),
                                               ([1.0, 7], "params")])
def test_a_malformed_parameter_is_named(tmp_path: Path, params: object, field: str) -> None:
    path = exported(tmp_path, MINIMAL | {"params": params})
    message = refused(path)
    assert message.startswith(f"{path}: ") and field in message.removeprefix(f"{path}: ")


@pytest.mark.parametrize(("plain", "written", "field"), [
    ('"ft_epochs": 7', '"ft_epochs": Infinity', "params.ft_epochs"),
    ('"c": 1.0', '"c": 1' + "0" * 400, "params.c"),
], ids=["ft_epochs-infinity", "c-beyond-float"])
def test_a_parameter_beyond_float_range_is_a_config_error(tmp_path: Path, plain: str, written: str,
                                                          field: str) -> None:
    text = json.dumps(MINIMAL)
    assert text.count(plain) == 1  # Python's json reads Infinity and integers of any size
    path = exported(tmp_path, text=text.replace(plain, written))
    assert f"{path}: {field} = " in refused(path)


def test_a_malformed_fit_table_is_named_with_the_file(tmp_path: Path) -> None:
    path = exported(tmp_path, MINIMAL | {"swagppm": FIT.to_dict() | {"draws_privacy": 0}})
    assert refused(path) == f"{path} swagppm [swagppm]: swagppm.draws_privacy = 0: must be at least 1"


# --- check_export_fields ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("changes", [
    {},
    {"params": {"c": 1e-9, "ft_epochs": 1, "g": -3.0}},
    {"metrics": {"epsilon": 0}, "trials_run": {"total": 1}},
    {"metrics": {"epsilon": float("inf")}},
    {"metrics": None, "trials_run": None, "tuning": None, "versions": None},
    {"metrics": {}, "trials_run": {}, "tuning": {}, "versions": {}},
])
def test_well_formed_fields_pass(tmp_path: Path, changes: dict[str, Any]) -> None:
    check_export_fields(MINIMAL | changes, tmp_path / "best.json")


@pytest.mark.parametrize(("changes", "message"), [
    ({"params": [1.0, 7]}, "field params must be a table"),
    ({"params": {"c": 0, "ft_epochs": 7}}, "params.c = 0: must be a positive finite number"),
    ({"params": {"c": True, "ft_epochs": 7}}, "params.c = True: must be a positive finite number"),
    ({"params": {"c": float("inf"), "ft_epochs": 7}}, "params.c = inf: must be a positive finite number"),
    ({"params": {"c": 1.0, "ft_epochs": True}}, "params.ft_epochs = True: must be an integer of at least 1"),
    ({"params": {"c": 1.0, "ft_epochs": "7"}}, "params.ft_epochs = '7': must be an integer of at least 1"),
    ({"params": {"c": 1.0, "ft_epochs": 7, "g": float("nan")}}, "params.g = nan: must be a finite number"),
    ({"params": {"c": 1.0, "ft_epochs": 7, "g": "0"}}, "params.g = '0': must be a finite number"),
    ({"swagppm": [1]}, "field swagppm must be a table (a JSON object), not list"),
    ({"versions": "2.13"}, "field versions must be a table (a JSON object), not str"),
    ({"metrics": []}, "field metrics must be a table (a JSON object), not list"),
    ({"metrics": {"epsilon": -0.5}}, "metrics.epsilon = -0.5: must be a number of at least 0 (or null)"),
    ({"metrics": {"epsilon": True}}, "metrics.epsilon = True: must be a number of at least 0 (or null)"),
    ({"metrics": {"epsilon": float("nan")}}, "metrics.epsilon = nan: must be a number of at least 0 (or null)"),
    ({"trials_run": {"total": 0}}, "trials_run.total = 0: must be an integer of at least 1"),
    ({"trials_run": {"total": 2.0}}, "trials_run.total = 2.0: must be an integer of at least 1"),
    ({"trials_run": {"total": True}}, "trials_run.total = True: must be an integer of at least 1"),
])
def test_a_field_a_verb_would_trip_over_is_refused_by_name(tmp_path: Path, changes: dict[str, Any],
                                                           message: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_export_fields(MINIMAL | changes, tmp_path / "best.json")
    assert str(info.value) == f"{tmp_path / 'best.json'}: {message}"


def test_the_parameters_are_checked_before_the_tables(tmp_path: Path) -> None:
    document = MINIMAL | {"params": {"c": -1.0, "ft_epochs": 0}, "metrics": [], "trials_run": {"total": 0}}
    with pytest.raises(ConfigError, match=r"params\.c = -1\.0: "):
        check_export_fields(document, tmp_path / "best.json")


# --- library_versions ------------------------------------------------------------------------------------------------


def test_the_versions_name_python_torch_and_the_libraries_of_a_fit() -> None:
    versions = library_versions()
    assert list(versions) == ["python", "torch", "swagppm-tuner", "transformers", "tokenizers", "numpy",
                              "scikit-learn"]
    assert versions["python"] == platform.python_version() and versions["torch"] == torch.__version__


def test_extra_distributions_are_added_and_a_missing_one_says_so() -> None:
    versions = library_versions("optuna", "no-such-distribution-here")
    assert list(versions)[-2:] == ["optuna", "no-such-distribution-here"]
    assert versions["optuna"] == optuna.__version__ and versions["no-such-distribution-here"] == "not installed"


# --- refit_suspects --------------------------------------------------------------------------------------------------


def chosen(**fields: Any) -> Chosen:
    """An exported choice with ``fields`` set and nothing else recorded."""
    return Chosen(**({"config": FIT, "params": TrialParams(c=1.0, ft_epochs=7), "epsilon": 6.0, "trials_run": 3,
                      "path": Path("best.json"), "claim": CLAIM} | fields))


REFIT = result(tight(), threads=4, cpu_kernels="AVX2", device="cpu", stage1_fingerprint="aaaaaaaaaaaaaaaa")


def test_an_export_that_recorded_nothing_leaves_every_cause_open() -> None:
    assert refit_suspects(REFIT, chosen()) == (
        "the CPU thread count (4 here, not recorded in the export), the CPU kernels (AVX2 here, not recorded in the "
        "export), the device (cpu here, not recorded in the export), the library versions (not recorded), or a "
        "stage 1 cached under other settings")


def test_the_same_stage_1_points_at_stage_2() -> None:
    same = chosen(threads=1, cpu_kernels="DEFAULT", device="cuda", stage1_fingerprint="aaaaaaaaaaaaaaaa",
                  versions=library_versions("optuna", "optuna-dashboard"))
    assert refit_suspects(REFIT, same) == (
        "not stage 1 (the export's, fingerprint aaaaaaaaaaaaaaaa), so stage 2: the CPU thread count (4 here, 1 in the "
        "export), the CPU kernels (AVX2 here, DEFAULT in the export), the device (cpu here, cuda in the export), the "
        "library versions (the same)")


def test_another_stage_1_names_both_fingerprints_and_the_versions_that_differ() -> None:
    versions = library_versions("optuna", "optuna-dashboard") | {"torch": "0.0", "numpy": "0.0", "peft": "0.1"}
    other = chosen(stage1_fingerprint="bbbbbbbbbbbbbbbb", versions=versions)
    refit = result(tight(), device="cpu", stage1_fingerprint="aaaaaaaaaaaaaaaa")  # no thread count or kernels
    assert refit_suspects(refit, other) == (
        "stage 1 differs (fingerprint aaaaaaaaaaaaaaaa here, bbbbbbbbbbbbbbbb in the export), from the CPU thread "
        "count (0 here, not recorded in the export), the CPU kernels (none here, not recorded in the export), the "
        "device (cpu here, not recorded in the export), the library versions (numpy, peft, torch differ), or a "
        "stage 1 cached under other settings")


def test_an_empty_versions_table_is_not_recorded() -> None:
    assert "the library versions (not recorded)" in refit_suspects(REFIT, chosen(versions={}))


# --- chosen_from_study -----------------------------------------------------------------------------------------------


def test_a_study_without_a_feasible_trial_chooses_nothing(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file()).with_storage(f"journal:{tmp_path / 'study.log'}")
    assert chosen_from_study(open_study(config, storage=open_storage(config)), config, "chosen") is None


def test_the_best_feasible_trial_is_chosen_with_what_it_cost(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path = study_file()
    storage = f"journal:{tmp_path / 'study.log'}"
    study = with_a_feasible_trial(path, storage=storage)
    config = StudyConfig.from_toml(path).with_storage(storage)
    [trial] = study.get_trials()
    picked = chosen_from_study(study, config, "chosen")
    assert picked is not None
    assert picked.params == TrialParams(c=trial.params["c"], ft_epochs=trial.params["ft_epochs"], g=0.0)
    assert picked.epsilon == 2 * max(tight())  # the made-up result's epsilon
    assert (picked.trials_run, picked.path, picked.epsilon_cap, picked.config) == (1, path, 50.0, config.fit)
    assert picked.tuning is not None and picked.tuning["mode"] == "unaccounted" and picked.tuning["trials_run"] == 1
    assert (picked.device, picked.threads, picked.versions) == (None, None, None)  # a study's trial is not an export
    assert picked.claim.claim == dataclasses.replace(TERMS, epsilon_cap=50.0, study_id=picked.claim.claim.study_id)
    assert picked.entered and picked.by_study
