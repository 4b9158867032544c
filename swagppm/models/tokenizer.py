"""The tiny preset's tokenizer: a WordPiece vocabulary fitted on the training texts (data-derived, demos only)."""

from __future__ import annotations

from collections import Counter

from transformers import PreTrainedTokenizerFast

_SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def fit_wordpiece_tokenizer(texts: tuple[str, ...] | list[str], *, vocab_size: int) -> PreTrainedTokenizerFast:
    """A lower-cased BERT-style WordPiece tokenizer whose vocabulary comes from ``texts`` (data-derived).

    The vocabulary is built deterministically (the ``tokenizers`` trainer breaks
    frequency ties in hash order, so the same texts could give different ids):
    special tokens, every character with its ``##`` continuation, then the most
    frequent words (ties broken alphabetically) up to ``vocab_size``.
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    counts: Counter[str] = Counter()
    for text in texts:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text)))
    chars = sorted({ch for word in counts for ch in word})
    pieces = [*_SPECIAL_TOKENS, *chars, *(f"##{ch}" for ch in chars)]
    words = [w for w, _ in sorted(counts.items(), key=lambda item: (-item[1], item[0])) if len(w) > 1]
    pieces += words[: max(0, vocab_size - len(pieces))]
    tokenizer = Tokenizer(models.WordPiece({piece: i for i, piece in enumerate(pieces)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
        sep_token="[SEP]", mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"],
    )
