"""Study files: defaults, paths resolved beside the file, and errors naming the table and key."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from scorers import MIN_DRAWS
from swagppm import ConfigError
from tests.tuner.helpers import write_study
from tuner import SearchSpace, StartPoint, StudyConfig
from tuner.cli import main
from tuner.storage import masked_url

REPO = Path(__file__).resolve().parents[2]


def test_defaults_and_paths_beside_the_file(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(write_study(tmp_path / "small.toml", {"study": {"name": "small"}}))
    assert config.storage_url == f"sqlite:///{tmp_path / 'small.db'}"
    assert config.artifact_dir == tmp_path / "small-artifacts"
    assert config.fit.model.name_or_path == "distilroberta-base"  # the paper's model by default
    assert config.study.sampler == "tpe" and config.study.objective == "epsilon"
    assert config.search.start == (StartPoint(1.0, 7),)  # the guide's starting point
    assert config.targets.epsilon_cap == 10.0 and config.targets.max_f1_degradation == 0.10
    assert config.targets.statistic == "median" and config.targets.require_well_fit
    assert config.early_stop  # on by default ...
    flowchart = StudyConfig.from_toml(study_file(study={"sampler": "flowchart"}))
    assert not flowchart.early_stop  # ... except for the flowchart, which reads whole series


def test_start_points_are_the_guides_then_the_private_side_probe() -> None:
    search = SearchSpace(c_min=0.1, c_max=1.5, ft_epochs_min=1, ft_epochs_max=16)
    assert search.start_points() == (StartPoint(1.0, 7), StartPoint(0.8, 16))  # mid c, most epochs
    assert SearchSpace(probe=False).start_points() == (StartPoint(1.0, 7),)
    assert SearchSpace(start=(StartPoint(0.8, 16),)).start_points() == (StartPoint(0.8, 16),)  # never twice
    assert SearchSpace(start=()).start_points() == (StartPoint(0.8, 16),)


def test_relative_sqlite_and_artifacts_resolve_beside_the_file(study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file(study={"storage": "sqlite:///runs/s.db", "artifacts": "art"}))
    assert config.storage_url == f"sqlite:///{tmp_path / 'runs' / 's.db'}"
    assert config.artifact_dir == tmp_path / "art"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("postgresql+psycopg://tuner:s3cret@db.example:5432/studies",
         "postgresql+psycopg://tuner:***@db.example:5432/studies"),
        ("postgresql://u@h/db?password=s3cret", "postgresql://u@h/db?password=***"),
        ("postgresql://u@h/db?sslmode=require&PWD=s3cret&api_token=s3cret&sslkey=s3cret;passwd=s3cret&x_secret=s3cret",
         "postgresql://u@h/db?sslmode=require&PWD=***&api_token=***&sslkey=***;passwd=***&x_secret=***"),
        ("redis://:s3cret@cache.internal:6379/0", "redis://:***@cache.internal:6379/0"),
        ("rediss://default:s3cret@cache.internal:6380/0", "rediss://default:***@cache.internal:6380/0"),
        ("postgresql://u:p@ss@s3cret@host/db", "postgresql://u:***@host/db"),  # unescaped '@': up to the last '@'
        ("mysql://s3cret@pa@host/db", "mysql://***@host/db"),  # unparseable, no ':': all of it
        ("postgresql://tuner@db.example/studies", "postgresql://tuner@db.example/studies"),
        ("journal:/runs/study.log", "journal:/runs/study.log"),
        ("sqlite:////runs/study.db", "sqlite:////runs/study.db"),
    ],
)
def test_every_form_of_credential_is_masked(url: str, shown: str) -> None:
    assert masked_url(url) == shown
    assert "s3cret" not in masked_url(url)


def test_password_is_masked_everywhere_it_is_shown(study_file: Callable[..., Path]) -> None:
    for url in ("postgresql+psycopg://tuner:s3cret@db.example:5432/studies", "postgresql://u@h/db?password=s3cret"):
        config = StudyConfig.from_toml(study_file(study={"storage": url}))
        assert "s3cret" not in str(config.to_dict())


def test_an_unescaped_at_in_a_password_is_refused_without_showing_it(study_file: Callable[..., Path]) -> None:
    with pytest.raises(ConfigError) as info:
        StudyConfig.from_toml(study_file(study={"storage": "postgresql://u:p@ss@db.example/studies"}))
    assert "%40" in str(info.value) and "ss@" not in str(info.value) and "p@ss" not in str(info.value)


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"study": {"sampler": "cmaes"}}, "study.sampler = 'cmaes'"),
        ({"study": {"n_trials": 0}}, "study.n_trials = 0"),
        ({"study": {"name": "a b"}}, "study.name = 'a b'"),
        ({"study": {"storage": "not a url"}}, "[study]: storage = 'not a url' is not a database URL"),
        ({"study": {"sampler": "flowchart", "objective": "pareto"}}, "cannot run study.objective = 'pareto'"),
        ({"search": {"c_max": 0.2}}, "search.c_max = 0.2: must be greater than c_min = 0.3"),
        ({"search": {"ft_epochs_max": 2.5}}, "[search]: ft_epochs_max = 2.5 has the wrong type"),
        ({"search": {"c_mni": 0.1}}, "[search]: unknown key(s) c_mni"),
        ({"search": {"g_min": 0.0}}, "search.g_min and search.g_max: give both"),
        ({"search": {"start": [{"c": 2.0, "ft_epochs": 6}]}}, "search.start[0].c = 2.0: must be within"),
        ({"search": {"start": [{"c": 1.0}]}}, "start[0]: missing required key(s) ft_epochs"),
        ({"search": {"start": 3}}, "start must be a list of tables"),
        ({"targets": {"epsilon_cap": -1.0}}, "targets.epsilon_cap = -1.0"),
        ({"targets": {"statistic": "mean"}}, "targets.statistic = 'mean'"),
        ({"targets": {"max_f1_degradation": 1.5}}, "targets.max_f1_degradation = 1.5"),
        ({"study": {"sampler": "flowchart"}, "targets": {"early_stop": True}}, "early_stop = true cannot be used"),
        ({"swagppm": {"draws_privacy": 0}}, "swagppm.draws_privacy = 0"),
        ({"serach": {"c_min": 0.1}}, "unknown table(s) [serach]"),
        ({"study": {"seed": -1}}, "study.seed = -1: must be an integer in [0, 2**32)"),
        ({"study": {"seed": 2**32}}, "study.seed = 4294967296: must be an integer in [0, 2**32)"),
        ({"study": {"storage": "postgresql://u@127.0.0.1:abc/db"}}, "is not a database URL"),
        ({"swagppm": {"draws_privacy": MIN_DRAWS - 1}},
         f"[targets] require_well_fit = true needs [swagppm] draws_privacy of at least {MIN_DRAWS}"),
    ],
)
def test_bad_values_name_the_table_and_key(
    study_file: Callable[..., Path], changes: dict[str, dict[str, object]], expected: str
) -> None:
    path = study_file(**changes)
    with pytest.raises(ConfigError) as info:
        StudyConfig.from_toml(path)
    assert expected in str(info.value)
    assert str(path) in str(info.value) or "." in expected  # table-level errors also name the file


def test_the_caps_old_key_is_named_with_its_new_name(study_file: Callable[..., Path]) -> None:
    """One name for the cap from the study file to the card: ``[targets] epsilon`` is refused with the rename."""
    path = study_file(targets={"epsilon": 5.0})
    with pytest.raises(ConfigError) as info:
        StudyConfig.from_toml(path)
    assert str(info.value) == (f"{path} [targets]: epsilon is now called epsilon_cap (the cap epsilon* that trials "
                               "are judged against and the release claims): rename the key")


@pytest.mark.parametrize(
    ("table", "key", "lines"),
    [
        ("search", "c_max", "c_max = inf"),
        ("search", "c_min", "c_min = nan"),
        ("search", "c_step", "c_step = inf"),
        ("search", "g", "g = -inf"),
        ("search", "g_min", "g_min = -inf\ng_max = 1.0"),
        ("search", "g_max", "g_min = 0.0\ng_max = inf"),
        ("targets", "max_bulk_spread", "max_bulk_spread = inf"),
        ("targets", "spike_z", "spike_z = inf"),
        ("study", "reconnect_wait", "reconnect_wait = inf"),
    ],
)
def test_non_finite_numbers_are_one_clear_error(tmp_path: Path, table: str, key: str, lines: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text('[study]\nname = "s"\n' + ("" if table == "study" else f"[{table}]\n") + lines + "\n")
    with pytest.raises(ConfigError, match=rf"{table}\.{key} = .*: must be .*finite"):
        StudyConfig.from_toml(path)


def test_short_privacy_series_are_fine_without_the_well_fit_requirement(study_file: Callable[..., Path]) -> None:
    path = study_file(targets={"require_well_fit": False}, swagppm={"draws_privacy": MIN_DRAWS - 1})
    assert StudyConfig.from_toml(path).fit.draws_privacy == MIN_DRAWS - 1


def test_missing_name_and_missing_file(study_file: Callable[..., Path], tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"name": None})
    with pytest.raises(ConfigError, match=r"\[study\]: name is required"):
        StudyConfig.from_toml(path)
    assert main(["status", str(tmp_path / "nope.toml")]) == 2
    err = capsys.readouterr().err
    assert "nope.toml: study file not found" in err and "Traceback" not in err


@pytest.mark.parametrize("name", ["demo.toml", "demo_tiny.toml", "osha.toml", "osha_cpu.toml"])
def test_shipped_studies_are_valid(name: str) -> None:
    config = StudyConfig.from_toml(REPO / "studies" / name)
    assert config.study.name == Path(name).stem
    assert config.search.start[0] == StartPoint(1.0, 7)
