"""Private selection of the released draw: threshold, random budget, public vs private selection sets."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch

import swagppm
from swagppm import TrialParams
from swagppm.config import PRIVATE_TEST
from swagppm.releases.selection import Selection, SelectionFailed, check_selection
from swagppm.releases.staging import owner_report_path
from swagppm.train import rng
from tests.swagppm.helpers import release_now, small_config

pytestmark = pytest.mark.fits

COST = {"epsilon": 3.1, "delta": 1e-3, "epsilon_per_draw": 1.0, "accountant": "test"}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[swagppm.Session, swagppm.Fit, Path]]:
    folder = tmp_path_factory.mktemp("selection")
    with swagppm.Session(small_config(folder / "cache")) as session:
        yield session, session.fit(TrialParams(c=0.9, ft_epochs=2)), folder


def public_file(session: swagppm.Session, path: Path, *, copy_private: int = 0, shuffle: bool = False) -> str:
    """Records in the training data's columns: reworded test texts (not private ones), ``copy_private`` verbatim."""
    data = session.data
    texts = [f"Reported publicly: {text}" for text in data.test_texts[:60]]
    texts[:copy_private] = data.train_texts[:copy_private]
    labels = [data.class_names[k] for k in data.test_labels[:60]]
    if shuffle:  # no classifier gets every label of a shuffled set right
        labels = labels[1:] + labels[:1]
    pd.DataFrame({"text": texts, "label": labels}).to_csv(path, index=False)
    return str(path)


def release(session: swagppm.Session, fit: swagppm.Fit, out: Path, selection: Selection) -> dict[str, Any]:
    release_now(session, fit, out, epsilon_cap=100.0, force=True, selection=selection)
    return dict(json.loads((out / "release_card.json").read_text()))


def test_a_public_selection_set_is_accounted_and_the_count_of_candidates_stays_private(
    fitted: tuple[swagppm.Session, swagppm.Fit, Path],
) -> None:
    session, fit, folder = fitted
    source = public_file(session, folder / "public.csv")
    card = release(session, fit, folder / "public-model",
                   Selection(source=source, threshold=0.0, rounds=5, stop_probability=0.2, cost=COST))
    selection = card["selection"]
    assert selection["accounted"] is True
    assert selection["cost"] == {key: COST[key] for key in ("epsilon", "delta", "accountant")}  # not the per-draw ε
    assert selection["selection_set"] == "60 public records" and 0.0 <= selection["released_draw_score"] <= 1.0
    line = next(x for x in card["privacy_statement"] if x.startswith("Selection of the released draw"))
    assert "f1_macro >= 0" in line and "epsilon 3.1 at delta 0.001 in total" in line
    published = (folder / "public-model" / "release_card.json").read_text()
    assert "candidates" not in published and "candidates" not in (folder / "public-model" / "README.md").read_text()
    private = json.loads(owner_report_path(folder / "public-model").read_text())
    assert private["selection"]["candidates_tried"] == 1  # threshold 0: the first candidate qualifies


def test_a_selection_on_the_private_split_is_unaccounted_and_its_score_stays_private(
        fitted: tuple[swagppm.Session, swagppm.Fit, Path]) -> None:
    session, fit, folder = fitted
    card = release(session, fit, folder / "model-private",
                   Selection(source=PRIVATE_TEST, threshold=0.0, rounds=2, stop_probability=0.5, cost=COST))
    reason = "scored on the private test split"
    assert card["selection"]["accounted"] is False and card["selection"]["cost"] is None
    assert card["selection"]["unaccounted_because"] == reason and card["selection"]["released_draw_score"] is None
    assert any(line.endswith(f"unaccounted: {reason}.") for line in card["privacy_statement"])
    assert 0.0 <= json.loads(owner_report_path(folder / "model-private").read_text())["selection"]["score"] <= 1.0


def test_a_public_set_that_holds_private_records_is_refused(fitted: tuple[swagppm.Session, swagppm.Fit, Path]) -> None:
    """Saying on the card that a public set overlaps the private data would tell whether a record is in it."""
    session, _, folder = fitted
    source = public_file(session, folder / "copied.csv", copy_private=3)
    with pytest.raises(swagppm.DataError, match="3 of 60 records also occur in the private data"):
        check_selection(session, Selection(source=source, threshold=0.0, rounds=2, stop_probability=0.5))


def test_a_private_record_in_other_case_spacing_width_or_accents_is_refused_like_a_copy(
        fitted: tuple[swagppm.Session, swagppm.Fit, Path]) -> None:
    """The tiny model's tokenizer lower-cases and strips accents: to it (and to a membership attack on it) these are
    the private records themselves."""
    session, _, folder = fitted
    private = session.data.train_texts[:4]
    variants = [private[0].upper(), "  " + "   ".join(private[1].split()) + "\t", private[2].replace("a", "\uff41"),
                private[3].replace("e", "\u00e9")]
    assert all(variant != text for variant, text in zip(variants, private, strict=True))
    labels = [session.data.class_names[k] for k in session.data.test_labels[:60]]
    texts = [f"Reported publicly: {text}" for text in session.data.test_texts[:60]]
    for index, variant in enumerate(variants):
        pd.DataFrame({"text": [variant, *texts[1:]], "label": labels}).to_csv(folder / f"variant{index}.csv",
                                                                               index=False)
        with pytest.raises(swagppm.DataError, match="1 of 60 records also occur in the private data"):
            check_selection(session, Selection(source=str(folder / f"variant{index}.csv"), threshold=0.0, rounds=2,
                                               stop_probability=0.5))
    check_selection(session, Selection(source=public_file(session, folder / "clean.csv"), threshold=0.0, rounds=2,
                                       stop_probability=0.5))


def test_no_candidate_reaching_the_threshold_releases_nothing_after_exactly_the_budget(
    fitted: tuple[swagppm.Session, swagppm.Fit, Path], monkeypatch: pytest.MonkeyPatch,
) -> None:
    session, fit, folder = fitted
    assert fit.posterior is not None
    mean = fit.posterior.mean.clone()
    drawn = []
    real = swagppm.SWAGPosterior.draw

    def counted(self: swagppm.SWAGPosterior, noise: rng.Noise) -> torch.Tensor:
        drawn.append(noise.secret)
        return real(self, noise)

    monkeypatch.setattr(swagppm.SWAGPosterior, "draw", counted)
    source = public_file(session, folder / "shuffled.csv", shuffle=True)
    out = folder / "refused"
    with pytest.raises(SelectionFailed, match="nothing was released"):
        release_now(session, fit, out, epsilon_cap=100.0, force=True,
                        selection=Selection(source=source, threshold=1.0, rounds=4, stop_probability=0.25))
    assert drawn == [True] * 4 and not out.exists() and not list(folder.glob(".refused.staging-*"))
    flat = torch.cat([p.detach().flatten() for n, p in session.bundle.model.named_parameters()
                      if n in fit.posterior.view.names])
    assert torch.equal(flat, mean.to(flat.dtype))  # the model holds the SWAG mean again


def test_a_selection_set_with_unknown_classes_is_named_without_its_labels(
    fitted: tuple[swagppm.Session, swagppm.Fit, Path],
) -> None:
    session, _, folder = fitted
    path = folder / "unknown.csv"
    pd.DataFrame({"text": ["a public record", "another one"], "label": ["secret-class-x", "burn"]}).to_csv(path)
    with pytest.raises(swagppm.DataError) as info:
        check_selection(session, Selection(source=str(path), threshold=0.5, rounds=1,
                                                           stop_probability=1.0))
    message = str(info.value)
    assert str(path) in message and "1 of 2 records" in message and "secret-class-x" not in message


@pytest.mark.parametrize(("field", "value", "words"), [("threshold", 1.5, "an F1 score"), ("rounds", 0, "at least 1"),
                                                       ("metric", "accuracy", "f1_macro, f1_weighted"),
                                                       ("stop_probability", 1e-300, "1e\\+300 candidate draws")])
def test_bad_selection_settings_are_named(field: str, value: object, words: str) -> None:
    settings: dict[str, Any] = {"source": PRIVATE_TEST, "threshold": 0.5, "rounds": 3, "stop_probability": 0.5}
    with pytest.raises(swagppm.ConfigError, match=words):
        Selection(**(settings | {field: value}))
