"""``swagppm-tune``: run a study of SWAG-PPM's (c, epochs), inspect it, export and release its choice.

Verbs: ``run`` (create or resume a study and optimise), ``fit`` (one fit outside
any study), ``status`` (the trial table and the best feasible trial), ``export``
(the chosen configuration as JSON), ``release`` (the private model) and
``report`` (one HTML file). Bad input exits with status 2 and a message naming
the file, table or key.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import optuna

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
    run_study,
    trial_rows,
    violated,
)

EXIT_INFEASIBLE = 1
EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130


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

    for verb in (run, fit, release):
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
    print(f"best feasible: trial {best.number}: c = {best.params['c']:.4g}, {best.params['ft_epochs']} epochs, "
          f"epsilon = {best.user_attrs['epsilon']:.3f}, F1 macro {best.user_attrs['f1_macro_median']:.3f}, "
          f"weighted {best.user_attrs['f1_weighted_median']:.3f}")
    if config.study.objective == "pareto":
        front = ", ".join(f"#{t.number} (eps {t.user_attrs['epsilon']:.2f}, F1 {t.user_attrs['f1_macro_median']:.3f})"
                          for t in pareto_front(study))
        print(f"feasible Pareto front: {front}")
    return 0


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
        summary = run_study(config, n_trials=args.n_trials, timeout=args.timeout, progress_fit=args.progress)
    except KeyboardInterrupt:
        study = open_study(config, create=False)
        print(f"\ninterrupted: the running trial is marked failed; {finished_count(study)} finished trials are kept. "
              f"Run `swagppm-tune run {args.study}` again to resume.", file=sys.stderr)
        return EXIT_INTERRUPTED
    print(f"stopped: {summary.stopped_because} ({summary.finished_now} new finished trials)")
    if summary.best is None:
        study = open_study(config, create=False)
        _print_closest(study)
        return EXIT_INFEASIBLE
    best = summary.best
    print(f"best feasible: trial {best.number}: c = {best.params['c']:.4g}, {best.params['ft_epochs']} epochs, "
          f"epsilon = {best.user_attrs['epsilon']:.3f}, F1 macro {best.user_attrs['f1_macro_median']:.3f} "
          f"(baseline {best.user_attrs['baseline_f1_macro']:.3f}), weighted {best.user_attrs['f1_weighted_median']:.3f} "
          f"(baseline {best.user_attrs['baseline_f1_weighted']:.3f})")
    print(f"next: swagppm-tune export {args.study} -o best.json; swagppm-tune release --from best.json -o released/")
    return 0


_VERBS = {"run": _run, "fit": _fit, "status": _status, "export": _export, "release": _release, "report": _report}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _VERBS[args.verb](args)
    except (swagppm.ConfigError, swagppm.DataError, swagppm.ReleaseRefused, swagppm.TrainingFailure) as error:
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
