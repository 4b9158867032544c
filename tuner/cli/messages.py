"""Lines several verbs print about a study: the best feasible trial, the closest one, and warnings about the choice."""

from __future__ import annotations

import sys

import optuna

from swagppm.statement import PROVEN_SHORT
from tuner.config import StudyConfig
from tuner.outcome import counted
from tuner.queries import closest_trial, describe_violations, epsilon_cap_of, range_edges, stage1_runs
from tuner.record import TrialRecord, audit_bounds, refuted_note


def best_line(best: optuna.trial.FrozenTrial, study: optuna.Study | None = None) -> str:
    """The best feasible trial in one line; its measured ε with the audit beside it when one refutes it."""
    record = TrialRecord.of(best)
    assert record is not None and record.f1_macro_median is not None and record.f1_weighted_median is not None
    bound = audit_bounds(study.user_attrs if study is not None else {}, best.number, record)
    note = refuted_note(record.epsilon, bound)
    check = note or "; swagppm-tune audit checks it"
    privacy = (f"epsilon <= {record.proven_epsilon:.3f} ({PROVEN_SHORT})" if record.proven_epsilon is not None else
               f"epsilon = {record.epsilon_or_inf:.3f} (an estimate from "
               f"{counted(record.draws_privacy, 'privacy draw')}, not a bound{check})")
    return (f"best feasible: trial {best.number}: c = {best.params['c']:.4g}, "
            f"{counted(best.params['ft_epochs'], 'epoch')}, {privacy}, "
            f"F1 macro median {record.f1_macro_median:.3f} (baseline "
            f"{record.baseline_f1_macro:.3f}), weighted {record.f1_weighted_median:.3f} (baseline "
            f"{record.baseline_f1_weighted:.3f})")


def print_closest(study: optuna.Study) -> None:
    """With no feasible trial: the closest one, what it violates and the guide's next move from there."""
    closest = closest_trial(study)
    if closest is None:
        print("no finished trial yet")
        return
    record = TrialRecord.of(closest)
    print(f"no feasible trial; closest: trial {closest.number} (c = {closest.params['c']:.4g}, "
          f"{counted(closest.params['ft_epochs'], 'epoch')}, {record.diagnosis if record else '?'}) violates: "
          f"{describe_violations(closest, epsilon_cap=epsilon_cap_of(study))}")
    if record is not None:
        print(f"  the guide's next move from there: {record.recommendation}")


def warn_at_edge(best: optuna.trial.FrozenTrial, config: StudyConfig) -> None:
    """Say so when the choice sits on the edge of the search ranges: a target may be met further out."""
    edges = range_edges(best, config.search)
    if edges:
        print(f"warning: the chosen configuration sits at the edge of the search ranges ({'; '.join(edges)}): a "
              f"better one may lie further out; widen [search] in {config.path} and run again", file=sys.stderr)


def warn_mixed_stage1(study: optuna.Study) -> None:
    """Say so when the trials used more than one stage 1: their ε and F1 do not compare."""
    runs = stage1_runs(study)
    if len(runs) > 1:
        listed = "; ".join(f"{fingerprint}: trials {', '.join(map(str, numbers))}"
                           for fingerprint, numbers in runs.items())
        print(f"warning: the trials used {len(runs)} different stage 1s ({listed}), so their epsilon and F1 do not "
              "compare; give every worker one cache_dir and thread count, and rerun the choice in a new study",
              file=sys.stderr)


def print_refuted(study: optuna.Study) -> None:
    """Each trial whose measured ε an audit refutes, with the audit's bound beside it."""
    attrs = study.user_attrs  # one read of the storage, not one per trial
    for trial in study.get_trials(deepcopy=False):
        record = TrialRecord.of(trial)
        if record is None:
            continue
        note = refuted_note(record.epsilon, audit_bounds(attrs, trial.number, record))
        if note:
            print(f"trial {trial.number}: measured epsilon {record.epsilon_or_inf:.3g}{note}")
