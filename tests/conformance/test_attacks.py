"""What every registered membership-inference attack must do, checked through the registry.

A new attack (``scorers.register_attack``) gets these tests for free: it sees no
signal where members and non-members are alike, finds the gap where members have
lower losses, ignores which records are members, and returns aggregates only.
"""

from __future__ import annotations

import numpy as np
import pytest

import scorers
from scorers import Attack

ATTACKS = {attack.name: attack for attack in scorers.attacks()}
N = 400


def losses(member_shift: float, *, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Member and non-member losses of four classes of different difficulty, members lower by ``member_shift``."""
    rng = np.random.default_rng(seed)
    classes = rng.integers(0, 4, size=2 * N)
    base = rng.exponential(1.0, size=2 * N) + classes
    return base[:N] - member_shift, base[N:], classes[:N], classes[N:]


def scores(attack: Attack, members: np.ndarray, non_members: np.ndarray, member_classes: np.ndarray,
           non_member_classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return attack.scores(members, non_members, *((member_classes, non_member_classes) if attack.needs_classes else ()))


def test_the_built_in_attacks_are_registered_in_order() -> None:
    assert list(ATTACKS)[:2] == ["loss_threshold", "class_calibrated"]


@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_scores_every_record_once_in_order(name: str) -> None:
    members, non_members, member_classes, non_member_classes = losses(0.5, seed=0)
    member_scores, non_member_scores = scores(ATTACKS[name], members, non_members, member_classes,
                                              non_member_classes)
    assert member_scores.shape == members.shape and non_member_scores.shape == non_members.shape
    assert np.isfinite(member_scores).all() and np.isfinite(non_member_scores).all()


@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_scores_records_alike_whoever_is_a_member(name: str) -> None:
    """Swapping which records are members swaps the scores: the score never reads membership."""
    members, non_members, member_classes, non_member_classes = losses(0.5, seed=1)
    forward = scores(ATTACKS[name], members, non_members, member_classes, non_member_classes)
    backward = scores(ATTACKS[name], non_members, members, non_member_classes, member_classes)
    np.testing.assert_allclose(forward[0], backward[1])
    np.testing.assert_allclose(forward[1], backward[0])


@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_sees_no_signal_without_a_gap_and_finds_a_gap(name: str) -> None:
    results = {}
    for shift in (0.0, 1.0):
        members, non_members, member_classes, non_member_classes = losses(shift, seed=2)
        audit = scorers.membership_audit(members, non_members, member_classes=member_classes,
                                         non_member_classes=non_member_classes)
        results[shift] = next(result for result in audit if result.attack == name)
    assert abs(results[0.0].auc - 0.5) < 0.06
    assert results[1.0].auc_interval[0] > 0.6
    assert results[1.0].epsilon_lower_bound > results[0.0].epsilon_lower_bound


@pytest.mark.parametrize("name", ATTACKS)
def test_an_attack_joins_the_family_wise_audit_with_aggregates_only(name: str) -> None:
    members, non_members, member_classes, non_member_classes = losses(0.3, seed=3)
    audit = scorers.privacy_audit(members, non_members, member_classes, non_member_classes)
    assert name in {attack.attack for attack in audit.attacks}
    published = repr(audit.to_dict())
    assert not any(f"{value:.6g}" in published for value in members[:20])
