"""A ``PreTrainedTokenizerFast`` for a chain's alphabet, with the oracle model's special ids.

Chain ids ``0 .. V-1`` keep their meaning; ``[MASK]`` = V, ``[PAD]`` = V + 1 and ``[EOS]`` = V + 2 follow, as in
:class:`~dllm_lit.hf.OracleConfig`, so a pipeline that takes a prompt string and decodes text works on the
oracle model.  Three alphabets (the chain source's decoder says which):

* characters (the English and text8 chains): one token per character, text lower-cased and every character
  outside the alphabet mapped to a space (the corpus's own rule);
* byte-level BPE (the OpenWebText chain): the chain's own BPE tokenizer;
* anything else: the ids written as decimal words separated by spaces ("17 4 230").

The tokenizer adds no BOS / EOS of its own: an encoded prompt is chain tokens only.
"""
from __future__ import annotations

from typing import Any

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from dllm_lit.hf.config import SPECIAL_TOKENS

__all__ = ["chain_tokenizer"]


def _wrap(tok: Tokenizer, vocab_size: int) -> PreTrainedTokenizerFast:
    tok.add_special_tokens(list(SPECIAL_TOKENS))
    for offset, name in enumerate(SPECIAL_TOKENS):
        got = tok.token_to_id(name)
        if got != vocab_size + offset:
            raise ValueError(f"the tokenizer gives {name} id {got}; the oracle model expects {vocab_size + offset} "
                             f"(its vocabulary must hold exactly the chain's {vocab_size} tokens first)")
    mask, pad, eos = SPECIAL_TOKENS
    return PreTrainedTokenizerFast(tokenizer_object=tok, mask_token=mask, pad_token=pad, eos_token=eos,
                                   padding_side="left", clean_up_tokenization_spaces=False)


def _characters(alphabet: str) -> Tokenizer:
    tok = Tokenizer(models.WordLevel({c: i for i, c in enumerate(alphabet)}, unk_token=" " if " " in alphabet else None))
    other = "".join(sorted(set(alphabet)))
    rules = [normalizers.Lowercase()] if alphabet == alphabet.lower() else []
    escaped = "".join("\\" + c if not c.isalnum() else c for c in other)
    rules.append(normalizers.Replace(Regex(f"[^{escaped}]"), " " if " " in alphabet else ""))
    tok.normalizer = normalizers.Sequence(rules)
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return tok


def _id_words(vocab_size: int) -> Tokenizer:
    tok = Tokenizer(models.WordLevel({str(i): i for i in range(vocab_size)}, unk_token="0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tok


def chain_tokenizer(source: Any = None, vocab_size: int | None = None) -> PreTrainedTokenizerFast:
    """The tokenizer of a built chain source (``source.decoder()`` names the alphabet), or of ``vocab_size``
    decimal ids when ``source`` is None."""
    from dllm_lit.corpus.bpe import BPEDecoder
    from dllm_lit.corpus.charlevel import CharDecoder

    if source is None:
        if vocab_size is None:
            raise ValueError("chain_tokenizer needs a chain source or vocab_size")
        return _wrap(_id_words(int(vocab_size)), int(vocab_size))
    dec = source.decoder()
    if isinstance(dec, CharDecoder):
        return _wrap(_characters(dec.alphabet), len(dec.alphabet))
    if isinstance(dec, BPEDecoder):
        tok = Tokenizer.from_str(dec.tokenizer.to_str())
        tok.post_processor = None
        return _wrap(tok, int(tok.get_vocab_size(with_added_tokens=False)))
    itos = getattr(dec, "itos", None)
    if itos is not None and all(len(s) == 1 for s in itos) and len(set(itos)) == len(itos):
        return _wrap(_characters("".join(itos)), len(itos))
    return _wrap(_id_words(int(dec.vocab_size)), int(dec.vocab_size))
