"""The typed claim: every field read back strictly, sealed over its whole canonical form, verified only under the key
that sealed it, and the only value a release writer accepts."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from swagppm import ConfigError
from swagppm.claim import (
    Accounting,
    ClaimRefused,
    SealedClaim,
    StudyClaim,
    VerifiedClaim,
    is_data_set,
    key_id,
)

KEY, OTHER = bytes(range(32)), bytes(32)
CLAIM = StudyClaim(epsilon_cap=2.5, mode="accounted", data_public=False, delta=1e-6, max_records=1000,
                   accounting=Accounting(trials_shape=1.0, trials_mean=10.0), posterior="exact",
                   prior_scale=(0.1, 1.0), nll_bound=4.0, public_risks=True, data_set="osha-2024", study_id="abc")
# One other value per field: the seal must change with each.
CHANGES: dict[str, Any] = {"epsilon_cap": 2.6, "mode": "unaccounted", "data_public": True, "delta": 1e-9,
                           "max_records": 1001, "accounting": Accounting(trials_shape=1.0, trials_mean=11.0),
                           "posterior": "laplace", "prior_scale": (0.1, 2.0), "nll_bound": 4.5, "public_risks": False,
                           "data_set": "osha-2025", "study_id": "abd", "ranked_at": 3.0}


def test_a_claim_reads_back_from_its_json_form_as_it_was() -> None:
    assert StudyClaim.from_dict(CLAIM.to_dict()) == CLAIM
    flat = dataclasses.replace(CLAIM, prior_scale=math.inf, mode="unaccounted", accounting=None)
    assert flat.to_dict()["prior_scale"] is None and StudyClaim.from_dict(flat.to_dict()) == flat
    assert CLAIM.to_dict()["prior_scale"] == [0.1, 1.0] and CLAIM.covers_prior_scale(0.5)
    assert not CLAIM.covers_prior_scale(1.5) and dataclasses.replace(CLAIM, ranked_at=7.0).ranking_cap == 7.0


def test_the_seal_covers_every_field_and_not_the_order_of_the_keys() -> None:
    assert set(CHANGES) == {field.name for field in dataclasses.fields(StudyClaim)}
    seal = SealedClaim.of(CLAIM, KEY).seal
    for name, value in CHANGES.items():
        changed = dataclasses.replace(CLAIM, **({name: value} | ({"accounting": None} if name == "mode" else {})))
        assert SealedClaim.of(changed, KEY).seal != seal, name
    reordered = StudyClaim.from_dict(dict(reversed(list(CLAIM.to_dict().items()))))
    assert SealedClaim.of(reordered, KEY).seal == seal


def test_a_sealed_claim_verifies_under_its_key_only_and_not_once_edited() -> None:
    sealed = SealedClaim.of(CLAIM, KEY)
    assert sealed.key == key_id(KEY) != key_id(OTHER) and len(sealed.key) == 16
    verified = sealed.verify(KEY)
    assert isinstance(verified, VerifiedClaim) and verified.claim == CLAIM and verified.key == sealed.key
    with pytest.raises(ClaimRefused, match="sealed with owner key") as other:
        sealed.verify(OTHER)
    assert other.value.reason == "key"
    edited = SealedClaim.from_dict(sealed.to_dict() | {"terms": CLAIM.to_dict() | {"epsilon_cap": 9.0}})
    with pytest.raises(ClaimRefused, match="does not match its seal") as seal:
        edited.verify(KEY)
    assert seal.value.reason == "seal"


def test_a_verified_claim_is_made_by_a_seals_check_alone() -> None:
    with pytest.raises(TypeError, match="comes only from SealedClaim.verify"):
        VerifiedClaim(claim=CLAIM, key=key_id(KEY), token=None)
    moved = SealedClaim.of(CLAIM, KEY).verify(KEY).on_records("other-records")
    assert moved.claim == dataclasses.replace(CLAIM, data_set="other-records") and isinstance(moved, VerifiedClaim)


@pytest.mark.parametrize(("field", "value", "says"), [
    ("epsilon_cap", 0, "claim.epsilon_cap = 0: must be a positive number"),
    ("epsilon_cap", True, "claim.epsilon_cap = true: must be a positive number"),
    ("mode", "adaptive", "claim.mode = adaptive: must be one of public-proxy, accounted, unaccounted"),
    ("delta", 1.0, "claim.delta = 1.0: must be a number in (0, 1) or none"),
    ("max_records", 1.5, "claim.max_records = 1.5: must be an integer of at least 2 or none"),
    ("accounting", None, "claim.accounting = none: must be given exactly when the mode is accounted"),
    ("accounting", {"trials_shape": 1.0}, "claim.accounting = {'trials_shape': 1.0}: must be a table of trials_shape"),
    ("prior_scale", [1.0, 0.1], "claim.prior_scale = (1.0, 0.1): must be a positive number, none (the flat prior) or"),
    ("public_risks", "yes", "claim.public_risks = yes: must be true or false"),
    ("data_set", "../ledger", "claim.data_set = ../ledger: must be letters, digits"),
])
def test_a_malformed_field_is_named(field: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError) as info:
        StudyClaim.from_dict(CLAIM.to_dict() | {field: value})
    assert str(info.value).startswith(says)


def test_a_missing_or_unknown_field_is_named_and_a_sealed_form_is_checked_whole() -> None:
    terms = CLAIM.to_dict()
    with pytest.raises(ConfigError, match="^claim: field data_set is missing$"):
        StudyClaim.from_dict({key: value for key, value in terms.items() if key != "data_set"})
    with pytest.raises(ConfigError, match="^claim: unknown field cap$"):
        StudyClaim.from_dict(terms | {"cap": 1.0})
    sealed = SealedClaim.of(CLAIM, KEY).to_dict()
    with pytest.raises(ConfigError, match="^claim.terms.epsilon_cap = -1: must be a positive number"):
        SealedClaim.from_dict(sealed | {"terms": terms | {"epsilon_cap": -1}})
    with pytest.raises(ConfigError, match="must be a table of terms, seal and key"):
        SealedClaim.from_dict(terms)


@pytest.mark.parametrize(("name", "ok"), [("osha-2024", True), ("a.b_c", True), ("", False), (".hidden", False),
                                          ("a/b", False), ("é", False), ("x" * 129, False), (3, False)])
def test_a_data_set_names_a_ledger_file_and_nothing_else(name: object, ok: bool) -> None:
    assert is_data_set(name) is ok
