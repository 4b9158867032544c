"""``[study] artifacts`` as a bucket: each trial's figures in S3 (a real moto server, started here) or GCS (a GCS
emulator) under the URL's prefix, checked before the first fit, and failures as one line; a folder stays the
default."""

from __future__ import annotations

import io
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import optuna
import pytest

from swagppm import ConfigError
from tuner.artifacts import (
    ARTIFACT_STORES,
    PROBE,
    AtomicArtifactStore,
    BucketStore,
    artifact_store,
    check_artifact_store,
)
from tuner.cli import main
from tuner.config import ARTIFACT_SCHEMES, StudyConfig

BUCKET = "owner-figures"


def test_a_bucket_url_is_kept_and_the_local_folder_stays_beside_the_file(study_file: Callable[..., Path],
                                                                          tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file(study={"artifacts": "s3://owner-figures/osha/figures/"}))
    assert config.artifact_store_url == "s3://owner-figures/osha/figures/"
    assert config.artifact_dir == tmp_path / "small-artifacts"  # launch's job files
    assert StudyConfig.from_toml(study_file(study={"artifacts": "art"})).artifact_store_url is None


@pytest.mark.parametrize("url", ["ftp://host/figures", "s3://", "gs:///prefix"])
def test_a_url_that_names_no_bucket_is_refused_naming_the_key(study_file: Callable[..., Path], url: str) -> None:
    with pytest.raises(ConfigError) as refused:
        StudyConfig.from_toml(study_file(study={"artifacts": url}))
    assert f"study.artifacts = {url!r}: must be a folder or a bucket, s3://BUCKET[/PREFIX] or gs://BUCKET[/PREFIX]" \
        in str(refused.value)


def test_every_scheme_the_config_takes_has_a_store() -> None:
    assert set(ARTIFACT_STORES) == set(ARTIFACT_SCHEMES)


def test_a_folder_is_the_atomic_file_store(study_file: Callable[..., Path], tmp_path: Path) -> None:
    store = artifact_store(StudyConfig.from_toml(study_file()))
    assert isinstance(store, AtomicArtifactStore) and (tmp_path / "small-artifacts").is_dir()


# --- a real S3 server ----------------------------------------------------------------------------------------------


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A moto S3 server on a free local port with one bucket; boto3 finds it through the owner's environment."""
    pytest.importorskip("boto3")
    server_module = pytest.importorskip("moto.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = server_module.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    for name, value in {"AWS_ENDPOINT_URL_S3": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "AKIAOWNERTEST",
                        "AWS_SECRET_ACCESS_KEY": "owner-secret-key", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(name, value)
    import boto3

    client = boto3.client("s3")
    client.create_bucket(Bucket=BUCKET)
    try:
        yield client
    finally:
        server.stop()


def keys(client: object) -> list[str]:
    listed = client.list_objects_v2(Bucket=BUCKET)  # type: ignore[attr-defined]
    return sorted(item["Key"] for item in listed.get("Contents", []))


@pytest.mark.slow
def test_the_probe_leaves_the_bucket_as_it_was_and_a_missing_bucket_is_one_line(
        s3: object, study_file: Callable[..., Path]) -> None:
    check_artifact_store(StudyConfig.from_toml(study_file(study={"artifacts": f"s3://{BUCKET}/figures"})))
    assert keys(s3) == []
    path = study_file(study={"artifacts": "s3://no-such-bucket/figures"})
    with pytest.raises(ConfigError) as refused:
        check_artifact_store(StudyConfig.from_toml(path))
    message = str(refused.value)
    assert message.startswith(f"{path} [study] artifacts s3://no-such-bucket/figures: cannot be written, so no "
                              "trial's figures could be kept (s3://no-such-bucket/figures: NoSuchBucket")
    assert "\n" not in message and PROBE not in message


@pytest.mark.slow
def test_a_trial_artifact_goes_under_the_prefix_and_reads_back(s3: object, study_file: Callable[..., Path],
                                                               tmp_path: Path) -> None:
    store = artifact_store(StudyConfig.from_toml(study_file(study={"artifacts": f"s3://{BUCKET}/osha/figures/"})))
    assert isinstance(store, BucketStore)
    study = optuna.create_study()
    trial = study.ask()
    picture = tmp_path / "trial-0-figures.svg"
    picture.write_text("<svg/>")
    artifact = optuna.artifacts.upload_artifact(artifact_store=store, file_path=str(picture), study_or_trial=trial)
    assert keys(s3) == [f"osha/figures/{artifact}"]
    assert store.open_reader(artifact).read() == b"<svg/>"
    store.remove(artifact)
    assert keys(s3) == []
    with pytest.raises(optuna.artifacts.exceptions.ArtifactNotFound):
        store.open_reader(artifact)


@pytest.mark.slow
def test_a_server_that_is_gone_is_an_os_error_naming_the_store(s3: object, study_file: Callable[..., Path],
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        monkeypatch.setenv("AWS_ENDPOINT_URL_S3", f"http://127.0.0.1:{probe.getsockname()[1]}")  # nothing listens
    store = artifact_store(StudyConfig.from_toml(study_file(study={"artifacts": f"s3://{BUCKET}"})))
    with pytest.raises(OSError, match=rf"^s3://{BUCKET}: EndpointConnectionError: Could not connect"):
        store.write("figures.svg", io.BytesIO(b"<svg/>"))


@pytest.mark.fits
def test_a_run_keeps_its_trials_figures_in_the_bucket_and_none_on_disk(s3: object, study_file: Callable[..., Path],
                                                                      tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = study_file(study={"n_trials": 1, "artifacts": f"s3://{BUCKET}/figures"})
    assert main(["run", str(path)]) in (0, 1)
    assert f"figures: each trial's figures (aggregates of the private data: owner-side) go to s3://{BUCKET}/figures" \
        in capsys.readouterr().out
    config = StudyConfig.from_toml(path)
    study = optuna.load_study(study_name="small", storage=config.storage_url)
    (meta,) = optuna.artifacts.get_all_artifact_meta(study.trials[0], storage=study._storage)
    assert keys(s3) == [f"figures/{meta.artifact_id}"] and meta.mimetype == "image/svg+xml"
    assert artifact_store(config).open_reader(meta.artifact_id).read().startswith(b"<svg")
    assert not (tmp_path / "small-artifacts").exists() and "AKIAOWNERTEST" not in path.read_text()


# --- a real GCS emulator -------------------------------------------------------------------------------------------


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """A GCS emulator on a free local port with one bucket; Google's client finds it through
    ``STORAGE_EMULATOR_HOST`` (anonymous, as against the emulator)."""
    pytest.importorskip("google.cloud.storage")
    emulator = pytest.importorskip("gcp_storage_emulator.server")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = emulator.create_server("127.0.0.1", port, in_memory=True, default_bucket=BUCKET)
    server.start()
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", f"http://127.0.0.1:{port}")
    from google.cloud import storage

    try:
        yield storage.Client(project="owner").bucket(BUCKET)
    finally:
        server.stop()


def blobs(bucket: object) -> list[str]:
    return sorted(blob.name for blob in bucket.list_blobs())  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_gcs_bucket_takes_the_probe_and_a_trials_artifact_under_the_prefix(
        gcs: object, study_file: Callable[..., Path], tmp_path: Path) -> None:
    config = StudyConfig.from_toml(study_file(study={"artifacts": f"gs://{BUCKET}/osha/figures"}))
    check_artifact_store(config)
    assert blobs(gcs) == []
    store = artifact_store(config)
    study = optuna.create_study()
    picture = tmp_path / "trial-0-figures.svg"
    picture.write_text("<svg/>")
    artifact = optuna.artifacts.upload_artifact(artifact_store=store, file_path=str(picture),
                                                study_or_trial=study.ask())
    assert blobs(gcs) == [f"osha/figures/{artifact}"] and store.open_reader(artifact).read() == b"<svg/>"
    path = study_file(study={"artifacts": "gs://no-such-bucket/figures"})
    with pytest.raises(ConfigError) as refused:
        check_artifact_store(StudyConfig.from_toml(path))
    assert str(refused.value).startswith(f"{path} [study] artifacts gs://no-such-bucket/figures: cannot be written, "
                                         "so no trial's figures could be kept (gs://no-such-bucket/figures: NotFound")


@pytest.mark.slow
def test_a_provider_client_without_credentials_is_one_line(study_file: Callable[..., Path], tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("google.cloud.storage")
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    path = study_file(study={"artifacts": f"gs://{BUCKET}/figures"})
    with pytest.raises(ConfigError) as refused:
        artifact_store(StudyConfig.from_toml(path))
    assert str(refused.value).startswith(f"{path} [study] artifacts gs://{BUCKET}/figures: the provider's client "
                                         "cannot be made (DefaultCredentialsError: ")
    assert str(refused.value).endswith("set its credentials in the environment") and "\n" not in str(refused.value)
