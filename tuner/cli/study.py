"""The verbs on a study: run, create, worker, launch, jobs, proxy, status, export, report, rejudge, dashboard and
clean."""

from __future__ import annotations

import argparse
import ipaddress
import socket
import socketserver
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState

from swagppm import ConfigError
from tuner.cli.arguments import (
    add_data,
    add_storage,
    add_study,
    add_study_name,
    add_study_output,
    check_artifacts,
    check_folder,
    degradation,
    nonnegative_int,
    port,
    positive_float,
    positive_int,
    study_and_output,
    study_config,
)
from tuner.cli.base import EXIT_INFEASIBLE, EXIT_INTERRUPTED, EXIT_OK, Command
from tuner.cli.messages import best_line, print_closest, print_refuted, warn_at_edge, warn_mixed_stage1
from tuner.config import StudyConfig
from tuner.extras import require
from tuner.faults import WORKER, interrupt_on_sigterm, interruption, is_interruption, stop_with_parent
from tuner.outcome import counted
from tuner.pause import pause_of
from tuner.queries import (
    best_feasible,
    finished_count,
    format_table,
    pareto_front,
    trial_rows,
    trials_run,
    trials_run_words,
)
from tuner.record import FAILURE, TrialRecord, named_constraints
from tuner.rejudge import needs_refit, rejudge, retarget
from tuner.storage import make_storage, masked_url
from tuner.study import open_existing_study, open_study, run_study
from tuner.tuning import check_all_trials, is_accounted, tuning_cost, tuning_line

if TYPE_CHECKING:
    from tuner.access import TokenGate

EXPOSE_HELP = ("listen on a --host other than this machine. The dashboard's only login is this run's token, sent in "
               "clear text over plain HTTP: anyone who can read the network traffic, or reach the port with the token, "
               "can read and modify or delete the study (trials, notes, figures). Prefer an SSH tunnel: "
               "ssh -L 8080:127.0.0.1:8080 HOST, then open the printed URL")


class RunCommand(Command):
    name = "run"
    help = "create or resume the study and optimise"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--n-trials", type=positive_int, default=None,
                            help="finished trials to reach (default [study] n_trials)")
        parser.add_argument("--timeout", type=positive_float, default=None,
                            help="seconds for this run (default [study] timeout)")
        parser.add_argument("--workers", type=positive_int, default=1,
                            help="local worker processes (default 1: this process)")
        parser.add_argument("--gpus", default=None, help="GPU ids assigned to the workers round-robin, e.g. 0,1")
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        from tuner.executors import make_executor

        since = datetime.now()  # Optuna's clock: the trials an interruption fails end after it
        config = study_config(args)
        check_artifacts(config)
        if args.workers > 1 or args.gpus:
            from tuner.tracking import tracking_callbacks

            tracking_callbacks(config)  # asked here once, before the workers start and fit (each asks it again)
            gpus = [g.strip() for g in args.gpus.split(",") if g.strip()] if args.gpus else []
            executor = make_executor("processes", workers=args.workers, gpus=gpus, data=args.data)
        else:
            executor = make_executor("sequential")
        try:
            with interrupt_on_sigterm():  # Slurm and Kubernetes stop a run with SIGTERM: as Ctrl-C
                summary = executor.run(config, n_trials=args.n_trials, timeout=args.timeout, echo=print)
        except KeyboardInterrupt as interrupt:
            return interrupted(config, args.study, interrupt, since=since)
        return EXIT_OK if summary.paused else run_summary(config, args.study)


class WorkerCommand(Command):
    name = "worker"
    help = "join an existing study (from any machine) and optimise"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--name", default=None, help="a name for this worker's lines")
        parser.add_argument("--n-trials", type=positive_int, default=None,
                            help="finished trials to reach (default [study] n_trials)")
        parser.add_argument("--timeout", type=positive_float, default=None, help="seconds for this worker")
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        since = datetime.now()  # Optuna's clock: the trials an interruption fails end after it
        config = study_config(args)
        check_artifacts(config)
        from tuner.tracking import tracking_callbacks

        def echo(line: str) -> None:
            print(line, flush=True)

        try:
            with interrupt_on_sigterm():  # Slurm and Kubernetes stop a worker with SIGTERM: as Ctrl-C
                stop_with_parent()  # a worker of `run --workers N` stops with its parent
                summary = run_study(config, n_trials=args.n_trials, timeout=args.timeout,
                                    worker=args.name or WORKER, echo=echo,
                                    callbacks=tracking_callbacks(config, echo=echo))
        except KeyboardInterrupt as interrupt:
            return interrupted(config, args.study, interrupt, since=since)
        print(f"stopped: {summary.stopped_because}")
        return EXIT_OK


class LaunchCommand(Command):
    name = "launch"
    help = "submit the study's workers as cluster jobs (Slurm through submitit, or local processes)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        from tuner.executors.cluster import CLUSTERS

        add_study(parser)
        parser.add_argument("--jobs", type=positive_int, required=True,
                            help="jobs to submit (each one GPU with --gpus-per-job 1)")
        parser.add_argument("--workers-per-job", type=positive_int, default=1,
                            help="workers in each job, sharing its GPU(s) (default 1)")
        parser.add_argument("--gpus-per-job", type=nonnegative_int, default=0,
                            help="GPUs each job asks for (default 0)")
        parser.add_argument("--cluster", choices=CLUSTERS, default="auto",
                            help="slurm, local (processes on this machine) or auto: Slurm where sbatch is found")
        parser.add_argument("--timeout-min", type=positive_int, default=24 * 60,
                            help="each job's wall-time limit (minutes)")
        parser.add_argument("--partition", default=None, help="Slurm partition")
        parser.add_argument("--n-trials", type=positive_int, default=None,
                            help="finished trials to reach (default [study] n_trials)")
        parser.add_argument("--timeout", type=positive_float, default=None, help="seconds for each worker")
        add_data(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        from tuner.executors import make_executor

        require("cluster", needed_by="launch (it submits the jobs through submitit)")
        config = study_config(args)
        check_artifacts(config)
        if config.artifact_store_url is not None:  # the figures go to a bucket, the job files stay here
            check_folder(config.artifact_dir, "the study's local folder (launch keeps its job files there)")
        from tuner.tracking import tracking_callbacks

        tracking_callbacks(config)  # asked here once, before any job is submitted (each job asks it again)
        extra = {} if args.partition is None else {"slurm_partition": args.partition}
        executor = make_executor("submitit", jobs=args.jobs, workers_per_job=args.workers_per_job,
                                 gpus_per_job=args.gpus_per_job, cluster=args.cluster, timeout_min=args.timeout_min,
                                 data=args.data, parameters=extra)
        try:
            summary = executor.run(config, n_trials=args.n_trials, timeout=args.timeout,
                                   echo=lambda line: print(line, flush=True))
        except KeyboardInterrupt:
            study = open_study(config, create=False)
            print(f"\ninterrupted (Ctrl-C or SIGTERM): {finished_count(study)} finished trials are kept; "
                  f"`swagppm-tune launch {args.study}` again resumes the study", file=sys.stderr)
            return EXIT_INTERRUPTED
        print(f"stopped: {summary.stopped_because}")
        return EXIT_OK if summary.paused else run_summary(config, args.study)


class CreateCommand(Command):
    name = "create"
    help = "create the study and its start points without running a trial, for workers to join (e.g. Kubernetes)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Create the study (its definition, accounting and start points) or find it made; safe to run again."""
        from tuner.executors.processes import shared_study

        config = study_config(args)
        study = shared_study(config, workers=1, n_trials=None)
        waiting = len(study.get_trials(deepcopy=False, states=(TrialState.WAITING,)))
        print(f"study {config.study.name!r} in {masked_url(config.storage_url)}: {finished_count(study)} finished "
              f"trial(s), {waiting} waiting; workers join it with `swagppm-tune worker {args.study}`")
        return EXIT_OK


class JobsCommand(Command):
    name = "jobs"
    help = ("the cluster jobs `launch` submitted for the study and their state (--cancel: cancel them; --pause, "
            "--resume: stop every worker after its running trial, and let them run again)")

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        action = parser.add_mutually_exclusive_group()
        action.add_argument("--cancel", action="store_true",
                            help="cancel the jobs still pending or running (scancel on Slurm, SIGINT to a local "
                                 "job's controller); their running trials are failed and queued again")
        action.add_argument("--pause", action="store_true",
                            help="pause the study: every worker (launched jobs, run, worker) stops after its "
                                 "running trial, which is finished and judged, and none starts a new one")
        action.add_argument("--resume", action="store_true",
                            help="lift the pause; then launch or run the study again to go on")
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        """Pause or resume the study with --pause or --resume; list the recorded jobs of the study with their state,
        cancelling the active ones first with --cancel."""
        from tuner.executors.cluster import import_submitit, jobs_folder
        from tuner.executors.jobs import cancel_jobs, job_handle, job_state, read_launches

        config = study_config(args)
        if args.pause or args.resume:
            print(pause_or_resume(config, pause=args.pause))
        folder = jobs_folder(config)
        launched = read_launches(folder, config.study.name)
        if not launched:
            if not (args.pause or args.resume):
                print(f"no jobs were launched for study {config.study.name!r} (none recorded in {folder})")
            return EXIT_OK
        import_submitit()
        handles = [job_handle(folder, job) for job in launched]
        if args.cancel:
            cancelled = cancel_jobs(handles, echo=print)
            print(f"cancelled {cancelled} job(s); {requeued(config)}")
            handles = [job_handle(folder, job) for job in launched]
        print(f"{'job':>10}  {'cluster':<7}  {'workers':>7}  {'submitted (UTC)':<25}  state")
        for job, handle in zip(launched, handles):
            print(f"{job.job_id:>10}  {job.cluster:<7}  {job.tasks:>7}  {job.submitted:<25}  {job_state(handle)}")
        return EXIT_OK


def pause_or_resume(config: StudyConfig, *, pause: bool) -> str:
    """Pause the study (``pause``) or resume it (``tuner.pause``); the line that says what it did."""
    from tuner.pause import pause_study, resume_study

    study = open_existing_study(config)
    name = config.study.name
    if pause:
        made, new = pause_study(study)
        running = len(study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)))
        said = f"paused study {name!r}" if new else f"study {name!r} was already paused (since {made.since})"
        return (f"{said}: every worker stops after its running trial ({running} running now) and none starts a new "
                f"one; `swagppm-tune jobs {config.path} --resume` lifts the pause")
    cleared = resume_study(study)
    if cleared is None:
        return f"study {name!r} is not paused: nothing to resume"
    return (f"resumed study {name!r} (paused since {cleared.since}): `swagppm-tune launch {config.path}` or "
            f"`swagppm-tune run {config.path}` goes on with it")


def requeued(config: StudyConfig) -> str:
    """Fail and queue again the running trials of this machine's vanished workers; the clause that says so."""
    from tuner.faults import recover_stale_trials, vanished_workers

    study = open_existing_study(config)
    gone = vanished_workers(study)
    if gone:
        recover_stale_trials(study, config, gone=gone)
    return (f"the running trials of its gone local workers were failed and queued again ({len(gone)} worker(s)); "
            "a Slurm job's workers fail and queue theirs on Slurm's SIGTERM (or, killed outright, once their "
            f"heartbeats are {config.study.grace_period}s old)")


class ProxyCommand(Command):
    name = "proxy"
    help = "serve the study's database to many workers through Optuna's gRPC storage proxy (grpc://HOST:PORT)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
        parser.add_argument("--port", type=port, default=13000, help="port (default 13000)")
        parser.add_argument("--expose-to-network", action="store_true",
                            help="listen on a --host other than this machine. The proxy's only login is this "
                                 "run's token, sent in clear text (no TLS): anyone who can read the network traffic "
                                 "can read, modify and delete every study in the database; keep it on the workers' "
                                 "private network")
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        """The gRPC proxy in front of the study's server database until Ctrl-C; workers use grpc://HOST:PORT."""
        if not (is_loopback(args.host) or args.expose_to_network):
            raise ConfigError(f"--host {args.host} would serve the study database to the network, and the gRPC "
                              f"proxy's only login is a token sent in clear text: anyone who can read the traffic to "
                              f"port {args.port} could read, modify and delete its studies. Pass --expose-to-network "
                              "on a private network")
        config = study_config(args)
        check_port(args.host, args.port)  # before the database is asked: a second proxy on the port is refused
        from tuner.access import new_token, token_file, token_path
        from tuner.storage import serve_grpc_proxy

        token = new_token()
        with token_file(token_path(config.path, "proxy", args.port), f"grpc://{args.host}:{args.port}?token={token}",
                        echo=lambda line: print(line, file=sys.stderr)):
            serve_grpc_proxy(config.storage_url, host=args.host, port=args.port, token=token,
                             connect_timeout=config.study.connect_timeout, echo=lambda line: print(line, flush=True))
        return EXIT_OK


def interrupted(config: StudyConfig, path: Path, interrupt: KeyboardInterrupt, *, since: datetime) -> int:
    """The one line of a run or worker stopped by Ctrl-C or SIGTERM, saying what it stopped (the trials it failed and
    queued again since ``since``, or none: it stopped while the study was prepared); exit status 130."""
    study = open_study(config, create=False)
    stopped = stopped_trials(study, since=since)
    reason = interruption(interrupt)
    if len(stopped) == 1:
        head = f"{reason}: the running trial is marked failed and queued again"
    elif stopped:
        head = f"{reason}: the {len(stopped)} running trials are marked failed and queued again"
    else:
        head = f"{reason} before any trial began (while the study was prepared: data, features, stage 1), so no " \
               "trial is marked failed"
    print(f"\n{head}; {finished_count(study)} finished trials are kept. Run `swagppm-tune run {path}` again to "
          "resume.", file=sys.stderr)
    return EXIT_INTERRUPTED


def stopped_trials(study: optuna.Study, *, since: datetime) -> list[int]:
    """The trials an interruption failed since ``since`` (their ``failure`` says so), by any worker of this run."""
    return [trial.number for trial in study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
            if is_interruption(trial.user_attrs.get(FAILURE))
            and trial.datetime_complete is not None and trial.datetime_complete >= since]


def run_summary(config: StudyConfig, path: Path) -> int:
    """The best feasible trial and what to do next (exit 0), or the closest one with its violations (exit 1)."""
    study = open_study(config, create=False)
    best = best_feasible(study)
    if best is None:
        print_closest(study)
        return EXIT_INFEASIBLE
    print(best_line(best, study))
    warn_at_edge(best, config)
    force = " --force" if config.fit.model.is_tiny else ""
    print(f"next: swagppm-tune export {path} -o best.json; swagppm-tune release --from best.json -o released/{force}")
    if force:
        print("  (--force: this study's tiny model builds its tokenizer from the training texts, so its vocabulary "
              "leaks their words: for demos only, never for a real release)")
    return EXIT_OK


class StatusCommand(Command):
    name = "status"
    help = "the trial table and the best feasible trial"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        add_storage(parser)
        add_study_name(parser)

    def run(self, args: argparse.Namespace) -> int:
        config = study_config(args)
        study = open_existing_study(config)
        print(format_table(trial_rows(study), statistic=config.targets.statistic))
        print_refuted(study)
        print_needs_refit(study, config)
        counts = trials_run(study)
        print(f"\n{trials_run_words(counts)}")
        if (pause := pause_of(study)) is not None:
            print(pause.line(config))
        print(tuning_line(tuning_cost(study, config)))
        warn_mixed_stage1(study)
        best = best_feasible(study)
        if best is None:
            print_closest(study)
            return EXIT_INFEASIBLE
        print(best_line(best, study))
        warn_at_edge(best, config)
        if config.study.objective == "pareto":
            front = ", ".join(f"#{t.number} (eps {r.epsilon_or_inf:.2f}, F1 {r.f1_macro_median or 0.0:.3f})"
                              for t in pareto_front(study) if (r := TrialRecord.of(t)) is not None)
            print(f"feasible Pareto front: {front}")
        return EXIT_OK


class ExportCommand(Command):
    name = "export"
    help = "write the best feasible configuration as JSON"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_output(parser, output_help="JSON file to write")
        parser.add_argument("--trial", type=nonnegative_int, default=None,
                            help="export this trial instead of the best feasible one")

    def run(self, args: argparse.Namespace) -> int:
        from tuner.export import export_trial, write_export

        config, study = study_and_output(args)
        if args.trial is not None:
            matching = [t for t in study.get_trials(deepcopy=False) if t.number == args.trial and t.params]
            if not matching or TrialRecord.of(matching[0]) is None:
                raise ConfigError(f"--trial {args.trial}: no finished trial with that number in study "
                                  f"{config.study.name!r}")
            trial = matching[0]
            check_all_trials(study, "exported")
            if is_accounted(study) and named_constraints(trial).get("epsilon", 1.0) > 0:
                raise ConfigError(f"--trial {args.trial}: its epsilon exceeds the accounted study's binding cap "
                                  f"epsilon* = {config.targets.epsilon_cap:g}, so it is not releasable")
        else:
            check_all_trials(study, "exported")
            best = best_feasible(study)
            if best is None:
                print_closest(study)
                print("nothing exported (use --trial N to export a specific trial anyway)", file=sys.stderr)
                return EXIT_INFEASIBLE
            trial = best
        document = export_trial(study, trial, config)
        path = write_export(document, args.output)
        epsilon = document["metrics"]["epsilon"]
        print(f"exported trial {trial.number} (c = {trial.params['c']:.4g}, "
              f"{counted(trial.params['ft_epochs'], 'epoch')}, "
              f"epsilon = {'-' if epsilon is None else f'{epsilon:.3f}'}) to {path}")
        if config.tracking.mlflow_uri is not None:
            from tuner.tracking import log_export

            log_export(config, path)
        return EXIT_OK


def print_needs_refit(study: optuna.Study, config: StudyConfig) -> None:
    """Name the trials a rejudged study could not judge (stopped early at an epsilon below its target)."""
    numbers = needs_refit(study)
    if numbers:
        print(f"trial(s) {', '.join(map(str, numbers))} need a refit to be judged: their privacy draws stopped early "
              f"at an epsilon below the target {config.targets.epsilon_cap:g}, so their F1 and fit were never measured "
              "(marked 'needs refit' above)")


class DashboardCommand(Command):
    name = "dashboard"
    help = "open optuna-dashboard on the study's storage and figures"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
        parser.add_argument("--port", type=port, default=8080, help="port (default 8080)")
        parser.add_argument("--expose-to-network", action="store_true", help=EXPOSE_HELP)
        add_storage(parser)

    def run(self, args: argparse.Namespace) -> int:
        """optuna-dashboard on the study's own storage; a network address only with --expose-to-network."""
        if not (is_loopback(args.host) or args.expose_to_network):
            raise ConfigError(f"--host {args.host} would serve the study to the network, and the dashboard's only "
                              "login is a token sent in clear text over plain HTTP: anyone who can read the traffic "
                              f"to port {args.port} could read, modify and delete it. Use an SSH tunnel (ssh -L "
                              f"{args.port}:127.0.0.1:{args.port} HOST, then open the printed URL) or pass "
                              "--expose-to-network")
        config = study_config(args)
        study = open_existing_study(config)
        check_artifacts(config)
        if not is_loopback(args.host):
            print(f"warning: anyone who can read the traffic to {args.host}:{args.port} (plain HTTP, the token in "
                  f"clear) can read and modify or delete study {study.study_name!r} (trials, notes, figures)",
                  file=sys.stderr)
        serve_dashboard(config, host=args.host, port=args.port, name=study.study_name)
        return EXIT_OK


def is_loopback(host: str) -> bool:
    """Whether ``host`` is this machine only (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_port(host: str, port: int) -> None:
    """Refuse a --port that cannot be listened on (another server holds it) before saying where the dashboard is."""
    try:
        with socket.create_server((host, port)):
            pass
    except OSError as error:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port} ({error.strerror or error}; another server "
                          "holds it?); pass another --port") from None


def serve_dashboard(config: StudyConfig, *, host: str, port: int, name: str) -> None:
    """optuna-dashboard on the study's storage and artifact folder, behind this run's token (``tuner.access``), until
    Ctrl-C."""
    import optuna_dashboard

    from tuner.access import TokenGate, new_token, token_file, token_path
    from tuner.artifacts import artifact_store
    from tuner.dashboard import OWNER_SIDE, DashboardView

    storage = make_storage(config.storage_url, connect_timeout=config.study.connect_timeout)
    view = DashboardView(storage, statistic=config.targets.statistic)  # type: ignore[abstract]  # delegated at run time
    token = new_token()
    app = TokenGate(optuna_dashboard.wsgi(view, artifact_store=artifact_store(config)),
                    token=token, port=port)
    server = listening(host, port, app)
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/dashboard/?token={token}"
    file = token_path(config.path, "dashboard", port)
    print(f"optuna-dashboard on {url} (study {name!r} in {masked_url(config.storage_url)}); the token in it is this "
          f"run's, and without it the pages are refused (kept in {file}); Ctrl-C stops it\n  {OWNER_SIDE}", flush=True)
    with server, token_file(file, url, echo=lambda line: print(line, file=sys.stderr)):
        serve_until_interrupted(server)


def serve_until_interrupted(server: socketserver.BaseServer) -> None:
    """Serve in a thread of its own while this (main) thread waits, so that Ctrl-C or SIGTERM lands here, never
    inside a request (wsgiref's handler catches everything there, and the server would go on); then stop it."""
    import threading

    serving = threading.Thread(target=server.serve_forever, name="dashboard", daemon=True)
    serving.start()
    try:
        while serving.is_alive():
            serving.join(0.5)
    finally:
        server.shutdown()


def listening(host: str, port: int, app: TokenGate) -> socketserver.BaseServer:
    """A WSGI server bound to ``host:port`` (the address refused in one line when it cannot be), logging no request:
    a request line would put the URL, and so the token, in the terminal's log."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return None

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    server_class = type("Server", (WSGIServer,), {"address_family": family})
    try:
        return make_server(host, port, app, server_class=server_class, handler_class=Quiet)
    except OSError as error:
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port} ({error.strerror or error}; another server "
                          "holds it?); pass another --port") from None


class CleanCommand(Command):
    name = "clean"
    help = "delete the study's private cache (per-record risks, stage 1, features)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--keep-key", action="store_true",
                            help="keep the fingerprint key (random, derived from no record) so that the study can "
                                 "be resumed; without it the study's stored fingerprint can never be matched again")
        parser.add_argument("--yes", action="store_true",
                            help="delete without asking (needed when standard input is not a terminal)")

    def run(self, args: argparse.Namespace) -> int:
        """Say what deleting the private cache makes impossible, ask (or need --yes), then delete the cache's own
        files; a folder the tool did not create, a cache in use and one that cannot be deleted are refused (exit 2)."""
        config = study_config(args)
        from swagppm.cache import FINGERPRINT_KEY, cache_contents, clear_cache, default_cache_dir

        contents = cache_contents(config.fit.cache_dir, keep_key=args.keep_key)
        if contents.folder is None:
            print(f"nothing to clean: no private cache in {config.fit.cache_dir or default_cache_dir()}")
            return EXIT_OK
        shared = "" if config.fit.cache_dir else " (the default cache, shared by every study without cache_dir)"
        print(f"clean deletes the private cache {contents.folder}: {counted(len(contents.files), 'file')}{shared}")
        if args.keep_key:
            print(f"  and keeps its fingerprint key {contents.folder / FINGERPRINT_KEY}: the study can be resumed "
                  "(stage 1 is computed again)")
        else:
            print(f"  with its fingerprint key: study {config.study.name!r} can then never be resumed on these "
                  "records under its name (a new [study] name can); `clean --keep-key` keeps the key")
        if not confirmed(args.yes, f"the private cache {contents.folder}"):
            print("nothing was deleted")
            return EXIT_OK
        folder, removed = clear_cache(config.fit.cache_dir, keep_key=args.keep_key)
        assert folder is not None  # found above; only clean removes it, and a second clean waits for none
        print(f"removed the private cache {folder}: {counted(removed, 'file')}")
        if args.keep_key:
            print(f"  kept its fingerprint key {folder / FINGERPRINT_KEY}: the study can be resumed")
        else:
            print("  its fingerprint key went with it: this study cannot be resumed on these records under its name")
        if folder.exists() and not args.keep_key:
            print(f"  {folder} also holds files swagppm did not write; they were kept")
        return EXIT_OK


def confirmed(yes: bool, what: str) -> bool:
    """Whether to go on with a deletion: ``--yes``, else the answer on a terminal; off a terminal without ``--yes`` it
    is refused (``ConfigError``), since no one can answer there."""
    if yes:
        return True
    if not sys.stdin.isatty():
        raise ConfigError(f"clean: standard input is not a terminal, so no one can confirm; nothing was deleted (pass "
                          f"--yes to delete {what})")
    try:
        answer = input("delete it? [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


class ReportCommand(Command):
    name = "report"
    help = "write one self-contained HTML report of the study"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study_output(parser, output_help="HTML file to write")
        parser.add_argument("--comparison", type=Path, default=None,
                            help="a comparison.json written by `compare`, to add its table and figure")

    def run(self, args: argparse.Namespace) -> int:
        from tuner.compare import read_comparison
        from tuner.report import write_report

        config, study = study_and_output(args)
        comparison = None if args.comparison is None else read_comparison(args.comparison)
        path = write_report(study, config, args.output, comparison=comparison)
        print(f"report of {finished_count(study)} finished trials written to {path}")
        return EXIT_OK


class RejudgeCommand(Command):
    name = "rejudge"
    help = "judge the finished fits against other targets into a new study (instant: nothing is refitted)"

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        add_study(parser)
        parser.add_argument("--name", required=True, help="name of the new study (same storage)")
        parser.add_argument("--epsilon-cap", type=positive_float, default=None,
                            help="new cap epsilon* to rank by (its releases still claim the study's own cap)")
        parser.add_argument("--max-f1-degradation", type=degradation, default=None, help="new allowed F1 degradation")
        parser.add_argument("--statistic", choices=("median", "q10"), default=None, help="F1 statistic of the draws")
        parser.add_argument("--require-well-fit", action=argparse.BooleanOptionalAction, default=None,
                            help="whether the max-delta series must look well fit")
        add_storage(parser)  # the source's storage, which the new study joins

    def run(self, args: argparse.Namespace) -> int:
        changes = {key: value for key, value in (
            ("epsilon_cap", args.epsilon_cap), ("max_f1_degradation", args.max_f1_degradation),
            ("statistic", args.statistic), ("require_well_fit", args.require_well_fit)) if value is not None}
        if not changes:
            raise ConfigError("rejudge: pass the targets to judge against: one or more of --epsilon-cap, "
                              "--max-f1-degradation, --statistic and --require-well-fit/--no-require-well-fit")
        config = study_config(args)
        open_existing_study(config)
        targets = retarget(config.targets, changes)
        study = rejudge(config, targets, name=args.name)
        print(f"study {args.name!r}: {len(study.trials)} fits of {config.study.name!r} judged against "
              + ", ".join(f"{key} = {value}" for key, value in changes.items()))
        print(format_table(trial_rows(study), statistic=targets.statistic))
        print_needs_refit(study, config)
        print(f"open it with any verb: swagppm-tune status {args.study} --study-name {args.name}")
        best = best_feasible(study)
        if best is None:
            print_closest(study)
            return EXIT_INFEASIBLE
        print(best_line(best, study))
        return EXIT_OK
