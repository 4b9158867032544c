"""``swagppm-tune``: run a study of SWAG-PPM's (c, epochs), inspect it, export and release its choice.

Verbs: ``run`` (create or resume a study and optimise, in one or several local
processes), ``worker`` (join a study from any machine), ``fit`` (one fit outside
any study), ``status`` (the trial table and the best feasible trial), ``export``
(the chosen configuration as JSON), ``release`` (the private model), ``report``
(one HTML file), ``dashboard`` (optuna-dashboard) and ``clean`` (delete the
private cache). Bad input exits with status 2 and a message naming
the file, table or key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

import optuna
import optuna_dashboard
from optuna.artifacts import FileSystemArtifactStore

import swagppm
from tuner._config import StudyConfig
from tuner._export import Chosen, export_trial, read_export, trials_run, write_export
from tuner._outcome import judge
from tuner._report import write_report
from tuner._study import (
    best_feasible,
    closest_trial,
    figures_html,
    finished_count,
    format_table,
    open_study,
    pareto_front,
    WORKER,
    StorageLost,
    run_study,
    trial_rows,
    violated,
)
from tuner._storage import masked_url
from tuner._workers import STORAGE_ENV, run_workers

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_STORAGE_LOST = 3
EXIT_INTERRUPTED = 130
LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


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
    worker.add_argument("--storage", default=None,
                        help=f"storage URL instead of [study] storage (or set ${STORAGE_ENV}, which keeps a password "
                             "out of the process list)")
    worker.add_argument("--name", default=None, help="a name for this worker's lines")
    worker.add_argument("--n-trials", type=int, default=None, help="finished trials to reach (default [study] n_trials)")
    worker.add_argument("--timeout", type=float, default=None, help="seconds for this worker")
    worker.add_argument("--progress", action="store_true", help="also show progress bars inside each fit")

    fit = verbs.add_parser("fit", help="one SWAG-PPM fit outside any study (the manual loop)")
    fit.add_argument("study", type=Path, nargs="?", help="study TOML file (or use --from)")
    fit.add_argument("--from", dest="source", type=Path, default=None, help="refit the configuration of an export JSON")
    fit.add_argument("--c", type=float, default=None, help="weight slope c (default 1.0)")
    fit.add_argument("--ft-epochs", type=int, default=None, help="weighted fine-tuning epochs (default 7)")
    fit.add_argument("--g", type=float, default=None, help="weight intercept g (default 0.0)")
    fit.add_argument("--stop-above", type=float, default=None, help="stop privacy draws once a max delta exceeds this")
    fit.add_argument("--figures", type=Path, default=None,
                     help="HTML file for the max-delta plot and F1 violins "
                     "(default: fit-c<c>-e<epochs>.html in the study's artifact folder)")
    fit.add_argument("--json", type=Path, default=None, help="also write the (aggregate) result to this JSON file")
    fit.add_argument("--release", type=Path, default=None, help="release one draw of this configuration to a folder")
    fit.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")

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
    release.add_argument("--force", action="store_true", help="release even a data-derived tokenizer (demos only)")

    dashboard = verbs.add_parser("dashboard", help="open optuna-dashboard on the study's storage and figures")
    study_arg(dashboard)
    dashboard.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    dashboard.add_argument("--port", type=int, default=8080, help="port (default 8080)")

    clean = verbs.add_parser("clean", help="delete the study's private cache (per-record risks, stage 1, features)")
    study_arg(clean)

    for verb in (run, worker, fit, release):
        verb.add_argument("--data", default=None, help="the records' file or folder, instead of [data] source")

    report = verbs.add_parser("report", help="write one self-contained HTML report of the study")
    study_arg(report)
    report.add_argument("-o", "--output", type=Path, required=True, help="HTML file to write")
    return parser


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
    config = StudyConfig.from_toml(args.study)
    storage = getattr(args, "storage", None) or (os.environ.get(STORAGE_ENV) if args.verb == "worker" else None)
    if storage:
        config = config.with_storage(storage)
    return config if getattr(args, "data", None) is None else config.with_data(args.data)


def _chosen(args: argparse.Namespace) -> Chosen:
    """The configuration of ``--from EXPORT.json``, on ``--data`` when given."""
    chosen = read_export(args.source)
    if args.data is None:
        return chosen
    return dataclasses.replace(chosen, config=chosen.config.replace(data={"source": str(Path(args.data).resolve())}))


def _one_source(args: argparse.Namespace) -> None:
    if (args.study is None) == (args.source is None):
        raise swagppm.ConfigError(f"swagppm-tune {args.verb}: give a study TOML file or --from EXPORT.json (one of them)")


def _fit(args: argparse.Namespace) -> int:
    _one_source(args)
    if args.source is not None:
        chosen = _chosen(args)
        config, c, epochs, g = chosen.config, chosen.c, chosen.ft_epochs, chosen.g
        for flag in ("c", "ft_epochs", "g"):
            if getattr(args, flag) is not None:
                raise swagppm.ConfigError(f"--{flag.replace('_', '-')} cannot be combined with --from (the export "
                                          "fixes the configuration)")
        study = None
    else:
        study = _study(args)
        config = study.fit
        c = 1.0 if args.c is None else args.c
        epochs = 7 if args.ft_epochs is None else args.ft_epochs
        g = study.search.g if args.g is None else args.g
    result = swagppm.run_fit(config, c=c, ft_epochs=epochs, g=g, stop_above=args.stop_above, progress=True)
    if study is not None:
        outcome = judge(result, targets=study.targets, search=study.search)
        print(outcome.line())
        for reason in outcome.reasons:
            print(f"  - {reason}")
        print(f"  next: {outcome.recommendation.sentence}")
        figures = args.figures or study.artifact_dir / f"fit-c{c:.3f}-e{epochs}.html"
        figures.parent.mkdir(parents=True, exist_ok=True)
        figures.write_text(figures_html(outcome.attributes(), study, title=f"Fit c = {c:g}, {epochs} epochs"))
        print(f"figures: {figures}")
    else:
        print(format_result(result))
    if args.json is not None:
        args.json.write_text(json.dumps(result.to_dict(), indent=2))
    code = 1 if result.failure else 0
    if args.source is not None and chosen.epsilon is not None:
        if result.epsilon == chosen.epsilon:
            print(f"epsilon {result.epsilon!r} reproduces the export exactly")
        else:
            print(f"epsilon {result.epsilon!r} differs from the export's {chosen.epsilon!r} (another device, "
                  "library version or cached stage 1?)")
            code = 1
    if args.release is not None:
        out = swagppm.release(config, c=c, ft_epochs=epochs, g=g, out_dir=args.release, force=args.force, progress=True)
        print(f"released one draw to {out}")
    return code


def _status(args: argparse.Namespace) -> int:
    config = _study(args)
    study = open_study(config, create=False)
    print(format_table(trial_rows(study), statistic=config.targets.statistic))
    counts = trials_run(study)
    print(f"\n{counts['total']} trials: {counts['complete']} complete, {counts['pruned']} pruned, {counts['fail']} failed")
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        return EXIT_INFEASIBLE
    print(_best_line(best))
    if config.study.objective == "pareto":
        front = ", ".join(f"#{t.number} (eps {t.user_attrs['epsilon']:.2f}, F1 {t.user_attrs['f1_macro_median']:.3f})"
                          for t in pareto_front(study))
        print(f"feasible Pareto front: {front}")
    return 0


def _best_line(best: optuna.trial.FrozenTrial) -> str:
    attrs = best.user_attrs
    return (f"best feasible: trial {best.number}: c = {best.params['c']:.4g}, {best.params['ft_epochs']} epochs, "
            f"epsilon = {attrs['epsilon']:.3f}, F1 macro {attrs['f1_macro_median']:.3f} (baseline "
            f"{attrs['baseline_f1_macro']:.3f}), weighted {attrs['f1_weighted_median']:.3f} (baseline "
            f"{attrs['baseline_f1_weighted']:.3f})")


def _print_closest(study: optuna.Study) -> None:
    closest = closest_trial(study)
    if closest is None:
        print("no finished trial yet")
        return
    misses = ", ".join(f"{key} {value:+.3f}" for key, value in violated(closest).items())
    print(f"no feasible trial; closest: trial {closest.number} (c = {closest.params['c']:.4g}, "
          f"{closest.params['ft_epochs']} epochs, {closest.user_attrs.get('diagnosis', '?')}) violates: {misses}")
    if closest.user_attrs.get("recommendation"):
        print(f"  the guide's next move from there: {closest.user_attrs['recommendation']}")


def _export(args: argparse.Namespace) -> int:
    config = _study(args)
    study = open_study(config, create=False)
    if args.trial is not None:
        matching = [t for t in study.get_trials(deepcopy=False) if t.number == args.trial and t.params]
        if not matching or "epsilon" not in matching[0].user_attrs:
            raise swagppm.ConfigError(f"--trial {args.trial}: no finished trial with that number in study "
                                      f"{config.study.name!r}")
        trial = matching[0]
    else:
        trial = best_feasible(study)
        if trial is None:
            _print_closest(study)
            print("nothing exported (use --trial N to export a specific trial anyway)", file=sys.stderr)
            return EXIT_INFEASIBLE
    path = write_export(export_trial(study, trial, config), args.output)
    print(f"exported trial {trial.number} (c = {trial.params['c']:.4g}, {trial.params['ft_epochs']} epochs, "
          f"epsilon = {trial.user_attrs['epsilon']:.3f}) to {path}")
    return 0


def _release(args: argparse.Namespace) -> int:
    _one_source(args)
    if args.source is not None:
        chosen = _chosen(args)
        config, c, epochs, g, count = chosen.config, chosen.c, chosen.ft_epochs, chosen.g, chosen.trials_run
    else:
        study_config = _study(args)
        study = open_study(study_config, create=False)
        best = best_feasible(study)
        if best is None:
            _print_closest(study)
            print("nothing released: the study has no feasible trial", file=sys.stderr)
            return EXIT_INFEASIBLE
        config, c, epochs = study_config.fit, best.params["c"], best.params["ft_epochs"]
        g, count = best.params.get("g", study_config.search.g), len(study.get_trials(deepcopy=False))
    out = swagppm.release(config, c=c, ft_epochs=epochs, g=g, out_dir=args.output, trials_run=count,
                          force=args.force, progress=True)
    print(f"released one draw of c = {c:.4g}, {epochs} epochs to {out}")
    return 0


def _report(args: argparse.Namespace) -> int:
    config = _study(args)
    study = open_study(config, create=False)
    path = write_report(study, config, args.output)
    print(f"report of {finished_count(study)} finished trials written to {path}")
    return 0


def _run(args: argparse.Namespace) -> int:
    config = _study(args)
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
    """The best feasible trial (exit 0) or the closest one with its violations (exit 1)."""
    study = open_study(config, create=False)
    best = best_feasible(study)
    if best is None:
        _print_closest(study)
        return EXIT_INFEASIBLE
    print(_best_line(best))
    print(f"next: swagppm-tune export {path} -o best.json; swagppm-tune release --from best.json -o released/")
    return 0


def _dashboard(args: argparse.Namespace) -> int:
    config = _study(args)
    study = open_study(config, create=False)
    if args.host not in LOCAL_HOSTS:
        print(f"warning: the dashboard listens on {args.host}, so anyone who can reach this machine sees the study "
              "(hyperparameters, epsilon, F1 and figures; no record); use --host 127.0.0.1 and an SSH tunnel "
              "unless that is intended", file=sys.stderr)
    config.artifact_dir.mkdir(parents=True, exist_ok=True)
    print(f"optuna-dashboard on http://{args.host}:{args.port}/dashboard/ (study {study.study_name!r} in "
          f"{masked_url(config.storage_url)}); Ctrl-C stops it", flush=True)
    optuna_dashboard.run_server(study._storage, host=args.host, port=args.port,
                                artifact_store=FileSystemArtifactStore(config.artifact_dir))
    return 0


def _clean(args: argparse.Namespace) -> int:
    config = _study(args)
    folder = Path(config.fit.cache_dir).expanduser() if config.fit.cache_dir else swagppm.default_cache_dir()
    if not folder.exists():
        print(f"nothing to clean: {folder} does not exist")
        return 0
    shutil.rmtree(folder)
    shared = "" if config.fit.cache_dir else " (the default cache, shared by every study without cache_dir)"
    print(f"removed the private cache {folder}{shared}")
    return 0


_VERBS = {"run": _run, "worker": _worker, "fit": _fit, "status": _status, "export": _export, "release": _release,
          "report": _report, "dashboard": _dashboard, "clean": _clean}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        return _VERBS[args.verb](args)
    except (swagppm.ConfigError, swagppm.DataError, swagppm.ReleaseRefused, swagppm.TrainingFailure) as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StorageLost as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_STORAGE_LOST


if __name__ == "__main__":
    sys.exit(main())
