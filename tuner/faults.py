"""Trials whose process died: heartbeats, finding the stale trials, failing and retrying them a bounded number of times.

A trial whose process is stopped (Ctrl-C, or SIGTERM from Slurm, Kubernetes or
``kill``, raised as ``Terminated``) is failed with the reason and re-enqueued with
its parameters by that process (``requeue_interrupted``); a worker of ``run
--workers N`` is sent SIGTERM when its parent dies (``stop_with_parent``). A trial
whose process died (SIGKILL, a lost machine) is failed and re-enqueued
with its parameters: on SQLite, which one process at a time may run (a lock file
beside the database), every running trial found when a run starts; on a journal
or Redis, one whose heartbeat (a user attribute) is older than the grace period;
on a server database, by Optuna's heartbeats; and at once, any trial of a worker
process seen to exit, or of one on this machine that no longer exists.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import sys
import threading
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import FrozenTrial, Trial, TrialState, create_trial

from tuner.config import StudyConfig
from tuner.record import FAILURE, HEARTBEAT, RAN_BY, RETRY_OF
from tuner.storage import describe_error, is_connection_error, masked_url, traits

PARENT_ENV = "SWAGPPM_TUNE_PARENT"  # set by `run --workers N` for its workers: the parent's process id
_PR_SET_PDEATHSIG = 1  # prctl(2): the signal this process gets when its parent dies


SIGTERM = "SIGTERM"  # what Slurm's scancel, Kubernetes and kill send
CLOSED_PIPE = "its output pipe was closed"  # a worker whose parent died mid-trial: stopped, and the trial queued again


class Terminated(KeyboardInterrupt):
    """A signal that stops a run as Ctrl-C does (SIGTERM; in a Slurm job also its time-limit warning), raised as a
    ``KeyboardInterrupt``: the running trial failed with the reason and queued again, exit status 130.
    ``signal_words`` names the signal; ``message`` is what a verb says it left (default: the signal's words)."""

    def __init__(self, signal_words: str = SIGTERM, *, message: str | None = None) -> None:
        super().__init__(signal_words if message is None else message)
        self.signal_words = signal_words


def retold(interrupt: KeyboardInterrupt, message: str) -> KeyboardInterrupt:
    """The same interruption (Ctrl-C, or the same signal) carrying a verb's ``message`` of what it left."""
    if isinstance(interrupt, Terminated):
        return Terminated(interrupt.signal_words, message=message)
    return KeyboardInterrupt(message)


def interruption(error: KeyboardInterrupt) -> str:
    """What stopped a trial, for its ``failure`` attribute and the interrupted line: the signal, or Ctrl-C."""
    return f"interrupted ({error.signal_words})" if isinstance(error, Terminated) else "interrupted (Ctrl-C)"


def is_interruption(failure: object) -> bool:
    """Whether a trial's ``failure`` attribute says an interruption stopped it (``interruption``'s words)."""
    return isinstance(failure, str) and failure.startswith("interrupted (")


class SigtermGate:
    """Where SIGTERM may interrupt a run: inside a trial's own code (``open``) at once; while Optuna creates or tells a
    trial it is held (``pending``) and raised once the trial is in a known state, so that no trial is left RUNNING
    with no code of ours to fail and queue it again."""

    def __init__(self) -> None:
        self.open = True
        self.pending: str | None = None  # the held signal, in words

    def take(self) -> str | None:
        """The held signal, if one waits (and forget it)."""
        pending, self.pending = self.pending, None
        return pending


GATE = SigtermGate()


@contextlib.contextmanager
def interrupt_on_sigterm(also: Mapping[int, str] | None = None) -> Iterator[None]:
    """SIGTERM (and the signals ``also`` names, with their words) raises ``Terminated`` (a ``KeyboardInterrupt``) in
    the block, as Ctrl-C does (main thread only), so that a run, worker or launcher being stopped cleans up as on
    Ctrl-C instead of dying mid-trial; the old handlers are restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    words = {signal.SIGTERM: SIGTERM, **(also or {})}

    def interrupt(number: int, frame: FrameType | None) -> None:
        if not GATE.open:
            GATE.pending = words[number]
            return
        raise Terminated(words[number])

    previous = {number: signal.signal(number, interrupt) for number in words}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@dataclass(kw_only=True)
class Held:
    """The signal held by ``held_signals`` ("SIGTERM" or "SIGINT"; None while none came)."""

    caught: str | None = None


@contextlib.contextmanager
def held_signals() -> Iterator[Held]:
    """Ctrl-C and SIGTERM held for a block that must not stop halfway (a release's folder put in place and its ledger
    entry written): the block runs to its end, and the caller reads what came (main thread only; elsewhere the block
    just runs)."""
    held = Held()
    if threading.current_thread() is not threading.main_thread():
        yield held
        return

    def hold(number: int, frame: FrameType | None) -> None:
        held.caught = "SIGTERM" if number == signal.SIGTERM else "SIGINT"

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield held
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def stop_with_parent() -> None:
    """In a worker of ``run --workers N`` (``PARENT_ENV`` set), on Linux: get SIGTERM when the parent dies, even by
    SIGKILL, so that the worker fails and queues again its trial and ends, instead of running on into the parent's
    closed pipe (a ``BrokenPipeError`` would fail the trial for good). Call it where SIGTERM is handled."""
    parent = os.environ.get(PARENT_ENV, "")
    if not parent.isdigit() or not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != int(parent):  # the parent died before the request: as if it had just died
        os.kill(os.getpid(), signal.SIGTERM)


def requeue_interrupted(study: optuna.Study, numbers: Collection[int], *, max_retries: int) -> list[int]:
    """Fail (if Optuna has not) and re-enqueue the trials this process was running when it was interrupted, so that
    their points are evaluated by the next run; the numbers re-enqueued. Best effort: a storage that refuses leaves a
    running trial to ``recover_stale_trials``."""
    requeued = []
    for trial in study.get_trials(deepcopy=False):
        if trial.number not in numbers or trial.state not in (TrialState.RUNNING, TrialState.FAIL):
            continue
        try:
            if trial.state == TrialState.RUNNING:
                study.tell(trial.number, state=TrialState.FAIL)
            if retry(study, trial, max_retries=max_retries) is not None:
                requeued.append(trial.number)
        except Exception:  # noqa: BLE001 - the storage is away or the trial was finished elsewhere
            continue
    return requeued


def mark_interrupted(trial: Trial, error: KeyboardInterrupt) -> None:
    """Record why the trial stops (``failure``: SIGTERM or Ctrl-C) before Optuna marks it failed; best effort."""
    with contextlib.suppress(Exception):
        trial.set_user_attr(FAILURE, interruption(error))


def worker_id(pid: int) -> str:
    """Which process ran a trial (the ``worker`` user attribute; no private data)."""
    return f"{socket.gethostname()}:{pid}"


WORKER = worker_id(os.getpid())


def vanished_workers(study: optuna.Study) -> set[str]:
    """The ``worker`` names of running trials whose process ran on this machine and no longer exists (for
    ``recover_stale_trials(gone=...)``: their trials are failed and retried without waiting for a heartbeat)."""
    host = socket.gethostname()
    names = set()
    for trial in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        name = str(trial.user_attrs.get(RAN_BY, ""))
        machine, _, pid = name.rpartition(":")
        if machine == host and pid.isdigit() and not _exists(int(pid)):
            names.add(name)
    return names


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    try:  # a process that exited but was not reaped yet is gone all the same
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


class HeartbeatThread(contextlib.AbstractContextManager[None]):
    """Stamps the trial's ``heartbeat`` attribute on entry and every ``interval`` seconds until exit.

    Journal and Redis storages have no heartbeats of their own; this one lets
    another process tell a trial whose worker died (``stale_trials``).
    """

    def __init__(self, trial: Trial, *, interval: float) -> None:
        self._trial, self._interval = trial, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat-trial-{trial.number}", daemon=True)

    def __enter__(self) -> None:
        self._trial.set_user_attr(HEARTBEAT, time.time())
        self._thread.start()

    def __exit__(self, error_type: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self._interval):
            with contextlib.suppress(Exception):  # a missed beat only brings the retry closer
                self._trial.set_user_attr(HEARTBEAT, time.time())


class NullHeartbeat(contextlib.AbstractContextManager[None]):
    """No heartbeat of ours: the storage has Optuna's (a server database), or one process runs it (SQLite)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, error_type: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        return None


def trial_heartbeat(trial: Trial, config: StudyConfig) -> contextlib.AbstractContextManager[None]:
    """The heartbeat a running trial keeps while its fit runs: ours on a shared storage without its own, else none."""
    if traits(config.storage_url).own_heartbeats:
        return HeartbeatThread(trial, interval=config.study.heartbeat_interval)
    return NullHeartbeat()


def quiet_heartbeat_errors(config: StudyConfig, echo: Callable[[str], None]) -> Callable[[Any], None]:
    """A ``threading.excepthook``: a heartbeat thread that loses the storage reports one masked line, no traceback."""
    default = threading.__excepthook__

    def hook(args: Any) -> None:
        if args.exc_value is not None and is_connection_error(args.exc_value):
            echo(f"heartbeat lost the study storage {masked_url(config.storage_url)} "
                 f"({describe_error(args.exc_value, config.storage_url)})")
        else:
            default(args)

    return hook


def stale_trials(study: optuna.Study, config: StudyConfig, *, gone: Collection[str] | None = None) -> list[FrozenTrial]:
    """The running trials that no live process runs any more.

    ``gone``: the ``worker`` names of processes seen to exit; their trials only.
    Otherwise by the storage: on SQLite every running trial (call it holding
    ``tuner.study.study_lock``, so that no other process can run one); on a journal,
    a trial whose heartbeat (or start) is older than ``grace_period``; on a server
    database none here (Optuna's heartbeats, see ``recover_stale_trials``).
    """
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    if gone is not None:
        return [t for t in running if t.user_attrs.get(RAN_BY) in gone]
    storage = traits(config.storage_url)
    if not storage.shared:
        return running
    if storage.own_heartbeats:
        silent_since = time.time() - config.study.grace_period
        return [t for t in running if _last_sign_of_life(t) < silent_since]
    return []


def _last_sign_of_life(trial: FrozenTrial) -> float:
    started = trial.datetime_start.timestamp() if trial.datetime_start else 0.0
    return max(float(trial.user_attrs.get(HEARTBEAT, 0.0)), started)


def recover_stale_trials(study: optuna.Study, config: StudyConfig, *, echo: Callable[[str], None] = print,
                         gone: Collection[str] | None = None) -> None:
    """Fail the ``stale_trials`` and re-enqueue each with its parameters, at most ``[study] max_retries`` times.

    Without ``gone`` a server database also fails the trials whose heartbeat is
    older than the grace period (Optuna's ``fail_stale_trials``, which re-enqueues
    them through the storage's retry callback).
    """
    if gone is None:
        with warnings.catch_warnings():  # fail_stale_trials is still marked experimental
            warnings.simplefilter("ignore", ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    for trial in stale_trials(study, config, gone=gone):
        try:
            study.tell(trial.number, state=TrialState.FAIL)
        except (ValueError, UpdateFinishedTrialError):  # another process finished or failed it first
            continue
        max_retries = config.study.max_retries
        params = retry(study, trial, max_retries=max_retries)
        done = (f"not retried (max_retries = {max_retries} reached)" if params is None else
                f"re-enqueued with {', '.join(f'{k}={v:g}' for k, v in params.items()) or 'new parameters'}")
        echo(f"trial {trial.number:>3}  was left running by a process that is gone: failed; {done}")


def retry(study: optuna.Study, trial: FrozenTrial, *, max_retries: int) -> dict[str, Any] | None:
    """Re-enqueue a failed trial's parameters (so a start point is still evaluated); None past ``max_retries``.

    The retry carries ``retry_of`` (the failed trial) and Optuna's own retry
    attributes, so retries by heartbeat and by this function count together.
    """
    history = [*trial.system_attrs.get("retry_history", []), trial.number]
    if len(history) > max_retries:
        return None
    params = {**trial.system_attrs.get("fixed_params", {}), **trial.params}
    study.add_trial(create_trial(
        state=TrialState.WAITING, user_attrs={RETRY_OF: trial.number},
        system_attrs={"fixed_params": params, "failed_trial": history[0], "retry_history": history}))
    return params
