"""A study of SWAG-PPM's (c, epochs): open or resume it, and run its trials in this process until a stop rule holds.

``open_study`` refuses to resume a study defined by a different search, targets or
fit. ``run_study`` runs stage 1 once, the start points, then the sampler's
proposals (``tuner.objective.Objective``) until n_trials finished trials, the
timeout, the first feasible trial (if asked), the sampler's own ``StopRule`` or a
pause of the study (``tuner.pause``);
it recovers trials of dead processes (``tuner.faults``) and reconnects to a
storage that went away.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import itertools
import json
import os
import secrets
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import optuna
from optuna.trial import FrozenTrial, TrialState

from swagppm import ConfigError, DataError, statement
from tuner.artifacts import check_artifact_store
from tuner.config import StudyConfig
from tuner.faults import (
    GATE,
    WORKER,
    Terminated,
    mark_interrupted,
    quiet_heartbeat_errors,
    recover_stale_trials,
    requeue_interrupted,
    vanished_workers,
)
from tuner.keys import owner_key, owner_key_for
from tuner.ledger import FingerprintsRecords, Ledger, sealed_ledgers
from tuner.outcome import TRIAL_LEGEND
from tuner.outputs import OWNER_FILE, create_storage_file, owner_folder
from tuner.pause import StopWhenPaused, pause_of
from tuner.queries import DEFINITION_ATTR, best_feasible, closest_trial, finished_count
from tuner.record import BASELINE_F1_MACRO, FAILURE, RAN_BY, RETRY_OF, TrialRecord
from tuner.samplers import StopRule, make_sampler, sampler_traits, stop_rule_of
from tuner.storage import describe_error, is_connection_error, make_storage, masked_url, storage_file, traits
from tuner.tuning import (
    ACCOUNTED_TRIALS,
    LEDGER,
    NUM_TRAIN,
    claim_of,
    is_accounted,
    seal_claim,
    sealed_studies,
    study_claim,
    verify_claim,
)

if TYPE_CHECKING:
    from optuna.samplers import BaseSampler
    from optuna.storages import BaseStorage

    from swagppm.claim import StudyClaim
    from swagppm.stage1 import Preparation
    from tuner.keys import OwnerKey
    from tuner.objective import Objective

STAGE1_FINGERPRINT = "stage1_fingerprint"  # study attribute: the stage 1 every trial of the study used
ONE_DRAW = ("The released model is one draw from the posterior; its own F1 varies around the medians reported "
            "here.")


def study_caveats(config: StudyConfig) -> tuple[str, ...]:
    """The caveats a study's outputs state once: the card's (the tokenizer's only for a data-derived tokenizer) and
    that a release is one draw."""
    return (*statement.caveats(data_derived_tokenizer=config.fit.model.is_tiny), ONE_DRAW)
MAX_CONSECUTIVE_CRASHES = 3


class StorageLost(RuntimeError):
    """The study storage went away mid-run and did not come back within the reconnect attempts."""


@dataclass(kw_only=True)
class RunSummary:
    """How a ``run`` ended, for the command line; ``paused``: it stopped (or never started) because the study is
    paused (``tuner.pause``)."""

    finished_before: int
    finished_now: int
    stopped_because: str
    best: FrozenTrial | None
    closest: FrozenTrial | None
    paused: bool = False


def open_storage(config: StudyConfig) -> BaseStorage:
    """The study's storage, with the heartbeat, retry and timeout settings of ``[study]``."""
    settings = config.study
    create_storage_file(config)  # owner-only from its first byte (tuner.outputs)
    return make_storage(config.storage_url, heartbeat_interval=settings.heartbeat_interval,
                        grace_period=settings.grace_period, max_retries=settings.max_retries,
                        connect_timeout=settings.connect_timeout)


def open_study(config: StudyConfig, *, create: bool = True, worker: str | None = None,
               storage: BaseStorage | None = None, claim: StudyClaim | None = None) -> optuna.Study:
    """Create the study or resume it; refuses one whose sealed claim does not verify, or whose claim (cap, mode,
    public flag, posterior, data set) or definition differs from the file's.

    A ``worker`` (its name) seeds its sampler from the study seed and the name, so
    parallel workers do not propose the same configurations; an accounted study's
    sampler is seeded from fresh OS entropy instead, never recorded (a published c
    must not name the trial that proposed it). ``storage`` (from ``open_storage``) is
    opened here when not given; a run passes its own, which records the trials'
    constraints. ``claim`` is a new study's claim when it is not the file's (a
    rejudged study keeps its source's). A new study's claim is sealed under the owner
    key (``tuner.keys``), made now if this installation has none and nothing was sealed
    before.
    """
    storage = open_storage(config) if storage is None else storage
    name = config.study.name
    if not create:
        try:
            loaded = optuna.load_study(study_name=name, storage=storage, sampler=_sampler(config, worker, None))
        except KeyError:
            raise ConfigError(f"{config.path}: no study named {name!r} in {masked_url(config.storage_url)}; "
                              f"run `swagppm-tune run {config.path}` first") from None
        verify_claim(loaded, config)
        loaded.sampler = _sampler(config, worker, loaded)
        return loaded
    directions: list[Literal["minimize", "maximize"]] = (
        ["minimize"] if config.study.objective == "epsilon" else ["minimize", "maximize"])
    key = owner_key_for(itertools.chain(sealed_studies(storage), sealed_ledgers()))  # before anything is created
    study = optuna.create_study(study_name=name, storage=storage, sampler=_sampler(config, worker, None),
                                directions=directions, load_if_exists=True)
    if [d.name.lower() for d in study.directions] != directions:
        raise ConfigError(f"{config.path} [study]: objective = {config.study.objective!r}, but the stored study "
                          f"{name!r} has {len(study.directions)} objective(s); use a new study name")
    _keep_definition(study, config, directions, claim=claim, key=key)
    verify_claim(study, config)
    study.sampler = _sampler(config, worker, study)
    return study


def _sampler(config: StudyConfig, worker: str | None, study: optuna.Study | None) -> BaseSampler:
    """The study's sampler: seeded from the study seed (and the worker's name), or, for a study created accounted,
    from fresh OS entropy."""
    seed = config.study.seed
    if study is not None and is_accounted(study):
        seed = secrets.randbits(31)
    elif worker is not None:
        seed = int.from_bytes(hashlib.sha256(f"{seed}:{worker}".encode()).digest()[:4], "little") % 2**31
    return make_sampler(config.study.sampler, seed=seed, search=config.search,
                        n_startup_trials=config.study.startup_trials)


def _keep_definition(study: optuna.Study, config: StudyConfig, directions: Sequence[str], *,
                     claim: StudyClaim | None, key: OwnerKey) -> None:
    """Store a new study's sealed claim, definition, caveats and metric names; refuse a stored study defined
    otherwise."""
    definition = study_definition(config)
    stored = study.user_attrs.get(DEFINITION_ATTR)
    if stored is None:
        seal_claim(study, study_claim(config, study_id=secrets.token_hex(16)) if claim is None else claim, key)
        study.set_user_attr(DEFINITION_ATTR, definition)
        study.set_user_attr("caveats", list(study_caveats(config)))
        with warnings.catch_warnings():  # set_metric_names is still marked experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names(["epsilon"] if len(directions) == 1 else ["epsilon", "f1_macro"])
    elif stored != definition:
        changed = changed_keys(definition, stored)
        raise ConfigError(f"{config.path}: the study {config.study.name!r} in {masked_url(config.storage_url)} was "
                          f"run with a different definition ({', '.join(changed)} changed); its trials would not be "
                          "comparable. Restore those values or use a new [study] name")


def changed_keys(definition: Mapping[str, Any], stored: Mapping[str, Any]) -> list[str]:
    """The study-file keys whose values differ between two definitions, as the file names them: ``[data] labels``
    for a key of the fit's ``[data]`` (or ``[model]``) table, ``[swagppm] draws_privacy`` for one of its own."""
    changed = []
    for table in definition:
        new, old = definition[table], stored.get(table, {})
        for key in set(new) | set(old):
            if new.get(key) == old.get(key):
                continue
            if table == "swagppm" and isinstance(new.get(key), dict) and isinstance(old.get(key), dict):
                changed += [f"[{key}] {inner}" for inner in set(new[key]) | set(old[key])
                            if new[key].get(inner) != old[key].get(inner)]
            else:
                changed.append(f"[{table}] {key}")
    return sorted(changed)


def open_existing_study(config: StudyConfig) -> optuna.Study:
    """The stored study; a SQLite or journal file that is not there yet is refused, not created empty."""
    file = storage_file(config.storage_url)
    if file is not None and not file.exists():
        raise ConfigError(f"{config.path}: no study exists in {masked_url(config.storage_url)} yet ({file} does not "
                          f"exist); run `swagppm-tune run {config.path}` first")
    return open_study(config, create=False)


def study_definition(config: StudyConfig) -> dict[str, dict[str, Any]]:
    """What makes trials comparable: the search ranges, the targets and every setting that changes a fit."""
    fit = config.fit.to_dict()
    for key in ("cache_dir", "device", "eval_batch_size"):
        fit.pop(key)
    for key in ("source", "revision"):  # the same data may live elsewhere on another machine (data_hash checks it)
        fit["data"].pop(key)
    search = dataclasses.asdict(config.search)
    search.pop("start")
    search.pop("probe")  # like the start points, where a study begins does not change what its trials measure
    return {"search": search, "targets": dataclasses.asdict(config.targets), "swagppm": json.loads(json.dumps(fit))}


def definition_digest(config: StudyConfig) -> str:
    """A short fingerprint of the study definition (shown in exports)."""
    return hashlib.sha256(json.dumps(study_definition(config), sort_keys=True).encode()).hexdigest()[:16]


def planned_trials(study: optuna.Study, config: StudyConfig, n_trials: int | None = None) -> int | None:
    """Finished trials the study runs to: ``n_trials`` (a run's override) or ``[study] n_trials``; an
    accounted study exactly the K drawn when it was created."""
    if is_accounted(study):
        return int(study.user_attrs[ACCOUNTED_TRIALS])
    return config.study.n_trials if n_trials is None else n_trials


def enqueue_start_points(study: optuna.Study, config: StudyConfig, *, n_trials: int | None) -> None:
    """The study's start points and probe, once, at most ``n_trials`` of them (none left waiting after a short
    study); a sampler that proposes its own start (the flowchart) gets none, and so does an accounted study
    (random search only: a fixed point would not be a draw of the accounted search)."""
    if sampler_traits(config.study.sampler).proposes_start or is_accounted(study):
        return
    for params in config.search.start_params()[:n_trials]:
        study.enqueue_trial(params, skip_if_exists=True)


@contextlib.contextmanager
def study_lock(config: StudyConfig) -> Iterator[None]:
    """On SQLite, this process's exclusive claim on the study (``<db>.lock``, released on exit); elsewhere nothing.

    SQLite takes one process at a time: a second ``run`` would run the start
    points again and overshoot ``n_trials``, so it is refused with what to use.
    """
    database = None if traits(config.storage_url).shared else storage_file(config.storage_url)
    if database is None:
        yield
        return
    lock = database.with_name(database.name + ".lock")
    try:
        owner_folder(lock.parent)
        handle = os.fdopen(os.open(lock, os.O_WRONLY | os.O_CREAT | os.O_APPEND, OWNER_FILE), "a")
    except OSError as error:
        raise ConfigError(f"{config.path} [study]: the SQLite study's folder {lock.parent} cannot be written "
                          f"({error.strerror or error}): a run keeps its database and {lock.name} there") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(
                f"{config.path} [study]: the SQLite study {database} is being run by another process (it holds "
                f"{lock}); SQLite takes one process at a time: wait for it, or for several processes set storage = "
                f"\"journal:{config.path.stem}.log\" or a PostgreSQL URL") from None
        yield


def check_public_eval(config: StudyConfig) -> None:
    """An accounted study's public evaluation file exists, checked before the first fit."""
    source = config.study.public_eval
    if source is not None and not Path(source).is_file():
        raise ConfigError(f"{config.path} [study] public_eval {source}: no such file (records you declare public, "
                          "with the columns of the data)")


@contextlib.contextmanager
def run_settings(config: StudyConfig, echo: Callable[[str], None]) -> Iterator[None]:
    """Optuna's log level and the heartbeat-error hook for the run only; both restored after it."""
    verbosity, hook = optuna.logging.get_verbosity(), threading.excepthook
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # our own line per trial replaces Optuna's log
    threading.excepthook = quiet_heartbeat_errors(config, echo)
    try:
        yield
    finally:
        optuna.logging.set_verbosity(verbosity)
        threading.excepthook = hook


def run_study(
    config: StudyConfig,
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    progress_fit: bool | None = None,
    worker: str | None = None,
    echo: Callable[[str], None] = print,
    callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = (),
) -> RunSummary:
    """Create or resume the study and optimise until n_trials finished trials, the timeout or a stop rule.

    ``n_trials`` (default ``[study] n_trials``) counts finished trials of the whole
    study, so a resumed run only adds what is missing; the stop rules read the
    storage after every trial, so they hold for every process sharing the study.
    A ``worker`` (its name) joins an existing study without enqueuing its start
    points, with a sampler seeded for it. Trials left running by dead processes
    are failed and retried (``recover_stale_trials``) when the run starts and
    after every trial. An SQLite study is locked for the run (``study_lock``). A
    storage that goes away is reconnected with backoff; ``StorageLost`` after the
    last attempt. Ctrl-C (or SIGTERM, where ``tuner.faults.interrupt_on_sigterm``
    holds) propagates as ``KeyboardInterrupt`` after the running trial is marked
    failed with the reason and queued again with its parameters. A paused study (``tuner.pause``) starts no trial, and
    a run stops after its running trial once the study is paused. Optuna's log level and ``threading.excepthook`` are
    restored on return. ``callbacks`` are called after every trial, after the
    run's own (e.g. ``tuner.tracking.tracking_callbacks``).
    """
    with study_lock(config), run_settings(config, echo):
        return _run(config, n_trials=n_trials, timeout=timeout, progress_fit=progress_fit, worker=worker,
                    echo=echo, callbacks=callbacks)


def _run(config: StudyConfig, *, n_trials: int | None, timeout: float | None, progress_fit: bool | None,
         worker: str | None, echo: Callable[[str], None],
         callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]] = ()) -> RunSummary:
    settings = config.study
    if settings.concurrent_trials != 1 and not traits(config.storage_url).shared:
        raise ConfigError(f"study.concurrent_trials = {settings.concurrent_trials} needs a journal file or a server "
                          "storage ([study] storage = \"journal:FILE\"): threads of one process share SQLite badly "
                          "(a trial can be told twice)")
    check_cache_dir(config)  # before the study database: a refused first run leaves none behind
    storage = open_storage(config)
    new = worker is None and not study_exists(storage, settings.name)
    study = open_study(config, create=worker is None, worker=worker, storage=storage)
    with refusal_removes(study, storage, new=new):
        return _run_opened(study, storage, config, n_trials=n_trials, timeout=timeout, progress_fit=progress_fit,
                           worker=worker, echo=echo, callbacks=callbacks)


def _run_opened(study: optuna.Study, storage: BaseStorage, config: StudyConfig, *, n_trials: int | None,
                timeout: float | None, progress_fit: bool | None, worker: str | None, echo: Callable[[str], None],
                callbacks: Sequence[Callable[[optuna.Study, FrozenTrial], None]]) -> RunSummary:
    settings = config.study
    recover_stale_trials(study, config, echo=echo)
    n_trials = planned_trials(study, config, n_trials)
    if settings.accounted and n_trials == 0:
        return RunSummary(finished_before=0, finished_now=0, best=None, closest=None,
                          stopped_because="the accounted study drew 0 trials (Poisson): nothing runs, nothing is "
                                          "released")
    if timeout is not None and is_accounted(study):
        raise ConfigError(f"--timeout {timeout:g} cannot be used on the accounted study {settings.name!r}: its total "
                          "holds for a study that runs all of its hidden number of trials (a run stopped early is "
                          "resumed to the end)")
    timeout = settings.timeout if timeout is None else timeout
    before = finished_count(study)

    def finish(reason: str, *, paused: bool = False) -> RunSummary:
        return RunSummary(finished_before=before, finished_now=finished_count(study) - before,
                          stopped_because=reason, best=best_feasible(study), closest=closest_trial(study),
                          paused=paused)

    stop_rule = stop_rule_of(study.sampler)
    if settings.stop_on_first_feasible and best_feasible(study) is not None:
        return finish("a feasible trial was already found (stop_on_first_feasible)")
    if n_trials is not None and before >= n_trials and not waiting_retry(study):
        return finish(f"the study already has {before} finished trials (n_trials = {n_trials})")
    if stop_rule is not None and stop_rule.wants_to_stop(study):
        return finish(stop_rule.end_reason(study))
    if (paused := paused_run(study, config)) is not None:  # before stage 1
        return paused

    echo(f"study {settings.name!r} in {masked_url(config.storage_url)}: {before} finished trial(s); "
         f"sampler {settings.sampler}, target epsilon <= {config.targets.epsilon_cap:g}, F1 within "
         f"{config.targets.max_f1_degradation:.0%} of the baseline ({config.targets.statistic})")
    check_artifact_store(config)
    if config.artifact_store_url is not None:
        echo(f"figures: each trial's figures (aggregates of the private data: owner-side) go to "
             f"{config.artifact_store_url}")
    check_public_eval(config)
    from tuner.objective import Objective  # here: the verbs that only read a study start without the fitting stack

    objective = Objective(config, storage=storage, progress=progress_fit, echo=echo)
    try:
        prep = _prepare(study, objective, config, echo=echo)
        if worker is None:
            enqueue_start_points(study, config, n_trials=n_trials)
        after_trial = AfterTrial(config, objective, stop_rule=stop_rule, echo=echo,
                                 trials_left=None if n_trials is None else n_trials - before,
                                 cost=trial_cost(study, objective, prep, config))
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = StopWhenPaused()
        study = _optimize(study, objective, config, [after_trial, pause, *callbacks], n_trials=n_trials,
                          deadline=deadline, worker=worker, echo=echo)
    finally:
        objective.close()
    if after_trial.reason:
        return finish(after_trial.reason)
    reached = n_trials is not None and finished_count(study) >= n_trials and not waiting_retry(study)
    if pause.pause is not None and not reached:
        return finish(pause.pause.line(config), paused=True)
    if deadline is not None and time.monotonic() >= deadline:
        return finish(f"the timeout ({timeout:g}s) was reached")
    return finish(f"the study has {finished_count(study)} finished trials (n_trials = {n_trials})")


def paused_run(study: optuna.Study, config: StudyConfig) -> RunSummary | None:
    """How a run of a paused study ends before its first trial (its line says how to resume); None when the study
    is not paused."""
    pause = pause_of(study)
    if pause is None:
        return None
    return RunSummary(finished_before=finished_count(study), finished_now=0, stopped_because=pause.line(config),
                      best=best_feasible(study), closest=closest_trial(study), paused=True)


def study_exists(storage: BaseStorage, name: str) -> bool:
    """Whether ``storage`` holds a study named ``name``."""
    try:
        storage.get_study_id_from_name(name)
    except KeyError:
        return False
    return True


@contextlib.contextmanager
def refusal_removes(study: optuna.Study, storage: BaseStorage, *, new: bool) -> Iterator[None]:
    """A study this run created is deleted again when the run is refused (bad data, a folder that cannot be written,
    a stage 1 that does not match) before any trial was added to it: left, it would hold the refused file's
    definition and refuse the corrected one. A study that existed, or that holds a trial, is never touched."""
    try:
        yield
    except (ConfigError, DataError):
        if new:
            with contextlib.suppress(Exception):  # best effort: the refusal is what the user must see
                if not study.get_trials(deepcopy=False):
                    optuna.delete_study(study_name=study.study_name, storage=storage)
        raise


def check_cache_dir(config: StudyConfig) -> None:
    """The private cache folder can be created and written, checked before the study is created: a study made and
    then refused for its cache would be left behind."""
    from swagppm.cache import PrivateCache  # plain files: no torch

    folder = PrivateCache(config.fit.cache_dir).directory  # a folder that cannot be made is refused here
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise ConfigError(f"{config.path} [swagppm] cache_dir: the private cache {folder} cannot be written "
                          f"({error.strerror or error}); stage 1 and the features are kept there") from None


def keep_first(study: optuna.Study, key: str, value: str) -> str | None:
    """Store ``value`` under ``key`` if the study has none yet; otherwise the stored value when it differs."""
    stored = study.user_attrs.get(key)
    if stored is None:
        study.set_user_attr(key, value)
    return stored if stored is not None and stored != value else None


def check_data(study: optuna.Study, data_hash: str, config: StudyConfig) -> None:
    """Refuse records that differ from those of the study's earlier trials (before any stage 1 or fit runs)."""
    if (stored := keep_first(study, "data_hash", data_hash)) is not None:
        raise ConfigError(f"{config.path} [data]: the records differ from those of the study's earlier "
                          f"trials (keyed data fingerprint {data_hash[:12]} vs {stored[:12]}), or the private cache's "
                          "fingerprint key did (`clean` deletes it unless --keep-key; a worker with a cache of its own "
                          "needs a copy); "
                          "use a new [study] name, or the cache_dir the study began with")


def check_record_bound(study: optuna.Study, num_train: int, config: StudyConfig) -> None:
    """Refuse records beyond the declared public bound ``max_records``: δ was set from it."""
    bound = claim_of(study).claim.max_records
    if bound is not None and num_train > bound:
        raise ConfigError(f"{config.path} [study] max_records = {bound}: the data hold more training records than "
                          "the declared public bound that delta is set from; declare a larger bound in a new study")


def enter_in_ledger(study: optuna.Study, records: FingerprintsRecords, config: StudyConfig) -> None:
    """A study enters its data set's ledger once (its mode, and an accounted study's terms); a study entered before
    whose ledger is gone or another is refused (``Ledger.require_study``). A public-proxy study enters too, as one on
    records declared public (it adds nothing to a total): a release of those records, in any file or order, finds it
    there and is refused (``tuner.release.check_not_public``)."""
    claim = claim_of(study).claim
    assert claim.study_id is not None  # every study's claim names it
    ledger = Ledger.of(claim.data_set, records, key=owner_key())
    if study.user_attrs.get(LEDGER) is not None:
        ledger.require_study(claim.study_id, f"the study {study.study_name!r}")
    terms = {} if claim.accounting is None else {"trials_shape": claim.accounting.trials_shape,
                                                 "trials_mean": claim.accounting.trials_mean}
    uid = ledger.record_study({"id": claim.study_id, "study": study.study_name,
                               "storage": masked_url(config.storage_url), "mode": claim.mode,
                               "epsilon_cap": claim.epsilon_cap, **terms})
    if study.user_attrs.get(LEDGER) is None:
        study.set_user_attr(LEDGER, {"file": str(ledger.path), "ledger": uid})


def match_cpu_threads(study: optuna.Study, config: StudyConfig, echo: Callable[[str], None]) -> None:
    """On a CPU, run with the thread count of the study's earlier trials (before the session reads it): stage 1 and
    epsilon depend on it in their last digits, so a study begun with ``--workers 2`` (each worker one of two cores'
    threads) resumes with any worker count, and says so in one line."""
    recorded = next((record.threads for trial in study.get_trials(deepcopy=False)
                     if (record := TrialRecord.of(trial)) is not None and record.device == "cpu" and record.threads),
                    None)
    if recorded is None:
        return
    import torch  # here: a run is about to fit

    from swagppm.resources import resolve_device

    if resolve_device(config.fit.device).type != "cpu" or torch.get_num_threads() == recorded:
        return
    torch.set_num_threads(recorded)
    echo(f"using {recorded} CPU thread(s), as the study's earlier trials did (on a CPU, stage 1 and epsilon depend "
         "on the thread count in their last digits)")


def check_stage1(study: optuna.Study, fingerprint: str, config: StudyConfig) -> None:
    """Refuse a stage 1 other than the one the study's earlier trials used: their ε and F1 would not compare."""
    if (stored := keep_first(study, STAGE1_FINGERPRINT, fingerprint)) is not None:
        raise ConfigError(f"{config.path} [swagppm]: this worker's stage 1 differs from the one the study's earlier "
                          f"trials used (fingerprint {fingerprint} vs {stored}): another CPU, thread count or library "
                          "version rounds differently, so its trials would not compare; give every worker one "
                          "cache_dir and thread count, or use a new [study] name")


def _prepare(study: optuna.Study, objective: Objective, config: StudyConfig, *,
             echo: Callable[[str], None]) -> Preparation:
    """Stage 1, once, under the cache lock: the records checked against the study's data and its record bound and
    entered in the data set's ledger, then stage 1 computed and checked against the study's, its baseline stored."""
    match_cpu_threads(study, config, echo)
    session = objective.session
    check_data(study, session.data.data_hash, config)
    check_record_bound(study, len(session.data.train_texts), config)
    enter_in_ledger(study, session, config)  # before stage 1: a ledger that is gone is refused before any work
    prep = session.prepare()  # stage 1 can run for minutes: progress as the command line set it
    check_stage1(study, prep.stage1_fingerprint, config)
    study.set_user_attr(NUM_TRAIN, prep.num_train)
    study.set_user_attr(BASELINE_F1_MACRO, prep.baseline_f1_macro)
    study.set_user_attr("baseline_f1_weighted", prep.baseline_f1_weighted)
    echo(f"data: {prep.num_train} training / {prep.num_test} test records, {prep.num_classes} classes; "
         f"non-private baseline F1 macro {prep.baseline_f1_macro:.3f}, weighted {prep.baseline_f1_weighted:.3f}; "
         f"stage 1 {'read from the cache' if prep.stage1_cache_hit else 'computed'} in "
         f"{sum(prep.timings.values()):.1f}s")
    return prep


def trial_cost(study: optuna.Study, objective: Objective, prep: Preparation,
               config: StudyConfig) -> tuple[float, str, bool] | None:
    """A trial's seconds on this device and thread count (``tuner.estimate``): the median of the study's finished
    trials here, else estimated from stage 1's steps; its basis; and whether the first trial should say it again."""
    import torch  # loaded by the session already

    from tuner.estimate import from_stage1, trial_seconds

    seconds = trial_seconds(study, device=objective.session.device.type, threads=torch.get_num_threads())
    if seconds is not None:
        return seconds, "the median of this study's trials on this machine", False
    estimate = from_stage1(prep.stage1_timings, fit=config.fit, search=config.search, num_train=prep.num_train,
                           num_test=prep.num_test)
    return None if estimate is None else (*estimate, True)


class AfterTrial:
    """Optuna's callback after every trial: print it, recover stale trials, save the study figures, apply the stop
    rules. ``reason`` says why it stopped the study (empty while none did)."""

    def __init__(self, config: StudyConfig, objective: Objective, *, stop_rule: StopRule | None,
                 echo: Callable[[str], None], trials_left: int | None = None,
                 cost: tuple[float, str, bool] | None = None) -> None:
        self.config, self.objective, self.stop_rule, self.echo = config, objective, stop_rule, echo
        self.reason = ""
        self.crashes = 0
        self.legend_shown = False
        self.trials_left = trials_left  # None: no cost line (no n_trials, or it was said)
        seconds, basis, again = cost if cost is not None else (None, "", True)
        self._say_cost(seconds, basis, last=not again)

    def _say_cost(self, seconds: float | None, basis: str, *, last: bool = True) -> None:
        """The cost line when a trial's seconds on this machine are known: before the trials, and again after the
        first one when the first line was an estimate (``last`` false)."""
        from tuner.estimate import cost_line

        if seconds is not None and self.trials_left:
            self.echo(cost_line(trials_left=self.trials_left, seconds=seconds, basis=basis))
            if last:
                self.trials_left = None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        import optuna_dashboard  # here, not at the top: the command line's read-only verbs start without it

        from tuner.figures import study_figures

        if trial.number in self.objective.lines:
            if not self.legend_shown:
                self.echo(TRIAL_LEGEND)
                self.legend_shown = True
            self.echo(f"trial {trial.number:>3}  {self.objective.lines.pop(trial.number)}")
            if self.trials_left and (record := TrialRecord.of(trial)) is not None:
                self.trials_left -= 1
                self._say_cost(record.timings.get("total"), "this run's first trial")
        recover_stale_trials(study, self.config, echo=self.echo)
        gone = vanished_workers(study)  # a killed worker on this machine: its point queued again before n_trials
        if gone:
            recover_stale_trials(study, self.config, echo=self.echo, gone=gone)
        if trial.state == TrialState.FAIL:
            self._crashed(study, trial)
            return
        self.crashes = 0
        for graph_id, figure in study_figures(study, self.config).items():
            optuna_dashboard.save_plotly_graph_object(study, figure, graph_object_id=graph_id)
        if self.config.study.stop_on_first_feasible and best_feasible(study) is not None:
            self._stop(study, "a feasible trial was found (stop_on_first_feasible)")
        elif self.stop_rule is not None and self.stop_rule.wants_to_stop(study):
            self._stop(study, self.stop_rule.end_reason(study))

    def _crashed(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.crashes += 1
        self.echo(f"trial {trial.number:>3}  FAILED: {trial.user_attrs.get(FAILURE, 'interrupted')}")
        if self.crashes >= MAX_CONSECUTIVE_CRASHES:
            self._stop(study, f"{self.crashes} trials in a row crashed; see the errors above")

    def _stop(self, study: optuna.Study, reason: str) -> None:
        self.reason = reason
        study.stop()


class StopAtTrials:
    """Stop once ``n_trials`` trials finished and no retry waits: the point of a trial whose worker died (queued again
    with ``retry_of``) is evaluated even when the other workers reached ``n_trials`` meanwhile, never dropped."""

    def __init__(self, n_trials: int) -> None:
        self.n_trials = n_trials

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if finished_count(study) >= self.n_trials and not waiting_retry(study):
            study.stop()


def waiting_retry(study: optuna.Study) -> bool:
    """Whether the point of a trial whose worker died waits to be run again (``tuner.faults``)."""
    return any(RETRY_OF in t.user_attrs for t in study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))


def _optimize(study: optuna.Study, objective: Objective, config: StudyConfig,
              after_trial: Sequence[Callable[[optuna.Study, FrozenTrial], None]], *, n_trials: int | None,
              deadline: float | None, worker: str | None, echo: Callable[[str], None]) -> optuna.Study:
    """Trials until a stop rule holds; returns the study (reopened if the storage was lost meanwhile)."""
    from tuner.objective import FitCrashed

    callbacks = list(after_trial)
    if n_trials is not None:
        callbacks.append(StopAtTrials(n_trials))
    spent = Reconnects(finished=finished_count(study))
    interrupted: list[int] = []

    gated = objective.jobs == 1  # one trial at a time: SIGTERM waits while Optuna creates or tells a trial

    def trial_run(trial: optuna.Trial) -> float | tuple[float, float]:
        """The objective; a trial stopped by Ctrl-C or SIGTERM says so before Optuna marks it failed."""
        try:
            GATE.open = True
            if gated and (waiting := GATE.take()):
                raise Terminated(waiting)
            return objective(trial)
        except KeyboardInterrupt as interrupt:
            interrupted.append(trial.number)
            mark_interrupted(trial, interrupt)
            raise
        finally:
            GATE.open = not gated

    def held(study: optuna.Study, trial: FrozenTrial) -> None:
        if GATE.pending:
            study.stop()

    while True:
        remaining = None if deadline is None else max(deadline - time.monotonic(), 0.001)
        try:
            GATE.open = not gated
            try:
                study.optimize(trial_run, timeout=remaining, callbacks=[held, *callbacks], catch=(FitCrashed,),
                               gc_after_trial=False, n_jobs=objective.jobs)
            finally:
                GATE.open = True
            if waiting := GATE.take():
                raise Terminated(waiting)
            return study
        except KeyboardInterrupt:  # its trial is queued again: the next run evaluates the point it did not finish
            requeue_interrupted(study, interrupted, max_retries=config.study.max_retries)
            raise
        except optuna.exceptions.UpdateFinishedTrialError as error:
            echo(f"a trial was failed by another worker while this one had lost the storage ({error}); going on")
        except Exception as error:
            if not is_connection_error(error):
                raise
            study, objective.storage = _reconnect(config, error, echo, worker, spent, study)


@dataclass(kw_only=True)
class Reconnects:
    """Reconnect attempts spent since a trial last finished (``finished``: the study's finished trials then).

    They count across reconnects: a storage that reconnects but cannot be written
    (a full disk) uses up the attempts and gives up, instead of reconnecting forever.
    """

    finished: int
    used: int = 0


def _reconnect(config: StudyConfig, error: BaseException, echo: Callable[[str], None], worker: str | None,
               spent: Reconnects, study: optuna.Study) -> tuple[optuna.Study, BaseStorage]:
    """Reopen the study after its storage went away: waits ``reconnect_wait`` seconds, doubling, then gives up
    (``StorageLost``, this process's running trials marked failed where the storage still takes it) once
    ``reconnect_attempts`` are spent without a trial finishing."""
    settings, shown = config.study, masked_url(config.storage_url)
    reason = describe_error(error, config.storage_url)
    episode = 0
    while spent.used < settings.reconnect_attempts:
        spent.used += 1
        episode += 1
        wait = settings.reconnect_wait * 2 ** (spent.used - 1)
        echo(f"lost the study storage {shown} ({reason}); reconnecting in {wait:g}s "
             f"(attempt {spent.used} of {settings.reconnect_attempts})")
        time.sleep(wait)
        try:
            storage = open_storage(config)
            reopened = open_study(config, create=False, worker=worker, storage=storage)
            finished = finished_count(reopened)  # a real round trip
        except Exception as retry_error:  # noqa: BLE001 - every failure here is "still unreachable"
            reason = describe_error(retry_error, config.storage_url)
            continue
        if finished > spent.finished:  # trials finished since the last loss: this loss starts a new count
            spent.finished, spent.used = finished, episode
        echo(f"reconnected to the study storage {shown}")
        return reopened, storage
    kept = _fail_own_running(study, config)
    raise StorageLost(f"lost the study storage {shown} and could not reconnect after {settings.reconnect_attempts} "
                      f"attempts without a trial finishing ({reason}); finished trials are kept there{kept}. Run "
                      "the command again once the database is back (or its disk has room)")


def _fail_own_running(study: optuna.Study, config: StudyConfig) -> str:
    """Mark this process's running trials failed where the storage still takes it (on SQLite, the lock holder's:
    all of them); a clause for the message."""
    mine = not traits(config.storage_url).shared
    failed, left = [], []
    try:
        running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    except Exception:  # noqa: BLE001 - the storage cannot even be read: the next run fails them as stale trials
        return "; its running trials will be marked failed by the next run"
    for trial in running:
        if not (mine or trial.user_attrs.get(RAN_BY) == WORKER):
            continue
        try:
            study.tell(trial.number, state=TrialState.FAIL)
            failed.append(trial.number)
        except Exception:  # noqa: BLE001 - the storage refused: the next run fails it as a stale trial
            left.append(trial.number)
    return ((f"; running trial(s) {', '.join(map(str, failed))} marked failed" if failed else "")
            + (f"; trial(s) {', '.join(map(str, left))} could not be marked failed (the next run will)"
               if left else ""))
