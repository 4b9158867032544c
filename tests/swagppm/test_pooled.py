"""``swagppm.models.pooled``: the config, mean and first-token pooling, the head, and a saved model loading back."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForSequenceClassification, BertConfig, BertModel

import swagppm.models.build  # noqa: F401 - registers the pooled classes with the Auto classes, as swagppm does
from swagppm.models.pooled import POOLINGS, PooledClassifier, PooledClassifierConfig

IDS = torch.tensor([[2, 5, 6, 7, 3], [2, 9, 3, 0, 0]])
MASK = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])


def _bert(**overrides: object) -> BertConfig:
    values: dict[str, object] = dict(vocab_size=30, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
                                     intermediate_size=16, max_position_embeddings=16)
    values.update(overrides)
    return BertConfig(**values)


def _encoder_dict(bert: BertConfig) -> dict[str, object]:
    return {k: v for k, v in bert.to_dict().items() if k not in ("_name_or_path", "id2label", "label2id")}


def _model(pooling: str = "mean", *, num_labels: int = 3, classifier_dropout: float = 0.0,
           **bert: object) -> PooledClassifier:
    torch.manual_seed(0)
    config = _bert(**bert)
    encoder = BertModel(config, add_pooling_layer=False)
    pooled = PooledClassifierConfig(encoder=_encoder_dict(config), pooling=pooling, num_labels=num_labels,
                                    classifier_dropout=classifier_dropout)
    return PooledClassifier(pooled, encoder=encoder).eval()


# --- The configuration -------------------------------------------------------------------------------


def test_an_unknown_pooling_is_refused_naming_the_choices() -> None:
    assert POOLINGS == ("mean", "cls")
    with pytest.raises(ValueError) as info:
        PooledClassifierConfig(pooling="max")
    assert str(info.value) == "pooling must be one of ('mean', 'cls'), got 'max'"


def test_the_config_keeps_a_copy_of_the_encoder_and_rebuilds_it() -> None:
    encoder = _encoder_dict(_bert())
    config = PooledClassifierConfig(encoder=encoder, num_labels=4)
    encoder["hidden_size"] = 99
    assert config.hidden_size == 8 and config.pooling == "mean" and config.classifier_dropout == 0.0
    for _ in range(2):  # rebuilding leaves the stored dict whole
        rebuilt = config.encoder_config()
        assert isinstance(rebuilt, BertConfig)
        assert (rebuilt.hidden_size, rebuilt.num_hidden_layers, rebuilt.vocab_size) == (8, 1, 30)
    assert config.encoder["model_type"] == "bert" and config.model_type == "swagppm_pooled"


# --- Building ------------------------------------------------------------------------------------------


def test_a_given_encoder_keeps_its_weights_and_only_the_head_is_initialised() -> None:
    torch.manual_seed(0)
    bert = _bert(initializer_range=0.5)
    encoder = BertModel(bert, add_pooling_layer=False)
    before = {name: value.clone() for name, value in encoder.state_dict().items()}
    model = PooledClassifier(PooledClassifierConfig(encoder=_encoder_dict(bert), num_labels=64), encoder=encoder)
    assert model.encoder is encoder and model.base_model is encoder
    assert all(torch.equal(before[name], value) for name, value in model.encoder.state_dict().items())
    assert model.classifier.in_features == 8 and model.classifier.out_features == 64
    assert torch.count_nonzero(model.classifier.bias) == 0
    assert model.classifier.weight.std().item() == pytest.approx(0.5, abs=0.08)  # the encoder's initializer_range


def test_without_an_encoder_one_is_built_from_the_stored_config() -> None:
    config = PooledClassifierConfig(encoder=_encoder_dict(_bert(num_hidden_layers=2)), num_labels=2)
    model = PooledClassifier(config)
    assert isinstance(model.encoder, BertModel) and len(model.encoder.encoder.layer) == 2
    assert model.encoder.config.hidden_size == 8


# --- Pooling -------------------------------------------------------------------------------------------


def test_mean_pooling_averages_the_unmasked_positions_only() -> None:
    hidden = torch.tensor([[[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]],
                           [[5.0, 6.0], [7.0, 8.0], [9.0, 10.0]],
                           [[50.0, 50.0], [60.0, 60.0], [70.0, 70.0]]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
    pooled = _model("mean").pool(hidden, mask)
    assert pooled.tolist() == [[2.0, 3.0], [7.0, 8.0], [0.0, 0.0]]  # an all-padding row pools to zeros, not NaN


def test_cls_pooling_takes_the_first_position_whatever_the_mask() -> None:
    hidden = torch.arange(12.0).reshape(2, 3, 2)
    pooled = _model("cls").pool(hidden, torch.tensor([[0, 1, 1], [1, 0, 0]]))
    assert pooled.tolist() == [[0.0, 1.0], [6.0, 7.0]]


@pytest.mark.parametrize("pooling", POOLINGS)
def test_features_are_the_pooled_last_hidden_states(pooling: str) -> None:
    model = _model(pooling)
    with torch.no_grad():
        hidden = model.encoder(input_ids=IDS, attention_mask=MASK).last_hidden_state
        assert torch.equal(model.features(IDS, MASK), model.pool(hidden, MASK))
        assert model.features(IDS, MASK).shape == (2, 8)


@pytest.mark.parametrize("pooling", POOLINGS)
def test_padding_a_text_leaves_its_logits_unchanged(pooling: str) -> None:
    model = _model(pooling)
    with torch.no_grad():
        alone = model(IDS[1:, :3]).logits
        padded = model(IDS[1:], attention_mask=MASK[1:]).logits
    torch.testing.assert_close(padded, alone, rtol=0.0, atol=1e-6)


# --- The forward pass ----------------------------------------------------------------------------------


def test_forward_gives_logits_per_label_and_a_loss_only_with_labels() -> None:
    model = _model(num_labels=3)
    with torch.no_grad():
        out = model(IDS, attention_mask=MASK)
        labelled = model(IDS, attention_mask=MASK, labels=torch.tensor([2, 0]))
    assert out.logits.shape == (2, 3) and out.loss is None
    assert torch.equal(labelled.logits, out.logits)
    assert labelled.loss is not None
    assert labelled.loss.item() == pytest.approx(
        torch.nn.functional.cross_entropy(out.logits, torch.tensor([2, 0])).item(), rel=1e-6)


def test_a_missing_attention_mask_means_every_token_counts() -> None:
    model = _model()
    with torch.no_grad():
        assert torch.equal(model(IDS).logits, model(IDS, attention_mask=torch.ones_like(IDS)).logits)


def test_the_head_dropout_acts_in_training_only() -> None:
    quiet = dict(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    dropped = _model(classifier_dropout=0.9, **quiet)
    with torch.no_grad():
        evaluated = dropped(IDS, attention_mask=MASK).logits
        torch.manual_seed(1)
        trained = dropped.train()(IDS, attention_mask=MASK).logits
    assert not torch.equal(trained, evaluated)
    plain = _model(classifier_dropout=0.0, **quiet)
    with torch.no_grad():
        evaluated = plain(IDS, attention_mask=MASK).logits
        assert torch.equal(plain.train()(IDS, attention_mask=MASK).logits, evaluated)


# --- Saving and loading --------------------------------------------------------------------------------


def test_a_saved_model_loads_through_the_auto_class_with_the_same_logits(tmp_path: Path) -> None:
    model = _model("cls", num_labels=4, classifier_dropout=0.2)
    model.save_pretrained(tmp_path)
    config = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(config, PooledClassifierConfig)
    assert (config.pooling, config.classifier_dropout, config.num_labels) == ("cls", 0.2, 4)
    assert config.encoder_config().to_dict() == model.config.encoder_config().to_dict()
    loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    assert isinstance(loaded, PooledClassifier)
    with torch.no_grad():
        assert torch.equal(loaded(IDS, attention_mask=MASK).logits, model(IDS, attention_mask=MASK).logits)
