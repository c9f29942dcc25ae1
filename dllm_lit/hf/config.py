"""The Hugging Face config of :class:`~dllm_lit.hf.OracleForMaskedLM`: the chain's identity, ids and options.

Token ids: ``0 .. V-1`` are the chain's tokens, then ``mask_token_id = V``, ``pad_token_id = V + 1`` and
``eos_token_id = V + 2`` (the chain never emits EOS: its logit is -inf), so ``vocab_size = V + 3``.  The chain
itself travels in the model's buffers (``model.safetensors``); ``chain_fingerprint`` identifies it.
"""
from __future__ import annotations

from typing import Any

from transformers import PretrainedConfig

from dllm_lit import checks

__all__ = ["OracleConfig", "REVEALED", "LOGITS_DTYPES", "SPECIAL_TOKENS", "WORLD_KINDS"]

#: what a revealed position's logits mean (docs/oracle_model.md)
REVEALED = ("self", "leave_one_out")
LOGITS_DTYPES = ("float32", "float64")
#: the worlds an oracle model holds (docs/oracle_model.md, "Every world")
WORLD_KINDS = ("chain", "hmm")
#: special tokens after the chain's V ids, in id order
SPECIAL_TOKENS = ("[MASK]", "[PAD]", "[EOS]")


class OracleConfig(PretrainedConfig):
    """Config of the oracle model.

    Args:
        chain_vocab_size: V, the chain's tokens.
        chain_top_k: K of the chain's top-K lists (the shape of its stored neighbour tables).
        chain_fingerprint: :attr:`~dllm_lit.markov.MarkovChain.fingerprint`, checked when the weights load.
        logit_shift: 0, or 1 for Dream-style models whose logits at position i predict token i + 1.
        revealed: "self" (a revealed position's logits are a point mass on its token, the SUBS convention) or
            "leave_one_out" (p(x_i | every other revealed token it may attend to)).
        logits_dtype: "float64" (default: the float64 oracle's rows, whose exact ties a float64 softmax keeps) or
            "float32" (a float32 softmax breaks ties between positions by rounding, which moved LLaDA's law by
            TV 0.016 on a V = 3 chain; docs/oracle_model.md).
        exact_ties: float32 logits in which mathematically equal probabilities are bit-equal (rows computed in
            float64, rounded to float32; :mod:`dllm_lit.hf.ties`).
        tie_jitter: sigma > 0 adds sigma N(0, 1) to every finite logit (seeded by ``tie_jitter_seed``): ties
            become measure-zero as under a learned model.
        mixing_tol: the oracle's power-table tolerance (:class:`~dllm_lit.denoisers.OracleDenoiser`).
        world_kind: "chain" (a first-order chain: top-K buffers) or "hmm" (an HMMWorld: emission, transition or
            context rows, initial law; ``chain_fingerprint`` is then the world's fingerprint).
        world_states: S of an HMM world; world_order: k of an order-k context world (0: a dense transition).
    """

    model_type = "dllm_lit_oracle"

    def __init__(self, chain_vocab_size: int = 2, chain_top_k: int = 2, chain_fingerprint: str | None = None,
                 logit_shift: int = 0, revealed: str = "self", logits_dtype: str = "float64",
                 exact_ties: bool = True, tie_jitter: float = 0.0, tie_jitter_seed: int = 0,
                 mixing_tol: float = 1e-8, world_kind: str = "chain", world_states: int = 0, world_order: int = 0,
                 **kwargs: Any) -> None:
        V = checks.integer("chain_vocab_size", chain_vocab_size)
        self.chain_vocab_size = V
        self.chain_top_k = checks.integer("chain_top_k", chain_top_k, maximum=V)
        self.chain_fingerprint = chain_fingerprint
        self.logit_shift = checks.choice("logit_shift", logit_shift, (0, 1))
        self.revealed = checks.choice("revealed", revealed, REVEALED)
        self.logits_dtype = checks.choice("logits_dtype", logits_dtype, LOGITS_DTYPES)
        self.exact_ties = checks.boolean("exact_ties", exact_ties)
        self.tie_jitter = checks.real("tie_jitter", tie_jitter, low=0.0)
        self.tie_jitter_seed = checks.integer("tie_jitter_seed", tie_jitter_seed, minimum=0)
        self.mixing_tol = checks.real("mixing_tol", mixing_tol, low=0.0, high=1.0, low_open=True, high_open=True)
        self.world_kind = checks.choice("world_kind", world_kind, WORLD_KINDS)
        self.world_states = checks.integer("world_states", world_states, minimum=0)
        self.world_order = checks.integer("world_order", world_order, minimum=0)
        for key, value in (("mask_token_id", V), ("pad_token_id", V + 1), ("eos_token_id", V + 2)):
            if kwargs.get(key) not in (None, value):
                raise ValueError(f"{key} of an oracle model with V = {V} chain tokens is {value}, got {kwargs[key]}")
            kwargs[key] = value
        kwargs["vocab_size"] = V + len(SPECIAL_TOKENS)
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        self.mask_token_id = V
