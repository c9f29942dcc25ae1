"""chain_tokenizer: the chain's alphabet with the oracle model's mask / pad / eos ids."""
from __future__ import annotations

import torch

from dllm_lit.corpus.bpe import BPEDecoder, train_bytelevel_bpe
from dllm_lit.hf import OracleConfig
from dllm_lit.hf.tokenizer import chain_tokenizer
from dllm_lit.sources import EnglishChars


def test_characters_of_the_english_chain() -> None:
    src = EnglishChars()
    chain = src.build()
    tok = chain_tokenizer(src)
    cfg = OracleConfig(chain_vocab_size=chain.vocab_size, chain_top_k=chain.top_k)
    assert (tok.mask_token_id, tok.pad_token_id, tok.eos_token_id) == (cfg.mask_token_id, cfg.pad_token_id,
                                                                      cfg.eos_token_id)
    assert len(tok) == cfg.vocab_size
    ids = tok("In the Beginning, 1611!")["input_ids"]
    assert tok.decode(ids) == "in the beginning" + " " * 7  # ", 1611!" -> spaces
    assert ids[:2] == [8, 13]
    batch = torch.tensor([[7, 4, 26, cfg.mask_token_id, cfg.pad_token_id]])
    assert tok.batch_decode(batch, skip_special_tokens=True) == src.decoder().decode_batch(batch[:, :3])
    padded = tok(["ab", "abcd"], padding=True)
    assert padded["input_ids"][0] == [cfg.pad_token_id] * 2 + [0, 1] and padded["attention_mask"][0] == [0, 0, 1, 1]


class _BPESource:
    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer

    def decoder(self) -> BPEDecoder:
        return BPEDecoder(self.tokenizer)


def test_byte_level_bpe_keeps_the_chain_ids() -> None:
    texts = ["the quick brown fox jumps over the lazy dog " * 20, "a stitch in time saves nine " * 20]
    bpe = train_bytelevel_bpe(texts, vocab_size=300, min_frequency=2)
    V = bpe.get_vocab_size()
    tok = chain_tokenizer(_BPESource(bpe))
    assert (tok.mask_token_id, tok.pad_token_id, tok.eos_token_id) == (V, V + 1, V + 2)
    text = "the lazy fox saves time"
    assert tok(text)["input_ids"] == bpe.encode(text).ids
    assert tok.decode(tok(text)["input_ids"]) == text


def test_decimal_ids_for_a_chain_without_text() -> None:
    tok = chain_tokenizer(vocab_size=5)
    assert tok("1 2 4")["input_ids"] == [1, 2, 4]
    assert tok.decode([1, 2, 5]) == "1 2 [MASK]"
