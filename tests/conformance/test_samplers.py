"""What every registered sampler must do, checked through the registry: a new sampler gets these tests for free.

Each sampler runs a short study whose trials are judged and recorded exactly as a
real fit's are (``judge``, ``record_outcome``), from made-up results whose ε grows
with c, so that the samplers that read verdicts (the flowchart) move and stop.
"""

from __future__ import annotations

import optuna
import pytest
from optuna.samplers import BaseSampler
from optuna.storages import InMemoryStorage

from tests.tuner.helpers import result, tight
from tuner import SearchSpace, StartPoint, Targets
from tuner.objective import record_outcome
from tuner.outcome import judge
from tuner.samplers import SAMPLERS, make_sampler, sampler_traits, stop_rule_of

pytestmark = pytest.mark.slow  # no fit, no service, but seconds a test

SEARCH = SearchSpace(c_min=0.3, c_max=1.2, ft_epochs_min=4, ft_epochs_max=8, restart_epochs=6,
                     start=(StartPoint(1.0, 6),))
TARGETS = Targets(epsilon_cap=10.0)
TRIALS = 6


def run(name: str, *, seed: int, n_trials: int = TRIALS) -> optuna.Study:
    """A study of ``n_trials`` judged trials proposed by the sampler ``name``; stops early only by its stop rule."""
    storage = InMemoryStorage()
    study = optuna.create_study(storage=storage, sampler=make_sampler(name, seed=seed, search=SEARCH))
    rule = stop_rule_of(study.sampler)

    def objective(trial: optuna.Trial) -> float:
        params = SEARCH.suggest(trial)
        outcome = judge(result(tight(median=2.0 + 4.0 * params.c), c=params.c, epochs=params.ft_epochs),
                        targets=TARGETS, search=SEARCH)
        record_outcome(trial, outcome, storage=storage)
        return outcome.objective_values("epsilon")  # type: ignore[return-value]

    def stop(study: optuna.Study, _: object) -> None:
        if rule is not None and rule.wants_to_stop(study):
            study.stop()

    study.optimize(objective, n_trials=n_trials, callbacks=[stop])
    return study


def proposals(study: optuna.Study) -> list[tuple[float, int]]:
    return [(t.params["c"], t.params["ft_epochs"]) for t in study.trials]


def sampler(name: str) -> BaseSampler:
    return make_sampler(name, seed=0, search=SEARCH)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_proposals_lie_inside_the_search_space(name: str) -> None:
    points = proposals(run(name, seed=1))
    assert points
    assert all(SEARCH.c_min <= c <= SEARCH.c_max for c, _ in points)
    assert all(isinstance(epochs, int) and SEARCH.ft_epochs_min <= epochs <= SEARCH.ft_epochs_max
               for _, epochs in points)


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_seed_reproduces_the_proposals(name: str) -> None:
    """Four trials: the start point and the probe, then two that a model-based sampler proposes from its model."""
    assert proposals(run(name, seed=3, n_trials=4)) == proposals(run(name, seed=3, n_trials=4))


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_stop_rule_answers_before_and_after_trials(name: str) -> None:
    rule = stop_rule_of(sampler(name))
    if rule is None:
        pytest.skip(f"the {name} sampler has no stop rule: it runs until the study's own limits")
    assert rule.wants_to_stop(optuna.create_study()) is False  # nothing judged yet: the procedure has not begun
    study = run(name, seed=1, n_trials=20)
    rule = stop_rule_of(study.sampler)
    assert rule is not None and rule.wants_to_stop(study) is True  # it ended the study, within 20 trials
    reason = rule.end_reason(study)
    assert isinstance(reason, str) and str(study.trials[-1].number) in reason


@pytest.mark.parametrize("name", [name for name in SAMPLERS if sampler_traits(name).proposes_start])
def test_a_sampler_that_proposes_its_own_start_begins_at_the_first_start_point(name: str) -> None:
    assert proposals(run(name, seed=1, n_trials=1)) == [(SEARCH.start[0].c, SEARCH.start[0].ft_epochs)]
