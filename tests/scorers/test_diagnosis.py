"""Tests of ``scorers._diagnosis``: verdicts, margins, Optuna constraints and the guide's next move.

Synthetic series are built relative to ``DEFAULT_SPIKE_Z`` and ``DiagnosisThresholds()``
(bulks at 0.5× / 2× the spread threshold, spikes at DEFAULT_SPIKE_Z + 3 robust SDs) so
that re-calibrating the defaults does not break them.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from scorers import (
    CONSTRAINT_CAP,
    DEFAULT_SPIKE_Z,
    Diagnosis,
    DiagnosisThresholds,
    Recommendation,
    constraint_values,
    diagnose,
    majority_weighted_f1,
    recommend,
    score_max_delta,
    score_utility,
)
from scorers._scores import MIN_DRAWS
from tests.scorers.series import CASE_STUDY, gaussian_bulk, with_spikes

T = DiagnosisThresholds()
KEYS = ["epsilon", "f1_macro", "f1_weighted", "fit_spread", "fit_spikes"]

HAND = [4.0, 5.0, 5.5, 6.0, 6.5, 7.0, 7.5, 8.0, 30.0]  # median 6.5, robust SD 1.4826, bulk spread 0.28, ε 60
HAND_Z = 5.0
HAND_MAX_Z = 23.5 / 1.4826
MACRO = [0.70, 0.72, 0.74, 0.76, 0.78, 0.80, 0.60, 0.82, 0.84, 0.86, 0.88]  # median 0.78
WEIGHTED = [0.80, 0.81, 0.82, 0.83, 0.84, 0.85, 0.86, 0.87, 0.88, 0.89, 0.90]  # median 0.85


def wide(seed: int = 0) -> np.ndarray:
    return gaussian_bulk(seed, 2.0 * T.max_bulk_spread)


def tight(seed: int = 0) -> np.ndarray:
    return gaussian_bulk(seed, 0.5 * T.max_bulk_spread)


def spiky(seed: int = 0, k: int = 3) -> np.ndarray:
    return with_spikes(tight(seed), k)


def good_utility(**kwargs: object):
    return score_utility(MACRO, WEIGHTED, baseline_macro=0.85, baseline_weighted=0.90, **kwargs)  # meets both


def poor_utility():
    # above collapse (0.5 · 0.9) but below 0.9 · baseline
    return score_utility([0.6] * 11, [0.7] * 11, baseline_macro=0.85, baseline_weighted=0.90)


# --------------------------------------------------------------------------- verdicts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_bulk_is_underfit(seed: int) -> None:
    s = score_max_delta(wide(seed))
    d = diagnose(s)
    assert d.label == "underfit"
    assert d.failure is None
    reason = d.reasons[0]
    assert f"{s.bulk_spread:.1%}" in reason
    assert f"{T.max_bulk_spread:.1%}" in reason
    assert "add fine-tuning epochs" in reason
    assert not d.feasible


def test_a_wide_bulk_without_spikes_gives_one_reason() -> None:
    assert len(diagnose(score_max_delta(wide())).reasons) == 1


def test_high_draws_on_a_wide_bulk_stay_underfit_and_are_named() -> None:
    # A real full fine-tuning series had both: a bulk 10.9% wide and one draw 25 robust SDs above it, which set
    # epsilon. The guide reads the wide bulk first, but a person must see the high draws too.
    s = score_max_delta(with_spikes(wide(), 2))
    d = diagnose(s)
    assert d.label == "underfit" and s.spike_count == 2
    assert "add fine-tuning epochs" in d.reasons[0]
    assert d.reasons[1].startswith(f"2 draw(s) lie more than {DEFAULT_SPIKE_Z:g} robust SDs above the median")
    assert f"{s.max_over_median:.2f}× it) and set epsilon" in d.reasons[1] and "lower c" in d.reasons[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tight_bulk_with_spikes_is_overfit(seed: int) -> None:
    s = score_max_delta(spiky(seed))
    d = diagnose(s)
    assert d.label == "overfit"
    reason = d.reasons[0]
    assert "lower c" in reason
    assert "3 spike(s)" in reason
    assert f"{DEFAULT_SPIKE_Z:g} robust SDs" in reason
    assert not d.feasible


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tight_bulk_without_spikes_is_well_fit(seed: int) -> None:
    d = diagnose(score_max_delta(tight(seed)))
    assert d.label == "well_fit"
    assert "well fit" in d.reasons[0]
    assert d.feasible


def test_single_spike_is_overfit_with_default_min_spikes() -> None:
    if T.min_spikes > 1:
        pytest.skip("min_spikes re-calibrated above 1")
    assert diagnose(score_max_delta(spiky(k=1))).label == "overfit"


def test_min_spikes_threshold_is_honoured() -> None:
    s = score_max_delta(spiky(k=3))
    assert diagnose(s, thresholds=DiagnosisThresholds(min_spikes=3)).label == "overfit"
    assert diagnose(s, thresholds=DiagnosisThresholds(min_spikes=4)).label == "well_fit"


def test_max_bulk_spread_threshold_is_honoured() -> None:
    s = score_max_delta(tight())
    assert diagnose(s, thresholds=DiagnosisThresholds(max_bulk_spread=0.25 * T.max_bulk_spread)).label == "underfit"
    s = score_max_delta(wide())
    assert diagnose(s, thresholds=DiagnosisThresholds(max_bulk_spread=4 * T.max_bulk_spread)).label == "well_fit"


def test_too_few_draws_is_taken_as_well_fit() -> None:
    s = score_max_delta([1.0, 1.5, 0.5][: MIN_DRAWS - 1])
    d = diagnose(s)
    assert d.label == "well_fit"
    assert "too few" in d.reasons[0]


def test_nan_in_series_is_catastrophic() -> None:
    series = tight()
    series[17] = math.nan
    d = diagnose(score_max_delta(series))
    assert d.label == "catastrophic"
    assert "1 of 500 max-delta values are NaN or infinite" in d.reasons[0]
    assert "restart with a lower learning rate" in d.reasons[0]
    assert not d.feasible


def test_inf_in_series_is_catastrophic() -> None:
    series = np.append(tight(), math.inf)
    assert diagnose(score_max_delta(series)).label == "catastrophic"


def test_reported_failure_is_catastrophic() -> None:
    d = diagnose(score_max_delta(tight()), good_utility(), failure="non-finite loss")
    assert d.label == "catastrophic"
    assert d.failure == "non-finite loss"
    assert any("training failed (non-finite loss)" in r for r in d.reasons)
    assert not d.feasible


def test_collapsed_utility_is_catastrophic() -> None:
    u = score_utility([0.2] * 11, [0.3] * 11, baseline_macro=0.85, baseline_weighted=0.90)
    assert u.collapsed
    d = diagnose(score_max_delta(tight()), u)
    assert d.label == "catastrophic"
    assert any("utility collapsed" in r and "0.300" in r for r in d.reasons)


def test_collapse_at_majority_level_mentions_it() -> None:
    level = majority_weighted_f1(0.9)
    u = score_utility([0.5] * 11, [level] * 11, baseline_macro=0.85, baseline_weighted=0.90, majority_rate=0.9)
    d = diagnose(score_max_delta(tight()), u)
    assert d.label == "catastrophic"
    assert any(f"majority-class level {level:.3f}" in r for r in d.reasons)


def test_all_catastrophic_causes_are_listed() -> None:
    series = np.append(tight(), math.nan)
    u = score_utility([], [], baseline_macro=0.85, baseline_weighted=0.90)
    d = diagnose(score_max_delta(series), u, failure="diverged")
    assert d.label == "catastrophic"
    catastrophic = [r for r in d.reasons if "catastrophic" in r]
    assert len(catastrophic) == 3


def test_priority_underfit_over_overfit() -> None:
    s = score_max_delta(with_spikes(wide(), 3))
    assert s.spike_count == 3
    assert s.bulk_spread > T.max_bulk_spread
    assert diagnose(s).label == "underfit"


@pytest.mark.parametrize("series_kind", ["wide", "spiky", "wide_spiky"])
def test_priority_catastrophic_over_everything(series_kind: str) -> None:
    series = {"wide": wide(), "spiky": spiky(), "wide_spiky": with_spikes(wide(), 3)}[series_kind]
    s = score_max_delta(series)
    assert diagnose(s, failure="non-finite loss").label == "catastrophic"
    collapsed = score_utility([0.1] * 5, [0.1] * 5, baseline_macro=0.85, baseline_weighted=0.90)
    assert diagnose(s, collapsed).label == "catastrophic"
    assert diagnose(score_max_delta(np.append(series, math.nan))).label == "catastrophic"


def test_epsilon_and_utility_reasons() -> None:
    d = diagnose(score_max_delta(tight(), epsilon_cap=1.0), poor_utility())
    assert d.label == "well_fit"
    assert any("exceeds the target 1.00" in r for r in d.reasons)
    assert any(r.startswith("macro F1 median 0.600 is below the threshold 0.765") for r in d.reasons)
    assert any(r.startswith("weighted F1 median 0.700 is below the threshold 0.810") for r in d.reasons)
    d = diagnose(score_max_delta(tight(), epsilon_cap=100.0), good_utility())
    assert any("meets the target 100.00" in r for r in d.reasons)
    assert any(r.startswith("macro F1 median 0.780 meets") for r in d.reasons)


# --------------------------------------------------------------------------- margins


def test_margins_golden() -> None:
    thresholds = DiagnosisThresholds(max_bulk_spread=0.2)
    s = score_max_delta(HAND, epsilon_cap=50.0, spike_z=HAND_Z)
    d = diagnose(s, good_utility(), thresholds)
    assert set(d.margins) == {"bulk_spread", "spikes", "epsilon", "f1_macro", "f1_weighted"}
    assert d.margins["bulk_spread"] == pytest.approx(0.28 - 0.2)
    assert d.margins["spikes"] == pytest.approx(HAND_MAX_Z - HAND_Z)
    assert d.margins["epsilon"] == pytest.approx(60.0 - 50.0)
    assert d.margins["f1_macro"] == pytest.approx(0.765 - 0.78)  # threshold − value
    assert d.margins["f1_weighted"] == pytest.approx(0.81 - 0.85)
    assert d.label == "underfit"  # 0.28 > 0.2


def test_margin_signs() -> None:
    # a good fit: every margin on the good side (≤ 0)
    s = score_max_delta(tight(), epsilon_cap=100.0)
    d = diagnose(s, good_utility())
    assert d.margins["bulk_spread"] == pytest.approx(s.bulk_spread - T.max_bulk_spread)
    assert d.margins["spikes"] == pytest.approx(s.max_robust_z - DEFAULT_SPIKE_Z)
    assert d.margins["epsilon"] == pytest.approx(s.epsilon - 100.0)
    assert all(v < 0 for v in d.margins.values()), d.margins
    # a bad fit: every margin on the bad side (> 0)
    s = score_max_delta(with_spikes(wide(), 3), epsilon_cap=1.0)
    d = diagnose(s, poor_utility())
    assert all(v > 0 for v in d.margins.values()), d.margins
    assert d.margins["f1_macro"] == pytest.approx(0.765 - 0.6)
    assert d.margins["f1_weighted"] == pytest.approx(0.81 - 0.7)


def test_margins_without_target_or_utility() -> None:
    d = diagnose(score_max_delta(tight()))
    assert set(d.margins) == {"bulk_spread", "spikes"}
    assert d.epsilon_ok is None and d.utility_ok is None


def test_spike_margin_agrees_with_spike_count() -> None:
    for series, spikes in ((tight(), False), (spiky(), True)):
        s = score_max_delta(series)
        d = diagnose(s)
        assert (d.margins["spikes"] > 0) == spikes == (s.spike_count > 0)


# --------------------------------------------------------------------------- feasible


def test_feasible_only_when_well_fit_and_targets_met() -> None:
    good = diagnose(score_max_delta(tight(), epsilon_cap=100.0), good_utility())
    assert good.label == "well_fit" and good.epsilon_ok is True and good.utility_ok is True
    assert good.feasible

    eps_bad = diagnose(score_max_delta(tight(), epsilon_cap=1.0), good_utility())
    assert eps_bad.label == "well_fit" and eps_bad.epsilon_ok is False
    assert not eps_bad.feasible

    util_bad = diagnose(score_max_delta(tight(), epsilon_cap=100.0), poor_utility())
    assert util_bad.label == "well_fit" and util_bad.utility_ok is False
    assert not util_bad.feasible

    for series in (wide(), spiky()):
        d = diagnose(score_max_delta(series, epsilon_cap=100.0), good_utility())
        assert d.epsilon_ok and d.utility_ok
        assert not d.feasible


def test_feasible_without_targets() -> None:
    d = diagnose(score_max_delta(tight()))
    assert d.epsilon_ok is None and d.utility_ok is None
    assert d.feasible


def test_epsilon_ok_at_exactly_the_target() -> None:
    d = diagnose(score_max_delta(HAND, epsilon_cap=60.0))
    assert d.epsilon_ok is True


# --------------------------------------------------------------------------- constraint values


def test_constraint_values_golden() -> None:
    thresholds = DiagnosisThresholds(max_bulk_spread=0.2)
    s = score_max_delta(HAND, epsilon_cap=50.0, spike_z=HAND_Z)
    values = constraint_values(s, good_utility(), thresholds)
    assert list(values) == KEYS
    assert values["epsilon"] == pytest.approx(60.0 / 50.0 - 1)  # 0.2
    assert values["f1_macro"] == pytest.approx((0.765 - 0.78) / 0.85)
    assert values["f1_weighted"] == pytest.approx((0.81 - 0.85) / 0.90)
    assert values["fit_spread"] == pytest.approx(0.28 / 0.2 - 1)  # 0.4
    assert values["fit_spikes"] == pytest.approx(HAND_MAX_Z / HAND_Z - 1)


def test_constraint_values_with_default_thresholds() -> None:
    s = score_max_delta(tight(), epsilon_cap=100.0)
    u = good_utility()
    values = constraint_values(s, u)
    assert values["epsilon"] == pytest.approx(s.epsilon / 100.0 - 1)
    assert values["fit_spread"] == pytest.approx(s.bulk_spread / T.max_bulk_spread - 1)
    assert values["fit_spread"] == pytest.approx(-0.5, abs=0.15)  # bulk at half the threshold
    assert values["fit_spikes"] == pytest.approx(s.max_robust_z / DEFAULT_SPIKE_Z - 1)
    assert values["f1_macro"] == pytest.approx(-u.margin_macro / u.baseline_macro)
    assert all(v <= 0 for v in values.values())  # a feasible fit satisfies every constraint


def test_constraint_signs_follow_the_diagnosis() -> None:
    underfit = constraint_values(score_max_delta(wide(), epsilon_cap=100.0), good_utility())
    assert underfit["fit_spread"] > 0 and underfit["fit_spikes"] <= 0
    assert underfit["fit_spread"] == pytest.approx(1.0, abs=0.3)  # bulk at twice the threshold
    overfit = constraint_values(score_max_delta(spiky(), epsilon_cap=100.0), good_utility())
    assert overfit["fit_spread"] <= 0 and overfit["fit_spikes"] > 0
    eps_bad = constraint_values(score_max_delta(tight(), epsilon_cap=1.0), good_utility())
    assert eps_bad["epsilon"] > 0
    util_bad = constraint_values(score_max_delta(tight(), epsilon_cap=100.0), poor_utility())
    assert util_bad["f1_macro"] > 0 and util_bad["f1_weighted"] > 0


def test_constraint_values_are_capped() -> None:
    # ε far above target, an enormous spike on a tight bulk: capped at +CAP
    s = score_max_delta(list(tight()) + [1e6], epsilon_cap=1.0)
    assert s.max_robust_z > 100 * s.spike_z
    values = constraint_values(s, good_utility())
    assert values["epsilon"] == CONSTRAINT_CAP
    assert values["fit_spikes"] == CONSTRAINT_CAP
    # utility far above a tiny baseline: capped at −CAP
    u = score_utility([0.9] * 5, [0.9] * 5, baseline_macro=0.01, baseline_weighted=0.01)
    assert not u.collapsed
    values = constraint_values(score_max_delta(tight(), epsilon_cap=100.0), u)
    assert values["f1_macro"] == -CONSTRAINT_CAP and values["f1_weighted"] == -CONSTRAINT_CAP
    for v in values.values():
        assert math.isfinite(v) and -CONSTRAINT_CAP <= v <= CONSTRAINT_CAP


def test_constraint_values_too_few_draws_are_finite() -> None:
    values = constraint_values(score_max_delta([1.0, 1.1, 0.9], epsilon_cap=10.0), good_utility())
    assert list(values) == KEYS
    assert all(math.isfinite(v) and abs(v) <= CONSTRAINT_CAP for v in values.values())
    assert values["fit_spread"] == 0.0  # too few draws to measure the spread: not judged, as in diagnose


def test_constraint_values_catastrophic_flag() -> None:
    values = constraint_values(score_max_delta(tight(), epsilon_cap=100.0), good_utility(), catastrophic=True)
    assert values == {key: CONSTRAINT_CAP for key in KEYS}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_constraint_values_nonfinite_series(bad: float) -> None:
    values = constraint_values(score_max_delta(np.append(tight(), bad), epsilon_cap=100.0), good_utility())
    assert values == {key: CONSTRAINT_CAP for key in KEYS}


def test_constraint_values_empty_series() -> None:
    values = constraint_values(score_max_delta([], epsilon_cap=100.0), good_utility())
    assert values == {key: CONSTRAINT_CAP for key in KEYS}


def test_constraint_values_collapsed_utility() -> None:
    for u in (score_utility([0.1] * 5, [0.1] * 5, baseline_macro=0.85, baseline_weighted=0.90),
              score_utility([], [], baseline_macro=0.85, baseline_weighted=0.90)):
        assert u.collapsed
        values = constraint_values(score_max_delta(tight(), epsilon_cap=100.0), u)
        assert values == {key: CONSTRAINT_CAP for key in KEYS}


def test_constraint_values_need_epsilon_target() -> None:
    with pytest.raises(ValueError, match="epsilon_cap"):
        constraint_values(score_max_delta(tight()), good_utility())


def test_constraint_keys_are_always_the_same() -> None:
    cases = [
        (score_max_delta(tight(), epsilon_cap=100.0), good_utility(), False),
        (score_max_delta(wide(), epsilon_cap=1.0), poor_utility(), False),
        (score_max_delta(spiky(), epsilon_cap=100.0), good_utility(), False),
        (score_max_delta(np.append(tight(), math.nan), epsilon_cap=100.0), good_utility(), False),
        (score_max_delta([], epsilon_cap=100.0), good_utility(), False),
        (score_max_delta([2.0], epsilon_cap=100.0), good_utility(), False),
        (score_max_delta([1.0] * 20, epsilon_cap=100.0), good_utility(), False),
        (score_max_delta(tight(), epsilon_cap=100.0), score_utility([], [], baseline_macro=0.8,
                                                                      baseline_weighted=0.8), False),
        (score_max_delta(tight(), epsilon_cap=100.0), good_utility(), True),
        (score_max_delta(tight(), epsilon_cap=100.0), good_utility(statistic="q10"), False),
    ]
    for s, u, catastrophic in cases:
        values = constraint_values(s, u, catastrophic=catastrophic)
        assert list(values) == KEYS
        assert all(isinstance(v, float) and math.isfinite(v) and abs(v) <= CONSTRAINT_CAP for v in values.values())


# --------------------------------------------------------------------------- recommend


def fit(label: str, seed: int) -> Diagnosis:
    """A diagnosis of the given label from a synthetic series (targets met where it matters)."""
    series = {"underfit": wide, "overfit": spiky, "feasible": tight}[label](seed)
    d = diagnose(score_max_delta(series, epsilon_cap=100.0), good_utility())
    assert d.label == ("well_fit" if label == "feasible" else label)
    assert d.feasible == (label == "feasible")
    return d


def test_case_study_from_synthetic_fits() -> None:
    c, epochs = 1.0, 7
    actions = []
    for i, ((expected_c, expected_epochs), label) in enumerate(CASE_STUDY):
        assert c == pytest.approx(expected_c) and epochs == expected_epochs, f"fit {i + 1}"
        rec = recommend(fit(label, seed=i), c=c, epochs=epochs)
        assert isinstance(rec, Recommendation)
        actions.append(rec.action)
        if i + 1 < len(CASE_STUDY):
            (next_c, next_epochs), _ = CASE_STUDY[i + 1]
            assert rec.c == pytest.approx(next_c) and rec.epochs == next_epochs, f"after fit {i + 1}"
        c, epochs = rec.c, rec.epochs
    assert actions == ["add_epochs", "lower_c", "add_epochs", "add_epochs", "lower_c", "add_epochs", "add_epochs",
                       "stop"]
    assert c == pytest.approx(0.7) and epochs == 13  # stop keeps the final pair


def test_case_study_from_constructed_diagnoses() -> None:
    c, epochs = 1.0, 7
    for (expected_c, expected_epochs), label in CASE_STUDY:
        assert c == pytest.approx(expected_c) and epochs == expected_epochs
        d = Diagnosis(label="well_fit" if label == "feasible" else label, margins={}, reasons=(),  # type: ignore[arg-type]
                      epsilon_ok=True, utility_ok=True)
        rec = recommend(d, c=c, epochs=epochs)
        c, epochs = rec.c, rec.epochs
    assert rec.action == "stop"


def test_repeated_c_steps_do_not_drift() -> None:
    d = Diagnosis(label="overfit", margins={}, reasons=(), epsilon_ok=None, utility_ok=None)
    c = 1.0
    for expected in (0.85, 0.7, 0.55, 0.4, 0.25):
        c = recommend(d, c=c, epochs=10).c
        assert c == pytest.approx(expected, abs=1e-12)


def test_well_fit_epsilon_above_target_lowers_c() -> None:
    d = diagnose(score_max_delta(tight(), epsilon_cap=1.0), good_utility())
    assert d.label == "well_fit" and d.epsilon_ok is False
    rec = recommend(d, c=1.0, epochs=13)
    assert rec.action == "lower_c"
    assert rec.c == pytest.approx(0.85)
    assert rec.epochs == 7
    assert "epsilon above target" in rec.sentence


def test_well_fit_epsilon_ok_utility_failing_revisits_targets() -> None:
    d = diagnose(score_max_delta(tight(), epsilon_cap=100.0), poor_utility())
    assert d.label == "well_fit" and d.epsilon_ok is True and d.utility_ok is False
    rec = recommend(d, c=0.85, epochs=10)
    assert rec.action == "revisit_targets"
    assert rec.c == pytest.approx(0.85) and rec.epochs == 10
    assert "targets must be revisited" in rec.sentence


def test_epsilon_is_fixed_before_utility() -> None:
    d = diagnose(score_max_delta(tight(), epsilon_cap=1.0), poor_utility())
    assert recommend(d, c=1.0, epochs=10).action == "lower_c"


def test_catastrophic_restarts_with_lower_lr() -> None:
    d = diagnose(score_max_delta(tight()), failure="non-finite loss")
    rec = recommend(d, c=0.85, epochs=10)
    assert rec.action == "restart_lower_lr"
    assert rec.c == pytest.approx(0.85) and rec.epochs == 10
    assert "lower learning rate" in rec.sentence


def test_custom_steps_are_honoured() -> None:
    underfit = fit("underfit", 0)
    rec = recommend(underfit, c=0.9, epochs=5, epochs_step=2)
    assert rec.action == "add_epochs" and rec.epochs == 7 and rec.c == pytest.approx(0.9)
    assert "add 2" in rec.sentence
    overfit = fit("overfit", 0)
    rec = recommend(overfit, c=0.9, epochs=11, c_step=0.2, restart_epochs=4)
    assert rec.action == "lower_c" and rec.c == pytest.approx(0.7) and rec.epochs == 4
    assert "0.2" in rec.sentence and "4 epochs" in rec.sentence
    eps_bad = diagnose(score_max_delta(tight(), epsilon_cap=1.0))
    rec = recommend(eps_bad, c=0.5, epochs=9, c_step=0.1, restart_epochs=3)
    assert rec.action == "lower_c" and rec.c == pytest.approx(0.4) and rec.epochs == 3


def test_recommend_without_current_pair() -> None:
    assert recommend(fit("underfit", 0)).epochs is None
    rec = recommend(fit("overfit", 0))
    assert rec.c is None and rec.epochs == 7
    assert recommend(fit("feasible", 0)).action == "stop"


def test_recommend_never_proposes_a_non_positive_c() -> None:
    overfit = diagnose(score_max_delta(spiky()))
    assert overfit.label == "overfit"
    move = recommend(overfit, c=0.1, epochs=13)
    assert move.action == "revisit_targets" and move.c == 0.1 and "positive" in move.sentence


def test_empty_series_is_catastrophic_with_a_clear_reason() -> None:
    d = diagnose(score_max_delta([]))
    assert d.label == "catastrophic" and "no max-delta values" in d.reasons[0]


def test_invalid_thresholds_are_rejected() -> None:
    with pytest.raises(ValueError, match="max_bulk_spread"):
        DiagnosisThresholds(max_bulk_spread=0.0)
    with pytest.raises(ValueError, match="epsilon_cap"):
        score_max_delta(tight(), epsilon_cap=0.0)
