"""Numbers that replace looking at max-delta and F1 plots (numpy, scipy and plotly only; no torch).

``score_max_delta`` and ``score_utility`` turn a fit's max-delta series and F1
values per draw into scores; ``diagnose`` labels the fit underfit, well fit,
overfit or catastrophic with the reasons; ``constraint_values`` gives Optuna
constraints and ``is_feasible`` reads them; ``recommend`` the practical guide's
next move (``GUIDE``: its start and steps); ``membership_audit`` the empirical
privacy audit; ``scorers.plots`` the figures. Every judgement rule and its
default lives here, once.
"""

from scorers._audit import AttackResult, membership_audit
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
    "AttackResult",
    "Diagnosis",
    "DiagnosisThresholds",
    "GuideSteps",
    "MaxDeltaScores",
    "Recommendation",
    "Statistic",
    "UtilityScores",
    "constraint_values",
    "diagnose",
    "is_feasible",
    "majority_weighted_f1",
    "membership_audit",
    "recommend",
    "recommend_lower_c",
    "score_max_delta",
    "score_utility",
    "spike_mask",
]
