"""A study definition: one TOML file with ``[study]``, ``[search]``, ``[targets]``, the fit's tables and, opt-in,
``[tracking]``.

Every table is checked key by key: an unknown key, a wrong type or a value out of
range is a ``ConfigError`` naming the file, the table and the key.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from scorers import DEFAULT_SPIKE_Z, MIN_DRAWS, DiagnosisThresholds, Statistic
from swagppm import ConfigError, SWAGPPMConfig
from swagppm.claim import DATA_SET_CHARACTERS, is_data_set
from swagppm.config import check_choice, check_value, config_from_table, load_toml
from swagppm.statement import claim_kind, proven_epsilon
from tuner.samplers import SAMPLERS, sampler_traits
from tuner.search import SearchSpace, StartPoint, check_finite
from tuner.storage import JOURNAL, journal_path, masked_url, parse_url

ObjectiveName = Literal["epsilon", "pareto"]

# The buckets [study] artifacts can name, by URL scheme, with the extra that installs each one's client
# (tuner.artifacts.ARTIFACT_STORES builds them).
ARTIFACT_SCHEMES = {"s3": "s3", "gs": "gcs"}
MAX_STUDY_NAME = 512  # characters: Optuna's study_name column on PostgreSQL and MySQL (String(512))
_TABLES = ("study", "search", "targets", "data", "model", "swagppm", "tracking")


@dataclass(frozen=True, kw_only=True)
class StudySettings:
    """``[study]``: where the study lives and how it searches.

    ``storage`` is an SQLAlchemy URL (default: ``sqlite:///<study file stem>.db``
    beside the study file), ``journal:<file>`` or ``redis://host``; ``artifacts`` where the
    per-trial figures go: a folder (default ``<stem>-artifacts`` beside the file) or
    a bucket, ``s3://BUCKET[/PREFIX]`` or ``gs://BUCKET[/PREFIX]`` (``tuner.artifacts``).
    Heartbeats (server databases only): a running trial whose worker sent none for
    ``grace_period`` seconds is failed and retried up to ``max_retries`` times. A
    storage that goes away mid-run is retried ``reconnect_attempts`` times, waiting
    ``reconnect_wait`` seconds and doubling. ``n_trials`` counts finished
    trials of the whole study, resumed runs included. ``objective = "epsilon"``
    minimises ε under the constraints; ``"pareto"`` also maximises macro-F1.

    ``accounted = true`` makes the cost of tuning computable (Papernot & Steinke):
    random search (``sampler = "random"``, no start point or probe) whose proposals
    come from fresh OS entropy (never a recorded seed), no ε early stop and no
    data-dependent stop (``stop_on_first_feasible``, ``timeout``), and a number of
    trials K drawn once, from fresh OS entropy, from a truncated negative binomial
    with shape ``trials_shape`` (η: 1 geometric, 0 logarithmic, ``inf`` Poisson) and
    mean ``trials_mean``; ``n_trials`` is then ignored. Each trial is scored by one
    secret draw on ``public_eval`` (a file of records the owner declares public,
    required), ε* (``[targets] epsilon_cap``) is binding, and the total ε of tuning and
    release is computed with dp-accounting at ``accounting_delta``, or at a power of
    ten at most 1/N² for ``max_records`` = N, a public upper bound on the number of
    training records (never the private count itself: one of the two is required).
    The cap, the mode and whether the data are public are fixed when a study is
    created (``tuner.tuning.CLAIM``).

    ``data_set`` names the private data set the records are a version of: its privacy
    ledger (``tuner.ledger``) composes every study and release on it, whatever file,
    order or edit of the records they read (default: the data source's file name
    without its suffixes, e.g. ``records`` for ``data/records.jsonl``; declare it when
    versions of one data set live under several names).

    ``concurrent_trials``: trials one worker runs at once, each in a thread with its
    own model copy and CUDA stream (``swagppm.side_by_side``); 0 means as many as fit
    in the free GPU memory (1 on a CPU). Each trial gives the ε it gives alone; a run
    may finish up to N − 1 trials past ``n_trials`` or a stop rule (Optuna's threads),
    so an accounted study runs one at a time.
    """

    name: str
    storage: str | None = None
    artifacts: str | None = None
    sampler: str = "tpe"  # a name in tuner.samplers.SAMPLERS
    startup_trials: int = 2
    n_trials: int | None = 20
    timeout: float | None = None
    seed: int = 0
    stop_on_first_feasible: bool = False
    objective: ObjectiveName = "epsilon"
    heartbeat_interval: int = 60
    grace_period: int = 180
    max_retries: int = 2
    connect_timeout: int = 5
    reconnect_attempts: int = 5
    reconnect_wait: float = 2.0
    accounted: bool = False
    trials_mean: float = 10.0
    trials_shape: float = 1.0
    accounting_delta: float | None = None
    max_records: int | None = None
    public_eval: str | None = None
    concurrent_trials: int = 1
    data_set: str | None = None

    def __post_init__(self) -> None:
        check_finite("study", self, ("timeout", "reconnect_wait", "trials_mean"))
        check_value(bool(re.fullmatch(r"[A-Za-z0-9_.\-]+", self.name)), "study.name", self.name,
               "letters, digits, '.', '_' or '-'")
        if len(self.name) > MAX_STUDY_NAME:  # a server database keeps no longer name (Optuna's column)
            raise ConfigError(f"study.name = {self.name[:24]!r}... ({len(self.name)} characters): must be at most "
                              f"{MAX_STUDY_NAME} characters, the longest study name a database storage keeps")
        check_value(self.sampler in SAMPLERS, "study.sampler", self.sampler,
                    f"one of {', '.join(map(repr, SAMPLERS))}")
        check_choice("study.objective", self.objective, ObjectiveName)
        check_value(self.n_trials is None or self.n_trials >= 1, "study.n_trials", self.n_trials, "at least 1")
        check_value(0 <= self.seed < 2**32, "study.seed", self.seed, "an integer in [0, 2**32)")
        check_value(self.startup_trials >= 1, "study.startup_trials", self.startup_trials, "at least 1")
        check_value(self.timeout is None or self.timeout > 0, "study.timeout", self.timeout, "positive (seconds)")
        check_value(self.heartbeat_interval >= 1, "study.heartbeat_interval", self.heartbeat_interval,
                    "at least 1 (seconds)")
        check_value(self.grace_period > self.heartbeat_interval, "study.grace_period", self.grace_period,
               f"longer than heartbeat_interval = {self.heartbeat_interval} (seconds)")
        check_value(self.max_retries >= 0, "study.max_retries", self.max_retries, "0 or more")
        check_value(self.connect_timeout >= 1, "study.connect_timeout", self.connect_timeout, "at least 1 (seconds)")
        check_value(self.reconnect_attempts >= 0, "study.reconnect_attempts", self.reconnect_attempts, "0 or more")
        check_value(self.reconnect_wait > 0, "study.reconnect_wait", self.reconnect_wait, "positive (seconds)")
        check_value(self.concurrent_trials >= 0, "study.concurrent_trials", self.concurrent_trials,
                    "0 (as many as fit in the GPU's memory) or more")
        check_value(self.trials_mean >= 1, "study.trials_mean", self.trials_mean, "at least 1")
        check_value(self.trials_shape >= 0, "study.trials_shape", self.trials_shape, "0 or more (or inf for Poisson)")
        delta = self.accounting_delta
        check_value(delta is None or 0 < delta < 1, "study.accounting_delta", delta, "in (0, 1)")
        check_value(self.max_records is None or self.max_records >= 2, "study.max_records", self.max_records,
                    "a public upper bound on the number of training records, at least 2")
        if self.artifacts is not None and is_store_url(self.artifacts):
            BucketLocation.parse(self.artifacts)
        check_value(self.data_set is None or is_data_set(self.data_set), "study.data_set", self.data_set,
                    DATA_SET_CHARACTERS)
        if self.accounted:
            self._check_accounted()
        traits = sampler_traits(self.sampler)
        if traits.single_objective and self.objective == "pareto":
            raise ConfigError(f"study.sampler = {self.sampler!r} follows one objective and cannot run "
                              f"study.objective = 'pareto'; use {_names(single_objective=False)}")


    def _check_accounted(self) -> None:
        """What an accounted study's total assumes: random search, public scores, every one of the K trials, a δ
        that does not come from the private record count."""
        if not sampler_traits(self.sampler).accountable:
            raise ConfigError(f"study.accounted = true needs study.sampler = {_names(accountable=True)} (got "
                              f"{self.sampler!r}): the tuning cost can be accounted for random search only; adaptive "
                              "samplers are reported as unaccounted")
        if self.public_eval is None:
            raise ConfigError("study.accounted = true needs study.public_eval = \"FILE\": each trial is scored by one "
                              "secret draw on records you declare public, never on the private test split")
        for key, value in (("stop_on_first_feasible", self.stop_on_first_feasible), ("timeout", self.timeout)):
            if value:
                raise ConfigError(f"study.{key} = {value!r} cannot be used with study.accounted = true: the total "
                                  "holds for a study that runs all of its hidden number of trials, and a stop that "
                                  "depends on the results is a release of information it does not count; remove it")
        if self.concurrent_trials != 1:
            raise ConfigError(f"study.concurrent_trials = {self.concurrent_trials} cannot be used with study.accounted "
                              "= true: trials side by side may run past the hidden number of trials the total holds "
                              "for; remove it")
        if self.accounting_delta is None and self.max_records is None:
            raise ConfigError("study.accounted = true needs study.max_records = N (a public upper bound on the number "
                              "of training records; delta is then a power of ten at most 1/N^2) or "
                              "study.accounting_delta: delta must not come from the private count itself, which would "
                              "tell neighbouring data sets apart")


@dataclass(frozen=True, kw_only=True)
class Targets:
    """``[targets]``: what a feasible configuration must meet.

    ``epsilon_cap``: ε*, the cap on ε that trials are judged against and that the
    study's releases claim (one name from the study file to the card; fixed when the
    study is created). ``max_f1_degradation``: macro- and weighted-F1 (their
    ``statistic`` over the utility draws) within this fraction of the non-private
    baseline. ``require_well_fit``: the max-delta series must look well fit
    (bulk spread ≤ ``max_bulk_spread``, no draw above ``spike_z`` robust SDs).
    ``early_stop``: stop the privacy draws once ε exceeds the target (default on,
    off for the flowchart, which reads whole series). ``stuck_epochs``: a fit whose
    training accuracy stays at the majority-class rate this many epochs in a row is
    catastrophic and pruned. ``require_audit``: every trial also runs the membership
    audit of one secret draw (``scorers.privacy_audit``), and a trial the audit
    refutes at ε ≤ ``epsilon_cap`` is infeasible. ``stop_above_best``: with the early
    stop and ``objective = "epsilon"``, the privacy draws also stop once ε exceeds
    the best feasible trial's (``tuner.pruning``: exact, such a trial can no longer
    be chosen; false runs them on, so its F1 is measured).
    """

    epsilon_cap: float = 10.0
    max_f1_degradation: float = 0.10
    statistic: Statistic = "median"
    require_well_fit: bool = True
    max_bulk_spread: float = DiagnosisThresholds.max_bulk_spread
    spike_z: float = DEFAULT_SPIKE_Z
    min_spikes: int = DiagnosisThresholds.min_spikes
    early_stop: bool | None = None
    stuck_epochs: int = 3
    require_audit: bool = False
    stop_above_best: bool = True

    def __post_init__(self) -> None:
        check_finite("targets", self, ("max_f1_degradation", "max_bulk_spread", "spike_z"))
        check_value(self.epsilon_cap > 0 and math.isfinite(self.epsilon_cap), "targets.epsilon_cap",
                    self.epsilon_cap, "positive and finite")
        check_value(0.0 <= self.max_f1_degradation < 1.0, "targets.max_f1_degradation", self.max_f1_degradation,
               "a fraction in [0, 1)")
        check_choice("targets.statistic", self.statistic, Statistic)
        check_value(self.max_bulk_spread > 0, "targets.max_bulk_spread", self.max_bulk_spread, "positive")
        check_value(self.spike_z > 0, "targets.spike_z", self.spike_z, "positive")
        check_value(self.min_spikes >= 1, "targets.min_spikes", self.min_spikes, "at least 1")
        check_value(self.stuck_epochs >= 1, "targets.stuck_epochs", self.stuck_epochs, "at least 1")


@dataclass(frozen=True, kw_only=True)
class Tracking:
    """``[tracking]`` (opt-in): every trial's aggregates also go to MLflow and/or W&B (``tuner.tracking``).

    ``mlflow_uri``: an MLflow tracking URI: a folder (a local file store, relative to
    the study file, created owner-only), ``sqlite:///FILE`` or a tracking server;
    runs go to the experiment ``mlflow_experiment`` (default: the study's name).
    ``wandb_project``: W&B runs in offline mode in ``wandb_dir`` (default
    ``<study file stem>-wandb`` beside it, created owner-only); nothing is uploaded
    until the owner runs ``wandb sync``, unless ``wandb_host`` names the owner's own
    W&B server (``https://wandb.example.org``): then the runs go there online, which
    needs ``remote = true`` and the server's key in ``WANDB_API_KEY`` (never here).
    ``remote``: the explicit consent an ``mlflow_uri`` that is no local store (a
    tracking server, ``http(s)://``, ``databricks``, ...) or a ``wandb_host`` needs: each trial's exact ε
    and F1 are private statistics of the data, and they leave the machine.
    """

    mlflow_uri: str | None = None
    mlflow_experiment: str | None = None
    wandb_project: str | None = None
    wandb_dir: str | None = None
    wandb_host: str | None = None
    remote: bool = False

    def __post_init__(self) -> None:
        if self.mlflow_experiment is not None and self.mlflow_uri is None:
            raise ConfigError("tracking.mlflow_experiment needs tracking.mlflow_uri (where the runs go)")
        if self.mlflow_uri is not None and self.mlflow_uri != "" and local_path(self.mlflow_uri) is None \
                and not self.remote:
            raise ConfigError(f"tracking.mlflow_uri = {masked_url(self.mlflow_uri)!r} is no local store: each "
                              "trial's parameters, exact epsilon and F1 (private statistics of the data) would be "
                              "sent there; set tracking.remote = true to send them, or use a local folder or "
                              "sqlite:///FILE")
        if self.wandb_dir is not None and self.wandb_project is None:
            raise ConfigError("tracking.wandb_dir needs tracking.wandb_project (the W&B project of the runs)")
        if self.wandb_host is not None:
            check_value(self.wandb_project is not None, "tracking.wandb_host", self.wandb_host,
                        "given with tracking.wandb_project (the W&B project of the runs)")
            check_value(self.wandb_host.startswith(("http://", "https://")), "tracking.wandb_host",
                        masked_url(self.wandb_host), "the http(s):// URL of your own W&B server")
            if not self.remote:
                raise ConfigError(f"tracking.wandb_host = {masked_url(self.wandb_host)!r}: each trial's parameters, "
                                  "exact epsilon and F1 (private statistics of the data) would be sent there; set "
                                  "tracking.remote = true to send them, or leave wandb_host out for offline runs")
        for key in ("mlflow_uri", "mlflow_experiment", "wandb_project", "wandb_dir", "wandb_host"):
            check_value(getattr(self, key) != "", f"tracking.{key}", "", "not empty")


@dataclass(frozen=True, kw_only=True)
class BucketLocation:
    """``[study] artifacts`` as a bucket: its URL's scheme, bucket and key prefix (no slash at either end)."""

    scheme: str
    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> BucketLocation:
        """``s3://BUCKET[/PREFIX]`` taken apart; a ``ConfigError`` naming the value when it is no such URL."""
        scheme, _, rest = url.partition("://")
        bucket, _, prefix = rest.partition("/")
        if scheme not in ARTIFACT_SCHEMES or not bucket:
            raise ConfigError(f"study.artifacts = {url!r}: must be a folder or a bucket, "
                              f"{' or '.join(f'{name}://BUCKET[/PREFIX]' for name in ARTIFACT_SCHEMES)}")
        return cls(scheme=scheme, bucket=bucket, prefix=prefix.strip("/"))

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


def is_store_url(value: str) -> bool:
    """Whether ``[study] artifacts`` names a bucket (a URL) rather than a folder."""
    return "://" in value


def local_path(uri: str) -> Path | None:
    """The local file or folder of an MLflow tracking URI (a folder, ``file:`` or ``sqlite:///``); None for a
    server (anything sent elsewhere)."""
    if "://" not in uri:
        return Path(uri)
    for prefix in ("file://", "sqlite:///"):
        if uri.startswith(prefix):
            return Path(uri[len(prefix):] if prefix == "file://" else "/" + uri[len(prefix):].lstrip("/"))
    return None


@dataclass(frozen=True, kw_only=True)
class StudyConfig:
    """A whole study file: the search, the targets and the fit configuration, with resolved paths."""

    path: Path
    study: StudySettings
    search: SearchSpace
    targets: Targets
    fit: SWAGPPMConfig
    tracking: Tracking = Tracking()

    @classmethod
    def from_toml(cls, path: str | Path) -> StudyConfig:
        """Read and check a study file; relative paths are taken from the file's folder."""
        path = Path(os.path.abspath(path))  # not resolve(): a linked study file keeps its outputs beside the link
        document = load_toml(path)
        unknown = sorted(set(document) - set(_TABLES))
        if unknown:
            raise ConfigError(f"{path}: unknown table(s) {', '.join(f'[{t}]' for t in unknown)}; "
                              f"known tables: {', '.join(f'[{t}]' for t in _TABLES)}")
        for table in _TABLES:
            if not isinstance(document.get(table, {}), dict):
                raise ConfigError(f"{path}: [{table}] must be a table")
        if "name" not in document.get("study", {}):
            raise ConfigError(f"{path} [study]: name is required (e.g. name = \"{path.stem}\")")
        study = config_from_table(StudySettings, _study_paths(document["study"], path), f"{path} [study]")
        search_table = dict(document.get("search", {}))
        if "start" in search_table:
            search_table["start"] = _start_points(search_table["start"], path)
        search = config_from_table(SearchSpace, search_table, f"{path} [search]")
        targets = config_from_table(Targets, _targets_table(document.get("targets", {}), path), f"{path} [targets]")
        if study.accounted and targets.early_stop:
            raise ConfigError(f"{path} [targets]: early_stop = true cannot be used with study.accounted = true "
                              "(the accounting needs every trial's exact epsilon); remove it")
        if study.accounted and targets.require_audit:
            raise ConfigError(f"{path} [targets]: require_audit = true cannot be used with study.accounted = true (the "
                              "audit reads every record's loss, so choosing by it would cost privacy the accounting "
                              "does not count); audit the accounted choice once at release instead")
        if sampler_traits(study.sampler).reads_whole_series and targets.early_stop:
            raise ConfigError(f"{path} [targets]: early_stop = true cannot be used with study.sampler = "
                              f"{study.sampler!r} (it reads whole max-delta series); remove it or pick another "
                              "sampler")
        fit = SWAGPPMConfig.from_toml(path)
        if study.data_set is None:
            study = dataclasses.replace(study, data_set=default_data_set(fit.data.source))
        if targets.require_well_fit and fit.draws_privacy < MIN_DRAWS:
            raise ConfigError(f"{path}: [targets] require_well_fit = true needs [swagppm] draws_privacy of at least "
                              f"{MIN_DRAWS} (the scorers cannot judge a shorter max-delta series), got "
                              f"{fit.draws_privacy}; raise draws_privacy or set require_well_fit = false")
        _check_proven_range(search, targets, fit, path)
        tracking = config_from_table(Tracking, _tracking_paths(document.get("tracking", {}), path),
                                     f"{path} [tracking]")
        return cls(path=path, study=study, search=search, targets=targets, fit=fit, tracking=tracking)

    def with_storage(self, url: str) -> StudyConfig:
        """The same study in another storage (``worker --storage``); relative file paths are taken from here."""
        table = _study_paths({**dataclasses.asdict(self.study), "storage": url}, Path.cwd() / self.path.name)
        table["artifacts"] = self.study.artifacts
        study = config_from_table(StudySettings, table, "--storage")
        return dataclasses.replace(self, study=study)

    def with_data(self, source: str | Path) -> StudyConfig:
        """The same study on records at another path (``--data``); the study definition is unchanged."""
        path = Path(source).expanduser()
        resolved = str(path.resolve()) if path.exists() or path.suffix else str(source)
        fit = self.fit.replace(data={"source": resolved, "revision": None})  # a revision was the old source's
        return dataclasses.replace(self, fit=fit)

    @property
    def early_stop(self) -> bool:
        """Whether privacy draws stop once ε exceeds its target (default: yes, unless the sampler reads whole
        series or the study is accounted)."""
        if self.targets.early_stop is not None:
            return self.targets.early_stop
        return not sampler_traits(self.study.sampler).reads_whole_series and not self.study.accounted

    @property
    def storage_url(self) -> str:
        assert self.study.storage is not None  # resolved by from_toml
        return self.study.storage

    @property
    def artifact_dir(self) -> Path:
        """The study's local owner-side folder: its figures unless they go to a bucket, and launch's job files."""
        assert self.study.artifacts is not None  # resolved by from_toml
        if is_store_url(self.study.artifacts):
            return self.path.parent / f"{self.path.stem}-artifacts"
        return Path(self.study.artifacts)

    @property
    def artifact_store_url(self) -> str | None:
        """The bucket the figures go to (``s3://...``, ``gs://...``), or None when they stay in ``artifact_dir``."""
        assert self.study.artifacts is not None  # resolved by from_toml
        return self.study.artifacts if is_store_url(self.study.artifacts) else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready values of every table (the storage URL with its password masked)."""
        return {
            "study": {**dataclasses.asdict(self.study), "storage": masked_url(self.storage_url)},
            "search": dataclasses.asdict(self.search),
            "targets": dataclasses.asdict(self.targets),
            "swagppm": self.fit.to_dict(),
        }


def _check_proven_range(search: SearchSpace, targets: Targets, fit: SWAGPPMConfig, path: Path) -> None:
    """With a proven claim every proposal's ε, 2·clip(c + g, 0, 1)·B, is known before any fit: a search range that
    reaches above ε* is refused (the tuner never fits a configuration it knows is infeasible, and no feasibility
    test on the data is left)."""
    if claim_kind(posterior=fit.posterior, nll_bound=fit.nll_bound, public_risks=fit.public_risks) != "proven":
        return
    assert fit.nll_bound is not None  # a proven claim has one
    g = search.g_max if search.g_max is not None else search.g
    largest = proven_epsilon(c=search.c_max, g=g, nll_bound=fit.nll_bound)
    if largest > targets.epsilon_cap:
        room = targets.epsilon_cap / (2 * fit.nll_bound) - g
        advice = f"set [search] c_max <= {room:.4g}" if room > search.c_min else \
            "lower [swagppm] nll_bound or raise the cap"
        raise ConfigError(f"{path} [search]: with a proven claim (exact sampler, nll_bound = {fit.nll_bound:g}, "
                          f"public risks) a trial's epsilon is 2 x clip(c + g, 0, 1) x B, known before any fit, and "
                          f"c_max = {search.c_max:g} reaches {largest:.4g}, above epsilon* = "
                          f"{targets.epsilon_cap:g}: {advice}")


def default_data_set(source: str) -> str:
    """A study's data set when it declares none: its source's file (or folder) name without suffixes, in the
    characters a ledger's name takes (``synthetic`` for the built-in corpus)."""
    name = Path(source.rstrip("/")).name.split(".", 1)[0] or "records"
    cleaned = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:128]
    return cleaned or "records"


def _names(**traits: bool) -> str:
    """The registered samplers with the given traits, as a study file's error lists them ('a', 'b' or 'c')."""
    names = [repr(name) for name, entry in SAMPLERS.items()
             if all(getattr(entry.traits, trait) == value for trait, value in traits.items())]
    return " or ".join(names) if len(names) < 3 else f"{', '.join(names[:-1])} or {names[-1]}"


def _study_paths(table: dict[str, Any], path: Path) -> dict[str, Any]:
    """Default storage and artifact folder beside the study file; relative SQLite paths from its folder."""
    table = dict(table)
    storage = table.get("storage")
    if storage is None:
        table["storage"] = f"sqlite:///{path.with_suffix('.db')}"
    elif isinstance(storage, str) and storage.startswith(JOURNAL):
        if not journal_path(storage).is_absolute():
            table["storage"] = f"{JOURNAL}{path.parent / journal_path(storage)}"
    elif isinstance(storage, str) and not storage.startswith(("redis://", "rediss://", "unix://")):
        try:
            url = parse_url(storage)
        except ConfigError as error:
            raise ConfigError(f"{path} [study]: {error}") from None
        if url.get_backend_name() == "sqlite" and url.database and url.database != ":memory:" \
                and not Path(url.database).is_absolute():
            table["storage"] = url.set(database=str(path.parent / url.database)).render_as_string(hide_password=False)
    public_eval = table.get("public_eval")
    if isinstance(public_eval, str) and not Path(public_eval).expanduser().is_absolute():
        table["public_eval"] = str(path.parent / public_eval)
    artifacts = table.get("artifacts")
    if artifacts is None:
        table["artifacts"] = str(path.parent / f"{path.stem}-artifacts")
    elif isinstance(artifacts, str) and not is_store_url(artifacts) and not Path(artifacts).expanduser().is_absolute():
        table["artifacts"] = str(path.parent / artifacts)
    return table


def _tracking_paths(table: dict[str, Any], path: Path) -> dict[str, Any]:
    """A local MLflow store (a folder, ``file:`` or ``sqlite:///`` path) and the W&B folder, from the study file's
    folder; the W&B folder defaults to ``<stem>-wandb`` beside it."""
    table = dict(table)
    uri = table.get("mlflow_uri")
    if isinstance(uri, str) and uri:
        scheme, separator, rest = uri.partition(":")
        if not separator or len(scheme) == 1:  # a bare folder (or a Windows drive)
            table["mlflow_uri"] = str(path.parent / uri)
        elif scheme == "file" and not rest.startswith("//"):
            table["mlflow_uri"] = str(path.parent / rest)
        elif scheme == "sqlite" and rest.startswith("///") and not Path(rest[3:]).is_absolute():
            table["mlflow_uri"] = f"sqlite:///{path.parent / rest[3:]}"
    folder = table.get("wandb_dir")
    if isinstance(folder, str) and folder and not Path(folder).expanduser().is_absolute():
        table["wandb_dir"] = str(path.parent / folder)
    elif folder is None and table.get("wandb_project") is not None:
        table["wandb_dir"] = str(path.parent / f"{path.stem}-wandb")
    return table


def _targets_table(table: Any, path: Path) -> Any:
    """``[targets]`` as written; the key this version renamed is named in one line rather than called unknown."""
    if isinstance(table, dict) and "epsilon" in table:
        raise ConfigError(f"{path} [targets]: epsilon is now called epsilon_cap (the cap epsilon* that trials are "
                          "judged against and the release claims): rename the key")
    return table


def _start_points(values: object, path: Path) -> tuple[StartPoint, ...]:
    where = f"{path} [search]"
    if not isinstance(values, list):
        raise ConfigError(f"{where}: start must be a list of tables, e.g. start = [{{ c = 1.0, ft_epochs = 7 }}]")
    return tuple(config_from_table(StartPoint, value, f"{where} start[{number}]")
                 for number, value in enumerate(values))
