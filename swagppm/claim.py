"""A study's claim as one typed value, sealed with the data owner's key, and what a release needs to trust it.

``StudyClaim`` holds everything a release may claim and the card states, fixed when
a study is created (the study file's cap ε*, the tuning mode, whether the data are
public, δ and the declared public record bound, the accounted trial count's
distribution, the pseudo posterior's settings, and the declared data set whose
privacy ledger composes it). ``tuner.tuning.study_claim`` is its one constructor
from a study file; ``from_dict`` reads a stored or exported one back, refusing any
field that is missing or of the wrong kind.

A claim is sealed (``SealedClaim.seal``): an HMAC-SHA-256 over its canonical JSON
under the owner's key, with the key's id beside it. Whoever edits any field, in the
study database or an export, breaks the seal. ``SealedClaim.verify`` checks it under
a key and gives the only value a release writer accepts, a ``VerifiedClaim``; this
module cannot know whose key it was handed (``tuner.keys`` keeps the owner's, created
once per installation), so the gate that gets it right is ``tuner.release``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeGuard, get_args

from swagppm.errors import ConfigError

Mode = Literal["public-proxy", "accounted", "unaccounted"]
PUBLIC_PROXY: Final = "public-proxy"
ACCOUNTED: Final = "accounted"
UNACCOUNTED: Final = "unaccounted"
DATA_SET_CHARACTERS = "letters, digits, '.', '_' or '-', at most 128 characters, not starting with '.'"
_KEY_ID_LABEL = b"swagppm-tune owner key id"
_VERIFIED = object()  # only ``SealedClaim.verify`` holds it: no other code makes a VerifiedClaim


class ClaimRefused(ConfigError):
    """A claim that does not pass its seal (``reason``: "seal", edited, or "key", sealed under another key)."""

    def __init__(self, message: str, *, reason: Literal["seal", "key"]) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, kw_only=True)
class Accounting:
    """An accounted study's hidden trial count: a truncated negative binomial of shape η and mean (public terms)."""

    trials_shape: float
    trials_mean: float


@dataclass(frozen=True, kw_only=True)
class StudyClaim:
    """What a study's releases may claim, fixed when it is created (see the module docstring).

    ``prior_scale`` is the prior's scale s (inf: the flat prior) or the searched
    ``(min, max)``; ``study_id`` names the study in its data set's ledger (None: a
    configuration released without a study); ``ranked_at`` is the cap a rejudged study
    ranks its trials against (its releases still claim ``epsilon_cap``).
    """

    epsilon_cap: float
    mode: Mode
    data_public: bool
    delta: float | None
    max_records: int | None
    accounting: Accounting | None
    posterior: str
    prior_scale: float | tuple[float, float]
    nll_bound: float | None
    public_risks: bool
    data_set: str
    study_id: str | None = None
    ranked_at: float | None = None

    def __post_init__(self) -> None:
        _check(_positive(self.epsilon_cap), "epsilon_cap", self.epsilon_cap, "a positive number")
        _check(self.mode in get_args(Mode), "mode", self.mode, f"one of {', '.join(get_args(Mode))}")
        _check(isinstance(self.data_public, bool), "data_public", self.data_public, "true or false")
        _check(self.delta is None or (_number(self.delta) and 0 < self.delta < 1), "delta", self.delta,
               "a number in (0, 1) or none")
        _check(self.max_records is None or (_integer(self.max_records) and self.max_records >= 2), "max_records",
               self.max_records, "an integer of at least 2 or none")
        _check((self.accounting is not None) == (self.mode == ACCOUNTED), "accounting", self.accounting,
               "given exactly when the mode is accounted")
        _check(isinstance(self.posterior, str) and bool(self.posterior), "posterior", self.posterior, "a name")
        scale = self.prior_scale
        _check(_positive(scale, infinite=True) or (isinstance(scale, tuple) and len(scale) == 2
                                                   and all(_positive(s) for s in scale) and scale[0] <= scale[1]),
               "prior_scale", scale, "a positive number, none (the flat prior) or [min, max]")
        _check(self.nll_bound is None or _positive(self.nll_bound), "nll_bound", self.nll_bound,
               "a positive number or none")
        _check(isinstance(self.public_risks, bool), "public_risks", self.public_risks, "true or false")
        _check(is_data_set(self.data_set), "data_set", self.data_set, DATA_SET_CHARACTERS)
        _check(self.study_id is None or (isinstance(self.study_id, str) and bool(self.study_id)), "study_id",
               self.study_id, "a string or none")
        _check(self.ranked_at is None or _positive(self.ranked_at), "ranked_at", self.ranked_at,
               "a positive number or none")

    def to_dict(self) -> dict[str, Any]:
        """Its JSON form (the flat prior as none, a searched prior scale as [min, max])."""
        scale = self.prior_scale
        return {"epsilon_cap": self.epsilon_cap, "mode": self.mode, "data_public": self.data_public,
                "delta": self.delta, "max_records": self.max_records,
                "accounting": None if self.accounting is None else {"trials_shape": self.accounting.trials_shape,
                                                                     "trials_mean": self.accounting.trials_mean},
                "posterior": self.posterior,
                "prior_scale": list(scale) if isinstance(scale, tuple) else None if math.isinf(scale) else scale,
                "nll_bound": self.nll_bound, "public_risks": self.public_risks, "data_set": self.data_set,
                "study_id": self.study_id, "ranked_at": self.ranked_at}

    @classmethod
    def from_dict(cls, values: object) -> StudyClaim:
        """A claim read back from its JSON form; a missing, unknown or malformed field is a ``ConfigError`` naming it
        (``claim.FIELD = value: must be ...``)."""
        if not isinstance(values, Mapping):
            raise ConfigError(f"claim = {_shown(values)}: must be a table")
        names = set(cls.__dataclass_fields__)
        unknown, missing = sorted(set(values) - names), sorted(names - set(values) - {"study_id", "ranked_at"})
        if unknown or missing:
            raise ConfigError(f"claim: {'unknown field ' + unknown[0] if unknown else 'field ' + missing[0]}"
                              f"{'' if unknown else ' is missing'}")
        fields = dict(values)
        accounting = fields["accounting"]
        if accounting is not None:
            _check(isinstance(accounting, Mapping) and set(accounting) == {"trials_shape", "trials_mean"}
                   and all(_number(v) for v in accounting.values()), "accounting", accounting,
                   "a table of trials_shape and trials_mean")
            fields["accounting"] = Accounting(trials_shape=float(accounting["trials_shape"]),
                                              trials_mean=float(accounting["trials_mean"]))
        scale = fields["prior_scale"]
        fields["prior_scale"] = math.inf if scale is None else tuple(scale) if isinstance(scale, list) else scale
        return cls(**fields)

    def canonical(self) -> bytes:
        """The bytes a seal covers: the whole claim, keys sorted, no spaces."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    @property
    def ranking_cap(self) -> float:
        """The cap its trials are judged against: a rejudged study's own, else the claimed one."""
        return self.epsilon_cap if self.ranked_at is None else self.ranked_at

    def covers_prior_scale(self, scale: float) -> bool:
        """Whether a trial's prior scale is the claim's, or within its searched range."""
        claimed = self.prior_scale
        return claimed[0] <= scale <= claimed[1] if isinstance(claimed, tuple) else scale == claimed


def key_id(key: bytes) -> str:
    """A short public name of a key (16 hex digits of an HMAC under it): which key sealed a claim, never the key."""
    return hmac.new(key, _KEY_ID_LABEL, hashlib.sha256).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class SealedClaim:
    """A claim with its seal (an HMAC over ``claim.canonical()``) and the id of the key that made it."""

    claim: StudyClaim
    seal: str
    key: str

    @classmethod
    def of(cls, claim: StudyClaim, key: bytes) -> SealedClaim:
        """Seal ``claim`` under ``key``."""
        return cls(claim=claim, seal=_mac(claim, key), key=key_id(key))

    def verify(self, key: bytes) -> VerifiedClaim:
        """The claim, once its seal checks under ``key`` (``ClaimRefused`` otherwise: sealed under another key, or
        edited since)."""
        if not hmac.compare_digest(self.key, key_id(key)):
            raise ClaimRefused(f"the claim was sealed with owner key {self.key}, not with the key given (id "
                               f"{key_id(key)})", reason="key")
        if not hmac.compare_digest(self.seal, _mac(self.claim, key)):
            raise ClaimRefused("the claim does not match its seal: a field was edited after it was sealed",
                               reason="seal")
        return VerifiedClaim(claim=self.claim, key=self.key, token=_VERIFIED)

    def to_dict(self) -> dict[str, Any]:
        return {"terms": self.claim.to_dict(), "seal": self.seal, "key": self.key}

    @classmethod
    def from_dict(cls, values: object) -> SealedClaim:
        """Read back ``to_dict``'s form; a malformed one is a ``ConfigError`` naming the field."""
        if not isinstance(values, Mapping) or set(values) != {"terms", "seal", "key"}:
            raise ConfigError("claim: must be a table of terms, seal and key (a claim sealed when its study was "
                              "created)")
        for name in ("seal", "key"):
            if not isinstance(values[name], str):
                raise ConfigError(f"claim.{name} = {_shown(values[name])}: must be a string")
        try:
            claim = StudyClaim.from_dict(values["terms"])
        except ConfigError as error:
            raise ConfigError(str(error).replace("claim", "claim.terms", 1)) from None
        return cls(claim=claim, seal=values["seal"], key=values["key"])


@dataclass(frozen=True, kw_only=True)
class VerifiedClaim:
    """A claim whose seal was checked (``SealedClaim.verify`` is its only maker): what a release may state."""

    claim: StudyClaim
    key: str
    token: object = field(repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.token is not _VERIFIED:
            raise TypeError("a VerifiedClaim comes only from SealedClaim.verify: seal the claim and verify it")

    def on_records(self, data_set: str) -> VerifiedClaim:
        """The claim of this configuration fitted on other records (``--data``): its data set, nothing else, changed
        (its seal covered the configuration's choice, not the new records)."""
        moved = dataclasses.replace(self.claim, data_set=data_set, data_public=False)
        return VerifiedClaim(claim=moved, key=self.key, token=_VERIFIED)


def is_data_set(name: object) -> TypeGuard[str]:
    """Whether ``name`` is a data-set id: it names a ledger file, so letters, digits, '.', '_' and '-' only."""
    return (isinstance(name, str) and 0 < len(name) <= 128 and not name.startswith(".")
            and all(ch.isascii() and (ch.isalnum() or ch in "._-") for ch in name))


def _mac(claim: StudyClaim, key: bytes) -> str:
    return hmac.new(key, claim.canonical(), hashlib.sha256).hexdigest()


def _check(ok: bool, name: str, value: object, expected: str) -> None:
    if not ok:
        raise ConfigError(f"claim.{name} = {_shown(value)}: must be {expected}")


def _shown(value: object) -> str:
    return "none" if value is None else str(value).lower() if isinstance(value, bool) else str(value)[:40]


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _positive(value: object, *, infinite: bool = False) -> bool:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return number and value > 0 and (math.isfinite(value) or infinite)  # type: ignore[operator, arg-type]
