"""Numbers that replace looking at max-delta and F1 plots (numpy, scipy and plotly only; no torch).

``score_max_delta`` and ``score_utility`` turn a fit's max-delta series and F1
values per draw into scores; ``diagnose`` labels the fit underfit, well fit,
overfit or catastrophic with the reasons; ``constraint_values`` gives Optuna
constraints and ``is_feasible`` reads them; ``recommend`` the practical guide's
next move (``GUIDE``: its start and steps); ``privacy_audit`` the empirical
privacy audit that refutes a stated ε or not (``membership_audit`` its attacks
one by one, ``one_run_p_value`` and ``max_auc`` two of its tests' rules,
``audit_ceiling`` the largest bound it can show at given counts);
``scorers.plots`` the figures; ``register_attack`` adds an attack to every
audit. Every judgement rule and its default lives here, once.
"""

from scorers._audit import (
    Attack,
    AttackResult,
    attacks,
    auc_interval_distribution_free,
    membership_audit,
    register_attack,
)
from scorers._diagnosis import (
    CONSTRAINT_CAP,
    GUIDE,
    Diagnosis,
    DiagnosisThresholds,
    GuideSteps,
    Recommendation,
    constraint_values,
    diagnose,
    is_feasible,
    recommend,
    recommend_lower_c,
)
from scorers._one_run import one_run_p_value
from scorers._privacy_audit import AttackAudit, PrivacyAudit, Refutation, audit_ceiling, max_auc, privacy_audit
from scorers._scores import (
    DEFAULT_SPIKE_Z,
    MIN_DRAWS,
    MaxDeltaScores,
    Statistic,
    UtilityScores,
    majority_weighted_f1,
    score_max_delta,
    score_utility,
    spike_mask,
)

__all__ = [
    "CONSTRAINT_CAP",
    "DEFAULT_SPIKE_Z",
    "GUIDE",
    "MIN_DRAWS",
    "Attack",
    "AttackAudit",
    "AttackResult",
    "Diagnosis",
    "DiagnosisThresholds",
    "GuideSteps",
    "MaxDeltaScores",
    "PrivacyAudit",
    "Recommendation",
    "Refutation",
    "Statistic",
    "UtilityScores",
    "attacks",
    "auc_interval_distribution_free",
    "audit_ceiling",
    "constraint_values",
    "diagnose",
    "is_feasible",
    "majority_weighted_f1",
    "max_auc",
    "membership_audit",
    "one_run_p_value",
    "privacy_audit",
    "recommend",
    "recommend_lower_c",
    "register_attack",
    "score_max_delta",
    "score_utility",
    "spike_mask",
]
