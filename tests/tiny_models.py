"""Tiny randomly initialised language models the tests build themselves (no network)."""
from __future__ import annotations

import random
from pathlib import Path

import torch

WORDS = (
    "the a of and to in is was he for it with as his on be at by had are but from or she an they "
    "which one you were her all their there been has when who will more no if out so said what up "
    "its about into than them can only other new some could time these two may then do first any"
).split()


def make_texts(num: int, seed: int, min_words: int = 1, max_words: int = 40) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(min_words, max_words))) for _ in range(num)]


def build_tiny_gpt2(directory: Path, seed: int = 0, n_positions: int = 128) -> Path:
    """Save a 2-layer GPT-2 (n_embd=32) and a ~300-token byte-level BPE tokenizer to ``directory``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(make_texts(200, seed=99), trainer)
    eos = "<|endoftext|>"
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=eos, bos_token=eos, unk_token=eos)
    fast.save_pretrained(directory)
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2,
        n_embd=32,
        n_head=2,
        n_positions=n_positions,
        vocab_size=len(fast),
        bos_token_id=fast.eos_token_id,
        eos_token_id=fast.eos_token_id,
    )
    GPT2LMHeadModel(config).save_pretrained(directory)
    return directory
