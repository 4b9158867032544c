"""The cost of tuning: trials run and the largest trial epsilon always; the accounted total for random search."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna
import pytest

from swagppm import ConfigError
from tuner import StudyConfig
from tuner.cli import main
from tuner.record import named_constraints
from tuner.study import open_study

pytestmark = pytest.mark.fits


def test_accounting_needs_random_search_and_no_early_stop(study_file: Callable[..., Path]) -> None:
    accounted = {"accounted": True, "public_eval": "public.jsonl", "max_records": 1000}
    with pytest.raises(ConfigError, match="accounted = true needs study.sampler = 'random'"):
        StudyConfig.from_toml(study_file(study=accounted))
    with pytest.raises(ConfigError, match="early_stop = true cannot be used with study.accounted"):
        StudyConfig.from_toml(study_file(study={**accounted, "sampler": "random"}, targets={"early_stop": True}))
    config = StudyConfig.from_toml(study_file(study={**accounted, "sampler": "random"}))
    assert not config.early_stop


def test_an_adaptive_study_says_it_is_unaccounted(study_file: Callable[..., Path],
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"n_trials": 1})
    main(["run", str(path)])
    capsys.readouterr()
    main(["status", str(path)])
    out = capsys.readouterr().out
    assert "tuning: 1 trials run, largest trial epsilon" in out and "unaccounted (tpe sampler)" in out


def test_a_choice_on_the_edge_of_the_ranges_is_flagged(study_file: Callable[..., Path],
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(search={"c_min": 1.0, "c_max": 1.2, "start": [{"c": 1.0, "ft_epochs": 6}]},
                      study={"n_trials": 1})
    assert main(["run", str(path)]) == 0
    assert "sits at the edge of the search ranges (c = 1 at c_min = 1)" in capsys.readouterr().err


def test_rejudge_judges_stored_fits_against_new_targets_without_refitting(
        study_file: Callable[..., Path], capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"n_trials": 2})
    main(["run", str(path)])
    config = StudyConfig.from_toml(path)
    source = open_study(config, create=False)
    assert "cost: 1 trial(s) to go, about " in capsys.readouterr().out  # said once the first trial's time is known
    assert main(["rejudge", str(path), "--name", "strict", "--epsilon-cap", "0.001"]) == 1  # nothing meets it
    assert "judged against epsilon_cap = 0.001" in capsys.readouterr().out
    strict = optuna.load_study(study_name="strict", storage=config.storage_url)  # ranked at its own cap
    assert [t.params for t in strict.trials] == [t.params for t in source.trials if t.state.is_finished()]
    assert all(named_constraints(t)["epsilon"] > 0 for t in strict.trials)
    assert [t.user_attrs["epsilon"] for t in strict.trials] == [t.user_attrs["epsilon"] for t in source.trials]
    assert main(["rejudge", str(path), "--name", "loose", "--epsilon-cap", "1000"]) == 0


def test_other_records_are_refused_before_stage_1(study_file: Callable[..., Path], tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import swagppm

    monkeypatch.setenv("SWAGPPM_TUNE_LEDGER", str(tmp_path / "ledger"))  # seed 0's records are other tests' too
    for name, seed in (("first.csv", 0), ("second.csv", 1)):
        texts, labels = swagppm.synthetic_corpus(240, num_classes=4, seed=seed)
        lines = ["text,label"] + [f'"{t}",{label}' for t, label in zip(texts, labels)]
        (tmp_path / name).write_text("\n".join(lines) + "\n")
    path = study_file(data={"source": str(tmp_path / "first.csv")}, study={"n_trials": 1})
    assert main(["run", str(path)]) in (0, 1)
    capsys.readouterr()
    assert main(["run", str(path), "--n-trials", "2", "--data", str(tmp_path / "second.csv")]) == 2
    err = capsys.readouterr()
    assert "the records differ from those of the study's earlier trials" in err.err
    assert "stage 1" not in err.out  # refused before stage 1 ran
    assert len(open_study(StudyConfig.from_toml(path), create=False).trials) == 1
