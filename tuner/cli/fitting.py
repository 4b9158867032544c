"""The verbs that fit: fit (one fit outside any study), release, audit and compare."""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import swagppm
from scorers import GUIDE
from swagppm import ConfigError
from swagppm.config import check_value
from tuner.audit import audit_fit, audit_text, write_audit
from tuner.cli.arguments import (
    add_data,
    add_overwrite,
    add_release_flags,
    add_storage,
    add_study_or_export,
    checked_output,
    epochs,
    exported,
    finite_float,
    one_source,
    positive_float,
    positive_int,
    probability,
    selection,
    share,
    study_config,
)
from tuner.cli.base import (
    EXIT_BAD_INPUT,
    EXIT_FIT_FAILED,
    EXIT_INFEASIBLE,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    Command,
)
from tuner.cli.messages import print_closest
from tuner.compare import (
    COMPARISON_FILES,
    CompareSettings,
    compare,
    comparison_about,
    comparison_table,
    write_comparison,
)
from tuner.config import StudyConfig
from tuner.export import Chosen, chosen_from_study, refit_suspects
from tuner.figures import figures_html
from tuner.outcome import judge, result_line
from tuner.outputs import write_atomic
from tuner.release import release_draw, selection_sentence
from tuner.search import StartPoint
from tuner.study import open_existing_study

if TYPE_CHECKING:
    from swagppm.releases.selection import Selection


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    """What ``fit`` fits: the settings, (c, epochs, g), and the study file or the export they come from."""

    config: swagppm.SWAGPPMConfig
    c: float
    ft_epochs: int
    g: float
    study: StudyConfig | None = None
    chosen: Chosen | None = None


class FitCommand(Command):
    name = "fit"
    help = "one SWAG-PPM fit outside any study (the manual loop)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_or_export(parser, study_help="study TOML file (or use --from)",
                            from_help="refit the configuration of an export JSON")
        parser.add_argument("--c", type=positive_float, default=None,
                            help="weight slope c (default: the study's first start point, the guide's 1.0)")
        parser.add_argument("--ft-epochs", type=epochs, default=None,
                            help="weighted fine-tuning epochs (default: the study's first start point, the guide's 7)")
        parser.add_argument("--g", type=finite_float, default=None, help="weight intercept g (default 0.0)")
        parser.add_argument("--stop-above-epsilon", type=positive_float, default=None,
                            help="stop the privacy draws once one shows epsilon above this (epsilon is then a lower "
                                 "bound)")
        parser.add_argument("--figures", type=Path, default=None,
                            help="HTML file for the max-delta plot and F1 violins "
                                 "(default: fit-c<c>-e<epochs>.html in the study's artifact folder)")
        parser.add_argument("--json", type=Path, default=None,
                            help="also write the (aggregate) result to this JSON file")
        parser.add_argument("--release", type=Path, default=None, help="release one draw of this very fit to a folder")
        add_release_flags(parser)
        add_data(parser)

    def run(self, args: argparse.Namespace) -> int:
        """One fit: outputs checked first, its line printed before any file is written, --release from this fit."""
        request = fit_request(args)
        figures = None
        if request.study is not None:
            figures = args.figures or request.study.artifact_dir / f"fit-c{request.c:.3f}-e{request.ft_epochs}.html"
            checked_output(args, figures, "--figures", config=request.study,  # the default one is the tool's own
                           overwrite=args.overwrite or args.figures is None)
        if args.json is not None:
            checked_output(args, args.json, "--json", config=request.study or request.config)
        if args.release is not None:
            check_release_dir(args.release, overwrite=args.overwrite,
                               data_derived=request.config.model.is_tiny, force=args.force)
        chosen_selection = selection(args, releasing=args.release is not None)
        if request.chosen is not None and request.chosen.threads:
            import torch  # only here: the command line starts without the training stack

            torch.set_num_threads(request.chosen.threads)
            print(f"using {request.chosen.threads} CPU thread(s), as the exported trial did (on a CPU, epsilon "
                  "depends on the thread count in its last digits)")
        with swagppm.Session(request.config) as session:
            if chosen_selection is not None:
                check_selection(session, chosen_selection)
            fit = session.fit(c=request.c, ft_epochs=request.ft_epochs, g=request.g,
                              stop_above_epsilon=args.stop_above_epsilon, progress=True)
            page = print_fit(fit.result, request)
            codes = [EXIT_FIT_FAILED if fit.result.failure else EXIT_OK, reproduced(fit.result, request.chosen)]
            if figures is not None and page is not None:
                codes.append(write_output(figures, page, "figures"))
            if args.json is not None:
                codes.append(write_output(args.json, json.dumps(fit.result.to_dict(), indent=2), "result JSON"))
            if args.release is not None:
                chosen = request.chosen
                codes.append(write_release(session, fit, args.release, args=args,
                                           trials_run=chosen.trials_run if chosen is not None else None,
                                           tuning=chosen.tuning if chosen is not None else None,
                                           selection=chosen_selection))
        return next((code for code in codes if code), EXIT_OK)


def fit_request(args: argparse.Namespace) -> FitRequest:
    """The fit the flags ask for, checked like a study's (positive finite c, at least one epoch, finite g)."""
    one_source(args)
    if args.source is not None:
        for flag in ("c", "ft_epochs", "g"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} cannot be combined with --from (the export "
                                  "fixes the configuration)")
        chosen = exported(args)
        request = FitRequest(config=chosen.config, c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, chosen=chosen)
    else:
        study = study_config(args)
        start = study.search.start[0] if study.search.start else StartPoint(GUIDE.start_c, GUIDE.start_epochs)
        request = FitRequest(config=study.fit, c=start.c if args.c is None else args.c,
                             ft_epochs=start.ft_epochs if args.ft_epochs is None else args.ft_epochs,
                             g=study.search.g if args.g is None else args.g, study=study)
    check_value(request.c > 0 and math.isfinite(request.c), "--c", request.c, "positive and finite")
    check_value(request.ft_epochs >= 1, "--ft-epochs", request.ft_epochs, "at least 1")
    check_value(math.isfinite(request.g), "--g", request.g, "finite")
    stop = args.stop_above_epsilon
    check_value(stop is None or (stop > 0 and math.isfinite(stop)), "--stop-above-epsilon", stop,
                "positive and finite")
    return request


def print_fit(result: swagppm.SWAGPPMResult, request: FitRequest) -> str | None:
    """Print the fit's line (judged against the study's targets when there is a study); its figures page, if any."""
    study = request.study
    if study is None:
        print(result_line(result), flush=True)
        return None
    outcome = judge(result, targets=study.targets, search=study.search)
    print(outcome.line())
    for reason in outcome.reasons:
        print(f"  - {reason}")
    print(f"  next: {outcome.recommendation.sentence}", flush=True)
    return figures_html(outcome.record(), study, title=f"Fit c = {request.c:g}, {request.ft_epochs} epochs")


def write_output(path: Path, text: str, what: str) -> int:
    """Write one output of a finished fit; a failure is one line and status 2, and the printed result stands."""
    try:
        write_atomic(path, text)
    except OSError as error:
        print(f"swagppm-tune: error: could not write the {what} {path} ({error.strerror or error}); the result "
              "above stands", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(f"{what}: {path}")
    return EXIT_OK


def reproduced(result: swagppm.SWAGPPMResult, chosen: Chosen | None) -> int:
    """Whether a refit gives its export's ε bit for bit; if not, the line names what to suspect."""
    if chosen is None or chosen.epsilon is None:
        return EXIT_OK
    if result.epsilon == chosen.epsilon:
        print(f"epsilon {result.epsilon!r} reproduces the export exactly")
        return EXIT_OK
    print(f"epsilon {result.epsilon!r} differs from the export's {chosen.epsilon!r}; suspects: "
          f"{refit_suspects(result, chosen)}")
    return EXIT_NOT_REPRODUCED


def check_release_dir(out: Path, *, overwrite: bool, data_derived: bool, force: bool) -> None:
    """``swagppm.releases.writer.check_release_dir``, imported when a release is asked for (it needs torch)."""
    from swagppm.releases.writer import check_release_dir as check

    check(out, overwrite=overwrite, data_derived=data_derived, force=force)


def check_selection(session: swagppm.Session, chosen: Selection) -> None:
    """``swagppm.releases.selection.check_selection``, imported when a selection is asked for."""
    from swagppm.releases.selection import check_selection as check

    check(session, chosen)


def write_release(session: swagppm.Session, fit: swagppm.Fit, out: Path, *, args: argparse.Namespace,
                  trials_run: int | None, tuning: dict[str, object] | None = None,
                  selection: Selection | None = None) -> int:
    """One secret draw of ``fit`` written to ``out``, its card carrying the membership-inference audit."""
    if fit.result.failure:
        print(f"nothing released: the fit failed ({fit.result.failure})", file=sys.stderr)
        return EXIT_FIT_FAILED
    from swagppm.releases.selection import SelectionFailed

    try:
        released = release_draw(session, fit, out, force=args.force, overwrite=args.overwrite, trials_run=trials_run,
                                tuning=tuning, selection=selection, selection_delta=args.selection_delta)
    except SelectionFailed as error:
        print(f"nothing released: {error}", file=sys.stderr)
        return EXIT_INFEASIBLE
    print(f"released one draw of c = {fit.result.c:.4g}, {fit.result.ft_epochs} epochs to {released.path}")
    if selection is not None:
        print(selection_sentence(released.path))
    print("membership-inference audit (members: training records, non-members: test records):")
    print(audit_text(released.audit, epsilon=fit.result.epsilon,
                     epsilon_is_lower_bound=fit.result.epsilon_is_lower_bound))
    return EXIT_OK


def chosen_configuration(args: argparse.Namespace, what: str) -> Chosen | None:
    """The configuration ``--from EXPORT.json`` names, else the study's best feasible trial (None: there is none)."""
    one_source(args)
    if args.source is not None:
        return exported(args)
    config = study_config(args)
    study = open_existing_study(config)
    chosen = chosen_from_study(study, config)
    if chosen is None:
        print_closest(study)
        print(f"nothing {what}: the study has no feasible trial", file=sys.stderr)
    return chosen


class ReleaseCommand(Command):
    name = "release"
    help = "fit the chosen configuration and write the private release"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_or_export(parser, study_help="study TOML file (or use --from)")
        parser.add_argument("-o", "--output", type=Path, required=True, help="folder to write the released model to")
        add_release_flags(parser)
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        chosen = chosen_configuration(args, "released")
        if chosen is None:
            return EXIT_INFEASIBLE
        check_release_dir(args.output, overwrite=args.overwrite, data_derived=chosen.config.model.is_tiny,
                          force=args.force)
        chosen_selection = selection(args, releasing=True)
        with swagppm.Session(chosen.config) as session:
            if chosen_selection is not None:
                check_selection(session, chosen_selection)
            fit = session.fit(c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, progress=True)
            return write_release(session, fit, args.output, args=args, trials_run=chosen.trials_run,
                                 tuning=chosen.tuning, selection=chosen_selection)


class CompareCommand(Command):
    name = "compare"
    help = ("non-private vs SWAG-PPM vs reweighted SWAG-PPM vs DP-SGD on the study's data and model (the paper's "
            "table)")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_or_export(parser, study_help="study TOML file (its best feasible trial; or --from)")
        parser.add_argument("-o", "--output", type=Path, required=True,
                            help="folder for comparison.json, comparison.csv and f1_by_class_size.html")
        parser.add_argument("--reweight-k", type=share, default=0.95,
                            help="the reweighted variant's k (default 0.95)")
        parser.add_argument("--long-epochs", type=epochs, default=None,
                            help="also a non-private fine-tune of this many epochs (the paper used 30)")
        parser.add_argument("--stricter-epsilon", type=positive_float, default=None,
                            help="DP-SGD's second, stricter target (default: half of SWAG-PPM's epsilon)")
        parser.add_argument("--delta", type=probability, default=None, help="DP-SGD's delta (default 1/n)")
        parser.add_argument("--dpsgd-epochs", type=epochs, default=30, help="DP-SGD epochs (default 30)")
        parser.add_argument("--dpsgd-batch-size", type=positive_int, default=512,
                            help="DP-SGD expected batch size (default 512)")
        parser.add_argument("--dpsgd-lr", type=positive_float, default=1e-3,
                            help="DP-SGD Adam learning rate (default 1e-3)")
        parser.add_argument("--dpsgd-clip", type=positive_float, default=1.0, help="DP-SGD clipping norm (default 1)")
        add_overwrite(parser, what="comparison.json, comparison.csv and f1_by_class_size.html in -o")
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        checked_output(args, args.output, "-o", folder=True, files=COMPARISON_FILES)
        chosen = chosen_configuration(args, "compared")
        if chosen is None:
            return EXIT_INFEASIBLE
        settings = CompareSettings(c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g, reweight_k=args.reweight_k,
                                   long_epochs=args.long_epochs, stricter_epsilon=args.stricter_epsilon,
                                   delta=args.delta, dpsgd_batch_size=args.dpsgd_batch_size,
                                   dpsgd_learning_rate=args.dpsgd_lr, dpsgd_max_grad_norm=args.dpsgd_clip,
                                   dpsgd_epochs=args.dpsgd_epochs)
        rows = compare(chosen.config, settings)
        print(comparison_table(rows))
        for path in write_comparison(rows, args.output, about=comparison_about(chosen.config, settings)):
            print(f"wrote {path}")
        return EXIT_OK


class AuditCommand(Command):
    name = "audit"
    help = "membership inference against a release-like draw and the non-private baseline (aggregates only)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_or_export(parser, study_help="study TOML file (its best feasible trial; or --from)")
        parser.add_argument("-o", "--output", type=Path, default=None, help="also write the audit as JSON")
        add_overwrite(parser)
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        if args.output is not None:
            checked_output(args, args.output, "-o")
        chosen = chosen_configuration(args, "audited")
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
            write_audit(args.output, audit, c=chosen.c, ft_epochs=chosen.ft_epochs, g=chosen.g,
                        epsilon=fit.result.epsilon)
            print(f"wrote {args.output}")
        return EXIT_OK
