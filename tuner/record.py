"""One typed trial record: the only place that names what a study stores about a trial.

A judged trial's aggregates go into Optuna user attributes (``TrialRecord.attrs``)
and come back typed (``TrialRecord.of(trial)``); the other attributes a trial may
carry are named here too (``RAN_BY``, ``FAILURE``, ...). Nothing is per record:
hyperparameters, ε, the max-delta series, F1 per draw, scores, timings.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from optuna.trial import FrozenTrial

if TYPE_CHECKING:
    from optuna.storages import BaseStorage
    from optuna.trial import Trial

# Attributes a trial may carry besides its record.
RAN_BY = "worker"  # which process ran it (host:pid)
HEARTBEAT = "heartbeat"  # when its process last said it is alive (storages without Optuna's heartbeats)
FAILURE = "failure"  # why a fit crashed (a FAIL trial)
FIGURES_ERROR = "figures_error"  # why its figures could not be written (the record stands)
RETRY_OF = "retry_of"  # the trial whose parameters it re-runs after that one's worker died
NEEDS_REFIT = "needs_refit"  # rejudged: stopped early at an ε below the new target, so it cannot be judged
BASELINE_F1_MACRO = "baseline_f1_macro"  # study attribute: stage 1's non-private macro-F1, the F1 threshold's reference
AUDITED = "audited"  # study attribute: {trial number: the ε lower bound of its audit by `audit` or `release`}

_CONSTRAINT_PREFIX = "constraint_"

# Every judged trial carries these constraints, in this order (samplers that model them need the same ones).
CONSTRAINT_KEYS = ("epsilon", "f1_macro", "f1_weighted", "fit_spread", "fit_spikes")
# The system attribute that holds them: one list in CONSTRAINT_KEYS order. Optuna reads it (as keys "0".."4") and
# so does optuna-dashboard, which ignores the per-key form that ``Trial.set_constraint`` writes under Optuna 5.
CONSTRAINTS = "constraints"


def constraint_attrs(constraints: Mapping[str, float]) -> dict[str, list[float]]:
    """The system attribute that stores ``constraints`` (for ``create_trial``)."""
    return {CONSTRAINTS: [float(constraints[key]) for key in CONSTRAINT_KEYS]}


def store_constraints(storage: BaseStorage, trial: Trial, constraints: Mapping[str, float]) -> None:
    """Store a running trial's constraints where both Optuna and optuna-dashboard read them.

    Through the storage's public API: a ``Trial`` offers only ``set_constraint``.
    """
    study_id = storage.get_study_id_from_name(trial.study.study_name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
    for key, value in constraint_attrs(constraints).items():
        storage.set_trial_system_attr(trial_id, key, value)


def named_constraints(trial: FrozenTrial) -> dict[str, float]:
    """A trial's constraints by name; also reads constraints stored one key at a time (``Trial.set_constraint``)."""
    values = trial.constraints
    if list(values) == [str(index) for index in range(len(CONSTRAINT_KEYS))]:
        return dict(zip(CONSTRAINT_KEYS, values.values(), strict=True))
    return dict(values)


def measured_violations(constraints: Mapping[str, float], unmeasured: Sequence[str] = ()) -> dict[str, float]:
    """What a fit missed: its violated constraints (> 0) with their values, less those it did not measure (an ε
    early stop's F1 and fit targets are stored as violated, but they are not misses)."""
    return {key: value for key, value in constraints.items() if value > 0 and key not in unmeasured}


@dataclass(frozen=True, kw_only=True)
class TrialRecord:
    """Everything a study stores about one judged fit.

    ``constraints`` follow Optuna's convention (≤ 0 met; see ``tuner.outcome.judge``), those
    in ``unmeasured`` violated without having been measured;
    ``diagnosis`` is the scorers' label or ``"not_judged"``. F1 statistics are
    None when the utility draws did not run (an ε early stop, a failure).
    """

    feasible: bool
    diagnosis: str
    reasons: tuple[str, ...]
    recommendation: str
    next_action: str
    next_c: float | None
    next_ft_epochs: int | None
    epsilon: float | None
    epsilon_is_lower_bound: bool
    draws_privacy: int
    draws_skipped: int
    failure: str | None
    max_delta_median: float | None
    bulk_spread: float | None
    max_robust_z: float | None
    spike_count: int
    baseline_f1_macro: float
    baseline_f1_weighted: float
    f1_macro_median: float | None
    f1_macro_q10: float | None
    f1_weighted_median: float | None
    f1_weighted_q10: float | None
    stage1_cache_hit: bool
    data_hash: str
    seed: int
    device: str
    threads: int = 0  # 0, "": not recorded (a study may hold trials judged without them)
    cpu_kernels: str = ""
    stage1_fingerprint: str = ""  # which stage 1 the fit used (trials compare only on the same one)
    majority_rate: float = 0.0  # the majority class's share of the training set (the collapse reference)
    timings: dict[str, float] = field(default_factory=dict)
    max_delta_series: tuple[float, ...] = ()
    f1_macro_draws: tuple[float, ...] = ()
    f1_weighted_draws: tuple[float, ...] = ()
    constraints: dict[str, float] = field(default_factory=dict)
    unmeasured: tuple[str, ...] = ()  # required targets an ε early stop left unmeasured (stored as violated)
    public_score: float | None = None  # macro-F1 of one secret draw on public evaluation data (accounted studies)
    audit_epsilon_bound: float | None = None  # the membership audit's ε lower bound of one secret draw (require_audit)
    posterior: str = "swag"  # the posterior the draws came from (swagppm.posteriors.kinds)
    prior_scale: float | None = None  # its prior's scale s (None: the flat prior, s = inf)
    nll_bound: float | None = None  # the public bound B on each record's NLL (None: unbounded)
    proven_epsilon: float | None = None  # 2·clip(c+g, 0, 1)·B when the trial's ε is proven, not estimated
    diagnostics: dict[str, float] = field(default_factory=dict)  # the posterior fit's aggregates (split-R̂, ESS, ...)

    def attrs(self) -> dict[str, Any]:
        """JSON-ready user attributes (constraints flattened as ``constraint_<key>`` for the dashboard)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "constraints"}
        values = {key: list(value) if isinstance(value, tuple) else value for key, value in values.items()}
        return values | {f"{_CONSTRAINT_PREFIX}{key}": value for key, value in self.constraints.items()}

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> TrialRecord | None:
        """The record stored in ``attrs``, or None for a trial never judged (crashed, running, pruned early) or whose
        record is not all written yet (``record_outcome`` stores it one attribute at a time; a killed worker may
        leave it half written)."""
        if not _REQUIRED <= attrs.keys():
            return None
        values: dict[str, Any] = {key: tuple(value) if isinstance(value, list) else value
                                  for key, value in attrs.items() if key in _FIELDS}
        constraints = {key[len(_CONSTRAINT_PREFIX):]: value for key, value in attrs.items()
                       if key.startswith(_CONSTRAINT_PREFIX)}
        return cls(**values, constraints=constraints)

    @classmethod
    def of(cls, trial: FrozenTrial) -> TrialRecord | None:
        return cls.from_attrs(trial.user_attrs)

    @property
    def epsilon_or_inf(self) -> float:
        """ε for sorting and comparing: infinite when not finite or not measured."""
        return self.epsilon if self.epsilon is not None and math.isfinite(self.epsilon) else math.inf

    @property
    def ranking_epsilon(self) -> float:
        """What a trial is ranked and judged by: its proven ε when it has one (a theorem, known before the fit), else
        the larger of its measured ε and its audit's ε lower bound (``require_audit``), so that a measured ε the audit
        refutes never ranks as the answer."""
        if self.proven_epsilon is not None:
            return self.proven_epsilon
        return max(self.epsilon_or_inf, self.audit_epsilon_bound or 0.0)


def refuted_note(epsilon: float | None, bound: float | None) -> str:
    """What stands beside a measured ε that an audit refutes: ``, refuted: the audit shows epsilon >= B`` (empty
    when no audit ran or it does not refute it)."""
    if epsilon is None or bound is None or not bound > epsilon:
        return ""
    return f", refuted: the audit shows epsilon >= {bound:.3g}"


def audit_bounds(study_attrs: Mapping[str, Any], number: int, record: TrialRecord | None) -> float | None:
    """The largest ε lower bound any audit found for trial ``number``: its own (``require_audit``) or one run later
    by `audit` or `release` on it (the study attribute ``AUDITED``)."""
    bounds = [bound for bound in ((record.audit_epsilon_bound if record else None),
                                  (study_attrs.get(AUDITED) or {}).get(str(number))) if bound is not None]
    return max(bounds, default=None)


# A record's attribute names, and those a complete record always holds (the rest have defaults).
_FIELDS = frozenset(f.name for f in dataclasses.fields(TrialRecord))
_REQUIRED = frozenset(f.name for f in dataclasses.fields(TrialRecord) if f.default is dataclasses.MISSING
                      and f.default_factory is dataclasses.MISSING and f.name != "constraints")
