"""``[tracking]``: each trial's aggregates in a real local MLflow file store and real offline W&B runs, exactly the
study database's aggregates (parameters, ε, F1 medians, verdict) and nothing per record, written owner-only."""

from __future__ import annotations

import http.server
import json
import re
import shutil
import socket
import stat
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import optuna
import pytest

from swagppm import ConfigError
from tests.tuner.helpers import one_error_line, with_a_feasible_trial
from tuner.cli import main
from tuner.config import StudyConfig, Tracking
from tuner.record import TrialRecord
from tuner.tracking import (
    EXPORT_FOLDER,
    HTTP_RETRIES,
    PARENT_TAG,
    SENT,
    STUDY_FIGURES,
    STUDY_TAG,
    TRACKED_METRICS,
    WANDB_KEY,
    WandbTracker,
    tracking_callbacks,
    trial_summary,
)

BLOCK = 32768  # the .wandb log's block size (LevelDB's log format)


def judged(study_file: Callable[..., Path], **tracking: object) -> tuple[StudyConfig, optuna.Study]:
    """A study (journal file) with one judged, feasible trial, and its file with ``[tracking]`` set."""
    path = study_file(tracking=tracking) if tracking else study_file()
    config = StudyConfig.from_toml(path)
    config = config.with_storage(f"journal:{path.parent / 's.log'}")
    return config, with_a_feasible_trial(path, storage=config.storage_url)


def expected(study: optuna.Study) -> tuple[dict[str, Any], dict[str, float], dict[str, str]]:
    """What a tracker must hold of the study's one trial: its parameters, metrics and tags, from the database."""
    trial = study.trials[0]
    record = TrialRecord.of(trial)
    assert record is not None
    metrics = {key: getattr(record, key) for key in TRACKED_METRICS}
    tags = {"study": study.study_name, "trial": "0", "state": "COMPLETE", "feasible": "true",
            "diagnosis": record.diagnosis, "epsilon_is_lower_bound": "false"}
    return dict(trial.params), metrics, tags


def owner_only(folder: Path) -> None:
    """Every folder under ``folder`` (itself included) is 0700 and every file 0600."""
    for item in [folder, *folder.rglob("*")]:
        if item.is_symlink():
            continue
        mode = stat.S_IMODE(item.stat().st_mode)
        assert mode == (0o700 if item.is_dir() else 0o600), f"{item}: {oct(mode)}"


# --- the study file's table --------------------------------------------------------------------------------------


def test_tracking_is_off_unless_the_table_asks_for_it(study_file: Callable[..., Path]) -> None:
    config = StudyConfig.from_toml(study_file())
    assert config.tracking == Tracking() and tracking_callbacks(config) == []


def test_local_tracking_paths_are_taken_from_the_study_files_folder(study_file: Callable[..., Path],
                                                                     tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file(tracking={"mlflow_uri": "mlruns", "wandb_project": "osha"}))
    assert config.tracking == Tracking(mlflow_uri=str(tmp_path / "mlruns"), wandb_project="osha",
                                       wandb_dir=str(tmp_path / "small-wandb"))
    for uri, resolved in (("file:runs/ml", str(tmp_path / "runs/ml")), ("sqlite:///ml.db", f"sqlite:///{tmp_path}/ml.db"),
                          ("file:///srv/mlruns", "file:///srv/mlruns")):
        assert StudyConfig.from_toml(study_file(tracking={"mlflow_uri": uri})).tracking.mlflow_uri == resolved
    server = study_file(tracking={"mlflow_uri": "http://mlflow.internal:5000", "remote": True})
    assert StudyConfig.from_toml(server).tracking.mlflow_uri == "http://mlflow.internal:5000"


@pytest.mark.parametrize("uri", ["http://mlflow.internal:5000", "https://tuner:s3cret@mlflow.example.org",
                                 "databricks://profile", "nosuchscheme://host/x"])
def test_a_tracking_uri_off_this_machine_needs_remote_true(study_file: Callable[..., Path], uri: str) -> None:
    """Each trial's exact epsilon and F1 are private statistics: they leave the machine only by the owner's word."""
    path = study_file(tracking={"mlflow_uri": uri})
    with pytest.raises(ConfigError) as refused:
        StudyConfig.from_toml(path)
    assert str(refused.value).startswith(f"{path} [tracking]: tracking.mlflow_uri = ") and \
        "set tracking.remote = true to send them" in str(refused.value) and "s3cret" not in str(refused.value)
    assert StudyConfig.from_toml(study_file(tracking={"mlflow_uri": uri, "remote": True})).tracking.remote


@pytest.mark.parametrize("table, message", [
    ({"mlflow_experiment": "x"}, "tracking.mlflow_experiment needs tracking.mlflow_uri"),
    ({"wandb_dir": "w"}, "tracking.wandb_dir needs tracking.wandb_project"),
    ({"wandb_mode": "online"}, "unknown key(s) wandb_mode"),
    ({"mlflow_uri": 3}, "mlflow_uri = 3 has the wrong type"),
])
def test_a_bad_tracking_key_is_refused_naming_the_table(study_file: Callable[..., Path], table: dict[str, Any],
                                                        message: str) -> None:
    path = study_file(tracking=table)
    with pytest.raises(ConfigError) as refused:
        StudyConfig.from_toml(path)
    assert str(refused.value).startswith(f"{path} [tracking]: ") and message in str(refused.value)


def test_a_trial_summary_is_the_databases_aggregates_and_nothing_per_record(
        study_file: Callable[..., Path]) -> None:
    config, study = judged(study_file)
    summary = trial_summary(study, study.trials[0])
    params, metrics, tags = expected(study)
    assert (summary.name, summary.params, summary.metrics, summary.tags) == ("trial 0", params, metrics, tags)
    record = TrialRecord.of(study.trials[0])
    assert record is not None and len(record.max_delta_series) > 100  # the database's series is not logged
    assert not {"data_hash", "seed", "max_delta_series", "f1_macro_draws"} & {*summary.metrics, *summary.tags}


# --- real stores -------------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_mlflow_file_store_gets_one_owner_only_run_per_trial(study_file: Callable[..., Path],
                                                             tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    config, study = judged(study_file, mlflow_uri="mlruns")
    lines: list[str] = []
    (callback,) = tracking_callbacks(config, echo=lines.append)
    callback(study, study.trials[0])
    assert lines == []
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    parent, (run,) = study_runs(client, "small")
    params, metrics, tags = expected(study)
    assert run.info.run_name == "trial 0" and run.info.status == "FINISHED"
    assert run.data.params == {key: str(value) for key, value in params.items()}
    assert run.data.metrics == pytest.approx(metrics)
    assert {key: value for key, value in run.data.tags.items() if not key.startswith("mlflow.")} == tags
    assert run.data.tags[PARENT_TAG] == parent.info.run_id and parent.info.run_name == "study small"
    owner_only(tmp_path / "mlruns")


def study_runs(client: Any, experiment_name: str) -> tuple[Any, list[Any]]:
    """The study's one parent run and its child runs (oldest first) in the experiment."""
    experiment = client.get_experiment_by_name(experiment_name)
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    (parent,) = [run for run in runs if STUDY_TAG in run.data.tags]
    return parent, [run for run in runs if run.data.tags.get(PARENT_TAG) == parent.info.run_id]


def artifacts(client: Any, run: Any, folder: str) -> list[str]:
    return sorted(item.path for item in client.list_artifacts(run.info.run_id, folder))


@pytest.mark.slow
def test_every_worker_logs_under_one_parent_run_with_the_figures(study_file: Callable[..., Path],
                                                                 tmp_path: Path) -> None:
    """Two workers' trackers (one trial each, logged twice here) find one parent run; each child holds its trial's
    picture, the parent the study's figures page, rewritten after each trial."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    config, study = judged(study_file, mlflow_uri="mlruns")
    for _ in range(2):
        (callback,) = tracking_callbacks(config)
        callback(study, study.trials[0])
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    parent, children = study_runs(client, "small")
    assert [run.info.run_name for run in children] == ["trial 0", "trial 0"]
    for run in children:
        assert artifacts(client, run, "figures") == ["figures/trial-0.svg"]
    picture = client.download_artifacts(children[0].info.run_id, "figures/trial-0.svg", str(tmp_path))
    assert Path(picture).read_text().startswith("<svg")
    assert artifacts(client, parent, "figures") == [STUDY_FIGURES]
    page = Path(client.download_artifacts(parent.info.run_id, STUDY_FIGURES, str(tmp_path))).read_text()
    assert "trials: feasibility" in page and "plotly" in page
    owner_only(tmp_path / "mlruns")


@pytest.mark.slow
def test_an_sqlite_stores_artifacts_lie_beside_it_not_in_the_working_folder(study_file: Callable[..., Path],
                                                                            tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("mlflow")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    config, study = judged(study_file, mlflow_uri="sqlite:///tracking/mlflow.db")
    (callback,) = tracking_callbacks(config)
    callback(study, study.trials[0])
    assert list(elsewhere.iterdir()) == []  # MLflow's default: ./mlruns, wherever the run started
    assert [path.name for path in (tmp_path / "tracking" / "mlflow-artifacts").rglob("*.svg")] == ["trial-0.svg"]
    owner_only(tmp_path / "tracking" / "mlflow-artifacts")


@pytest.mark.slow
def test_export_logs_its_file_to_the_studys_parent_run(study_file: Callable[..., Path], tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    path = study_file(tracking={"mlflow_uri": "mlruns"})
    with_a_feasible_trial(path)
    assert main(["export", str(path), "-o", str(tmp_path / "best.json")]) == 0
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    parent, _ = study_runs(client, "small")
    assert artifacts(client, parent, EXPORT_FOLDER) == [f"{EXPORT_FOLDER}/best.json"]
    logged = client.download_artifacts(parent.info.run_id, f"{EXPORT_FOLDER}/best.json", str(tmp_path / "got"))
    assert Path(logged).read_bytes() == (tmp_path / "best.json").read_bytes()
    assert f"tracking: the export was logged to MLflow {tmp_path / 'mlruns'}, run {parent.info.run_id} (study " \
           f"'small'), under {EXPORT_FOLDER}/" in capsys.readouterr().out


@pytest.mark.slow
def test_wandb_offline_run_holds_the_trials_aggregates_owner_only(study_file: Callable[..., Path],
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_DISABLE_CODE", "true")
    config, study = judged(study_file, wandb_project="osha")
    lines: list[str] = []
    (callback,) = tracking_callbacks(config, echo=lines.append)
    callback(study, study.trials[0])
    assert lines == []
    (log,) = (tmp_path / "small-wandb").glob("wandb/offline-run-*/run-*.wandb")
    logged = wandb_log(log)
    params, metrics, tags = expected(study)
    assert logged["name"] == "trial-0" and logged["group"] == "small" and logged["project"] == "osha"
    assert logged["config"] == params
    assert logged["history"] == pytest.approx(metrics)
    assert logged["summary"] == {**metrics, **tags}
    owner_only(tmp_path / "small-wandb")


def wandb_log(path: Path) -> dict[str, Any]:
    """What an offline W&B run file holds: the run's name, group, project and config, its history and summary (less
    W&B's own ``_`` keys). The file is LevelDB's log format (32 KiB blocks of records, each a 7-byte header and a
    chunk) of W&B's ``Record`` protobufs."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    position, pending, payloads = 7, b"", []
    while position + 7 <= len(data):
        left = BLOCK - position % BLOCK
        _, length, kind = struct.unpack("<IHB", data[position:position + 7])
        if left < 7 or (length == 0 and kind == 0):  # a block's padding
            position += left
            continue
        pending += data[position + 7:position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a whole record, or the last chunk of one
            payloads.append(pending)
            pending = b""
    logged: dict[str, Any] = {"config": {}, "history": {}, "summary": {}}
    for payload in payloads:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            logged |= {"name": record.run.display_name, "group": record.run.run_group,
                       "project": record.run.project}
            logged["config"] |= {item.key: json.loads(item.value_json) for item in record.run.config.update}
        elif kind == "history":
            logged["history"] |= {_key(item): json.loads(item.value_json) for item in record.history.item}
        elif kind == "summary":
            logged["summary"] |= {_key(item): json.loads(item.value_json) for item in record.summary.update}
    return {key: {k: v for k, v in value.items() if not k.startswith("_")} if isinstance(value, dict) else value
            for key, value in logged.items()}


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


class Unavailable(http.server.BaseHTTPRequestHandler):
    """A server that answers every request 503 (an MLflow server behind a proxy that lost it), counting them."""

    count = 0

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        type(self).count += 1
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET  # noqa: N815

    def log_message(self, format: str, *args: object) -> None:
        return None


def test_a_tracking_server_that_fails_is_one_line_before_any_fit_after_bounded_retries(
        study_file: Callable[..., Path]) -> None:
    """MLflow's defaults retried such a server for minutes on every trial; a tracker is now asked once before the
    first fit, with at most HTTP_RETRIES retry, and says first what it would send."""
    pytest.importorskip("mlflow")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unavailable)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        uri = f"http://tuner:s3cret@127.0.0.1:{server.server_address[1]}"
        config, _ = judged(study_file, mlflow_uri=uri, remote=True)
        lines: list[str] = []
        with pytest.raises(ConfigError) as refused:
            tracking_callbacks(config, echo=lines.append)
    finally:
        server.shutdown()
    assert Unavailable.count == 1 + HTTP_RETRIES
    assert lines == [f"tracking: {SENT} are sent to the MLflow server http://tuner:***@127.0.0.1:"
                     f"{server.server_address[1]} ([tracking] remote = true)"]
    line = str(refused.value)
    assert line.startswith(f"{config.path} [tracking]: cannot log to MLflow http://tuner:***@127.0.0.1:")
    assert "s3cret" not in line and "\n" not in line


@pytest.mark.slow
def test_a_bad_tracking_uri_is_refused_by_run_before_any_fit(study_file: Callable[..., Path],
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("mlflow")
    path = study_file(tracking={"mlflow_uri": "nosuchscheme://tuner:s3cret@host/x", "remote": True})
    assert main(["run", str(path)]) == 2
    out, err = capsys.readouterr()
    line = one_error_line(err)
    assert line.startswith(f"swagppm-tune: error: {path} [tracking]: cannot log to MLflow nosuchscheme://tuner:***@")
    assert "s3cret" not in out + err and "stage1" not in err  # before any fit: it was said after it
    assert not path.with_suffix(".db").exists()  # before the study too


def test_a_tracker_that_fails_mid_study_is_one_line_and_the_study_goes_on(study_file: Callable[..., Path],
                                                                         tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    config, study = judged(study_file, mlflow_uri="mlruns")
    lines: list[str] = []
    (callback,) = tracking_callbacks(config, echo=lines.append)  # the store answered
    shutil.rmtree(tmp_path / "mlruns")
    (tmp_path / "mlruns").write_text("the store is gone")  # then it went away
    callback(study, study.trials[0])
    assert len(lines) == 1 and lines[0].startswith(f"tracking: trial 0 not logged to MLflow {tmp_path / 'mlruns'}: ")


@pytest.mark.fits
def test_a_run_logs_each_of_its_trials_to_mlflow(study_file: Callable[..., Path], tmp_path: Path) -> None:
    """``run`` passes the study file's trackers to ``run_study``: one MLflow run per finished trial."""
    pytest.importorskip("mlflow")
    from mlflow.tracking import MlflowClient

    path = study_file(study={"n_trials": 1}, tracking={"mlflow_uri": "mlruns", "mlflow_experiment": "demo"})
    assert main(["run", str(path)]) in (0, 1)
    client = MlflowClient(tracking_uri=(tmp_path / "mlruns").as_uri())
    experiment = client.get_experiment_by_name("demo")
    assert experiment is not None
    _, (run,) = study_runs(client, "demo")
    assert run.data.params == {"c": "1.0", "ft_epochs": "6"} and set(run.data.metrics) <= set(TRACKED_METRICS)
    assert "epsilon" in run.data.metrics
    owner_only(tmp_path / "mlruns")


class Answers(Unavailable):
    """A server that answers (503 too means it is there), counting apart from ``Unavailable``."""

    count = 0


# --- W&B on the owner's own server -------------------------------------------------------------------------------


@pytest.mark.parametrize(("table", "message"), [
    ({"wandb_project": "osha", "wandb_host": "https://wandb.example.org"},
     "tracking.wandb_host = 'https://wandb.example.org': each trial's parameters, exact epsilon and F1"),
    ({"wandb_host": "https://wandb.example.org", "remote": True}, "given with tracking.wandb_project"),
    ({"wandb_project": "osha", "wandb_host": "wandb.example.org", "remote": True}, "the http(s):// URL of your own"),
])
def test_w_and_b_online_needs_a_project_an_http_url_and_remote_true(study_file: Callable[..., Path],
                                                                     table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        StudyConfig.from_toml(study_file(tracking=table))


def online(study_file: Callable[..., Path], host: str) -> StudyConfig:
    return StudyConfig.from_toml(study_file(tracking={"wandb_project": "osha", "wandb_host": host, "remote": True}))


@pytest.mark.slow
def test_w_and_b_online_runs_go_to_the_owners_server_with_nothing_but_what_is_logged(
        study_file: Callable[..., Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv(WANDB_KEY, "owner-key")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    host = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        lines: list[str] = []
        tracking_callbacks(online(study_file, host), echo=lines.append)
    finally:
        server.shutdown()
    assert lines == [f"tracking: {SENT} are sent to the W&B server {host} ([tracking] remote = true)"]
    settings = WandbTracker(project="osha", folder=tmp_path / "w", host=host).settings()
    assert (settings.mode, settings.base_url) == ("online", host)
    assert not settings.save_code and settings.disable_git and settings.x_disable_stats
    assert WandbTracker(project="osha", folder=tmp_path / "w").settings().mode == "offline"


@pytest.mark.slow
@pytest.mark.parametrize("key", [None, "owner-key"])
def test_w_and_b_online_without_its_key_or_server_is_one_line_before_any_fit(
        study_file: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, key: str | None) -> None:
    pytest.importorskip("wandb")
    if key is None:
        monkeypatch.delenv(WANDB_KEY, raising=False)
    else:
        monkeypatch.setenv(WANDB_KEY, key)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        host = f"http://127.0.0.1:{probe.getsockname()[1]}"  # nothing listens
    config = online(study_file, host)
    with pytest.raises(ConfigError) as refused:
        tracking_callbacks(config, echo=lambda line: None)
    line = str(refused.value)
    reason = f"{WANDB_KEY} is not set" if key is None else f"no answer from {host} ("
    assert line.startswith(f"{config.path} [tracking]: cannot log to W&B {host}: ") and reason in line
    assert "\n" not in line and "owner-key" not in line
