"""Where a study keeps each trial's figures: ``[study] artifacts``, a local folder or an S3/GCS bucket.

A folder (the default, ``<stem>-artifacts`` beside the study file) is Optuna's
file-system store whose files are written whole (``AtomicArtifactStore``). An
``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]`` value is Optuna's own
``Boto3ArtifactStore`` or ``GCSArtifactStore``, every object under ``PREFIX``, so
that workers on several machines and the dashboard share one store. Credentials
and the endpoint come from the provider's own environment (``AWS_*``, e.g.
``AWS_ENDPOINT_URL_S3`` for MinIO or another S3-compatible server;
``GOOGLE_APPLICATION_CREDENTIALS``), never from the study file. A bucket is
owner-side, as the study database is: the figures are aggregates of the private
data (each trial's max-delta series and F1 draws).

``artifact_store`` builds the store from a registry keyed by the URL's scheme
(``ARTIFACT_STORES``); ``check_artifact_store`` writes and removes one probe
object before the first fit, so a missing bucket or credential is one line then.
A remote store's failure is an ``OSError`` naming the store, so that a trial whose
figures cannot be kept keeps its fit (``tuner.objective.record``).
"""

from __future__ import annotations

import io
import os
import uuid
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, BinaryIO, TypeVar

from optuna.artifacts import FileSystemArtifactStore
from optuna.artifacts.exceptions import ArtifactNotFound

from swagppm import ConfigError
from tuner.config import ARTIFACT_SCHEMES, BucketLocation
from tuner.outputs import owner_folder, write_atomic

if TYPE_CHECKING:
    from optuna.artifacts._protocol import ArtifactStore

    from tuner.config import StudyConfig

PROBE = ".swagppm-probe-"  # the object check_artifact_store writes and removes
T = TypeVar("T")
CONNECT_TIMEOUT, READ_TIMEOUT, MAX_ATTEMPTS = 5, 60, 3  # seconds, seconds, tries: a bucket away is one line soon


class AtomicArtifactStore(FileSystemArtifactStore):
    """Optuna's file-system store whose files are whole or absent: each is written beside its place and renamed in,
    so a full disk or a killed worker never leaves a truncated picture for the dashboard to show."""

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        # the folder is the store; it was named when the study was made if it lies in a git checkout
        write_atomic(self._get_filepath(artifact_id), content_body.read(), parents=False, warn=False)


class BucketStore:
    """One of Optuna's bucket stores with every object under ``location.prefix``, and its failures ``OSError``."""

    def __init__(self, *, location: BucketLocation, store: ArtifactStore) -> None:
        self.location, self.store = location, store

    def _key(self, artifact_id: str) -> str:
        return f"{self.location.prefix}/{artifact_id}" if self.location.prefix else artifact_id

    def open_reader(self, artifact_id: str) -> BinaryIO:
        return self._guarded(lambda: self.store.open_reader(self._key(artifact_id)))

    def write(self, artifact_id: str, content_body: BinaryIO) -> None:
        self._guarded(lambda: self.store.write(self._key(artifact_id), content_body))

    def remove(self, artifact_id: str) -> None:
        self._guarded(lambda: self.store.remove(self._key(artifact_id)))

    def _guarded(self, call: Callable[[], T]) -> T:
        try:
            return call()
        except (ArtifactNotFound, OSError):
            raise
        except Exception as error:  # noqa: BLE001 - boto3's and google's errors, as one OSError naming the store
            first = (str(error).strip().splitlines() or [""])[0]
            raise OSError(f"{self.location}: {type(error).__name__}: {first}") from error


def _s3(location: BucketLocation) -> ArtifactStore:
    """Optuna's S3 store with a client whose waits are bounded (boto3's own: 60 s a connection, with retries), unless
    the owner's ``AWS_MAX_ATTEMPTS`` says otherwise."""
    import boto3
    from botocore.config import Config
    from optuna.artifacts import Boto3ArtifactStore

    bounded = Config(connect_timeout=CONNECT_TIMEOUT, read_timeout=READ_TIMEOUT,
                     retries={"total_max_attempts": int(os.environ.get("AWS_MAX_ATTEMPTS", MAX_ATTEMPTS))})
    return Boto3ArtifactStore(location.bucket, client=boto3.client("s3", config=bounded))


def _gcs(location: BucketLocation) -> ArtifactStore:
    """Optuna's GCS store (marked experimental by Optuna: its warning is not the owner's business)."""
    from optuna.artifacts import GCSArtifactStore
    from optuna.exceptions import ExperimentalWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ExperimentalWarning)
        return GCSArtifactStore(location.bucket)


# Each bucket's store by URL scheme (the schemes and their extras: tuner.config.ARTIFACT_SCHEMES).
ARTIFACT_STORES: dict[str, Callable[[BucketLocation], ArtifactStore]] = {"s3": _s3, "gs": _gcs}


def artifact_store(config: StudyConfig) -> ArtifactStore:
    """The study's artifact store: its folder, created owner-only, or its bucket (a ``ConfigError`` naming the
    extra when the provider's package is missing)."""
    url = config.artifact_store_url
    if url is None:
        owner_folder(config.artifact_dir)
        return AtomicArtifactStore(config.artifact_dir)
    location = BucketLocation.parse(url)
    try:
        return BucketStore(location=location, store=ARTIFACT_STORES[location.scheme](location))
    except ModuleNotFoundError as error:
        raise ConfigError(f"{config.path} [study] artifacts {location}: needs the {error.name!r} package (pip install "
                          f"'swagppm-tuner[{ARTIFACT_SCHEMES[location.scheme]}]')") from None
    except Exception as error:  # noqa: BLE001 - the provider's client refused (no credentials, a bad endpoint)
        first = (str(error).strip().splitlines() or [""])[0]
        raise ConfigError(f"{config.path} [study] artifacts {location}: the provider's client cannot be made "
                          f"({type(error).__name__}: {first}); set its credentials in the environment") from None


def check_artifact_store(config: StudyConfig) -> None:
    """The store can be written, checked before the first (expensive) fit: a folder is made and written, a bucket
    gets one probe object, removed at once."""
    where = config.artifact_store_url or str(config.artifact_dir)
    try:
        store = artifact_store(config)
        probe = f"{PROBE}{uuid.uuid4().hex}"
        store.write(probe, io.BytesIO(b""))
        store.remove(probe)
    except OSError as error:
        reason = str(error) if error.__cause__ is not None else f"{type(error).__name__}: {error.strerror or error}"
        raise ConfigError(f"{config.path} [study] artifacts {where}: cannot be written, so no trial's figures could "
                          f"be kept ({reason})") from None

