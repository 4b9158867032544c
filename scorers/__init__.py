"""Numbers that replace looking at max-delta and F1 plots (numpy, scipy and plotly only; no torch).

``score_max_delta`` and ``score_utility`` turn a fit's max-delta series and F1
values per draw into scores; ``diagnose`` labels the fit underfit, well fit,
overfit or catastrophic with the reasons; ``constraint_values`` gives Optuna
constraints; ``recommend`` the practical guide's next move; ``scorers.plots``
the figures.
"""

from scorers._audit import AttackResult, membership_audit
from scorers._diagnosis import (
    CONSTRAINT_CAP,
    Diagnosis,
    DiagnosisThresholds,
    Recommendation,
    constraint_values,
    diagnose,
    recommend,
)
from scorers._scores import (
    DEFAULT_SPIKE_Z,
    MIN_DRAWS,
    MaxDeltaScores,
    UtilityScores,
    majority_weighted_f1,
    score_max_delta,
    score_utility,
    spike_mask,
)

__all__ = [
    "AttackResult",
    "CONSTRAINT_CAP",
    "DEFAULT_SPIKE_Z",
    "MIN_DRAWS",
    "Diagnosis",
    "DiagnosisThresholds",
    "MaxDeltaScores",
    "Recommendation",
    "UtilityScores",
    "constraint_values",
    "diagnose",
    "majority_weighted_f1",
    "membership_audit",
    "recommend",
    "score_max_delta",
    "score_utility",
    "spike_mask",
]
