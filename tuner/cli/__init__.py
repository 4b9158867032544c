"""swagppm-tune: run a study of SWAG-PPM's (c, epochs), inspect it, export and release its choice.

Verbs:
  demo       write the demo study into a folder and print the next commands (--run: run it)
  init       write a study file for your own records (data file, label column, model)
  run        create or resume a study and optimise, in one or several local processes
  create     create the study and its start points without a trial, for workers to join
  worker     join an existing study from any machine
  launch     submit workers as cluster jobs (Slurm through submitit, or local processes)
  jobs       the launched jobs and their state (--cancel; --pause, --resume: the whole study)
  proxy      Optuna's gRPC storage proxy in front of the database, for hundreds of workers
  fit        one fit outside any study
  status     the trial table and the best feasible trial
  export     the chosen configuration as JSON
  release    fit the chosen configuration and write the private release (one posterior draw)
  audit      membership-inference attack on a release-like draw: the empirical check of epsilon
  compare    non-private vs SWAG-PPM vs reweighted SWAG-PPM vs DP-SGD on the study's data
  rejudge    judge a study's trials again against other targets
  report     one self-contained HTML file of the study
  dashboard  optuna-dashboard on the study (trials, feasibility, figures)
  clean      delete the private cache (says what that makes impossible, then asks; --yes)
  explain    what a printed word means (the glossary): swagppm-tune explain not_judged
swagppm-tune VERB --help lists a verb's flags.

epsilon is an estimate from finitely many posterior draws, not a bound (no
differential-privacy guarantee is proven), unless it says "proven": then it is
2 x clip(c + g, 0, 1) x B, proven before the fit (exact sampler, NLL bounded by B,
public risks). The audit verb is its empirical check. Every word the verbs print (epsilon,
delta, c, E, max-delta, feasible, well_fit, not_judged, unaccounted, the
audit's AUC bound) is explained by swagppm-tune explain WORD (no WORD: the
whole glossary). Every verb that opens a study reads its storage from
--storage, else $SWAGPPM_TUNE_STORAGE, else [study] storage.
Optional packages (Opacus for compare, submitit for launch, a database driver
for the storage), output files and folders are checked before any fit. Long
steps report their progress on stderr (a bar on a terminal, else one line per
stage); -q/--quiet silences it.
Only the release folder is public: every other file written is owner-side,
created 0600 in 0700 folders (the verbs run under umask 077).

Exit status:
  0    ok (run, status, export, release: a feasible trial exists)
  1    no feasible trial (the closest one and its violations are printed), or a
       private selection in which no draw reached --min-utility (nothing released)
  2    bad input or refused: the study file, a flag, the data, an output that
       cannot be written, a release refused (one line naming the file, table or key)
  3    the study storage was lost mid-run and could not be reconnected (or was
       lost where no reconnect is tried, e.g. at the end of stage 1)
  4    internal error: an unexpected exception (one line with its type and
       message; set SWAGPPM_TUNE_DEBUG=1 for the traceback)
  5    the fit failed (catastrophic: its training loss or a draw turned NaN/inf)
  6    fit --from: epsilon differs from the export's
  7    the membership-inference audit refutes the claim epsilon <= the study's
       cap: release released nothing (the bound, the cap and the delta that would
       reconcile them are printed; --force-audit releases it anyway), audit says so
  8    release --push-to-hub: the release is committed, but pushing it to the
       Hub failed (offline, no access); one line says how to push it later
  130  interrupted by Ctrl-C or SIGTERM, any verb (run, worker: the running trial
       is marked failed and queued again; launch: its local jobs are cancelled;
       release: nothing is released, its lock and staging folder are removed);
       finished trials are kept
  141  the output pipe was closed (e.g. swagppm-tune status STUDY.toml | head)
"""


from __future__ import annotations

import argparse
import functools
import gc
import importlib
import importlib.util
import io
import os
import signal
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass

from tuner.cli.base import (
    EXIT_AUDIT_REFUTED,
    EXIT_BAD_INPUT,
    EXIT_BROKEN_PIPE,
    EXIT_FIT_FAILED,
    EXIT_INFEASIBLE,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    EXIT_PUSH_FAILED,
    EXIT_STORAGE_LOST,
    Command,
)

__all__ = ["COMMANDS", "EXIT_AUDIT_REFUTED",
           "EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_FIT_FAILED", "EXIT_INFEASIBLE", "EXIT_INTERNAL",
           "EXIT_INTERRUPTED", "EXIT_NOT_REPRODUCED", "EXIT_OK", "EXIT_PUSH_FAILED", "EXIT_STORAGE_LOST", "Command",
           "failures", "main"]

DEBUG_ENV = "SWAGPPM_TUNE_DEBUG"
SIGTERM_TEXT = "SIGTERM"  # the text of the interruption SIGTERM raises (tuner.faults.Terminated's too)
PROGRESS_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"  # read by huggingface_hub and transformers; 0 shows the bars

# The verbs, in the order --help lists them: each one's class, imported only when that verb runs (or its --help is
# asked), so that `swagppm-tune --help` loads no study, plotting or training library.
COMMANDS: dict[str, str] = {
    "demo": "tuner.cli.demo:DemoCommand", "init": "tuner.cli.init:InitCommand", "run": "tuner.cli.study:RunCommand",
    "create": "tuner.cli.study:CreateCommand", "worker": "tuner.cli.study:WorkerCommand",
    "launch": "tuner.cli.study:LaunchCommand", "jobs": "tuner.cli.study:JobsCommand",
    "proxy": "tuner.cli.study:ProxyCommand", "fit": "tuner.cli.fitting:FitCommand",
    "status": "tuner.cli.study:StatusCommand", "export": "tuner.cli.study:ExportCommand",
    "release": "tuner.cli.fitting:ReleaseCommand", "audit": "tuner.cli.fitting:AuditCommand",
    "compare": "tuner.cli.fitting:CompareCommand", "rejudge": "tuner.cli.study:RejudgeCommand",
    "report": "tuner.cli.study:ReportCommand",
    "dashboard": "tuner.cli.study:DashboardCommand", "clean": "tuner.cli.study:CleanCommand",
    "explain": "tuner.cli.explain:ExplainCommand",
}


@dataclass(frozen=True, kw_only=True)
class Failure:
    """What an error escaping a verb becomes: an exit status and one line on stderr (``{error}``: its text)."""

    status: int
    message: str
    quiet_stdout: bool = False  # the reader closed the pipe: the exit's own flush of stdout must stay quiet


@functools.cache
def failures() -> dict[type[BaseException], Failure]:
    """Every error a verb may raise on purpose, by type (the nearest base class counts); anything else is internal.
    Built at the first failure: the study machinery it names is not loaded for --help."""
    import swagppm
    from swagppm import ConfigError
    from tuner.study import StorageLost

    return {
        ConfigError: Failure(status=EXIT_BAD_INPUT, message="swagppm-tune: error: {error}"),
        swagppm.DataError: Failure(status=EXIT_BAD_INPUT, message="swagppm-tune: error: {error}"),
        swagppm.ReleaseRefused: Failure(status=EXIT_BAD_INPUT, message="swagppm-tune: error: {error}"),
        swagppm.TrainingFailure: Failure(status=EXIT_FIT_FAILED, message="swagppm-tune: the fit failed: {error}"),
        StorageLost: Failure(status=EXIT_STORAGE_LOST, message="swagppm-tune: error: {error}"),
        KeyboardInterrupt: Failure(status=EXIT_INTERRUPTED, message="\nswagppm-tune: {interrupted}"),
        BrokenPipeError: Failure(status=EXIT_BROKEN_PIPE, message="", quiet_stdout=True),  # `status | head`
    }


INTERNAL = Failure(status=EXIT_INTERNAL, message="swagppm-tune: internal error: {kind}: {first} (run again with "
                                                 f"{DEBUG_ENV}=1 for the traceback)")


STORAGE_GONE = Failure(status=EXIT_STORAGE_LOST, message="swagppm-tune: error: lost the study storage where no "
                                                         "reconnect is tried ({kind}); finished trials are kept "
                                                         "there: run the command again once it is back")


def failure_of(error: BaseException) -> Failure | None:
    """The ``failures()`` entry of ``error``'s nearest class; a storage that went away outside a run's reconnecting
    loop (during stage 1, say) is ``STORAGE_GONE`` (its text may name the server: not shown); None for an unexpected
    error."""
    from tuner.storage import is_connection_error

    known = failures()
    found = next((known[kind] for kind in type(error).__mro__ if kind in known), None)
    if found is None and isinstance(error, Exception) and is_connection_error(error):
        return STORAGE_GONE
    return found


def command_of(verb: str) -> Command:
    """The verb's command, its module imported now."""
    module, name = COMMANDS[verb].split(":")
    command: Command = getattr(importlib.import_module(module), name)()
    return command


def build_parser(verbs: Sequence[str] | None = None) -> tuple[argparse.ArgumentParser, dict[str, Command]]:
    """The parser, and the verbs by name; only ``verbs`` (default: all) declare their arguments, so a command line
    loads one verb's module. --help lists the verbs once, from this module's docstring."""
    from tuner.cli.arguments import Parser

    parser = Parser(prog="swagppm-tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    subparsers = parser.add_subparsers(dest="verb", required=True, metavar="VERB", help="one of the verbs above")
    commands: dict[str, Command] = {}
    for verb in COMMANDS:
        subparser = subparsers.add_parser(verb)
        if verbs is None or verb in verbs:
            command = commands[verb] = command_of(verb)
            subparser.description = command.help
            command.add_arguments(subparser)
            subparser.add_argument("-q", "--quiet", action="store_true",
                                   help="no progress lines or bars (results, warnings and errors are still printed)")
    return parser, commands


def defer_import(name: str) -> None:
    """Load the installed module ``name`` only when an attribute of it is first used, not when it is imported.

    For ``redis``: optuna imports it whenever its storages load, and redis imports OpenTelemetry and psutil with
    it (a quarter of a second), which every verb would pay on SQLite too; a Redis storage loads it on first use.
    The stub has the module's ``__file__``, so that ``inspect.getmodule`` (which torch calls while it registers its
    operators, asking every loaded module for it) does not load it either.
    """
    spec = importlib.util.find_spec(name)
    if spec is None or name in sys.modules:
        return
    stub = types.ModuleType(name)
    stub.__spec__ = spec
    stub.__file__ = spec.origin

    def load(attribute: str) -> object:
        del sys.modules[name]
        return getattr(importlib.import_module(name), attribute)

    stub.__getattr__ = load  # type: ignore[method-assign]  # PEP 562: called for a name the stub lacks
    sys.modules[name] = stub


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; every failure is one line on stderr and a documented exit status (see the module docstring).

    This module imports only the standard library at its top, so that Ctrl-C while the verb's libraries load (the
    first second or so) lands here too: one line and exit 130, not an import's traceback. Run as the process's own
    command (``argv`` None: the process ends next), it freezes the garbage collector's objects on the way out, so
    the interpreter's exit does not sweep the libraries' hundred thousand objects (a fifth of ``status``); files and
    connections are closed as usual, by their owners and the exit handlers."""
    main_thread = threading.current_thread() is threading.main_thread()  # only there may a handler be set
    previous = signal.signal(signal.SIGTERM, _terminated) if main_thread else None  # until tuner.faults' own
    try:
        return _main(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt as interrupt:
        print(f"\nswagppm-tune: {interrupted_text(interrupt)}", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
        if argv is None:
            gc.freeze()


def _terminated(number: int, frame: types.FrameType | None) -> None:
    """SIGTERM while the libraries load: as Ctrl-C there (one line, exit 130), not a silent death (143)."""
    raise KeyboardInterrupt(SIGTERM_TEXT)


def _main(argv: list[str]) -> int:
    from tuner.cli.arguments import ArgumentsRefused

    defer_import("redis")
    parser, commands = build_parser(argv[:1])  # the verb comes first: the top level has no flag but --help
    try:
        args = parser.parse_args(argv)
    except ArgumentsRefused as refused:
        print(refused, file=sys.stderr)
        return EXIT_BAD_INPUT
    import optuna  # after parsing: --help answers without it

    from swagppm import progress
    from tuner.outputs import OWNER_UMASK

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault(PROGRESS_BARS_ENV, "1")  # our one line per step replaces the libraries' progress bars
    progress.configure(not args.quiet)  # long steps report as bars on a terminal, else as lines on stderr
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # into a pipe or a log too, each line shows when it is printed
    from tuner.faults import interrupt_on_sigterm

    previous_umask = os.umask(OWNER_UMASK)  # what the verb and its libraries create is owner-only (tuner.outputs)
    try:
        with interrupt_on_sigterm():  # what `timeout`, Slurm and Kubernetes send: cleaned up as Ctrl-C is
            code = commands[args.verb].run(args)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled below
        return code
    except (Exception, KeyboardInterrupt) as error:
        failure = failure_of(error)
        if failure is None and os.environ.get(DEBUG_ENV):
            raise
        return report_failure(error, failure or INTERNAL)
    finally:
        os.umask(previous_umask)  # a caller in the same process (a test, a notebook) keeps its own


def report_failure(error: BaseException, failure: Failure) -> int:
    """Print the failure's one line (if any) and return its status."""
    if failure.quiet_stdout:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    if failure.message:
        first = (str(error).strip().splitlines() or [""])[0]
        print(failure.message.format(error=error, kind=type(error).__name__, first=first,
                                     interrupted=interrupted_text(error)), file=sys.stderr)
    return failure.status


def interrupted_text(error: BaseException) -> str:
    """What an interruption's line says: the verb's own words ("interrupted (SIGTERM): nothing was released ..."),
    else "interrupted", with the signal when it was SIGTERM."""
    text = str(error)
    if text.startswith("interrupted"):
        return text
    return "interrupted (SIGTERM)" if text == SIGTERM_TEXT else "interrupted"
