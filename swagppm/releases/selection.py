"""Private selection of the released draw: the first secret draw to reach a utility threshold, random stopping.

Liu & Talwar (2019): draw candidates from the stage-2 posterior, score each on a *selection set*,
release the first that reaches the threshold, and give up after a random number of
candidates (geometric, so stopping after each miss is a coin flip). The procedure
then costs a small multiple of one draw's ε (about 3ε), which the caller computes
with its accountant and passes in as ``Selection.cost``.

That cost holds only when the selection set is public: scored on the private test
split, the choice of draw depends on private records in a way no accountant here
covers, and the release says so (``accounted`` false). A file declared public
that shares a text with the private data (compared as the model's tokenizer
normalises texts, and ignoring letter case, width and spacing) is refused (saying so on the card would
tell whether one record is in a public set). How many candidates were tried, and
the score on the private split, depend on the private data too: they go to the
owner-only report, never to the public card. ``public_scores`` scores the
released draw on a public evaluation set by the same rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swagppm.config import PRIVATE_TEST, check_stop_probability
from swagppm.data.public import read_public_records
from swagppm.errors import ConfigError, ReleaseRefused
from swagppm.posteriors.base import Posterior
from swagppm.resources import Resources
from swagppm.train.engine import Net, Split
from swagppm.train.rng import secret_noise
from swagppm.utility import f1_pair

METRICS = ("f1_macro", "f1_weighted")


class SelectionFailed(ReleaseRefused):
    """No candidate reached the threshold within the random budget: nothing is released (the attempt still cost ε)."""


@dataclass(frozen=True, kw_only=True)
class Selection:
    """How the released draw is chosen: ``metric`` >= ``threshold`` on ``source``, within ``rounds`` candidates.

    ``source`` is a file of records the owner declares public (same columns as the
    training data), or ``PRIVATE_TEST`` for the private test split (then unaccounted).
    ``rounds`` is the candidate budget, drawn by the caller once from fresh entropy
    (Geometric(``stop_probability``) on 1, 2, ...); it must not depend on the data.
    ``cost`` is the accountant's figure for a public selection set (total ε, δ, the
    library), copied into the card when the selection is accounted.
    """

    source: str
    threshold: float
    rounds: int
    stop_probability: float
    metric: str = "f1_macro"
    cost: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.metric not in METRICS:
            raise ConfigError(f"selection metric {self.metric!r}: use one of {', '.join(METRICS)}")
        if not 0.0 <= self.threshold <= 1.0:
            raise ConfigError(f"selection threshold {self.threshold!r}: an F1 score in [0, 1]")
        if self.rounds < 1:
            raise ConfigError(f"selection rounds {self.rounds!r}: at least 1")
        check_stop_probability(self.stop_probability, "selection stop_probability")


@dataclass(frozen=True, kw_only=True)
class _SelectionSet:
    split: Split
    labels: np.ndarray
    private: bool


def choose_draw(resources: Resources, posterior: Posterior,
                selection: Selection) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load secret draws into the model until one reaches the threshold; that draw stays loaded.

    Returns the public description of the selection (for the card) and its private
    side (candidates tried, the score on the private split: for the owner-only
    report). Raises ``SelectionFailed`` when the budget runs out; the caller restores the mean.
    """
    chosen = _selection_set(resources, selection.source)
    model = resources.bundle.model
    for tried in range(1, selection.rounds + 1):
        posterior.load_into(model, posterior.draw(secret_noise()))
        score = _scores(resources, chosen)[selection.metric]
        if score >= selection.threshold:
            return _public_description(selection, chosen, score), {"candidates_tried": tried, "score": score}
    raise SelectionFailed(
        f"no candidate draw reached {selection.metric} >= {selection.threshold:g} on the selection set within the "
        "random budget: nothing was released. The attempt still counts against the privacy budget; lower the "
        "threshold only with the cost of another attempt in mind")


def check_selection(resources: Resources, selection: Selection) -> None:
    """Read and check the selection set now (a bad file is named before a fit of minutes, not after)."""
    _selection_set(resources, selection.source)


def check_public_set(resources: Resources, source: str) -> None:
    """Read and check a public evaluation set now, before any fit (``public_scores`` reads it again after)."""
    _public_set(resources, source)


def public_scores(resources: Resources, source: str) -> dict[str, Any]:
    """The current parameters' F1 on a file of records the owner declares public (for the card)."""
    chosen = _public_set(resources, source)
    return {"records": len(chosen.labels), **_scores(resources, chosen)}


def _scores(resources: Resources, chosen: _SelectionSet) -> dict[str, float]:
    net = Net(resources.bundle.model, None, device=resources.device, amp=False)
    net.train(False)
    preds = net.predict(chosen.split, resources.config.eval_batch_size).cpu().numpy()
    return dict(zip(METRICS, f1_pair(chosen.labels, preds, resources.data.num_classes), strict=True))


def _public_description(selection: Selection, chosen: _SelectionSet, score: float) -> dict[str, Any]:
    """What the card says of the selection: the rule, the selection set, and its score and cost when public."""
    cost = {key: selection.cost[key] for key in ("epsilon", "delta", "accountant", "composed_into_total")
            if key in selection.cost}
    return {
        "procedure": "threshold selection with random (geometric) stopping (Liu & Talwar 2019)",
        "metric": selection.metric, "threshold": selection.threshold,
        "stop_probability": selection.stop_probability,
        "selection_set": "the private test split" if chosen.private else f"{len(chosen.labels)} public records",
        "released_draw_score": None if chosen.private else score,
        "accounted": not chosen.private,
        "unaccounted_because": "scored on the private test split" if chosen.private else None,
        "cost": None if chosen.private else cost,
    }


def _selection_set(resources: Resources, source: str) -> _SelectionSet:
    """The records candidates are scored on, tokenised as in training; the test split for ``PRIVATE_TEST``."""
    if source == PRIVATE_TEST:
        return _SelectionSet(split=resources.tokens[1], labels=resources.data.test_labels, private=True)
    return _public_set(resources, source)


def _public_set(resources: Resources, source: str) -> _SelectionSet:
    """A file declared public, tokenised as in training; refused if a label is unknown or a text is private."""
    records = read_public_records(source, data=resources.data, config=resources.config.data,
                                  seed=resources.config.seed, tokenizer=resources.bundle.tokenizer,
                                  device=resources.device)
    return _SelectionSet(split=records.split, labels=records.labels, private=False)
