"""``tuner.search`` directly: the finiteness check, every refusal of ``SearchSpace``, its start points, the one
suggest rule and the one reader of stored parameters."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest
from optuna.distributions import FloatDistribution, IntDistribution
from optuna.storages import InMemoryStorage, JournalStorage
from optuna.storages.journal import JournalFileBackend

from scorers import GUIDE
from swagppm import ConfigError, TrialParams
from tuner.config import StudyConfig
from tuner.search import SearchSpace, StartPoint, check_finite

INF, NAN = float("inf"), float("nan")


# --- check_finite ----------------------------------------------------------------------------------------------------


def test_finite_numbers_and_unset_values_pass() -> None:
    check_finite("search", SimpleNamespace(c_min=0.1, ft=3, g_min=None, g=-2.5), ("c_min", "ft", "g_min", "g"))


@pytest.mark.parametrize(("value", "shown"), [(INF, "inf"), (-INF, "-inf"), (NAN, "nan")])
def test_a_non_finite_number_is_named_with_its_table(value: float, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        check_finite("targets", SimpleNamespace(spike_z=value), ("spike_z",))
    assert str(info.value) == f"targets.spike_z = {shown}: must be a finite number"


def test_the_first_bad_name_in_the_given_order_is_named() -> None:
    settings = SimpleNamespace(a=INF, b=NAN)
    with pytest.raises(ConfigError, match=r"^t\.b = nan: "):
        check_finite("t", settings, ("b", "a"))
    with pytest.raises(ConfigError, match=r"^t\.a = inf: "):
        check_finite("t", settings, ("a", "b"))


def test_only_the_given_names_are_checked() -> None:
    check_finite("t", SimpleNamespace(a=1.0, b=INF), ("a",))


def test_an_integer_too_large_for_a_float_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"^search\.c_max = 10+: must be a finite number$"):
        check_finite("search", SimpleNamespace(c_max=10**400), ("c_max",))


# --- SearchSpace refusals --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("fields", "message"), [
    ({"c_min": 0.0}, "search.c_min = 0.0: must be positive"),
    ({"c_min": -1.0}, "search.c_min = -1.0: must be positive"),
    ({"c_min": 1.0, "c_max": 1.0}, "search.c_max = 1.0: must be greater than c_min = 1.0"),
    ({"ft_epochs_min": 0}, "search.ft_epochs_min = 0: must be at least 1"),
    ({"ft_epochs_min": 8, "ft_epochs_max": 7}, "search.ft_epochs_max = 7: must be at least ft_epochs_min = 8"),
    ({"g_max": 1.0}, "search.g_min and search.g_max: give both (to search g) or neither"),
    ({"g_min": 0.5, "g_max": 0.5}, "search.g_max = 0.5: must be greater than g_min = 0.5"),
    ({"epochs_step": 0}, "search.epochs_step = 0: must be at least 1"),
    ({"c_step": 0.0}, "search.c_step = 0.0: must be positive"),
    ({"c_step": -0.1}, "search.c_step = -0.1: must be positive"),
    ({"restart_epochs": 0}, "search.restart_epochs = 0: must be within [1, 16]"),
    ({"restart_epochs": 17}, "search.restart_epochs = 17: must be within [1, 16]"),
    ({"ft_epochs_min": 8, "restart_epochs": 7}, "search.restart_epochs = 7: must be within [8, 16]"),
    ({"start": (StartPoint(1.0, 17),)}, "search.start[0].ft_epochs = 17: must be within [1, 16]"),
    ({"start": (StartPoint(1.0, 7), StartPoint(0.05, 7))},
     "search.start[1].c = 0.05: must be within [c_min, c_max] = [0.1, 1.5]"),
    ({"start": (StartPoint(1.0, 7, g=0.1),)},
     "search.start[0].g = 0.1: must be left out unless g is searched (g_min, g_max)"),
    ({"g_min": 0.0, "g_max": 1.0, "start": (StartPoint(1.0, 7, g=1.5),)},
     "search.start[0].g = 1.5: must be within [g_min, g_max] = [0.0, 1.0]"),
    ({"c_min": NAN}, "search.c_min = nan: must be a finite number"),
    ({"g": INF}, "search.g = inf: must be a finite number"),
])
def test_every_impossible_search_is_refused_by_name(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        SearchSpace(**fields)
    assert str(info.value) == message


def test_the_finiteness_check_comes_before_the_range_checks() -> None:
    with pytest.raises(ConfigError) as info:
        SearchSpace(c_min=NAN, c_max=-INF)
    assert str(info.value) == "search.c_min = nan: must be a finite number"


def test_the_defaults_are_the_guides() -> None:
    search = SearchSpace()
    assert (search.c_min, search.c_max, search.ft_epochs_min, search.ft_epochs_max, search.g) == (0.1, 1.5, 1, 16, 0.0)
    assert search.start == (StartPoint(GUIDE.start_c, GUIDE.start_epochs),)
    assert (search.epochs_step, search.c_step, search.restart_epochs) == (
        GUIDE.epochs_step, GUIDE.c_step, GUIDE.restart_epochs)
    assert not search.searches_g and not search.c_log and search.probe


def test_g_is_searched_only_with_both_bounds() -> None:
    assert SearchSpace(g_min=-1.0, g_max=1.0).searches_g
    assert not SearchSpace(g=0.5).searches_g


def test_a_search_space_and_its_start_points_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SearchSpace().c_min = 0.2  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        StartPoint(1.0, 7).c = 0.5  # type: ignore[misc]
    assert StartPoint(1.0, 7).g is None


# --- start_points ----------------------------------------------------------------------------------------------------


def test_the_probe_is_rounded_to_six_decimals() -> None:
    assert SearchSpace(c_min=0.1, c_max=0.2, start=()).start_points() == (StartPoint(0.15, 16),)
    assert SearchSpace(c_min=1 / 3, c_max=1.0, start=()).start_points() == (StartPoint(0.666667, 16),)


def test_the_probe_leaves_g_to_the_sampler() -> None:
    search = SearchSpace(g_min=0.0, g_max=1.0, start=(StartPoint(1.0, 7, g=0.5),))
    assert search.start_points() == (StartPoint(1.0, 7, g=0.5), StartPoint(0.8, 16))


def test_a_start_point_at_the_probe_with_its_own_g_replaces_the_probe() -> None:
    start = (StartPoint(0.8, 16, g=0.5),)
    assert SearchSpace(g_min=0.0, g_max=1.0, start=start).start_points() == start


def test_several_start_points_keep_their_order_before_the_probe() -> None:
    start = (StartPoint(1.2, 4), StartPoint(0.3, 8))
    search = SearchSpace(c_min=0.3, c_max=1.2, ft_epochs_min=4, ft_epochs_max=8, restart_epochs=6, start=start)
    assert search.start_points() == (*start, StartPoint(0.75, 8))


# --- SearchSpace.suggest and params_of -------------------------------------------------------------------------------


def test_suggest_searches_c_and_epochs_and_keeps_g_fixed(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(search={"g": 0.25}))
    storage = InMemoryStorage()
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    for _ in range(5):
        trial = study.ask()
        params = config.search.suggest(trial)
        c, epochs, g = params.c, params.ft_epochs, params.g
        assert 0.3 <= c <= 1.2 and isinstance(epochs, int) and 4 <= epochs <= 8 and g == 0.25
        assert trial.params == {"c": c, "ft_epochs": epochs}
    assert trial.distributions == {"c": FloatDistribution(0.3, 1.2), "ft_epochs": IntDistribution(4, 8)}


def test_suggest_searches_g_in_its_range_and_c_on_a_log_scale(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(search={"g_min": 0.1, "g_max": 0.9, "c_log": True}))
    storage = InMemoryStorage()
    study = optuna.create_study(storage=storage, sampler=optuna.samplers.RandomSampler(seed=0))
    trial = study.ask()
    params = config.search.suggest(trial)
    c, epochs, g = params.c, params.ft_epochs, params.g
    assert trial.params == {"c": c, "ft_epochs": epochs, "g": g} and 0.1 <= g <= 0.9
    assert trial.distributions == {"c": FloatDistribution(0.3, 1.2, log=True), "ft_epochs": IntDistribution(4, 8),
                                   "g": FloatDistribution(0.1, 0.9)}


def test_an_enqueued_point_is_suggested_exactly(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file(search={"g_min": 0.1, "g_max": 0.9}))
    storage = InMemoryStorage()
    study = optuna.create_study(storage=storage)
    study.enqueue_trial({"c": 0.55, "ft_epochs": 5, "g": 0.3})
    assert config.search.suggest(study.ask()) == TrialParams(c=0.55, ft_epochs=5, g=0.3)


def test_suggestions_are_stored_in_a_journal_file_and_read_back(study_file: Callable[..., Path],
                                                                 tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file())
    journal = tmp_path / "journal.log"
    storage = JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.create_study(study_name="j", storage=storage, sampler=optuna.samplers.RandomSampler(seed=3))
    trial = study.ask()
    params = config.search.suggest(trial)
    study.tell(trial, 1.0)
    again = optuna.load_study(study_name="j", storage=JournalStorage(JournalFileBackend(str(journal))))
    assert config.search.params_of(again.trials[0].params) == params  # g: the search's fixed one


def test_stored_params_are_read_with_the_searchs_fixed_g_and_an_exports_own() -> None:
    search = SearchSpace(g=0.25)
    assert search.params_of({"c": 0.5, "ft_epochs": 3}, seed=7) == TrialParams(c=0.5, ft_epochs=3, g=0.25, seed=7)
    assert search.params_of({"c": 0.5, "ft_epochs": 3, "g": 0.1}).g == 0.1
    assert TrialParams.from_params({"c": 1, "ft_epochs": 2.0}) == TrialParams(c=1.0, ft_epochs=2, g=0.0)
