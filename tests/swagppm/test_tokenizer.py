"""``swagppm.models.tokenizer``: the tiny preset's WordPiece vocabulary, its order and size, and how it encodes."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer, PreTrainedTokenizerFast

from swagppm.models.tokenizer import fit_wordpiece_tokenizer

TEXTS = ["A worker fell.", "The worker fell from a ladder", "Café burn; worker cut"]
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CHARS = [".", ";", "a", "b", "c", "d", "e", "f", "h", "k", "l", "m", "n", "o", "r", "t", "u", "w"]
WORDS = ["worker", "fell", "burn", "cafe", "cut", "from", "ladder", "the"]  # by count, ties alphabetical


def _vocabulary(tokenizer: PreTrainedTokenizerFast) -> list[str]:
    vocab = tokenizer.get_vocab()
    assert sorted(vocab.values()) == list(range(len(vocab)))
    return sorted(vocab, key=vocab.__getitem__)


def test_the_vocabulary_is_specials_then_characters_then_words_by_count() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=1000)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert _vocabulary(tokenizer) == [*SPECIALS, *CHARS, *(f"##{ch}" for ch in CHARS), *WORDS]
    assert len(tokenizer) == 49  # fewer than vocab_size: every word of the texts is in


def test_vocab_size_cuts_the_rarest_words_first() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=44)
    assert len(tokenizer) == 44
    assert _vocabulary(tokenizer)[41:] == ["worker", "fell", "burn"]


def test_characters_are_kept_even_beyond_vocab_size() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=10)
    assert _vocabulary(tokenizer) == [*SPECIALS, *CHARS, *(f"##{ch}" for ch in CHARS)]
    assert len(tokenizer) == 41


def test_the_vocabulary_does_not_depend_on_the_order_of_the_texts() -> None:
    forward = fit_wordpiece_tokenizer(TEXTS, vocab_size=45)
    backward = fit_wordpiece_tokenizer(tuple(reversed(TEXTS)), vocab_size=45)
    assert forward.get_vocab() == backward.get_vocab()


def test_no_texts_give_the_special_tokens_alone() -> None:
    assert _vocabulary(fit_wordpiece_tokenizer([], vocab_size=100)) == SPECIALS


def test_special_tokens_have_the_first_ids() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    assert (tokenizer.pad_token_id, tokenizer.unk_token_id, tokenizer.cls_token_id, tokenizer.sep_token_id,
            tokenizer.mask_token_id) == (0, 1, 2, 3, 4)
    assert tokenizer.model_input_names == ["input_ids", "attention_mask"]


def test_texts_are_lower_cased_and_stripped_of_accents() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    assert tokenizer.tokenize("CAFÉ Burn, Worker") == ["cafe", "burn", "[UNK]", "worker"]  # no ',' in the texts


def test_one_text_is_framed_by_cls_and_sep_without_token_types() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    assert dict(tokenizer("worker fell")) == {"input_ids": [2, 41, 42, 3], "attention_mask": [1, 1, 1, 1]}
    assert tokenizer("fell", "cut")["input_ids"] == [2, 42, 3, 45, 3]


def test_unseen_words_split_into_pieces_and_unseen_characters_are_unknown() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("fellow workers zebra")["input_ids"])
    assert tokens == ["[CLS]", "fell", "##o", "##w", "[UNK]", "[UNK]", "[SEP]"]  # no 's' and no 'z' in the texts


def test_a_batch_is_padded_on_the_right_with_the_pad_id() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    batch = tokenizer(["fell", "a worker fell"], padding=True)
    assert batch["input_ids"] == [[2, 42, 3, 0, 0], [2, 7, 41, 42, 3]]
    assert batch["attention_mask"] == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]


def test_decoding_joins_the_pieces_back() -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    ids = tokenizer("The worker fell from a ladder.")["input_ids"]
    assert tokenizer.decode(ids, skip_special_tokens=True) == "the worker fell from a ladder."
    assert tokenizer.decode(tokenizer("fellow")["input_ids"], skip_special_tokens=True) == "fellow"


def test_a_saved_tokenizer_loads_from_its_folder_with_the_same_ids(tmp_path: Path) -> None:
    tokenizer = fit_wordpiece_tokenizer(TEXTS, vocab_size=100)
    tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    sample = ["Café burn; worker cut", "fellow workers"]
    assert loaded(sample, padding=True)["input_ids"] == tokenizer(sample, padding=True)["input_ids"]
    assert loaded.get_vocab() == tokenizer.get_vocab()
