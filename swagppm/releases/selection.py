"""Private selection of the released draw: the first secret draw to reach a utility threshold, random stopping.

Liu & Talwar (2019): draw candidates from SWAG 2, score each on a *selection set*,
release the first that reaches the threshold, and give up after a random number of
candidates (geometric, so stopping after each miss is a coin flip). The procedure
then costs a small multiple of one draw's ε (about 3ε), which the caller computes
with its accountant and passes in as ``Selection.cost``.

That cost holds only when the selection set is public: scored on the private test
split, or on records that also occur in the private data, the choice of draw
depends on private records in a way no accountant here covers, and the release
says so (``accounted`` false). How many candidates were tried depends on the
private data too: it goes to the owner-only report, never to the public card.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from swagppm.config import PRIVATE_TEST, check_stop_probability
from swagppm.data.sources import load_records
from swagppm.errors import ConfigError, DataError, ReleaseRefused
from swagppm.resources import Resources
from swagppm.train.engine import Net, Split
from swagppm.train.swag import SWAGPosterior
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
    overlap: int  # selection records whose text also occurs in the private data (0 for the test split itself)
    private: bool


def choose_draw(resources: Resources, posterior: SWAGPosterior, selection: Selection) -> tuple[dict[str, Any], int]:
    """Load secret draws into the model until one reaches the threshold; that draw stays loaded.

    Returns the public description of the selection (for the card) and the number
    of candidates tried (private: for the owner-only report). Raises
    ``SelectionFailed`` when the budget runs out; the caller restores the mean.
    """
    chosen = _selection_set(resources, selection.source)
    model = resources.bundle.model
    net = Net(model, None, device=resources.device, amp=False)
    net.train(False)
    for tried in range(1, selection.rounds + 1):
        posterior.load_into(model, posterior.sample_secret())
        preds = net.predict(chosen.split, resources.config.eval_batch_size).cpu().numpy()
        score = f1_pair(chosen.labels, preds, resources.data.num_classes)[METRICS.index(selection.metric)]
        if score >= selection.threshold:
            return _public_description(selection, chosen, score), tried
    raise SelectionFailed(
        f"no candidate draw reached {selection.metric} >= {selection.threshold:g} on the selection set within the "
        "random budget: nothing was released. The attempt still counts against the privacy budget; lower the "
        "threshold only with the cost of another attempt in mind")


def check_selection(resources: Resources, selection: Selection) -> None:
    """Read and check the selection set now (a bad file is named before a fit of minutes, not after)."""
    _selection_set(resources, selection.source)


def _public_description(selection: Selection, chosen: _SelectionSet, score: float) -> dict[str, Any]:
    """What the card says of the selection: the rule, the selection set, its score, and the cost if accounted."""
    accounted = not chosen.private and chosen.overlap == 0
    if chosen.private:
        reason = "scored on the private test split"
    elif chosen.overlap:
        reason = f"{chosen.overlap} selection record(s) also occur in the private data"
    else:
        reason = None
    return {
        "procedure": "threshold selection with random (geometric) stopping (Liu & Talwar 2019)",
        "metric": selection.metric, "threshold": selection.threshold,
        "stop_probability": selection.stop_probability,
        "selection_set": "the private test split" if chosen.private else f"{len(chosen.labels)} public records",
        "released_draw_score": score,
        "accounted": accounted,
        "unaccounted_because": reason,
        "cost": dict(selection.cost) if accounted else None,
    }


def _selection_set(resources: Resources, source: str) -> _SelectionSet:
    """The records candidates are scored on, tokenised as in training; the test split for ``PRIVATE_TEST``."""
    data = resources.data
    if source == PRIVATE_TEST:
        return _SelectionSet(split=resources.tokens[1], labels=data.test_labels, overlap=0, private=True)
    config = dataclasses.replace(resources.config.data, source=source)
    texts, labels = load_records(config, seed=resources.config.seed)
    index = {name: k for k, name in enumerate(data.class_names)}
    unknown = sum(label not in index for label in labels)
    if unknown:
        raise DataError(f"{source}: {unknown} of {len(labels)} records have a {config.label_column!r} value that is "
                        f"not one of the {data.num_classes} classes the model was trained on")
    codes = np.asarray([index[label] for label in labels], dtype=np.int64)
    private = {_digest(text) for text in (*data.train_texts, *data.test_texts)}
    overlap = sum(_digest(text) in private for text in texts)
    split = Split.from_texts(tuple(texts), codes, resources.bundle.tokenizer, max_length=config.max_length,
                             device=resources.device)
    return _SelectionSet(split=split, labels=codes, overlap=overlap, private=False)


def _digest(text: str) -> bytes:
    """A text's digest for the overlap check (surrounding white space ignored)."""
    return hashlib.sha256(text.strip().encode()).digest()
