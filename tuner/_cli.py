"""``swagppm-tune``: run a study of SWAG-PPM's (c, epochs), inspect it, export and release its choice.

Verbs: ``run`` (create or resume a study and optimise, in one or several local
processes), ``worker`` (join a study from any machine), ``fit`` (one fit outside
any study), ``status`` (the trial table and the best feasible trial), ``export``
(the chosen configuration as JSON), ``release`` (the private model), ``report``
(one HTML file), ``dashboard`` (optuna-dashboard) and ``clean`` (delete the
private cache). Every verb that opens a study reads its storage from --storage,
else $SWAGPPM_TUNE_STORAGE, else [study] storage. Output files and folders are
checked before any fit.

Exit status:
  0    ok (run, status, export, release: a feasible trial exists)
  1    no feasible trial (the closest one and its violations are printed), or a
       private selection in which no draw reached --min-utility (nothing released)
  2    bad input or refused: the study file, a flag, the data, an output that
       cannot be written, a release refused (one line naming the file, table or key)
  3    the study storage was lost mid-run and could not be reconnected
  4    internal error: an unexpected exception (one line with its type and
       message; set SWAGPPM_TUNE_DEBUG=1 for the traceback)
  5    the fit failed (catastrophic: its training loss or a draw turned NaN/inf)
  6    fit --from: epsilon differs from the export's
  130  interrupted (Ctrl-C); finished trials are kept
  141  the output pipe was closed (e.g. `swagppm-tune status STUDY.toml | head`)
"""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import math
import os
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna

import swagppm
from scorers import GUIDE
from swagppm import PRIVATE_TEST, ConfigError, check_value, config_from_table
from tuner._study import (
    WORKER,
    StorageLost,
    best_feasible,
    closest_trial,
    describe_violations,
    figures_html,
    finished_count,
    format_table,
    open_study,
    pareto_front,
    run_study,
    stage1_runs,
    trial_rows,
)
from tuner._workers import STORAGE_ENV, run_workers
from tuner.audit import BASELINE, RELEASE, audit_fit, audit_losses, audit_text
from tuner.compare import CompareSettings, compare, comparison_table, read_comparison, write_comparison
from tuner.config import StudyConfig, Targets
from tuner.export import Chosen, export_trial, read_export, trials_run, write_export
from tuner.outcome import judge
from tuner.record import TrialRecord
from tuner.rejudge import rejudge
from tuner.report import write_report
from tuner.search import StartPoint
from tuner.storage import make_storage, masked_url, storage_file
from tuner.tuning import private_selection, tuning_cost, tuning_line, with_selection_cost

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_STORAGE_LOST = 3
EXIT_INTERNAL = 4
EXIT_FIT_FAILED = 5
EXIT_NOT_REPRODUCED = 6
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
DEBUG_ENV = "SWAGPPM_TUNE_DEBUG"
PROGRESS_BARS_ENV = "HF_HUB_DISABLE_PROGRESS_BARS"  # read by huggingface_hub and transformers; 0 shows the bars
EXPOSE_HELP = ("listen on a --host other than this machine. optuna-dashboard has no login: anyone who can reach the "
               "port can read and modify or delete the study (trials, notes, figures). Prefer an SSH tunnel: "
               "ssh -L 8080:127.0.0.1:8080 HOST, then open http://127.0.0.1:8080/dashboard/")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swagppm-tune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def study_arg(p: argparse.ArgumentParser) -> None:
        p.add_argument("study", type=Path, help="study TOML file (see studies/demo.toml)")

    run = verbs.add_parser("run", help="create or resume the study and optimise")
    study_arg(run)
    run.add_argument("--n-trials", type=int, default=None, help="finished trials to reach (default [study] n_trials)")
    run.add_argument("--timeout", type=float, default=None, help="seconds for this run (default [study] timeout)")
    run.add_argument("--progress", action="store_true", help="also show progress bars inside each fit")
    run.add_argument("--workers", type=int, default=1, help="local worker processes (default 1: this process)")
    run.add_argument("--gpus", default=None, help="GPU ids assigned to the workers round-robin, e.g. 0,1")

    worker = verbs.add_parser("worker", help="join an existing study (from any machine) and optimise")
    study_arg(worker)
    worker.add_argument("--name", default=None, help="a name for this worker's lines")
    worker.add_argument("--n-trials", type=int, default=None,
                        help="finished trials to reach (default [study] n_trials)")
    worker.add_argument("--timeout", type=float, default=None, help="seconds for this worker")
    worker.add_argument("--progress", action="store_true", help="also show progress bars inside each fit")

    fit = verbs.add_parser("fit", help="one SWAG-PPM fit outside any study (the manual loop)")
    fit.add_argument("study", type=Path, nargs="?", help="study TOML file (or use --from)")
    fit.add_argument("--from", dest="source", type=Path, default=None, help="refit the configuration of an export JSON")
    fit.add_argument("--c", type=float, default=None,
                     help="weight slope c (default: the study's first start point, the guide's 1.0)")
    fit.add_argument("--ft-epochs", type=int, default=None,
                     help="weighted fine-tuning epochs (default: the study's first start point, the guide's 7)")
    fit.add_argument("--g", type=float, default=None, help="weight intercept g (default 0.0)")
    fit.add_argument("--stop-above-epsilon", type=float, default=None,
                     help="stop the privacy draws once one shows epsilon above this (epsilon is then a lower bound)")
    fit.add_argument("--stop-above", type=float, default=None, help=argparse.SUPPRESS)  # gone: refused with a hint
    fit.add_argument("--figures", type=Path, default=None,
                     help="HTML file for the max-delta plot and F1 violins "
                     "(default: fit-c<c>-e<epochs>.html in the study's artifact folder)")
    fit.add_argument("--json", type=Path, default=None, help="also write the (aggregate) result to this JSON file")
    fit.add_argument("--release", type=Path, default=None, help="release one draw of this very fit to a folder")

    status = verbs.add_parser("status", help="the trial table and the best feasible trial")
    study_arg(status)

    export = verbs.add_parser("export", help="write the best feasible configuration as JSON")
    study_arg(export)
    export.add_argument("-o", "--output", type=Path, required=True, help="JSON file to write")
    export.add_argument("--trial", type=int, default=None, help="export this trial instead of the best feasible one")

    release = verbs.add_parser("release", help="fit the chosen configuration and write the private release")
    release.add_argument("study", type=Path, nargs="?", help="study TOML file (or use --from)")
    release.add_argument("--from", dest="source", type=Path, default=None, help="an export JSON file")
    release.add_argument("-o", "--output", type=Path, required=True, help="folder to write the released model to")

    for verb in (fit, release):
        verb.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")
        _selection_arguments(verb)
        verb.add_argument("--overwrite", action="store_true",
                          help="release into a folder that is not empty: writes over files of the same name, never "
                               "deletes others")

    dashboard = verbs.add_parser("dashboard", help="open optuna-dashboard on the study's storage and figures")
    study_arg(dashboard)
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    dashboard.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    dashboard.add_argument("--expose-to-network", action="store_true", help=EXPOSE_HELP)

    clean = verbs.add_parser("clean", help="delete the study's private cache (per-record risks, stage 1, features)")
    study_arg(clean)

    report = verbs.add_parser("report", help="write one self-contained HTML report of the study")
    study_arg(report)
    report.add_argument("-o", "--output", type=Path, required=True, help="HTML file to write")
    report.add_argument("--comparison", type=Path, default=None,
                        help="a comparison.json written by `compare`, to add its table and figure")
    _compare_parser(verbs)
    rejudge = verbs.add_parser("rejudge", help="judge the finished fits against other targets into a new study "
                                               "(instant: nothing is refitted)")
    study_arg(rejudge)
    rejudge.add_argument("--name", required=True, help="name of the new study (same storage)")
    rejudge.add_argument("--epsilon", type=float, default=None, help="new epsilon target")
    rejudge.add_argument("--max-f1-degradation", type=float, default=None, help="new allowed F1 degradation")
    rejudge.add_argument("--statistic", choices=("median", "q10"), default=None, help="F1 statistic of the draws")
    rejudge.add_argument("--require-well-fit", action=argparse.BooleanOptionalAction, default=None,
                         help="whether the max-delta series must look well fit")
    audit = verbs.add_parser("audit", help="membership inference against a release-like draw and the non-private "
                                           "baseline (aggregates only)")
    audit.add_argument("study", type=Path, nargs="?", help="study TOML file (its best feasible trial; or --from)")
    audit.add_argument("--from", dest="source", type=Path, default=None, help="an export JSON file")
    audit.add_argument("-o", "--output", type=Path, default=None, help="also write the audit as JSON")

    for verb in (run, worker, fit, release, verbs.choices["compare"], audit):
        verb.add_argument("--data", default=None, help="the records' file or folder, instead of [data] source")
    for verb in (run, worker, status, export, release, verbs.choices["compare"], audit, report, dashboard):
        verb.add_argument("--storage", default=None,
                          help=f"storage URL instead of ${STORAGE_ENV} or [study] storage (the variable keeps a "
                               "password out of the process list)")
    return parser


def _selection_arguments(verb: argparse.ArgumentParser) -> None:
    """Private selection of the released draw (Liu & Talwar): release the first draw that reaches --min-utility."""
    verb.add_argument("--min-utility", type=float, default=None,
                      help="release the first secret draw whose F1 on --selection-data reaches this (private "
                           "selection with random stopping; its total epsilon is computed and stated)")
    verb.add_argument("--selection-data", default=None,
                      help=f"records you declare public, scored for --min-utility (same columns as the data), or "
                           f"'{PRIVATE_TEST}' for the private test split (then the selection is unaccounted)")
    verb.add_argument("--selection-metric", choices=("f1_macro", "f1_weighted"), default="f1_macro",
                      help="the F1 compared with --min-utility (default f1_macro)")
    verb.add_argument("--selection-stop-probability", type=float, default=0.1,
                      help="chance of giving up after each draw that misses (default 0.1: 10 draws on average)")
    verb.add_argument("--selection-delta", type=float, default=None,
                      help="delta of the selection's total epsilon (default 1/n for n training records)")


def _compare_parser(verbs: Any) -> None:
    compare = verbs.add_parser("compare", help="non-private vs SWAG-PPM vs reweighted SWAG-PPM vs DP-SGD on the "
                                               "study's data and model (the paper's table)")
    compare.add_argument("study", type=Path, nargs="?", help="study TOML file (its best feasible trial; or --from)")
    compare.add_argument("--from", dest="source", type=Path, default=None, help="an export JSON file")
    compare.add_argument("-o", "--output", type=Path, required=True,
                         help="folder for comparison.json, comparison.csv and f1_by_class_size.html")
    compare.add_argument("--reweight-k", type=float, default=0.95, help="the reweighted variant's k (default 0.95)")
    compare.add_argument("--long-epochs", type=int, default=None,
                         help="also a non-private fine-tune of this many epochs (the paper used 30)")
    compare.add_argument("--stricter-epsilon", type=float, default=None,
                         help="DP-SGD's second, stricter target (default: half of SWAG-PPM's epsilon)")
    compare.add_argument("--delta", type=float, default=None, help="DP-SGD's delta (default 1/n)")
    compare.add_argument("--dpsgd-epochs", type=int, default=30, help="DP-SGD epochs (default 30)")
    compare.add_argument("--dpsgd-batch-size", type=int, default=512, help="DP-SGD expected batch size (default 512)")
    compare.add_argument("--dpsgd-lr", type=float, default=1e-3, help="DP-SGD Adam learning rate (default 1e-3)")
    compare.add_argument("--dpsgd-clip", type=float, default=1.0, help="DP-SGD clipping norm (default 1)")


def format_result(result: swagppm.SWAGPPMResult) -> str:
    """One line per fit without targets: c, epochs, ε, F1 medians against the baseline, time."""
    if result.failure:
        return f"c={result.c:.3f} epochs={result.ft_epochs:>2}  FAILED: {result.failure}"
    bound = ">=" if result.epsilon_is_lower_bound else "="
    return (
        f"c={result.c:.3f} epochs={result.ft_epochs:>2}  eps{bound}{result.epsilon:.3f}  "
        f"F1 macro {result.f1_macro_median:.3f} (baseline {result.baseline_f1_macro:.3f})  "
        f"F1 weighted {result.f1_weighted_median:.3f} (baseline {result.baseline_f1_weighted:.3f})  "
        f"{result.timings.get('total', 0.0):.1f}s{'  [stage 1 cached]' if result.stage1_cache_hit else ''}"
    )


def _study(args: argparse.Namespace) -> StudyConfig:
    """The study file; its storage from --storage, else $SWAGPPM_TUNE_STORAGE, for verbs that open the study."""
    config = StudyConfig.from_toml(args.study)
    storage = (args.storage or os.environ.get(STORAGE_ENV)) if hasattr(args, "storage") else None
    if storage:
        config = config.with_storage(storage)
    return config if getattr(args, "data", None) is None else config.with_data(args.data)


def _existing_study(config: StudyConfig) -> optuna.Study:
    """The stored study; a SQLite or journal file that is not there yet is refused, not created empty."""
    file = storage_file(config.storage_url)
    if file is not None and not file.exists():
        raise ConfigError(f"{config.path}: no study exists in {masked_url(config.storage_url)} yet ({file} does not "
                          f"exist); run `swagppm-tune run {config.path}` first")
    return open_study(config, create=False)


def _check_output(path: Path, what: str, *, folder: bool = False) -> None:
    """Refuse, before any work, an output file (or ``folder``) that could not be written; missing folders are made."""
    if not folder and path.is_dir():
        raise ConfigError(f"{what} {path}: is a folder; name a file")
    home = path if folder else path.parent
    try:
        home.mkdir(parents=True, exist_ok=True)
        if not folder and path.exists():
            path.open("a").close()  # opening to append changes nothing
        else:
            tempfile.TemporaryFile(dir=home).close()
    except OSError as error:
        in_the_way = next((p for p in (home, *home.parents) if p.exists() and not p.is_dir()), None)
        reason = f"{in_the_way} is a file, not a folder" if in_the_way else error.strerror or str(error)
        raise ConfigError(f"{what} {path}: cannot be written ({reason})") from None


def _chosen(args: argparse.Namespace) -> Chosen:
    """The configuration of ``--from EXPORT.json``, on ``--data`` when given."""
    chosen = read_export(args.source)
    if args.data is None:
        return chosen
    return dataclasses.replace(chosen, config=chosen.config.replace(data={"source": str(Path(args.data).resolve())}))


def _one_source(args: argparse.Namespace) -> None:
    if (args.study is None) == (args.source is None):
        raise ConfigError(f"swagppm-tune {args.verb}: give a study TOML file or --from EXPORT.json (one of them)")


@dataclass(frozen=True, kw_only=True)
class _FitRequest:
    """What ``fit`` fits: the settings, (c, epochs, g), and the study file or the export they come from."""

    config: swagppm.SWAGPPMConfig
    c: float
    ft_epochs: int
    g: float
    study: StudyConfig | None = None
    chosen: Chosen | None = None


def _fit_request(args: argparse.Namespace) -> _FitRequest:
    """The fit the flags ask for, checked like a study's (positive finite c, at least one epoch, finite g)."""
    _one_source(args)
    if args.stop_above is not None:
        raise ConfigError("--stop-above is gone (its unit was the max delta, epsilon/2): use --stop-above-epsilon, "
                          "whose unit is epsilon")
    if args.source is not None:
        for flag in ("c", "ft_epochs", "g"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} cannot be combined with --from (the export "
                                  "fixes the configuration)")
        chosen = _chosen(args)
        request = _FitRequest(config=chosen.config, c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, chosen=chosen)
    else:
        study = _study(args)
        start = study.search.start[0] if study.search.start else StartPoint(GUIDE.start_c, GUIDE.start_epochs)
        request = _FitRequest(config=study.fit, c=start.c if args.c is None else args.c,
                              ft_epochs=start.ft_epochs if args.ft_epochs is None else args.ft_epochs,
                              g=study.search.g if args.g is None else args.g, study=study)
    check_value(request.c > 0 and math.isfinite(request.c), "--c", request.c, "positive and finite")
    check_value(request.ft_epochs >= 1, "--ft-epochs", request.ft_epochs, "at least 1")
    check_value(math.isfinite(request.g), "--g", request.g, "finite")
    stop = args.stop_above_epsilon
    check_value(stop is None or (stop > 0 and math.isfinite(stop)), "--stop-above-epsilon", stop, "positive and finite")
    return request


def _fit(args: argparse.Namespace) -> int:
    """One fit: outputs checked first, its line printed before any file is written, --release from this very fit."""
    request = _fit_request(args)
    figures = None
    if request.study is not None:
        figures = args.figures or request.study.artifact_dir / f"fit-c{request.c:.3f}-e{request.ft_epochs}.html"
        _check_output(figures, "--figures")
    if args.json is not None:
        _check_output(args.json, "--json")
    if args.release is not None:
        swagppm.check_release_dir(args.release, overwrite=args.overwrite, data_derived=request.config.model.is_tiny,
                          force=args.force)
    selection = _selection(args, releasing=args.release is not None)
    if request.chosen is not None and request.chosen.threads:
        import torch  # only here: the command line starts without the training stack

        torch.set_num_threads(request.chosen.threads)
        print(f"using {request.chosen.threads} CPU thread(s), as the exported trial did (on a CPU, epsilon depends "
              "on the thread count in its last digits)")
    with swagppm.Session(request.config) as session:
        if selection is not None:
            swagppm.check_selection(session, selection)
        fit = session.fit(c=request.c, ft_epochs=request.ft_epochs, g=request.g,
                          stop_above_epsilon=args.stop_above_epsilon, progress=True)
        page = _print_fit(fit.result, request)
        codes = [EXIT_FIT_FAILED if fit.result.failure else 0, _reproduced(fit.result, request.chosen)]
        if figures is not None and page is not None:
            codes.append(_write(figures, page, "figures"))
        if args.json is not None:
            codes.append(_write(args.json, json.dumps(fit.result.to_dict(), indent=2), "result JSON"))
        if args.release is not None:
            codes.append(_release_fit(session, fit, args, request, selection))
    return next((code for code in codes if code), 0)


def _print_fit(result: swagppm.SWAGPPMResult, request: _FitRequest) -> str | None:
    """Print the fit's line (judged against the study's targets when there is a study); its figures page, if any."""
    study = request.study
    if study is None:
        print(format_result(result), flush=True)
        return None
    outcome = judge(result, targets=study.targets, search=study.search)
    print(outcome.line())
    for reason in outcome.reasons:
        print(f"  - {reason}")
    print(f"  next: {outcome.recommendation.sentence}", flush=True)
    return figures_html(outcome.record(), study, title=f"Fit c = {request.c:g}, {request.ft_epochs} epochs")


def _write(path: Path, text: str, what: str) -> int:
    """Write one output of a finished fit; a failure is one line and status 2, and the printed result stands."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    except OSError as error:
        print(f"swagppm-tune: error: could not write the {what} {path} ({error.strerror or error}); the result "
              "above stands", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{what}: {path}")
    return 0


def _reproduced(result: swagppm.SWAGPPMResult, chosen: Chosen | None) -> int:
    """Whether a refit gives its export's ε bit for bit; if not, the line names what to suspect."""
    if chosen is None or chosen.epsilon is None:
        return 0
    if result.epsilon == chosen.epsilon:
        print(f"epsilon {result.epsilon!r} reproduces the export exactly")
        return 0
    print(f"epsilon {result.epsilon!r} differs from the export's {chosen.epsilon!r}; suspects: "
          f"{_suspects(result, chosen)}")
    return EXIT_NOT_REPRODUCED


def _suspects(result: swagppm.SWAGPPMResult, chosen: Chosen) -> str:
    """Whether stage 1 is the export's, then the thread count, CPU kernels, device and library versions against it."""
    now, then = swagppm.versions("optuna", "optuna-dashboard"), chosen.versions or {}
    changed = sorted(name for name in set(now) | set(then) if now.get(name) != then.get(name))
    versions = (f"{', '.join(changed)} differ" if changed else "the same") if then else "not recorded"
    causes = (f"the CPU thread count ({result.threads} here, {chosen.threads or 'not recorded'} in the export), the "
              f"CPU kernels ({result.cpu_kernels or 'none'} here, {chosen.cpu_kernels or 'not recorded'} in the "
              f"export), the device ({result.device} here, {chosen.device or 'not recorded'} in the export), the "
              f"library versions ({versions})")
    here, there = result.stage1_fingerprint, chosen.stage1_fingerprint
    if there is None:
        return f"{causes}, or a stage 1 cached under other settings"
    if here == there:
        return f"not stage 1 (the export's, fingerprint {here}), so stage 2: {causes}"
    return (f"stage 1 differs (fingerprint {here} here, {there} in the export), from {causes}, or a stage 1 cached "
            "under other settings")


def _release_fit(session: swagppm.Session, fit: swagppm.Fit, args: argparse.Namespace, request: _FitRequest,
                 selection: swagppm.Selection | None) -> int:
    """``fit --release``: one draw of the fit just printed, written with the checks made before it."""
    chosen = request.chosen
    return _write_release(session, fit, args.release, args=args,
                          trials_run=chosen.trials_run if chosen is not None else None,
                          tuning=chosen.tuning if chosen is not None else None, selection=selection)


def _selection(args: argparse.Namespace, *, releasing: bool) -> swagppm.Selection | None:
    """The release's private selection from --min-utility and --selection-data (both or neither), checked now."""
    given = {"--min-utility": args.min_utility, "--selection-data": args.selection_data}
    if all(value is None for value in given.values()):
        return None
    missing = [flag for flag, value in given.items() if value is None]
    if missing or not releasing:
        raise ConfigError(f"{' and '.join(missing) or '--release'} must be given too: private selection chooses "
                          "the released draw by its F1 on the selection data")
    check_value(0 <= args.min_utility <= 1, "--min-utility", args.min_utility, "an F1 score in [0, 1]")
    check_value(0 < args.selection_stop_probability <= 1, "--selection-stop-probability",
                args.selection_stop_probability, "in (0, 1]")
    delta = args.selection_delta
    check_value(delta is None or 0 < delta < 1, "--selection-delta", delta, "in (0, 1)")
    source = args.selection_data
    if source != PRIVATE_TEST and not Path(source).expanduser().is_file():
        raise ConfigError(f"--selection-data {source}: no such file (or pass {PRIVATE_TEST})")
    return private_selection(source=source, threshold=args.min_utility, metric=args.selection_metric,
                             stop_probability=args.selection_stop_probability)


def _write_release(session: swagppm.Session, fit: swagppm.Fit, out: Path, *, args: argparse.Namespace,
                   trials_run: int | None, tuning: dict[str, Any] | None = None,
                   selection: swagppm.Selection | None = None) -> int:
    """One secret draw of ``fit`` written to ``out``, its card carrying the membership-inference audit."""
    if fit.result.failure:
        print(f"nothing released: the fit failed ({fit.result.failure})", file=sys.stderr)
        return EXIT_FIT_FAILED
    baseline = audit_losses(session.baseline_losses())
    audits: dict[str, Any] = {}

    def audit(losses: swagppm.RecordLosses) -> dict[str, Any]:
        audits.update({BASELINE: baseline, RELEASE: audit_losses(losses)})
        return audits

    if selection is not None:
        selection = with_selection_cost(selection, epsilon_per_draw=fit.result.epsilon,
                                        delta=args.selection_delta or 1.0 / fit.result.num_train)
    try:
        path = session.release(fit, out, force=args.force, overwrite=args.overwrite, trials_run=trials_run,
                               audit=audit, tuning=tuning, selection=selection)
    except swagppm.SelectionFailed as error:
        print(f"nothing released: {error}", file=sys.stderr)
        return EXIT_INFEASIBLE
    print(f"released one draw of c = {fit.result.c:.4g}, {fit.result.ft_epochs} epochs to {path}")
    if selection is not None:
        print(_selection_line(path))
    print("membership-inference audit (members: training records, non-members: test records):")
    print(audit_text(audits, epsilon=fit.result.epsilon, epsilon_is_lower_bound=fit.result.epsilon_is_lower_bound))
    return 0


def _selection_line(release: Path) -> str:
    """The selection's sentence of the privacy statement, as the release card states it."""
    statement = json.loads((release / "release_card.json").read_text())["privacy_statement"]
    return next(line for line in statement if line.startswith("Selection of the released draw"))


def _status(args: argparse.Namespace) -> int:
    config = _study(args)
    study = _existing_study(config)
    print(format_table(trial_rows(study), statistic=config.targets.statistic))
    counts = trials_run(study)
    print(f"\n{counts['total']} trials: {counts['complete']} complete, {counts['pruned']} pruned, "
          f"{counts['fail']} failed")
    print(tuning_line(tuning_cost(study, config)))
    _warn_mixed_stage1(study)
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        return EXIT_INFEASIBLE
    print(_best_line(best))
    _warn_at_edge(best, config)
    if config.study.objective == "pareto":
        front = ", ".join(f"#{t.number} (eps {r.epsilon_or_inf:.2f}, F1 {r.f1_macro_median or 0.0:.3f})"
                          for t in pareto_front(study) if (r := TrialRecord.of(t)) is not None)
        print(f"feasible Pareto front: {front}")
    return 0


def _warn_mixed_stage1(study: optuna.Study) -> None:
    """Say so when the trials used more than one stage 1: their ε and F1 do not compare."""
    runs = stage1_runs(study)
    if len(runs) > 1:
        listed = "; ".join(f"{fingerprint}: trials {', '.join(map(str, numbers))}"
                           for fingerprint, numbers in runs.items())
        print(f"warning: the trials used {len(runs)} different stage 1s ({listed}), so their epsilon and F1 do not "
              "compare; give every worker one cache_dir and thread count, and rerun the choice in a new study",
              file=sys.stderr)


def _warn_at_edge(best: optuna.trial.FrozenTrial, config: StudyConfig) -> None:
    """Say so when the choice sits on the edge of the search ranges: a target may be met further out."""
    search, c, epochs = config.search, best.params["c"], best.params["ft_epochs"]
    near = 0.01 * (search.c_max - search.c_min)
    checks = ((c - search.c_min <= near, f"c = {c:.4g} at c_min = {search.c_min:g}"),
              (search.c_max - c <= near, f"c = {c:.4g} at c_max = {search.c_max:g}"),
              (epochs == search.ft_epochs_min, f"{epochs} epochs at ft_epochs_min"),
              (epochs == search.ft_epochs_max, f"{epochs} epochs at ft_epochs_max"))
    edges = [text for at_edge, text in checks if at_edge]
    if edges:
        print(f"warning: the chosen configuration sits at the edge of the search ranges ({'; '.join(edges)}): a "
              f"better one may lie further out; widen [search] in {config.path} and run again", file=sys.stderr)


def _best_line(best: optuna.trial.FrozenTrial) -> str:
    record = TrialRecord.of(best)
    assert record is not None and record.f1_macro_median is not None and record.f1_weighted_median is not None
    return (f"best feasible: trial {best.number}: c = {best.params['c']:.4g}, {best.params['ft_epochs']} epochs, "
            f"epsilon = {record.epsilon_or_inf:.3f}, F1 macro median {record.f1_macro_median:.3f} (baseline "
            f"{record.baseline_f1_macro:.3f}), weighted {record.f1_weighted_median:.3f} (baseline "
            f"{record.baseline_f1_weighted:.3f})")


def _print_closest(study: optuna.Study) -> None:
    closest = closest_trial(study)
    if closest is None:
        print("no finished trial yet")
        return
    record = TrialRecord.of(closest)
    print(f"no feasible trial; closest: trial {closest.number} (c = {closest.params['c']:.4g}, "
          f"{closest.params['ft_epochs']} epochs, {record.diagnosis if record else '?'}) violates: "
          f"{describe_violations(closest)}")
    if record is not None:
        print(f"  the guide's next move from there: {record.recommendation}")


def _export(args: argparse.Namespace) -> int:
    config = _study(args)
    _check_output(args.output, "-o")
    study = _existing_study(config)
    if args.trial is not None:
        matching = [t for t in study.get_trials(deepcopy=False) if t.number == args.trial and t.params]
        if not matching or TrialRecord.of(matching[0]) is None:
            raise ConfigError(f"--trial {args.trial}: no finished trial with that number in study "
                              f"{config.study.name!r}")
        trial = matching[0]
    else:
        best = best_feasible(study)
        if best is None:
            _print_closest(study)
            print("nothing exported (use --trial N to export a specific trial anyway)", file=sys.stderr)
            return EXIT_INFEASIBLE
        trial = best
    document = export_trial(study, trial, config)
    path = write_export(document, args.output)
    epsilon = document["metrics"]["epsilon"]
    print(f"exported trial {trial.number} (c = {trial.params['c']:.4g}, {trial.params['ft_epochs']} epochs, "
          f"epsilon = {'-' if epsilon is None else f'{epsilon:.3f}'}) to {path}")
    return 0


def _chosen_configuration(args: argparse.Namespace, what: str) -> Chosen | None:
    """The configuration ``--from EXPORT.json`` names, else the study's best feasible trial (None: there is none)."""
    _one_source(args)
    if args.source is not None:
        return _chosen(args)
    study_config = _study(args)
    study = _existing_study(study_config)
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        print(f"nothing {what}: the study has no feasible trial", file=sys.stderr)
        return None
    record = TrialRecord.of(best)
    return Chosen(config=study_config.fit, c=best.params["c"], ft_epochs=best.params["ft_epochs"],
                  g=best.params.get("g", study_config.search.g), epsilon=record.epsilon if record else None,
                  trials_run=len(study.get_trials(deepcopy=False)), path=study_config.path,
                  tuning=tuning_cost(study, study_config))


def _release(args: argparse.Namespace) -> int:
    chosen = _chosen_configuration(args, "released")
    if chosen is None:
        return EXIT_INFEASIBLE
    swagppm.check_release_dir(args.output, overwrite=args.overwrite, data_derived=chosen.config.model.is_tiny,
                              force=args.force)
    selection = _selection(args, releasing=True)
    with swagppm.Session(chosen.config) as session:
        if selection is not None:
            swagppm.check_selection(session, selection)
        fit = session.fit(c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, progress=True)
        return _write_release(session, fit, args.output, args=args, trials_run=chosen.trials_run,
                              tuning=chosen.tuning, selection=selection)


def _audit(args: argparse.Namespace) -> int:
    if args.output is not None:
        _check_output(args.output, "-o")
    chosen = _chosen_configuration(args, "audited")
    if chosen is None:
        return EXIT_INFEASIBLE
    with swagppm.Session(chosen.config) as session:
        fit = session.fit(c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, progress=True)
        if fit.result.failure:
            print(f"nothing audited: the fit failed ({fit.result.failure})", file=sys.stderr)
            return EXIT_FIT_FAILED
        audit = audit_fit(session, fit)
    print(f"membership-inference audit of c = {chosen.c:.4g}, {chosen.ft_epochs} epochs (epsilon "
          f"{fit.result.epsilon:.3g}; members: training records, non-members: test records):")
    print(audit_text(audit, epsilon=fit.result.epsilon, epsilon_is_lower_bound=fit.result.epsilon_is_lower_bound))
    if args.output is not None:
        args.output.write_text(json.dumps({"c": chosen.c, "ft_epochs": chosen.ft_epochs, "g": chosen.g,
                                           "epsilon": fit.result.epsilon, "audit": audit}, indent=2) + "\n")
        print(f"wrote {args.output}")
    return 0


def _rejudge(args: argparse.Namespace) -> int:
    config = _study(args)
    _existing_study(config)
    changes = {key: value for key, value in (("epsilon", args.epsilon), ("max_f1_degradation", args.max_f1_degradation),
                                             ("statistic", args.statistic), ("require_well_fit", args.require_well_fit))
               if value is not None}
    targets = config_from_table(Targets, {**dataclasses.asdict(config.targets), **changes}, "rejudge")
    study = rejudge(config, targets, name=args.name)
    print(f"study {args.name!r}: {len(study.trials)} fits of {config.study.name!r} judged against "
          + ", ".join(f"{key} = {value}" for key, value in changes.items()))
    print(format_table(trial_rows(study), statistic=targets.statistic))
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        return EXIT_INFEASIBLE
    print(_best_line(best))
    return 0


def _compare(args: argparse.Namespace) -> int:
    _check_output(args.output, "-o", folder=True)
    chosen = _chosen_configuration(args, "compared")
    if chosen is None:
        return EXIT_INFEASIBLE
    settings = CompareSettings(c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, reweight_k=args.reweight_k,
                               long_epochs=args.long_epochs, stricter_epsilon=args.stricter_epsilon, delta=args.delta,
                               dpsgd_batch_size=args.dpsgd_batch_size, dpsgd_learning_rate=args.dpsgd_lr,
                               dpsgd_max_grad_norm=args.dpsgd_clip, dpsgd_epochs=args.dpsgd_epochs)
    rows = compare(chosen.config, settings)
    print(comparison_table(rows))
    about = {"configuration": dataclasses.asdict(settings), "swagppm": chosen.config.to_dict(),
             "data_note": "scored on the study's own test split; class-level aggregates only"}
    for path in write_comparison(rows, args.output, about=about):
        print(f"wrote {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    config = _study(args)
    _check_output(args.output, "-o")
    study = _existing_study(config)
    comparison = None if args.comparison is None else read_comparison(args.comparison)
    path = write_report(study, config, args.output, comparison=comparison)
    print(f"report of {finished_count(study)} finished trials written to {path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    config = _study(args)
    _check_output(config.artifact_dir, "[study] artifacts", folder=True)
    try:
        if args.workers > 1 or args.gpus:
            gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else []
            run_workers(config, workers=args.workers, gpus=gpus, n_trials=args.n_trials, timeout=args.timeout,
                        data=args.data)
            return _summary(config, args.study)
        summary = run_study(config, n_trials=args.n_trials, timeout=args.timeout, progress_fit=args.progress)
    except KeyboardInterrupt:
        return _interrupted(config, args.study)
    print(f"stopped: {summary.stopped_because} ({summary.finished_now} new finished trials)")
    return _summary(config, args.study)


def _worker(args: argparse.Namespace) -> int:
    config = _study(args)
    _check_output(config.artifact_dir, "[study] artifacts", folder=True)
    try:
        summary = run_study(config, n_trials=args.n_trials, timeout=args.timeout, progress_fit=args.progress,
                            worker=args.name or WORKER, echo=lambda line: print(line, flush=True))
    except KeyboardInterrupt:
        return _interrupted(config, args.study)
    print(f"stopped: {summary.stopped_because}")
    return 0


def _interrupted(config: StudyConfig, path: Path) -> int:
    study = open_study(config, create=False)
    print(f"\ninterrupted: the running trial is marked failed; {finished_count(study)} finished trials are kept. "
          f"Run `swagppm-tune run {path}` again to resume.", file=sys.stderr)
    return EXIT_INTERRUPTED


def _summary(config: StudyConfig, path: Path) -> int:
    """The best feasible trial and what to do next (exit 0), or the closest one with its violations (exit 1)."""
    study = open_study(config, create=False)
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        return EXIT_INFEASIBLE
    print(_best_line(best))
    _warn_at_edge(best, config)
    force = " --force" if config.fit.model.is_tiny else ""
    print(f"next: swagppm-tune export {path} -o best.json; swagppm-tune release --from best.json -o released/{force}")
    if force:
        print("  (--force: this study's tiny model builds its tokenizer from the training texts, so its vocabulary "
              "leaks their words: for demos only, never for a real release)")
    return 0


def _is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dashboard(args: argparse.Namespace) -> int:
    """optuna-dashboard on the study's own storage; a network address only with --expose-to-network."""
    if not (_is_loopback(args.host) or args.expose_to_network):
        raise ConfigError(f"--host {args.host} would serve the study to the network, and optuna-dashboard has no "
                          f"login: anyone who can reach port {args.port} could read, modify and delete it. Use an "
                          f"SSH tunnel (ssh -L {args.port}:127.0.0.1:{args.port} HOST, then open "
                          f"http://127.0.0.1:{args.port}/dashboard/) or pass --expose-to-network")
    config = _study(args)
    study = _existing_study(config)
    _check_output(config.artifact_dir, "[study] artifacts", folder=True)
    if not _is_loopback(args.host):
        print(f"warning: anyone who can reach {args.host}:{args.port} can read and modify or delete study "
              f"{study.study_name!r} (trials, notes, figures)", file=sys.stderr)
    storage = make_storage(config.storage_url, connect_timeout=config.study.connect_timeout)
    print(f"optuna-dashboard on http://{args.host}:{args.port}/dashboard/ (study {study.study_name!r} in "
          f"{masked_url(config.storage_url)}); Ctrl-C stops it", flush=True)
    import optuna_dashboard
    from optuna.artifacts import FileSystemArtifactStore

    optuna_dashboard.run_server(storage, host=args.host, port=args.port,
                                artifact_store=FileSystemArtifactStore(config.artifact_dir))
    return 0


def _clean(args: argparse.Namespace) -> int:
    """Delete the private cache's own files; a folder the tool did not create is refused (exit 2), never emptied."""
    config = _study(args)
    folder, removed = swagppm.clear_cache(config.fit.cache_dir)
    if folder is None:
        print(f"nothing to clean: no private cache in {config.fit.cache_dir or swagppm.default_cache_dir()}")
        return 0
    shared = "" if config.fit.cache_dir else " (the default cache, shared by every study without cache_dir)"
    print(f"removed the private cache {folder}: {removed} files{shared}")
    if folder.exists():
        print(f"  {folder} also holds files swagppm did not write; they were kept")
    return 0


_VERBS = {"run": _run, "worker": _worker, "fit": _fit, "status": _status, "export": _export, "release": _release,
          "compare": _compare, "audit": _audit, "rejudge": _rejudge, "report": _report, "dashboard": _dashboard,
          "clean": _clean}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one verb; every failure is one line on stderr and a documented exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    os.environ.setdefault(PROGRESS_BARS_ENV, "1")  # our one line per step replaces the libraries' progress bars
    try:
        code = _VERBS[args.verb](args)
        sys.stdout.flush()  # a closed pipe shows here, where it is handled below
        return code
    except (ConfigError, swagppm.DataError, swagppm.ReleaseRefused) as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except swagppm.TrainingFailure as error:
        print(f"swagppm-tune: the fit failed: {error}", file=sys.stderr)
        return EXIT_FIT_FAILED
    except StorageLost as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_STORAGE_LOST
    except KeyboardInterrupt:
        print("\nswagppm-tune: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `status | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's own flush stays quiet
        return EXIT_BROKEN_PIPE
    except Exception as error:  # noqa: BLE001 - a bug or an unforeseen failure: one line, the traceback on request
        if os.environ.get(DEBUG_ENV):
            raise
        first = (str(error).strip().splitlines() or [""])[0]
        print(f"swagppm-tune: internal error: {type(error).__name__}: {first} (run again with {DEBUG_ENV}=1 for "
              "the traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
