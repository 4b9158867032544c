"""The verbs that fit: fit (one fit outside any study), release, audit and compare."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import optuna

import swagppm
from scorers import GUIDE
from swagppm import ConfigError
from swagppm.config import check_value
from tuner.audit import RELEASE, audit_document, audit_fit, audit_text, write_audit
from tuner.cli.arguments import (
    add_data,
    add_data_override,
    add_overwrite,
    add_release_flags,
    add_storage,
    add_study_name,
    add_study_or_export,
    checked_output,
    data_override,
    epochs,
    exported,
    finite_float,
    one_source,
    positive_float,
    positive_int,
    probability,
    run_config,
    selection,
    share,
    study_config,
)
from tuner.cli.base import (
    EXIT_AUDIT_REFUTED,
    EXIT_BAD_INPUT,
    EXIT_FIT_FAILED,
    EXIT_INFEASIBLE,
    EXIT_INTERRUPTED,
    EXIT_NOT_REPRODUCED,
    EXIT_OK,
    EXIT_PUSH_FAILED,
    Command,
)
from tuner.cli.messages import print_closest
from tuner.compare import (
    COMPARISON_FILES,
    CompareSettings,
    check_dependencies,
    compare,
    comparison_about,
    comparison_table,
    write_comparison,
)
from tuner.config import StudyConfig
from tuner.export import Chosen, chosen_from_study, refit_suspects
from tuner.faults import interrupt_on_sigterm, interruption, retold
from tuner.figures import figures_html
from tuner.keys import owner_key_for
from tuner.ledger import AUDIT_ENTRY, sealed_ledgers
from tuner.outcome import counted, judge, result_line
from tuner.outputs import check_replaced_folder, warn_in_checkout, write_atomic
from tuner.record import AUDITED
from tuner.release import (
    FitFailed,
    Released,
    ReleaseRequest,
    audit_count,
    check_ledger,
    checked_ledger,
    measured_line,
    measured_text,
    release,
    release_chosen,
    selection_sentence,
)
from tuner.search import StartPoint
from tuner.study import open_existing_study
from tuner.tuning import LEDGER, claim_for_fit, claim_of

if TYPE_CHECKING:
    from swagppm.claim import VerifiedClaim
    from swagppm.releases.hub import HubTarget
    from swagppm.releases.selection import Selection
    from swagppm.releases.staging import ReleaseTarget


@dataclass(frozen=True, kw_only=True)
class FitRequest:
    """What ``fit`` fits: the settings, the trial's parameters, and the study file or the export they come from."""

    config: swagppm.SWAGPPMConfig
    params: swagppm.TrialParams
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
        add_publication_flags(parser)
        add_data_override(parser)

    def run(self, args: argparse.Namespace) -> int:
        """One fit: outputs checked first, its line printed before any file is written, --release from this fit
        (SIGTERM stops it as Ctrl-C does: one line, exit 130, nothing half-written)."""
        return until_stopped(lambda: self._run(args), "nothing was released" if args.release else "nothing was kept")

    def _run(self, args: argparse.Namespace) -> int:
        request = fit_request(args)
        if args.release is not None:
            check_release_target(args, args.release, what="--release", config=request.study or request.config)
        figures = None
        if request.study is not None:
            name = f"fit-c{request.params.c:.3f}-e{request.params.ft_epochs}.html"
            figures = args.figures or request.study.artifact_dir / name
            checked_output(args, figures, "--figures", config=request.study,  # the default one is the tool's own
                           overwrite=args.overwrite or args.figures is None)
        if args.json is not None:
            checked_output(args, args.json, "--json", config=request.study or request.config)
        chosen_selection = selection(args, releasing=args.release is not None)
        wanted = None if args.release is None else fit_release_request(args, request, chosen_selection)
        if request.chosen is not None and request.chosen.threads:
            import torch  # only here: the command line starts without the training stack

            torch.set_num_threads(request.chosen.threads)
            print(f"using {request.chosen.threads} CPU thread(s), as the exported trial did (on a CPU, epsilon "
                  "depends on the thread count in its last digits)")
        started = time.time()
        with contextlib.ExitStack() as stack:
            if wanted is not None:
                stack.enter_context(interrupted_release(args.release, report=args.owner_report, started=started))
            target = None if wanted is None else stack.enter_context(
                claim_release_dir(args.release, wanted, report=args.owner_report))
            session = stack.enter_context(swagppm.Session(request.config))
            check_release_inputs(session, wanted)
            fit = session.fit(request.params, stop_above_epsilon=args.stop_above_epsilon)
            page = print_fit(fit.result, request)
            codes = [EXIT_FIT_FAILED if fit.result.failure else EXIT_OK, reproduced(fit.result, request.chosen)]
            if figures is not None and page is not None:
                codes.append(write_output(figures, page, "figures"))
            if args.json is not None:
                codes.append(write_output(args.json, json.dumps(fit.result.to_dict(), indent=2), "result JSON"))
            if target is not None and wanted is not None:
                codes.append(released_or_not(lambda: release(session, fit, target, wanted), target.path,
                                             target.report))
        return next((code for code in codes if code), EXIT_OK)


def until_stopped(run: Callable[[], int], nothing: str) -> int:
    """``run`` with SIGTERM (what ``timeout``, Slurm and Kubernetes send) raised as Ctrl-C is: either one ends the verb
    in one line saying what was left undone, exit 130, its folders, locks and staging cleaned on the way out."""
    try:
        with interrupt_on_sigterm():
            return run()
    except KeyboardInterrupt as stop:
        print(f"swagppm-tune: {interruption(stop)}: {nothing}", file=sys.stderr)
        return EXIT_INTERRUPTED


def fit_request(args: argparse.Namespace) -> FitRequest:
    """The fit the flags ask for (each flag checked by its parser, a start point by the study file, an export's
    parameters when read)."""
    one_source(args)
    if args.source is not None:
        for flag in ("c", "ft_epochs", "g"):
            if getattr(args, flag) is not None:
                raise ConfigError(f"--{flag.replace('_', '-')} cannot be combined with --from (the export "
                                  "fixes the configuration)")
        chosen = exported(args)
        request = FitRequest(config=chosen.config, params=chosen.params, chosen=chosen)
    else:
        study = study_config(args)
        start = study.search.start[0] if study.search.start else StartPoint(GUIDE.start_c, GUIDE.start_epochs)
        params = swagppm.TrialParams(c=start.c if args.c is None else args.c,
                                     ft_epochs=start.ft_epochs if args.ft_epochs is None else args.ft_epochs,
                                     g=(study.search.g if start.g is None else start.g) if args.g is None else args.g)
        request = FitRequest(config=study.fit, params=params, study=study)
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
    params = request.params
    return figures_html(outcome.record(), study, title=f"Fit c = {params.c:g}, {counted(params.ft_epochs, 'epoch')}")


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


def add_publication_flags(parser: argparse.ArgumentParser) -> None:
    """What a release may publish beyond the data-independent facts, and the audit's override."""
    parser.add_argument("--public-eval", default=None, metavar="FILE",
                        help="records you declare public (same columns as the data): the card states the released "
                             "draw's F1 on them (no utility is published otherwise)")
    parser.add_argument("--public-labels", action="store_true",
                        help="publish the class names (default: LABEL_0, LABEL_1, ...; the mapping goes to the "
                             "owner-only report)")
    parser.add_argument("--owner-report", type=Path, default=None, metavar="FILE",
                        help="where the owner-only report goes (default: FOLDER.owner-report.json beside the "
                             "release); keep it outside any git checkout, with the private data")
    parser.add_argument("--force-audit", action="store_true",
                        help="release even when the membership-inference audit refutes the claim epsilon <= the "
                             "study's target (the card then says so); without it such a release exits 7")


def fit_release_request(args: argparse.Namespace, request: FitRequest,
                        chosen_selection: Selection | None) -> ReleaseRequest:
    """What ``fit --release`` releases under: the export's claim (its configuration, the study's choice), else the
    study's as sealed at its creation, else (a study file never run) the file's, declared before this fit and sealed
    now; a configuration given by hand states no tuning on its card."""
    from swagppm.releases.writer import check_covered

    if request.chosen is not None:
        wanted = release_request(args, args.release, request.config, chosen_selection, claim=request.chosen.claim,
                                 chosen=request.chosen)
    else:
        assert request.study is not None
        study = existing_study(request.study)
        claim = claim_for_fit(request.study, owner_key_for(sealed_ledgers())) if study is None else claim_of(study)
        wanted = release_request(args, args.release, request.config, chosen_selection, claim=claim, chosen=None,
                                 entered=study is not None and study.user_attrs.get(LEDGER) is not None)
    check_covered(request.config, request.params.resolved_prior_scale(request.config.prior_scale),
                  wanted.spec.claim.claim)
    return wanted


def release_request(args: argparse.Namespace, out: Path, config: swagppm.SWAGPPMConfig,
                    chosen_selection: Selection | None, *, claim: VerifiedClaim, chosen: Chosen | None,
                    entered: bool = False) -> ReleaseRequest:
    """The release's verified claim and publication flags, every input checked now (before any fit): the export's
    fields, δ for a selection, the public evaluation file, the folder, the labels."""
    from swagppm.releases.writer import ReleaseSpec, check_release

    if config.data.public:
        raise ConfigError(f"{config.data.source}: these records are declared public ([data] public = true), and a "
                          "release is one fit on the private records under a privacy claim: pass --data PRIVATE "
                          "(a public-proxy choice is fitted once on the private data)")
    if chosen is not None:
        check_release_fields(chosen)
    public_eval = args.public_eval
    if public_eval is not None and not Path(public_eval).expanduser().is_file():
        raise ConfigError(f"--public-eval {public_eval}: no such file")
    if chosen_selection is not None and (args.selection_delta or claim.claim.delta) is None:
        raise ConfigError("--min-utility: the selection's total epsilon needs a delta that does not come from the "
                          "private record count: pass --selection-delta, or declare [study] max_records (a public "
                          "upper bound on the training records) in a new study")
    spec = ReleaseSpec(claim=claim, public_labels=args.public_labels, public_eval=public_eval,
                       selection=chosen_selection, force=args.force, overwrite=args.overwrite,
                       by_study=chosen is not None and chosen.by_study,
                       standard_class=args.standard_class)
    check_release(out, spec, config, report=args.owner_report)
    return ReleaseRequest(spec=spec, force_audit=args.force_audit, selection_delta=args.selection_delta,
                          source=chosen.source if chosen is not None else str(args.study),
                          entered=chosen.entered if chosen is not None else entered,
                          tuning=chosen.tuning if chosen is not None else None)


def check_release_fields(chosen: Chosen) -> None:
    """The export fields a release writes into its reports: each the right kind, or one line naming it."""
    if chosen.tuning is not None and not isinstance(chosen.tuning, dict):
        raise ConfigError(f"{chosen.path}: field tuning = {chosen.tuning!r:.40} is not an object")
    trials = chosen.trials_run
    if trials is not None and (isinstance(trials, bool) or not isinstance(trials, int) or trials < 0):
        raise ConfigError(f"{chosen.path}: field trials_run.total = {trials!r:.40} is not a count")


def check_release_target(args: argparse.Namespace, out: Path, *, what: str,
                         config: StudyConfig | swagppm.SWAGPPMConfig | None = None) -> None:
    """The release folder (replaced as a whole with --overwrite) is no input of the run and holds none, and neither is
    the owner report beside it (``tuner.outputs``): checked before anything is read or fitted."""
    from swagppm.releases.staging import owner_report_path  # plain files, no torch

    check_replaced_folder(out, config=run_config(args) if config is None else config, args=args, what=what,
                          beside=[args.owner_report or owner_report_path(out)])


@contextlib.contextmanager
def interrupted_release(out: Path, *, report: Path | None, started: float) -> Iterator[None]:
    """Ctrl-C or SIGTERM during a release is one line and exit 130 (``tuner.cli``): by then the folder's lock and
    staging folder are removed (the blocks inside this one have ended), and the line says whether the release was
    committed (its owner report written since ``started``) or nothing was."""
    from swagppm.releases.staging import owner_report_path  # plain files, no torch

    try:
        yield
    except KeyboardInterrupt as interrupt:
        try:
            committed = (report or owner_report_path(out)).stat().st_mtime >= started
        except OSError:
            committed = False
        done = (f"the release to {out} was committed just before" if committed else
                f"nothing was released to {out} (its lock and staging folder are removed)")
        raise retold(interrupt, f"{interruption(interrupt)}: {done}") from None


@contextlib.contextmanager
def claim_release_dir(out: Path, request: ReleaseRequest, *, report: Path | None) -> Iterator[ReleaseTarget]:
    """The release folder locked before the fit, its owner report at ``report`` (default: beside the folder)
    (``swagppm.releases``: imported here, it needs torch)."""
    from swagppm.releases.staging import claim

    with claim(out, overwrite=request.spec.overwrite, report=report) as target:
        yield target


def check_release_inputs(session: swagppm.Session, request: ReleaseRequest | None) -> None:
    """The ledger (writable, and holding the claim's study when it was entered), the selection and public evaluation
    files read and checked against the session's data, before the fit."""
    from swagppm.releases.selection import check_public_set, check_selection

    if request is None:
        return
    check_ledger(session, request)
    if request.spec.selection is not None:
        check_selection(session, request.spec.selection)
    if request.spec.public_eval is not None:
        check_public_set(session, request.spec.public_eval)


def released_or_not(attempt: Callable[[], Released], out: Path, report: Path, study: optuna.Study | None = None,
                    trial: int | None = None) -> int:
    """Run one release ``attempt`` through the gate and say how it went: released (with its audit, and the audit's
    bound remembered on the released ``trial`` of ``study``: status shows it beside the measured ε), refused by its
    audit (exit 7), no draw selected (exit 1), the fit failed (exit 5), a write failed (exit 2), or interrupted by
    Ctrl-C or SIGTERM (exit 130); each in one line."""
    from swagppm.releases.selection import SelectionFailed
    from swagppm.releases.writer import AuditRefuted

    try:
        released = attempt()
    except FitFailed as error:
        print(str(error), file=sys.stderr)
        return EXIT_FIT_FAILED
    except SelectionFailed as error:
        print(f"nothing released: {error}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except AuditRefuted as error:
        remember_audit(study, trial, error.epsilon_lower_bound)
        print(f"swagppm-tune: error: {error}", file=sys.stderr)
        return EXIT_AUDIT_REFUTED
    except OSError as error:  # the staging folder is gone with it: nothing is left at the target
        print(f"swagppm-tune: error: could not write the release {out} ({error.strerror or error}); nothing was "
              "released", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt as stop:
        print(f"swagppm-tune: {interruption(stop)}: nothing was released to {out} (its lock and staging folder are "
              "removed; an attempt that had begun its draws is entered in the privacy ledger as interrupted)",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    print_released(released, study, trial, report)
    if released.interrupted:
        print(f"swagppm-tune: interrupted ({released.interrupted}) while the release was put in place; it was "
              "finished first", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def print_released(released: Released, study: optuna.Study | None, trial: int | None, report: Path) -> None:
    """The released draw, its selection and its audit, for the terminal."""
    result, cap = released.result, released.card.privacy_claim.epsilon_cap
    if released.audit is not None:
        remember_audit(study, trial, released.audit[RELEASE].epsilon_lower_bound)
    print(f"released one draw of c = {result.c:.4g}, {counted(result.ft_epochs, 'epoch')} to {released.path} "
          f"under the claim epsilon <= {cap:g}")
    if released.card.selection is not None:
        print(selection_sentence(released))
    if released.audit is not None:
        print("membership-inference audit (members: training records, non-members: test records):")
        print(audit_text(released.audit, epsilon=cap))
    print(measured_line(released, result.epsilon))
    print(f"owner-only report (not for publication): {report}")
    warn_in_checkout([report], elsewhere=" (--owner-report FILE)")


def remember_audit(study: optuna.Study | None, trial: int | None, bound: float | None) -> None:
    """Keep an audit's ε lower bound of a study's trial (the largest seen), so that every later line showing its
    measured ε shows the audit beside it."""
    if study is None or trial is None or bound is None:
        return
    audited = dict(study.user_attrs.get(AUDITED) or {})
    audited[str(trial)] = max(bound, audited.get(str(trial), 0.0))
    study.set_user_attr(AUDITED, audited)


def exported_study(chosen: Chosen) -> optuna.Study | None:
    """The study an export came from, so that its release's audit is remembered on the trial (``status`` then shows
    it beside the measured ε); None when its file or study is gone or no longer opens as it was."""
    if chosen.study is None or chosen.trial is None or not chosen.study[0].is_file():
        return None
    file, name = chosen.study
    try:
        config = StudyConfig.from_toml(file)
        return existing_study(config) if config.study.name == name else None
    except (ConfigError, OSError):
        return None


def existing_study(config: StudyConfig) -> optuna.Study | None:
    """The stored study of a study file, or None when it was never run (a SQLite or journal file not there yet, or
    no study of that name)."""
    try:
        return open_existing_study(config)
    except ConfigError as error:
        if "no study" in str(error):
            return None
        raise


def chosen_configuration(args: argparse.Namespace, what: str) -> Chosen | None:
    """The configuration ``--from EXPORT.json`` names, else the study's best feasible trial (None: there is none)."""
    one_source(args)
    if args.source is not None:
        return exported(args)
    config = study_config(args, data=False)
    study = open_existing_study(config)
    chosen = chosen_from_study(study, config, what)
    if chosen is None:
        print_closest(study)
        print(f"nothing {what}: the study has no feasible trial", file=sys.stderr)
        return None
    return data_override(args, chosen)


class ReleaseCommand(Command):
    name = "release"
    help = "fit the chosen configuration and write the private release (refused if its audit refutes it)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_or_export(parser, study_help="study TOML file (or use --from)")
        parser.add_argument("-o", "--output", type=Path, required=True,
                            help="folder to write the released model to (its owner-only report goes beside it, "
                                 "as FOLDER.owner-report.json, unless --owner-report)")
        add_release_flags(parser)
        add_publication_flags(parser)
        parser.add_argument("--push-to-hub", default=None, metavar="OWNER/NAME",
                            help="after the release is committed, upload exactly its folder (with its model card, "
                                 "never the owner report) to this Hugging Face repository, private unless "
                                 "--public-repo; needs a token (hf auth login or HF_TOKEN)")
        parser.add_argument("--public-repo", action="store_true",
                            help="with --push-to-hub: make the repository public (default: private)")
        add_data_override(parser)
        add_storage(parser)
        add_study_name(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Every input checked and the folder locked before the fit; the folder appears only when complete, and only
        then is it pushed (--push-to-hub); the gate is the library's (``tuner.release.release_chosen``); SIGTERM stops
        it as Ctrl-C does."""
        return until_stopped(lambda: self._run(args), "nothing was released")

    def _run(self, args: argparse.Namespace) -> int:
        from swagppm.releases.staging import owner_report_path

        check_release_target(args, args.output, what="-o")
        hub = hub_target(args)
        chosen = chosen_configuration(args, "released")
        if chosen is None:
            return EXIT_INFEASIBLE
        wanted = release_request(args, args.output, chosen.config, selection(args, releasing=True),
                                 claim=chosen.claim, chosen=chosen)
        study = exported_study(chosen) if args.study is None else open_existing_study(study_config(args, data=False))
        report = args.owner_report or owner_report_path(args.output)
        code = released_or_not(lambda: release_chosen(chosen, args.output, wanted, report=args.owner_report),
                               args.output, report, study, chosen.trial)
        return push_release(args.output, hub) if code == EXIT_OK and hub is not None else code


def hub_target(args: argparse.Namespace) -> HubTarget | None:
    """The Hub repository --push-to-hub names (checked now: its name and a token on this machine), or None."""
    if args.push_to_hub is None:
        if args.public_repo:
            raise ConfigError("--public-repo needs --push-to-hub OWNER/NAME")
        return None
    from swagppm.releases.hub import check_repo

    return check_repo(args.push_to_hub, private=not args.public_repo)


def push_release(folder: Path, hub: HubTarget) -> int:
    """Upload the committed release ``folder`` to ``hub``; a failure is one line (the release stays committed)."""
    from swagppm.releases.hub import PushFailed, push, upload_plan

    visibility = "private" if hub.private else "public"
    try:
        plan = upload_plan(folder, hub)
        print(f"pushing {len(plan.files)} files to the {visibility} Hub repository {hub.repo_id}: "
              f"{', '.join(plan.files)}", flush=True)
        url = push(plan)
    except PushFailed as error:
        print(f"swagppm-tune: error: the release is committed at {folder}, but pushing it to {hub.repo_id} failed "
              f"({error}); push it later with `hf upload {hub.repo_id} {folder} . "
              f"--{'private' if hub.private else 'no-private'}`", file=sys.stderr)
        return EXIT_PUSH_FAILED
    print(f"pushed to {url} ({visibility})")
    return EXIT_OK


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
        check_dependencies()  # before -o is made
        checked_output(args, args.output, "-o", folder=True, files=COMPARISON_FILES)
        chosen = chosen_configuration(args, "compared")
        if chosen is None:
            return EXIT_INFEASIBLE
        settings = CompareSettings(params=chosen.params, reweight_k=args.reweight_k,
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
        add_study_name(parser)

    def run(self, args: argparse.Namespace) -> int:
        return until_stopped(lambda: self._run(args), "nothing was audited")

    def _run(self, args: argparse.Namespace) -> int:
        if args.output is not None:
            checked_output(args, args.output, "-o")
        chosen = chosen_configuration(args, "audited")
        if chosen is None:
            return EXIT_INFEASIBLE
        cap = chosen.epsilon_cap
        with swagppm.Session(chosen.config) as session:
            # every audit is entered: a ledger that cannot take it, or that lacks the study, is refused before the fit
            ledger = checked_ledger(session, chosen.claim, entered=chosen.entered, source=chosen.source)
            fit = session.fit(chosen.params)
            if fit.result.failure:
                print(f"nothing audited: the fit failed ({fit.result.failure})", file=sys.stderr)
                return EXIT_FIT_FAILED
            audit = audit_fit(session, fit)
            refuted = audit[RELEASE].refutation(cap) is not None
            ledger.append({"kind": AUDIT_ENTRY, "outcome": "refuted" if refuted else "passed",
                           "source": chosen.source})
        if args.study is not None:
            remember_audit(open_existing_study(study_config(args, data=False)), chosen.trial,
                           audit[RELEASE].epsilon_lower_bound)
        document = audit_document(audit, epsilon_cap=cap, audits_run=audit_count(ledger))
        print(f"membership-inference audit of c = {chosen.params.c:.4g}, {counted(chosen.params.ft_epochs, 'epoch')} "
              "against the "
              f"claim epsilon <= {cap:g} (members: training records, non-members: test records):")
        print(audit_text(audit, epsilon=cap))
        print(measured_text(audit[RELEASE], fit.result.epsilon))
        if args.output is not None:
            write_audit(args.output, document, chosen.params)
            print(f"wrote {args.output}")
        if refuted:
            print(f"swagppm-tune: the audit refutes the claim epsilon <= {cap:g} (exit {EXIT_AUDIT_REFUTED}): a "
                  "release of this configuration would be refused", file=sys.stderr)
            return EXIT_AUDIT_REFUTED
        return EXIT_OK
