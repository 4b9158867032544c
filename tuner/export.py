"""The chosen configuration as a JSON file: everything needed to refit, release and report it honestly."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeGuard

import optuna
from optuna.trial import FrozenTrial

import swagppm
from swagppm import ConfigError, SWAGPPMConfig, TrialParams
from swagppm.claim import PUBLIC_PROXY, ClaimRefused, SealedClaim, VerifiedClaim
from swagppm.statement import privacy_statement
from tuner.config import StudyConfig
from tuner.keys import owner_key
from tuner.outputs import write_atomic
from tuner.queries import best_feasible, is_feasible, trials_run, violated
from tuner.record import TrialRecord, named_constraints
from tuner.search import is_finite
from tuner.storage import masked_url
from tuner.study import definition_digest, study_caveats
from tuner.tuning import check_all_trials, claim_of, sealed_of, tuning_cost

FORMAT = "swagppm-tuner/export-1"


def library_versions(*extra: str) -> dict[str, str]:
    """The library versions a fit depends on, and ``extra`` ones (``swagppm.provenance``: imports torch when called)."""
    from swagppm.provenance import versions

    return versions(*extra)


def export_trial(study: optuna.Study, trial: FrozenTrial, config: StudyConfig) -> dict[str, Any]:
    """The export document of one trial (aggregates only: no per-record value)."""
    record = TrialRecord.of(trial)
    if record is None:
        raise ConfigError(f"trial {trial.number} of study {study.study_name!r} has no judged fit to export")
    params = config.search.params_of(trial.params).as_params()
    metrics = {key: getattr(record, key) for key in (
        "epsilon", "epsilon_is_lower_bound", "f1_macro_median", "f1_macro_q10", "f1_weighted_median",
        "f1_weighted_q10", "baseline_f1_macro", "baseline_f1_weighted", "max_delta_median", "bulk_spread",
        "max_robust_z", "spike_count", "draws_privacy", "draws_skipped")}
    counts = trials_run(study)
    tuning = tuning_cost(study, config)
    claim_of(study)  # verified: an edited claim is never sealed into an export
    return {
        "format": FORMAT,
        "study": {"name": study.study_name, "storage": masked_url(config.storage_url), "file": str(config.path),
                  "sampler": config.study.sampler, "objective": config.study.objective,
                  "definition": definition_digest(config)},
        "trial": trial.number,
        "feasible": is_feasible(trial),
        "params": params,
        "swagppm": config.fit.to_dict(),
        "targets": config.to_dict()["targets"],
        "claim": sealed_of(study).to_dict(),
        "metrics": metrics,
        "constraints": named_constraints(trial),
        "violated": violated(trial),
        "not_measured": list(record.unmeasured),
        "diagnosis": {"label": record.diagnosis, "reasons": list(record.reasons),
                      "recommendation": record.recommendation},
        "timings": record.timings,
        "trials_run": counts,
        "tuning": tuning,
        "privacy_statement": privacy_statement(
            epsilon=record.epsilon, epsilon_is_lower_bound=record.epsilon_is_lower_bound,
            trainable=config.fit.model.trainable, posterior=record.posterior, proven=record.proven_epsilon,
            tuning=tuning),
        "data_hash": record.data_hash,
        "seeds": {"fit": record.seed, "sampler": config.study.seed},
        "device": record.device,
        "threads": record.threads,
        "cpu_kernels": record.cpu_kernels or None,
        "stage1_fingerprint": record.stage1_fingerprint or None,
        "versions": library_versions("optuna", "optuna-dashboard"),
        "caveats": list(study_caveats(config)) + [f"This configuration was selected from {counts['total']} trials "
                                    f"({counts['complete']} complete, {counts['pruned']} pruned, "
                                    f"{counts['fail']} failed) on the private data."],
    }


def write_export(document: dict[str, Any], path: str | Path) -> Path:
    return write_atomic(path, json.dumps(document, indent=2) + "\n")


@dataclass(frozen=True, kw_only=True)
class Chosen:
    """A configuration read back from an export or a study: the fit settings, the trial's parameters, what it
    measured, and the study's verified claim.

    ``device``, ``threads`` (the CPU thread count; ε depends on it in the last
    digits on a CPU), ``cpu_kernels`` (torch's CPU kernel level, e.g. AVX512; another
    level changes stage 1) and ``versions`` say where the trial ran, for a refit to match;
    ``stage1_fingerprint`` says whether a refit's stage 1 is the trial's. ``tuning`` is
    what choosing it cost, for the owner only (no card reads it: the card's tuning
    section comes from ``claim``). ``entered``: its study was entered in the claim's data
    set's ledger, so a release requires that ledger to hold it; ``by_study``: the
    configuration is the study's choice (not one chosen by hand).
    """

    config: SWAGPPMConfig
    params: TrialParams
    epsilon: float | None
    trials_run: int | None
    path: Path
    claim: VerifiedClaim
    device: str | None = None
    threads: int | None = None
    cpu_kernels: str | None = None
    stage1_fingerprint: str | None = None
    versions: dict[str, str] | None = None
    tuning: dict[str, Any] | None = None  # what choosing it cost (tuner.tuning.tuning_cost), owner-side
    trial: int | None = None  # its trial's number in the study
    study: tuple[Path, str] | None = None  # the study file and study name it was exported from
    entered: bool = False
    by_study: bool = True

    @property
    def epsilon_cap(self) -> float:
        """The cap a release of it claims: the one fixed when its study was created."""
        return self.claim.claim.epsilon_cap

    @property
    def delta(self) -> float | None:
        """δ of the study's totals, from its declared public record bound or ``accounting_delta``."""
        return self.claim.claim.delta

    @property
    def source(self) -> str:
        """What it was read from (an export or a study file), as the ledger names a release attempt's source."""
        return str(self.path)


def read_export(path: str | Path) -> Chosen:
    """Read ``export``'s JSON; errors name the file and the missing or malformed field."""
    path = Path(path)
    try:
        document = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"{path}: export file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ConfigError(f"{path}: not a readable export JSON file: {error}") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ConfigError(f"{path}: not an export of swagppm-tune (expected \"format\": \"{FORMAT}\")")
    check_export_fields(document, path)
    params = TrialParams.from_params(document["params"])
    config = SWAGPPMConfig.from_dict(document["swagppm"], where=f"{path} swagppm")
    epsilon = (document.get("metrics") or {}).get("epsilon")
    threads, kernels, stage1 = document.get("threads"), document.get("cpu_kernels"), document.get("stage1_fingerprint")
    claim = _sealed_claim(path, document)
    return Chosen(config=config, params=params, epsilon=epsilon,
                  trials_run=(document.get("trials_run") or {}).get("total"), path=path,
                  device=document.get("device"), threads=threads if _count(threads) and threads > 0 else None,
                  cpu_kernels=kernels if isinstance(kernels, str) and kernels else None,
                  stage1_fingerprint=stage1 if isinstance(stage1, str) and stage1 else None,
                  versions=document.get("versions"), tuning=document.get("tuning"), claim=claim,
                  trial=document["trial"] if _count(document.get("trial")) else None, study=_source(document),
                  entered=claim.claim.mode != PUBLIC_PROXY)


def _source(document: dict[str, Any]) -> tuple[Path, str] | None:
    """The study file and name an export names, when it names both."""
    study = document.get("study")
    if isinstance(study, dict) and isinstance(study.get("file"), str) and isinstance(study.get("name"), str):
        return Path(study["file"]), study["name"]
    return None


def _sealed_claim(path: Path, document: dict[str, Any]) -> VerifiedClaim:
    """The export's claim, its seal checked under the owner key: an edited claim, or one sealed under another key, is
    refused in one line."""
    stored = document.get("claim")
    if not isinstance(stored, dict):
        raise ConfigError(f"{path}: field claim is missing (an export of an older swagppm-tune, or edited): export the "
                          "study again")
    try:
        sealed = SealedClaim.from_dict(stored)
    except ConfigError as error:
        raise ConfigError(f"{path}: field {error} (an export of an older swagppm-tune, or edited): export the study "
                          "again") from None
    key = owner_key(sealed=sealed.key, what=f"the claim of {path}")
    try:
        return sealed.verify(key.secret)
    except ClaimRefused:
        raise ConfigError(f"{path}: the claim (cap, mode, public flag, posterior, data set) does not match its seal: "
                          "it was edited after the study fixed it; export the study again") from None


def check_export_fields(document: dict[str, Any], path: Path) -> None:
    """Refuse an export whose fields a verb would trip over, naming the field: params or swagppm missing, (c,
    ft_epochs, g) missing, out of range or of the wrong type, and tables (metrics, trials_run, tuning, versions,
    swagppm) that are not tables."""
    for key in ("params", "swagppm"):
        if document.get(key) is None:
            raise ConfigError(f"{path}: field {key} is missing")
    params = document["params"]
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: field params must be a table")
    for key in ("c", "ft_epochs"):
        if key not in params:
            raise ConfigError(f"{path}: field params.{key} is missing")
    checks = (("c", lambda v: _finite(v) and v > 0, "a positive finite number"),
              ("ft_epochs", lambda v: _count(v) and v >= 1, "an integer of at least 1"),
              ("g", _finite, "a finite number"))
    for key, ok, expected in checks:
        if key in params and not ok(params[key]):
            raise ConfigError(f"{path}: params.{key} = {params[key]!r}: must be {expected}")
    for key in ("swagppm", "metrics", "trials_run", "tuning", "versions"):
        if document.get(key) is not None and not isinstance(document[key], dict):
            raise ConfigError(f"{path}: field {key} must be a table (a JSON object), not "
                              f"{type(document[key]).__name__}")
    epsilon = (document.get("metrics") or {}).get("epsilon")
    if epsilon is not None and not ((_finite(epsilon) or epsilon == math.inf) and epsilon >= 0):
        raise ConfigError(f"{path}: metrics.epsilon = {epsilon!r}: must be a number of at least 0 (or null)")
    total = (document.get("trials_run") or {}).get("total")
    if total is not None and not (_count(total) and total >= 1):
        raise ConfigError(f"{path}: trials_run.total = {total!r}: must be an integer of at least 1")


def _count(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a JSON integer (not a boolean, which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _finite(value: object) -> TypeGuard[float]:
    """Whether ``value`` is a JSON number (not a boolean) that a float holds, and finite (Python's JSON reads
    Infinity and integers of any size)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and is_finite(value)


def chosen_from_study(study: optuna.Study, config: StudyConfig, what: str) -> Chosen | None:
    """The study's best feasible trial as a ``Chosen`` configuration, with what choosing it cost and the claim fixed
    at the study's creation (None: no feasible trial); an accounted study that did not run exactly its K trials is
    refused."""
    check_all_trials(study, what)
    best = best_feasible(study)
    if best is None:
        return None
    record = TrialRecord.of(best)
    claim = claim_of(study)
    return Chosen(config=config.fit, params=config.search.params_of(best.params),
                  epsilon=record.epsilon if record else None,
                  trials_run=len(study.get_trials(deepcopy=False)), path=config.path,
                  tuning=tuning_cost(study, config), claim=claim, trial=best.number,
                  entered=claim.claim.mode != PUBLIC_PROXY)


def choose(config: StudyConfig) -> Chosen | None:
    """The stored study's best feasible trial, as ``release`` chooses it (None: no feasible trial)."""
    from tuner.study import open_existing_study

    return chosen_from_study(open_existing_study(config), config, "released")


def refit_suspects(result: swagppm.SWAGPPMResult, chosen: Chosen) -> str:
    """What may explain a refit's ε that differs from its export's: whether stage 1 is the export's, then the thread
    count, CPU kernels, device and library versions against it."""
    now, then = library_versions("optuna", "optuna-dashboard"), chosen.versions or {}
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
