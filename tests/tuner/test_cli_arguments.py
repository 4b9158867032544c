"""The shared argument helpers of the command line: one-line refusals, flag types, and reading the arguments back."""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from swagppm import ConfigError, TrialParams
from swagppm.claim import Accounting, SealedClaim
from tests.tuner.helpers import with_a_feasible_trial
from tuner.cli import arguments
from tuner.cli.arguments import (
    ArgumentsRefused,
    Parser,
    add_data,
    add_data_override,
    add_overwrite,
    add_release_flags,
    add_storage,
    add_study,
    add_study_name,
    add_study_or_export,
    check_folder,
    checked_output,
    data_override,
    one_source,
    run_config,
    selection,
    study_config,
)
from tuner.config import StudyConfig
from tuner.export import Chosen, export_trial, write_export
from tuner.keys import owner_key_for
from tuner.storage import STORAGE_ENV, make_storage
from tuner.tuning import study_claim


def refusal(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    with pytest.raises(ArgumentsRefused) as refused:
        parser.parse_args(argv)
    return str(refused.value)


def study_parser() -> Parser:
    """A verb's parser with the study, --storage, --study-name and --data, as `status` or `run` declare them."""
    parser = Parser(prog="swagppm-tune verb")
    add_study(parser)
    add_storage(parser)
    add_study_name(parser)
    add_data(parser)
    return parser


@pytest.fixture(autouse=True)
def no_storage_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    """A storage variable in the environment of the test run must not decide these tests."""
    monkeypatch.delenv(STORAGE_ENV, raising=False)


# --- Parser: one line, no abbreviations -------------------------------------------------------------------------


def test_a_refusal_is_one_line_naming_the_verb_the_flag_and_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    parser = Parser(prog="swagppm-tune run")
    parser.add_argument("--n-trials", type=arguments.positive_int)
    assert refusal(parser, ["--n-trials", "0"]) == (
        "swagppm-tune run: error: argument --n-trials: 0 must be an integer of at least 1 "
        "(see swagppm-tune run --help)")
    assert capsys.readouterr() == ("", "")  # raised for main to print, never printed or exited here


def test_a_missing_study_file_or_a_stray_word_is_refused_in_one_line() -> None:
    parser = study_parser()
    assert refusal(parser, []) == ("swagppm-tune verb: error: the following arguments are required: study "
                                   "(see swagppm-tune verb --help)")
    assert refusal(parser, ["a.toml", "b.toml"]) == ("swagppm-tune verb: error: unrecognized arguments: b.toml "
                                                     "(see swagppm-tune verb --help)")
    assert refusal(parser, ["a.toml", "--storage"]) == ("swagppm-tune verb: error: argument --storage: expected one "
                                                        "argument (see swagppm-tune verb --help)")


def test_no_flag_is_taken_from_its_abbreviation_unless_asked() -> None:
    parser = Parser(prog="swagppm-tune report")
    add_overwrite(parser)
    assert refusal(parser, ["--over"]).endswith("unrecognized arguments: --over (see swagppm-tune report --help)")
    abbreviating = Parser(prog="swagppm-tune report", allow_abbrev=True)
    add_overwrite(abbreviating)
    assert abbreviating.parse_args(["--over"]).overwrite is True


# --- flag types -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("convert, text, value", [
    (arguments.positive_int, "1", 1),
    (arguments.nonnegative_int, "0", 0),
    (arguments.epochs, "1000", 1000),
    (arguments.positive_float, "1e-9", 1e-9),
    (arguments.finite_float, "-2.5", -2.5),
    (arguments.score, "0", 0.0),
    (arguments.score, "1", 1.0),
    (arguments.probability, "0.999", 0.999),
    (arguments.share, "1", 1.0),
    (arguments.degradation, "0", 0.0),
    (arguments.port, "65535", 65535),
    (arguments.stop_probability, "1", 1.0),
    (arguments.stop_probability, "0.0001", 0.0001),
])
def test_each_flag_type_takes_the_edge_of_its_range(convert: Callable[[str], Any], text: str, value: Any) -> None:
    assert convert(text) == value and type(convert(text)) is type(value)


@pytest.mark.parametrize("convert, text, message", [
    (arguments.positive_int, "0", "0 must be an integer of at least 1"),
    (arguments.positive_int, "2.0", "'2.0' is not an integer of at least 1"),
    (arguments.nonnegative_int, "-1", "-1 must be an integer of at least 0"),
    (arguments.epochs, "1001", "1001 must be an integer from 1 to 1000 (each epoch is a pass over the training split)"),
    (arguments.positive_float, "0", "0 must be a positive finite number"),
    (arguments.positive_float, "inf", "inf must be a positive finite number"),
    (arguments.finite_float, "-inf", "-inf must be a finite number"),
    (arguments.finite_float, "one", "'one' is not a finite number"),
    (arguments.score, "1.01", "1.01 must be an F1 score in [0, 1]"),
    (arguments.score, "nan", "nan must be an F1 score in [0, 1]"),
    (arguments.probability, "0", "0 must be a probability in (0, 1)"),
    (arguments.probability, "1", "1 must be a probability in (0, 1)"),
    (arguments.share, "0", "0 must be in (0, 1]"),
    (arguments.degradation, "1", "1 must be a fraction in [0, 1)"),
    (arguments.port, "0", "0 must be a port in 1..65535"),
    (arguments.port, "65536", "65536 must be a port in 1..65535"),
    (arguments.stop_probability, "1.5", "1.5 must be in (0, 1]"),
    (arguments.stop_probability, "0.00001", "--selection-stop-probability = 1e-05: must be at least 0.0001: it asks "
                                            "for 1e+05 candidate draws on average, above the 10000 allowed"),
])
def test_each_flag_type_refuses_what_is_outside_saying_what_it_expects(convert: Callable[[str], Any], text: str,
                                                                       message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        convert(text)
    assert str(refused.value) == message


# --- the flags each helper adds ---------------------------------------------------------------------------------


def test_the_study_helpers_add_a_path_and_flags_that_default_to_none() -> None:
    args = study_parser().parse_args(["runs/small.toml"])
    assert vars(args) == {"study": Path("runs/small.toml"), "storage": None, "study_name": None, "data": None}
    text = " ".join(study_parser().format_help().split())
    assert f"storage URL instead of ${STORAGE_ENV} or [study] storage" in text
    assert "keeps a password out of the process list" in text


def test_the_release_flags_default_to_a_plain_release() -> None:
    parser = Parser(prog="swagppm-tune release")
    add_release_flags(parser)
    assert vars(parser.parse_args([])) == {
        "force": False, "min_utility": None, "selection_data": None, "selection_metric": "f1_macro",
        "selection_stop_probability": 0.1, "selection_delta": None, "standard_class": False, "overwrite": False}
    args = parser.parse_args(["--force", "--min-utility", "0.7", "--selection-data", "private-test",
                              "--selection-metric", "f1_weighted", "--selection-stop-probability", "0.5",
                              "--selection-delta", "1e-6", "--standard-class", "--overwrite"])
    assert vars(args) == {
        "force": True, "min_utility": 0.7, "selection_data": "private-test", "selection_metric": "f1_weighted",
        "selection_stop_probability": 0.5, "selection_delta": 1e-6, "standard_class": True, "overwrite": True}


@pytest.mark.parametrize("argv, message", [
    (["--min-utility", "1.5"], "argument --min-utility: 1.5 must be an F1 score in [0, 1]"),
    (["--selection-metric", "accuracy"],
     "argument --selection-metric: invalid choice: 'accuracy' (choose from 'f1_macro', 'f1_weighted')"),
    (["--selection-delta", "1"], "argument --selection-delta: 1 must be a probability in (0, 1)"),
    (["--selection-stop-probability", "0"], "argument --selection-stop-probability: 0 must be in (0, 1]"),
])
def test_a_release_flag_out_of_range_is_refused_naming_it(argv: list[str], message: str) -> None:
    parser = Parser(prog="swagppm-tune release")
    add_release_flags(parser)
    assert refusal(parser, argv) == f"swagppm-tune release: error: {message} (see swagppm-tune release --help)"


def test_overwrite_says_what_it_replaces_and_what_it_never_does() -> None:
    parser = Parser(prog="swagppm-tune report")
    add_overwrite(parser, what="the report")
    assert parser.parse_args([]).overwrite is False
    assert ("--overwrite replace the report if it exists (never an input of the run: the study file, its storage, "
            "the data, the file read)") in " ".join(parser.format_help().split())


def test_data_override_says_when_other_records_are_refused() -> None:
    parser = Parser(prog="swagppm-tune fit")
    add_data_override(parser)
    assert parser.parse_args(["--data", "private.csv"]).data == "private.csv"
    assert "refused for a configuration chosen on undeclared data, unless accounted" in " ".join(
        parser.format_help().split())


# --- one source -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[], ["small.toml", "--from", "best.json"]])
def test_a_verb_takes_a_study_or_an_export_but_not_both_nor_neither(argv: list[str]) -> None:
    parser = Parser(prog="swagppm-tune audit")
    add_study_or_export(parser, study_help="the study")
    args = parser.parse_args(argv)
    args.verb = "audit"
    with pytest.raises(ConfigError) as refused:
        one_source(args)
    assert str(refused.value) == "swagppm-tune audit: give a study TOML file or --from EXPORT.json (one of them)"


@pytest.mark.parametrize("argv, study, source", [
    (["small.toml"], Path("small.toml"), None),
    (["--from", "best.json"], None, Path("best.json")),
])
def test_one_source_is_enough(argv: list[str], study: Path | None, source: Path | None) -> None:
    parser = Parser(prog="swagppm-tune audit")
    add_study_or_export(parser, study_help="the study")
    args = parser.parse_args(argv)
    args.verb = "audit"
    one_source(args)
    assert (args.study, args.source) == (study, source)


# --- study_config: storage, study name and data -----------------------------------------------------------------


def test_the_storage_comes_from_the_flag_else_the_variable_else_the_file(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = study_file()
    parser = study_parser()
    assert study_config(parser.parse_args([str(path)])).storage_url == f"sqlite:///{tmp_path / 'small.db'}"
    monkeypatch.setenv(STORAGE_ENV, f"journal:{tmp_path / 'variable.log'}")
    assert study_config(parser.parse_args([str(path)])).storage_url == f"journal:{tmp_path / 'variable.log'}"
    flag = f"journal:{tmp_path / 'flag.log'}"
    assert study_config(parser.parse_args([str(path), "--storage", flag])).storage_url == flag
    assert study_config(parser.parse_args([str(path), "--storage", ""])).storage_url == (
        f"journal:{tmp_path / 'variable.log'}")  # an empty flag is no flag


def test_a_verb_without_storage_flag_ignores_the_variable(study_file: Callable[..., Path], tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A verb that does not open the study (no --storage) keeps the file's own storage."""
    monkeypatch.setenv(STORAGE_ENV, f"journal:{tmp_path / 'variable.log'}")
    parser = Parser(prog="swagppm-tune fit")
    add_study(parser)
    assert study_config(parser.parse_args([str(study_file())])).storage_url == f"sqlite:///{tmp_path / 'small.db'}"


@pytest.mark.parametrize("given", ["flag", "variable"])
def test_a_malformed_storage_is_blamed_on_where_it_came_from_without_its_password(
        study_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, given: str) -> None:
    url = "postgresql://tuner:s3cret@127.0.0.1:abc/studies"
    argv = [str(study_file())]
    if given == "flag":
        argv += ["--storage", url]
    else:
        monkeypatch.setenv(STORAGE_ENV, url)
    with pytest.raises(ConfigError) as refused:
        study_config(study_parser().parse_args(argv))
    where = "--storage" if given == "flag" else f"${STORAGE_ENV}"
    assert str(refused.value) == (
        f"{where}: storage = 'postgresql://tuner:***@127.0.0.1:abc/studies' is not a database URL: the port must be a "
        "number (e.g. 'sqlite:///demo.db' or 'postgresql+psycopg://user@host:5432/db')")


def test_study_name_opens_another_study_of_the_storage(study_file: Callable[..., Path], tmp_path: Path) -> None:
    path = study_file()
    journal = f"journal:{tmp_path / 's.log'}"
    optuna.create_study(study_name="other", storage=make_storage(journal))
    parser = study_parser()
    config = study_config(parser.parse_args([str(path), "--storage", journal, "--study-name", "other"]))
    assert config.study.name == "other" and config.storage_url == journal
    assert config.targets == StudyConfig.from_toml(path).targets  # not a rejudged study: the file's targets
    with pytest.raises(ConfigError) as refused:
        study_config(parser.parse_args([str(path), "--storage", journal, "--study-name", "nowhere"]))
    assert str(refused.value) == f"--study-name nowhere: no study of that name in {journal}"


def test_data_moves_the_study_to_other_records_unless_a_chosen_configuration_takes_it(
        study_file: Callable[..., Path], tmp_path: Path) -> None:
    records = tmp_path / "records.jsonl"
    records.write_text('{"text": "a record", "label": 0}\n')
    args = study_parser().parse_args([str(study_file()), "--data", str(records)])
    assert study_config(args).fit.data.source == str(records)
    assert study_config(args, data=False).fit.data.source == "synthetic"


# --- data_override ----------------------------------------------------------------------------------------------


def chosen(study_file: Callable[..., Path], tmp_path: Path, *, public: bool, mode: str | None) -> Chosen:
    """A configuration read back from an export: the small study's fit, on data declared public or not, its sealed
    claim accounted when ``mode`` says so; ``mode`` is written into its (unsealed, owner-side) tuning field too, which
    decides nothing."""
    config = StudyConfig.from_toml(study_file(data={"public": public}))
    claim = study_claim(config, study_id="s")
    if mode == "accounted":
        claim = dataclasses.replace(claim, mode="accounted", delta=1e-6,
                                    accounting=Accounting(trials_shape=1.0, trials_mean=10.0))
    key = owner_key_for(())
    return Chosen(config=config.fit, params=TrialParams(c=0.8, ft_epochs=6), epsilon=6.2, trials_run=3,
                  path=tmp_path / "best.json", stage1_fingerprint="0123456789abcdef",
                  tuning=None if mode is None else {"mode": mode},
                  claim=SealedClaim.of(claim, key.secret).verify(key.secret), entered=not public)


def test_without_data_the_chosen_configuration_is_kept_as_it_is(study_file: Callable[..., Path],
                                                                tmp_path: Path) -> None:
    before = chosen(study_file, tmp_path, public=False, mode="unaccounted")
    assert data_override(argparse.Namespace(data=None), before) is before


@pytest.mark.parametrize("mode", [None, "unaccounted", "public-proxy"])
def test_a_choice_that_looked_at_undeclared_data_is_not_moved_to_other_records(
        study_file: Callable[..., Path], tmp_path: Path, mode: str | None) -> None:
    with pytest.raises(ConfigError) as refused:
        data_override(argparse.Namespace(data="private.csv"), chosen(study_file, tmp_path, public=False, mode=mode))
    assert str(refused.value) == (
        f"--data private.csv: {tmp_path / 'best.json'} was chosen by a study on data not declared public ([data] "
        "public = true) and not accounted, so its choice already looked at those records; run a study on the new "
        "records instead")


@pytest.mark.parametrize("public, mode", [(True, "public-proxy"), (True, None), (False, "accounted")])
def test_a_public_or_accounted_choice_moves_to_private_records_without_its_epsilon(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, public: bool,
        mode: str | None) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "private.jsonl").write_text('{"text": "a record", "label": 0}\n')
    before = chosen(study_file, tmp_path, public=public, mode=mode)
    moved = data_override(argparse.Namespace(data="private.jsonl"), before)
    assert (moved.config.data.source, moved.config.data.public) == (str(tmp_path / "private.jsonl"), False)
    assert moved.epsilon is None and moved.stage1_fingerprint is None  # measured on other records: not compared
    assert moved.config == before.config.replace(data={"source": str(tmp_path / "private.jsonl"), "public": False})
    assert moved.claim.claim == dataclasses.replace(before.claim.claim, data_set="private", data_public=False)
    assert not moved.entered  # the study never entered these records' ledger
    assert dataclasses.replace(moved, config=before.config, epsilon=6.2, stage1_fingerprint="0123456789abcdef",
                               claim=before.claim, entered=before.entered) == before


@pytest.mark.parametrize("given, source", [
    ("ag_news", "ag_news"),  # no such path and no suffix: a dataset name, kept as given
    ("later.csv", "TMP/later.csv"),  # a file that does not exist yet: made absolute from here
])
def test_other_records_are_a_path_from_here_or_a_dataset_name(study_file: Callable[..., Path], tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch, given: str,
                                                              source: str) -> None:
    monkeypatch.chdir(tmp_path)
    moved = data_override(argparse.Namespace(data=given), chosen(study_file, tmp_path, public=True, mode=None))
    assert moved.config.data.source == source.replace("TMP", str(tmp_path))


# --- run_config, checked_output and check_folder ----------------------------------------------------------------


def test_run_config_is_the_study_s_else_the_export_s_else_none(study_file: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    path = study_file()
    config = StudyConfig.from_toml(path).with_storage(f"journal:{tmp_path / 's.log'}")
    study = with_a_feasible_trial(path, storage=config.storage_url)
    exported = write_export(export_trial(study, study.trials[0], config), tmp_path / "best.json")
    from_study = run_config(argparse.Namespace(study=path, source=None))
    assert isinstance(from_study, StudyConfig) and from_study.path == path
    assert run_config(argparse.Namespace(study=None, source=exported, data=None)) == config.fit
    assert run_config(argparse.Namespace(study=None, source=None)) is None
    assert run_config(argparse.Namespace()) is None


def test_an_output_over_the_study_file_is_refused_even_with_overwrite(study_file: Callable[..., Path]) -> None:
    path = study_file()
    with pytest.raises(ConfigError) as refused:
        checked_output(argparse.Namespace(study=path, overwrite=True), path, "-o")
    assert str(refused.value) == (f"-o {path}: is the study file of this run; writing there would destroy it (name "
                                  "another path; --overwrite does not allow this)")


def test_an_existing_output_is_replaced_only_when_overwrite_is_asked(study_file: Callable[..., Path],
                                                                     tmp_path: Path) -> None:
    path = study_file()
    mine = tmp_path / "report.html"
    mine.write_text("mine")
    message = (f"-o {mine}: exists; swagppm-tune replaces no file it finds (pass --overwrite to replace it)")
    for args, overwrite in ((argparse.Namespace(study=path), None),  # a verb without --overwrite
                            (argparse.Namespace(study=path, overwrite=False), None),
                            (argparse.Namespace(study=path, overwrite=True), False)):  # the caller's word wins
        with pytest.raises(ConfigError) as refused:
            checked_output(args, mine, "-o", overwrite=overwrite)
        assert str(refused.value) == message
    assert checked_output(argparse.Namespace(study=path, overwrite=True), mine, "-o") == mine
    assert checked_output(argparse.Namespace(study=path), mine, "-o", overwrite=True) == mine
    assert mine.read_text() == "mine"  # checked, never written


def test_the_given_configuration_names_the_inputs_instead_of_the_arguments(study_file: Callable[..., Path],
                                                                           tmp_path: Path) -> None:
    path = study_file()
    storage = tmp_path / "small.db"
    storage.write_bytes(b"")
    config = StudyConfig.from_toml(path)
    with pytest.raises(ConfigError, match="is the study storage of this run"):
        checked_output(argparse.Namespace(), storage, "--json", config=config, overwrite=True)
    other = StudyConfig.from_toml(path).with_storage(f"sqlite:///{tmp_path / 'other.db'}")
    assert checked_output(argparse.Namespace(), storage, "--json", config=other, overwrite=True) == storage


def test_a_folder_output_checks_each_file_it_will_write(tmp_path: Path) -> None:
    folder = tmp_path / "results"
    folder.mkdir()
    (folder / "comparison.csv").write_text("my own table")
    args = argparse.Namespace(overwrite=False)
    with pytest.raises(ConfigError) as refused:
        checked_output(args, folder, "-o", folder=True, files=("comparison.json", "comparison.csv"))
    assert str(refused.value) == (f"-o {folder / 'comparison.csv'}: exists; swagppm-tune replaces no file it finds "
                                  "(pass --overwrite to replace it)")
    assert checked_output(args, tmp_path / "new", "-o", folder=True, files=("comparison.csv",)) == tmp_path / "new"
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())  # made, left empty


def test_the_tool_s_own_folder_is_made_or_refused_when_it_is_a_file(tmp_path: Path) -> None:
    check_folder(tmp_path / "art" / "nested", "[study] artifacts")
    assert (tmp_path / "art" / "nested").is_dir()
    (tmp_path / "art" / "nested" / "trial-0.json").write_text("{}")
    check_folder(tmp_path / "art" / "nested", "[study] artifacts")  # what the tool wrote there is no obstacle
    (tmp_path / "file").write_text("mine")
    with pytest.raises(ConfigError) as refused:
        check_folder(tmp_path / "file", "[study] artifacts")
    assert str(refused.value) == f"[study] artifacts {tmp_path / 'file'}: is a file; name a folder"
    assert (tmp_path / "file").read_text() == "mine"


# --- the release's private selection (refusals: a valid one draws its budget with torch loaded) ------------------


def selection_args(**flags: object) -> argparse.Namespace:
    parser = Parser(prog="swagppm-tune release")
    add_release_flags(parser)
    return argparse.Namespace(**{**vars(parser.parse_args([])), **flags})


def test_no_selection_flags_is_no_selection() -> None:
    assert selection(selection_args(), releasing=True) is None
    assert selection(selection_args(), releasing=False) is None


@pytest.mark.parametrize("flags, releasing, missing", [
    ({"min_utility": 0.7}, True, "--selection-data"),
    ({"selection_data": "private-test"}, True, "--min-utility"),
    ({"min_utility": 0.7, "selection_data": "private-test"}, False, "--release"),
    ({"min_utility": 0.7}, False, "--selection-data"),
])
def test_a_selection_needs_both_flags_and_a_release(flags: dict[str, object], releasing: bool,
                                                    missing: str) -> None:
    with pytest.raises(ConfigError) as refused:
        selection(selection_args(**flags), releasing=releasing)
    assert str(refused.value) == (f"{missing} must be given too: private selection chooses the released draw by its "
                                  "F1 on the selection data")


def test_selection_data_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    for source in (tmp_path / "none.jsonl", tmp_path):
        with pytest.raises(ConfigError) as refused:
            selection(selection_args(min_utility=0.7, selection_data=str(source)), releasing=True)
        assert str(refused.value) == f"--selection-data {source}: no such file (or pass private-test)"
