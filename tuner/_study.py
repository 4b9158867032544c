"""Optuna studies of SWAG-PPM: open or resume one, run trials, and read back what they found.

A trial suggests (c, epochs[, g]), runs ``swagppm.run_fit`` (stage 1 shared),
judges the fit with ``scorers`` and records constraints (``trial.set_constraint``),
the same numbers as user attributes, the diagnosis as a note and its figures as
an artifact. Feasibility and "best" are computed here from the stored
constraints, so they read the same from every worker and every command.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import socket
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import optuna_dashboard
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.study import MaxTrialsCallback
from optuna.trial import FrozenTrial, Trial, TrialState

import scorers.plots
import swagppm
from swagppm import ConfigError, EpochInfo
from tuner._config import StudyConfig
from tuner._outcome import CONSTRAINT_KEYS, Outcome, judge
from tuner._samplers import FlowchartSampler, make_sampler
from tuner._storage import describe_error, is_connection_error, make_storage, masked_url

FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
DEFINITION_ATTR = "definition"
CAVEATS = (*swagppm.CAVEATS,
           "The released model is one draw from the SWAG posterior; its own F1 varies around the medians reported "
           "here.")
MAX_CONSECUTIVE_CRASHES = 3
WORKER = f"{socket.gethostname()}:{os.getpid()}"  # which process ran a trial (no private data)


class FitCrashed(RuntimeError):
    """A fit raised something other than a configuration or data error (out of memory, a bug, ...)."""


def open_study(config: StudyConfig, *, create: bool = True, worker: str | None = None) -> optuna.Study:
    """Create the study or resume it; refuses to resume one defined by a different search, targets or fit.

    A ``worker`` (its name) seeds its sampler from the study seed and the name, so
    parallel workers do not propose the same configurations.
    """
    settings = config.study
    storage = make_storage(config.storage_url, heartbeat_interval=settings.heartbeat_interval,
                           grace_period=settings.grace_period, max_retries=settings.max_retries,
                           connect_timeout=settings.connect_timeout)
    directions = ["minimize"] if config.study.objective == "epsilon" else ["minimize", "maximize"]
    seed = config.study.seed
    if worker is not None:
        seed = int.from_bytes(hashlib.sha256(f"{seed}:{worker}".encode()).digest()[:4], "little") % 2**31
    sampler = make_sampler(config.study.sampler, seed=seed, search=config.search,
                           n_startup_trials=config.study.startup_trials)
    name = config.study.name
    if not create:
        try:
            return optuna.load_study(study_name=name, storage=storage, sampler=sampler)
        except KeyError:
            raise ConfigError(f"{config.path}: no study named {name!r} in {masked_url(config.storage_url)}; "
                              f"run `swagppm-tune run {config.path}` first") from None
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler, directions=directions,
                                load_if_exists=True)
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(f"{config.path} [study]: objective = {config.study.objective!r}, but the stored study "
                          f"{name!r} has {len(study.directions)} objective(s); use a new study name")
    definition = study_definition(config)
    stored = study.user_attrs.get(DEFINITION_ATTR)
    if stored is None:
        study.set_user_attr(DEFINITION_ATTR, definition)
        study.set_user_attr("caveats", list(CAVEATS))
        with warnings.catch_warnings():  # set_metric_names is still marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["epsilon"] if len(directions) == 1 else ["epsilon", "f1_macro"])
    elif stored != definition:
        changed = sorted(f"[{table}] {key}" for table in definition for key in
                         set(definition[table]) | set(stored.get(table, {}))
                         if definition[table].get(key) != stored.get(table, {}).get(key))
        raise ConfigError(f"{config.path}: the study {name!r} in {masked_url(config.storage_url)} was run with a "
                          f"different definition ({', '.join(changed)} changed); its trials would not be comparable. "
                          "Restore those values or use a new [study] name")
    return study


def study_definition(config: StudyConfig) -> dict[str, dict[str, Any]]:
    """What makes trials comparable: the search ranges, the targets and every setting that changes a fit."""
    fit = config.fit.to_dict()
    for key in ("cache_dir", "device", "eval_batch_size"):
        fit.pop(key)
    fit["data"].pop("source")  # the same data may live at another path on another machine (data_hash checks it)
    search = dataclasses.asdict(config.search)
    search.pop("start")
    return {"search": search, "targets": dataclasses.asdict(config.targets), "swagppm": json.loads(json.dumps(fit))}


class StuckDetector:
    """Stops a fit whose training accuracy stays at the majority-class rate ``epochs`` epochs in a row."""

    def __init__(self, epochs: int, *, tolerance: float = 0.01) -> None:
        self.epochs, self.tolerance, self.run = epochs, tolerance, 0

    def __call__(self, info: EpochInfo) -> bool:
        self.run = self.run + 1 if info.train_accuracy <= info.majority_rate + self.tolerance else 0
        return self.run >= self.epochs


class Objective:
    """One trial: suggest, fit, judge, record. Catastrophic fits are pruned after recording."""

    def __init__(self, config: StudyConfig, *, on_outcome: Callable[[int, Outcome], None] | None = None,
                 progress: bool = False) -> None:
        self.config = config
        self.on_outcome = on_outcome
        self.progress = progress
        config.artifact_dir.mkdir(parents=True, exist_ok=True)
        self.artifacts = FileSystemArtifactStore(config.artifact_dir)

    def suggest(self, trial: Trial) -> tuple[float, int, float]:
        search = self.config.search
        c = trial.suggest_float("c", search.c_min, search.c_max, log=search.c_log)
        epochs = trial.suggest_int("ft_epochs", search.ft_epochs_min, search.ft_epochs_max)
        g = trial.suggest_float("g", search.g_min, search.g_max) if search.searches_g else search.g  # type: ignore[arg-type]
        return c, epochs, g

    def __call__(self, trial: Trial) -> float | tuple[float, float]:
        config = self.config
        c, epochs, g = self.suggest(trial)
        stop_above = config.targets.epsilon / 2 if config.early_stop else None
        trial.set_user_attr("worker", WORKER)
        try:
            result = swagppm.run_fit(config.fit, c=c, ft_epochs=epochs, g=g, stop_above=stop_above,
                                     on_epoch=StuckDetector(config.targets.stuck_epochs), progress=self.progress)
        except (swagppm.ConfigError, swagppm.DataError):
            raise
        except KeyboardInterrupt:
            trial.set_user_attr("failure", "interrupted (Ctrl-C)")
            raise
        except Exception as error:
            trial.set_user_attr("failure", f"{type(error).__name__}: {error}")
            raise FitCrashed(f"trial {trial.number} (c={c:g}, epochs={epochs}): {type(error).__name__}: {error}") from error
        self._check_data(trial, result.data_hash)
        outcome = judge(result, targets=config.targets, search=config.search)
        record(trial, outcome, self.artifacts, config)
        if self.on_outcome is not None:
            self.on_outcome(trial.number, outcome)
        if outcome.catastrophic:
            raise optuna.TrialPruned(outcome.reasons[0])
        return outcome.objective_values(config.study.objective)

    def _check_data(self, trial: Trial, data_hash: str) -> None:
        study = trial.study
        stored = study.user_attrs.get("data_hash")
        if stored is None:
            study.set_user_attr("data_hash", data_hash)
        elif stored != data_hash:
            raise ConfigError(f"{self.config.path} [data]: the records differ from those of the study's earlier "
                              f"trials (data hash {data_hash[:12]} vs {stored[:12]}); use a new [study] name")


def record_outcome(trial: Trial, outcome: Outcome) -> dict[str, Any]:
    """The constraints (``trial.set_constraint``) and every aggregate as user attributes (returned)."""
    for key in CONSTRAINT_KEYS:
        trial.set_constraint(key, outcome.constraints[key])
    attrs = outcome.attributes()
    for key, value in attrs.items():
        trial.set_user_attr(key, value)
    return attrs


def record(trial: Trial, outcome: Outcome, artifacts: FileSystemArtifactStore, config: StudyConfig) -> None:
    """Constraints, user attributes, the diagnosis note and the trial's figures (aggregates only)."""
    attrs = record_outcome(trial, outcome)
    optuna_dashboard.save_note(trial, trial_note(trial.number, outcome))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"trial-{trial.number}-figures.html"
        path.write_text(figures_html(attrs, config, title=f"Trial {trial.number}"))
        upload_artifact(artifact_store=artifacts, file_path=str(path), study_or_trial=trial, mimetype="text/html")


def trial_note(number: int, outcome: Outcome) -> str:
    """The dashboard note: verdict, reasons and the guide's next move (markdown)."""
    lines = [f"## Trial {number}: {outcome.label.replace('_', ' ')} — "
             f"{'feasible' if outcome.feasible else 'not feasible'}", ""]
    lines += [f"- {reason}" for reason in outcome.reasons]
    lines += ["", f"**Next (the guide's flowchart):** {outcome.recommendation.sentence}"]
    return "\n".join(lines)


def figures_html(attrs: dict[str, Any], config: StudyConfig, *, title: str, include_plotlyjs: bool | str = True) -> str:
    """A trial's max-delta plot and F1 violins as one HTML page (plotly.js embedded once)."""
    parts = []
    for index, figure in enumerate(trial_figures(attrs, config)):
        parts.append(figure.to_html(full_html=False, include_plotlyjs=include_plotlyjs if index == 0 else False))
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title></head><body>" \
           f"<h1>{title}</h1>{''.join(parts)}</body></html>"


def trial_figures(attrs: dict[str, Any], config: StudyConfig) -> list[Any]:
    """The max-delta figure and, when the utility draws ran, the F1 violins of one trial's attributes."""
    targets = config.targets
    figures = [scorers.plots.max_delta_figure(
        attrs.get("max_delta_series", []),
        epsilon_target=targets.epsilon, epsilon_is_lower_bound=bool(attrs.get("epsilon_is_lower_bound")),
        title=f"{attrs.get('diagnosis', '').replace('_', ' ')} fit")]
    if attrs.get("f1_macro_draws"):
        figures.append(scorers.plots.f1_violin_figure(
            attrs["f1_macro_draws"], attrs["f1_weighted_draws"], baseline_macro=attrs["baseline_f1_macro"],
            baseline_weighted=attrs["baseline_f1_weighted"], max_degradation=targets.max_f1_degradation))
    return figures


# --- reading a study back -------------------------------------------------------------------------------------


def is_feasible(trial: FrozenTrial) -> bool:
    """A completed trial whose every constraint is met (≤ 0)."""
    constraints = trial.constraints
    return trial.state == TrialState.COMPLETE and bool(constraints) and all(v <= 0 for v in constraints.values())


def violation(trial: FrozenTrial) -> float:
    """The sum of violated constraint values (0 for a feasible trial; inf without constraints)."""
    constraints = trial.constraints
    return sum(max(0.0, v) for v in constraints.values()) if constraints else math.inf


def best_feasible(study: optuna.Study) -> FrozenTrial | None:
    """The most private feasible trial (lowest ε; ties: higher macro-F1, then the earlier trial)."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]
    if not feasible:
        return None
    return min(feasible, key=lambda t: (t.user_attrs.get("epsilon", math.inf),
                                        -(t.user_attrs.get("f1_macro_median") or 0.0), t.number))


def closest_trial(study: optuna.Study) -> FrozenTrial | None:
    """With no feasible trial: the finished trial with the smallest total constraint violation."""
    finished = [t for t in study.get_trials(deepcopy=False, states=FINISHED) if t.constraints]
    return min(finished, key=lambda t: (violation(t), t.number)) if finished else None


def pareto_front(study: optuna.Study) -> list[FrozenTrial]:
    """Feasible trials not dominated in (ε down, macro-F1 up)."""
    feasible = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_feasible(t)]

    def point(t: FrozenTrial) -> tuple[float, float]:
        return t.user_attrs.get("epsilon") or math.inf, t.user_attrs.get("f1_macro_median") or 0.0

    return sorted((t for t in feasible if not any(
        point(o)[0] <= point(t)[0] and point(o)[1] >= point(t)[1] and point(o) != point(t) for o in feasible)),
        key=lambda t: point(t))


def violated(trial: FrozenTrial) -> dict[str, float]:
    """The constraints a trial violates, with their values."""
    return {key: value for key, value in trial.constraints.items() if value > 0}


def fits_for_figures(study: optuna.Study) -> list[dict[str, Any]]:
    """One mapping per finished trial, as ``scorers.plots`` grid and trade-off figures take them."""
    return [{"number": t.number, "c": t.params.get("c"), "ft_epochs": t.params.get("ft_epochs"),
             "epsilon": t.user_attrs.get("epsilon"), "f1_macro": t.user_attrs.get("f1_macro_median"),
             "label": t.user_attrs.get("diagnosis"), "feasible": is_feasible(t)}
            for t in study.get_trials(deepcopy=False, states=FINISHED) if "diagnosis" in t.user_attrs]


def study_figures(study: optuna.Study, config: StudyConfig) -> dict[str, Any]:
    """The search grid and the ε–F1 trade-off of every finished trial."""
    fits = fits_for_figures(study)
    prep = study.user_attrs.get("baseline_f1_macro")
    threshold = None if prep is None else (1 - config.targets.max_f1_degradation) * prep
    return {
        "search-grid": scorers.plots.search_grid_figure(fits, epsilon_target=config.targets.epsilon),
        "tradeoff": scorers.plots.tradeoff_figure(fits, epsilon_target=config.targets.epsilon,
                                                  f1_macro_threshold=threshold),
    }


# --- running ----------------------------------------------------------------------------------------------------


@dataclass
class RunSummary:
    """How a ``run`` ended, for the command line."""

    finished_before: int
    finished_now: int
    stopped_because: str
    best: FrozenTrial | None
    closest: FrozenTrial | None


def finished_count(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=FINISHED))


class StorageLost(RuntimeError):
    """The study storage went away mid-run and did not come back within the reconnect attempts."""


def enqueue_start_points(study: optuna.Study, config: StudyConfig) -> None:
    """The study's start points, once (the flowchart starts from the first one by itself)."""
    if isinstance(study.sampler, FlowchartSampler):
        return
    for point in config.search.start:
        params: dict[str, Any] = {"c": point.c, "ft_epochs": point.ft_epochs}
        if config.search.searches_g:
            params["g"] = config.search.g if point.g is None else point.g
        study.enqueue_trial(params, skip_if_exists=True)


def run_study(
    config: StudyConfig,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    progress_fit: bool = False,
    worker: str | None = None,
    echo: Callable[[str], None] = print,
) -> RunSummary:
    """Create or resume the study and optimise until n_trials finished trials, the timeout or a stop rule.

    ``n_trials`` (default ``[study] n_trials``) counts finished trials of the whole
    study, so a resumed run only adds what is missing; the stop rules read the
    storage after every trial, so they hold for every process sharing the study.
    A ``worker`` (its name) joins an existing study without enqueuing its start
    points, with a sampler seeded for it. A
    storage that goes away is reconnected with backoff; ``StorageLost`` after the
    last attempt. Ctrl-C propagates as ``KeyboardInterrupt`` after Optuna marks the
    running trial failed.
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own line per trial replaces Optuna's log
    settings = config.study
    study = open_study(config, create=worker is None, worker=worker)
    n_trials = settings.n_trials if n_trials is None else n_trials
    timeout = settings.timeout if timeout is None else timeout
    before = finished_count(study)
    summary = RunSummary(before, 0, "", None, None)

    def finish(reason: str) -> RunSummary:
        summary.finished_now = finished_count(study) - before
        summary.stopped_because = reason
        summary.best, summary.closest = best_feasible(study), closest_trial(study)
        return summary

    if settings.stop_on_first_feasible and best_feasible(study) is not None:
        return finish("a feasible trial was already found (stop_on_first_feasible)")
    if n_trials is not None and before >= n_trials:
        return finish(f"the study already has {before} finished trials (n_trials = {n_trials})")
    sampler = study.sampler
    if isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study):
        return finish(sampler.end_reason(study))

    echo(f"study {settings.name!r} in {masked_url(config.storage_url)}: {before} finished trial(s); "
         f"sampler {settings.sampler}, target epsilon <= {config.targets.epsilon:g}, F1 within "
         f"{config.targets.max_f1_degradation:.0%} of the baseline ({config.targets.statistic})")
    prep = swagppm.prepare(config.fit, progress=progress_fit)  # under the cache lock: once per study
    study.set_user_attr("baseline_f1_macro", prep.baseline_f1_macro)
    study.set_user_attr("baseline_f1_weighted", prep.baseline_f1_weighted)
    echo(f"data: {prep.num_train} training / {prep.num_test} test records, {prep.num_classes} classes; "
         f"non-private baseline F1 macro {prep.baseline_f1_macro:.3f}, weighted {prep.baseline_f1_weighted:.3f}; "
         f"stage 1 {'read from the cache' if prep.stage1_cache_hit else 'computed'} in "
         f"{sum(prep.timings.values()):.1f}s")
    if worker is None:
        enqueue_start_points(study, config)

    reason = {"text": ""}
    crashes = {"run": 0}
    lines: dict[int, str] = {}

    def keep_line(number: int, outcome: Outcome) -> None:
        lines[number] = outcome.line()

    def after_trial(study: optuna.Study, trial: FrozenTrial) -> None:
        """Print the finished trial (once it is stored), save the study figures, apply the stop rules."""
        if trial.number in lines:
            echo(f"trial {trial.number:>3}  {lines.pop(trial.number)}")
        if trial.state == TrialState.FAIL:
            crashes["run"] += 1
            echo(f"trial {trial.number:>3}  FAILED: {trial.user_attrs.get('failure', 'interrupted')}")
            if crashes["run"] >= MAX_CONSECUTIVE_CRASHES:
                reason["text"] = f"{crashes['run']} trials in a row crashed; see the errors above"
                study.stop()
            return
        crashes["run"] = 0
        for graph_id, figure in study_figures(study, config).items():
            optuna_dashboard.save_plotly_graph_object(study, figure, graph_object_id=graph_id)
        if settings.stop_on_first_feasible and best_feasible(study) is not None:
            reason["text"] = "a feasible trial was found (stop_on_first_feasible)"
            study.stop()
        elif isinstance(sampler, FlowchartSampler) and sampler.wants_to_stop(study):
            reason["text"] = sampler.end_reason(study)
            study.stop()

    callbacks: list[Callable[[optuna.Study, FrozenTrial], None]] = [after_trial]
    if n_trials is not None:
        callbacks.append(MaxTrialsCallback(n_trials, states=FINISHED))
    objective = Objective(config, on_outcome=keep_line, progress=progress_fit)
    threading.excepthook = _quiet_heartbeat_errors(config, echo)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
        try:
            study.optimize(objective, timeout=remaining, callbacks=callbacks, catch=(FitCrashed,),
                           gc_after_trial=False)
            break
        except optuna.exceptions.UpdateFinishedTrialError as error:
            echo(f"a trial was failed by another worker while this one had lost the storage ({error}); going on")
        except Exception as error:
            if not is_connection_error(error):
                raise
            study = _reconnect(config, error, echo, worker)
    if not reason["text"]:
        if deadline is not None and time.monotonic() >= deadline:
            reason["text"] = f"the timeout ({timeout:g}s) was reached"
        else:
            reason["text"] = f"the study has {finished_count(study)} finished trials (n_trials = {n_trials})"
    return finish(reason["text"])


def _quiet_heartbeat_errors(config: StudyConfig, echo: Callable[[str], None]) -> Callable[[Any], None]:
    """A heartbeat thread that loses the storage reports one masked line instead of a traceback."""
    default = threading.__excepthook__

    def hook(args: Any) -> None:
        if args.exc_value is not None and is_connection_error(args.exc_value):
            echo(f"heartbeat lost the study storage {masked_url(config.storage_url)} "
                 f"({describe_error(args.exc_value, config.storage_url)})")
        else:
            default(args)

    return hook


def _reconnect(config: StudyConfig, error: BaseException, echo: Callable[[str], None],
               worker: str | None) -> optuna.Study:
    """Reopen the study after its storage went away: waits ``reconnect_wait`` seconds, doubling, then gives up."""
    settings, shown = config.study, masked_url(config.storage_url)
    reason = describe_error(error, config.storage_url)
    for attempt in range(1, settings.reconnect_attempts + 1):
        wait = settings.reconnect_wait * 2 ** (attempt - 1)
        echo(f"lost the study storage {shown} ({reason}); reconnecting in {wait:g}s "
             f"(attempt {attempt} of {settings.reconnect_attempts})")
        time.sleep(wait)
        try:
            study = open_study(config, create=False, worker=worker)
            finished_count(study)  # a real round trip
        except Exception as retry_error:  # noqa: BLE001 - every failure here is "still unreachable"
            reason = describe_error(retry_error, config.storage_url)
            continue
        echo(f"reconnected to the study storage {shown}")
        return study
    raise StorageLost(f"lost the study storage {shown} and could not reconnect after "
                      f"{settings.reconnect_attempts} attempts ({reason}); finished trials are kept there. "
                      "Run the command again once the database is back")


def definition_digest(config: StudyConfig) -> str:
    """A short fingerprint of the study definition (shown in exports)."""
    return hashlib.sha256(json.dumps(study_definition(config), sort_keys=True).encode()).hexdigest()[:16]


def trial_rows(study: optuna.Study) -> list[dict[str, Any]]:
    """One row per trial for tables: number, state, params, ε, F1s, verdict, feasibility, time."""
    rows = []
    for t in study.get_trials(deepcopy=False):
        attrs = t.user_attrs
        rows.append({
            "number": t.number, "state": t.state.name, "c": t.params.get("c"), "ft_epochs": t.params.get("ft_epochs"),
            "g": t.params.get("g"), "epsilon": attrs.get("epsilon"),
            "epsilon_is_lower_bound": attrs.get("epsilon_is_lower_bound", False),
            "f1_macro": attrs.get("f1_macro_median"), "f1_weighted": attrs.get("f1_weighted_median"),
            "f1_macro_q10": attrs.get("f1_macro_q10"), "f1_weighted_q10": attrs.get("f1_weighted_q10"),
            "diagnosis": attrs.get("diagnosis") or attrs.get("failure") or "", "feasible": is_feasible(t),
            "seconds": (attrs.get("timings") or {}).get("total"),
        })
    return rows


def format_table(rows: Sequence[dict[str, Any]], *, statistic: str = "median") -> str:
    """The trial table as fixed-width text."""
    def num(value: Any, width: int, digits: int = 3) -> str:
        return f"{value:>{width}.{digits}f}" if isinstance(value, (int, float)) and math.isfinite(value) else " " * (width - 1) + "-"

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
                     f"{num(weighted, 7)} {str(row['diagnosis'])[:12]:<12} {'yes' if row['feasible'] else 'no':<8} "
                     f"{num(row['seconds'], 6, 1)}s")
    return "\n".join(lines)
