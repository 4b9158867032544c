"""Reading a study back: feasibility, the best and the closest trial, the Pareto front, tables and counts.

Feasibility and "best" are computed here from the stored constraints, so they
read the same from every worker and every command.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

import scorers
from tuner.outcome import counted
from tuner.record import FAILURE, NEEDS_REFIT, TrialRecord, measured_violations, named_constraints
from tuner.search import SearchSpace

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
DEFINITION_ATTR = "definition"  # tuner.study's study attribute: the search, targets and fit settings


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


def trials_run(study: optuna.Study) -> dict[str, int]:
    """The trials by state; ``total`` counts those that ran to an end (complete, pruned or failed): how many the
    choice was made from (the data-dependent selection caveat). Running and waiting trials are counted apart."""
    trials = study.get_trials(deepcopy=False)
    counts = {state.name.lower(): sum(t.state == state for t in trials)
              for state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL, TrialState.RUNNING,
                            TrialState.WAITING)}
    return counts | {"total": counts["complete"] + counts["pruned"] + counts["fail"]}


def trials_run_words(counts: dict[str, int]) -> str:
    """``trials_run``'s counts as every output says them: "4 trials run: 2 complete, 1 pruned, 1 failed; 1 running,
    0 waiting" (the unfinished ones only when there are any)."""
    unfinished = (f"; {counts['running']} running, {counts['waiting']} waiting"
                  if counts["running"] or counts["waiting"] else "")
    return (f"{counts['total']} trials run: {counts['complete']} complete, {counts['pruned']} pruned, "
            f"{counts['fail']} failed{unfinished}")


def is_feasible(trial: FrozenTrial) -> bool:
    """A completed trial whose every constraint is met (``scorers.is_feasible``)."""
    return trial.state == TrialState.COMPLETE and scorers.is_feasible(trial.constraints)


def violation(trial: FrozenTrial, *, epsilon_cap: float | None = None) -> float:
    """The sum of violated measured constraint values (0 for a feasible trial; inf without constraints); with
    ``epsilon_cap``, the ε violation unclipped (``unclipped_violations``)."""
    if not trial.constraints:
        return math.inf
    return sum(unclipped_violations(trial, epsilon_cap=epsilon_cap).values())


def unclipped_violations(trial: FrozenTrial, *, epsilon_cap: float | None) -> dict[str, float]:
    """``violated``, with an ε violation stored clipped at ``scorers.CONSTRAINT_CAP`` (Optuna needs bounded numbers)
    given whole: ranking ε / ``epsilon_cap`` − 1. Trials that all miss ε by more than the cap would otherwise tie,
    and the closest be named by trial number."""
    missed = violated(trial)
    if epsilon_cap and missed.get("epsilon", 0.0) >= scorers.CONSTRAINT_CAP:
        record = TrialRecord.of(trial)
        if record is not None and math.isfinite(record.ranking_epsilon):
            missed["epsilon"] = max(scorers.CONSTRAINT_CAP, record.ranking_epsilon / epsilon_cap - 1.0)
    return missed


def epsilon_cap_of(study: optuna.Study) -> float | None:
    """The cap ε* the study's trials are judged against (its stored definition); None before it is stored."""
    value = study.user_attrs.get(DEFINITION_ATTR, {}).get("targets", {}).get("epsilon_cap")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def best_feasible(study: optuna.Study) -> FrozenTrial | None:
    """The most private feasible trial (lowest ε; ties: higher macro-F1, then the earlier trial); in an accounted
    study the feasible trial with the best public score."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]
    if not feasible:
        return None
    return min(feasible, key=lambda t: (*_rank(t), t.number))


def _rank(trial: FrozenTrial) -> tuple[float, float]:
    """An accounted trial ranks by its public score alone (all the accounting covers); others by ``_point``."""
    record = TrialRecord.of(trial)
    if record is not None and record.public_score is not None:
        return -record.public_score, 0.0
    return _point(trial)


def closest_trial(study: optuna.Study) -> FrozenTrial | None:
    """With no feasible trial: the finished trial with the smallest total violation of what it measured (ε's
    unclipped)."""
    finished = [t for t in study.get_trials(deepcopy=False, states=FINISHED) if t.constraints]
    cap = epsilon_cap_of(study)
    return min(finished, key=lambda t: (violation(t, epsilon_cap=cap), t.number)) if finished else None


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible trials not dominated in (ε down, macro-F1 up)."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]

    def point(t: FrozenTrial) -> tuple[float, float]:
        epsilon, minus_f1 = _point(t)
        return epsilon, -minus_f1

    return sorted((t for t in feasible if not any(
        point(o)[0] <= point(t)[0] and point(o)[1] >= point(t)[1] and point(o) != point(t) for o in feasible)),
        key=lambda t: point(t))


def _point(trial: FrozenTrial) -> tuple[float, float]:
    """(ε, −macro-F1 median) for ordering, ε the larger of the measured one and the audit's bound; an unjudged or
    unmeasured trial sorts last."""
    record = TrialRecord.of(trial)
    if record is None:
        return math.inf, 0.0
    return record.ranking_epsilon, -(record.f1_macro_median or 0.0)


def violated(trial: FrozenTrial) -> dict[str, float]:
    """The measured constraints a trial violates, with their values."""
    return measured_violations(named_constraints(trial), _unmeasured(trial))


def describe_violations(trial: FrozenTrial, *, epsilon_cap: float | None = None) -> str:
    """What a trial misses, for a line or a report: ``epsilon +0.200; not measured: f1_macro, f1_weighted``; with
    ``epsilon_cap``, ε's miss unclipped (``unclipped_violations``)."""
    unmeasured = _unmeasured(trial)
    missed = unclipped_violations(trial, epsilon_cap=epsilon_cap)
    text = ", ".join(f"{key} {value:+.3f}" for key, value in missed.items())
    return text + (f"; not measured: {', '.join(unmeasured)}" if unmeasured else "")


def _unmeasured(trial: FrozenTrial) -> tuple[str, ...]:
    record = TrialRecord.of(trial)
    return record.unmeasured if record is not None else ()


def range_edges(trial: FrozenTrial, search: SearchSpace) -> list[str]:
    """Where a trial sits on the edge of the search ranges (a target may then be met further out), as phrases."""
    c, epochs = trial.params["c"], trial.params["ft_epochs"]
    near = 0.01 * (search.c_max - search.c_min)
    checks = ((c - search.c_min <= near, f"c = {c:.4g} at c_min = {search.c_min:g}"),
              (search.c_max - c <= near, f"c = {c:.4g} at c_max = {search.c_max:g}"),
              (epochs == search.ft_epochs_min, f"{counted(epochs, 'epoch')} at ft_epochs_min"),
              (epochs == search.ft_epochs_max, f"{counted(epochs, 'epoch')} at ft_epochs_max"))
    return [text for at_edge, text in checks if at_edge]


def stage1_runs(study: optuna.Study) -> dict[str, list[int]]:
    """The trial numbers of every stage 1 the study's finished trials used, by fingerprint (unrecorded: none)."""
    runs: dict[str, list[int]] = {}
    for trial in study.get_trials(deepcopy=False, states=FINISHED):
        record = TrialRecord.of(trial)
        if record is not None and record.stage1_fingerprint:
            runs.setdefault(record.stage1_fingerprint, []).append(trial.number)
    return runs


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial for tables: number, state, params, ε, F1s, verdict, feasibility, time."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        r = TrialRecord.of(t)
        planned = t.params or t.system_attrs.get("fixed_params", {})  # a queued trial's point is not a param yet
        rows.append({
            "number": t.number, "state": t.state.name, "c": planned.get("c"), "ft_epochs": planned.get("ft_epochs"),
            "g": planned.get("g"), "epsilon": r and r.epsilon,
            "epsilon_is_lower_bound": bool(r and r.epsilon_is_lower_bound),
            "f1_macro": r and r.f1_macro_median, "f1_weighted": r and r.f1_weighted_median,
            "f1_macro_q10": r and r.f1_macro_q10, "f1_weighted_q10": r and r.f1_weighted_q10,
            "diagnosis": "needs refit" if t.user_attrs.get(NEEDS_REFIT) else r.diagnosis if r else
            t.user_attrs.get(FAILURE, ""), "feasible": is_feasible(t) if t.state.is_finished() else None,
            "seconds": r.timings.get("total") if r else None,
        })
    return rows


FEASIBLE_WORD = {True: "yes", False: "no", None: "-"}  # None: not finished, so not judged yet


def format_table(rows: Sequence[dict[str, Any]], *, statistic: str = "median") -> str:
    """The trial table as fixed-width text."""
    def num(value: Any, width: int, digits: int = 3) -> str:
        if isinstance(value, (int, float)) and math.isfinite(value):
            return f"{value:>{width}.{digits}f}"
        return " " * (width - 1) + "-"

    header = f"{'#':>4} {'state':<8} {'c':>6} {'ep':>3} {'epsilon':>9} {'F1 mac':>7} {'F1 wtd':>7} {'diagnosis':<12} " \
             f"{'feasible':<8} {'time':>7}"
    lines = [header, "-" * len(header)]
    for row in rows:
        eps = num(row["epsilon"], 8)
        eps = (">" if row["epsilon_is_lower_bound"] else " ") + eps
        macro = row["f1_macro"] if statistic == "median" else row["f1_macro_q10"]
        weighted = row["f1_weighted"] if statistic == "median" else row["f1_weighted_q10"]
        lines.append(f"{row['number']:>4} {row['state']:<8} {num(row['c'], 6)} "
                     f"{row['ft_epochs'] if row['ft_epochs'] is not None else '-':>3} {eps} {num(macro, 7)} "
                     f"{num(weighted, 7)} {str(row['diagnosis'])[:12]:<12} {FEASIBLE_WORD[row['feasible']]:<8} "
                     f"{num(row['seconds'], 6, 1)}s")
    return "\n".join(lines)
