"""LLaDA's ``generate()`` (ML-GSAI/LLaDA, ``generate.py``); see ``docs/samplers/llada.md``.

Nie et al., "Large Language Diffusion Models" (arXiv:2502.09992).

The output is ``x = [prompt | generated]`` of length T; the generated part (length G = T - P) is split into
G / block_length blocks decoded left to right (semi-autoregressive), with S = steps / num_blocks steps per
block.  A block with n masked positions commits

    k_i = n // S + [i < n % S]        tokens at its step i = 0..S-1

(``get_num_transfer_tokens``), so the whole block is decoded after S steps (no final step).
At a step, with p_l = p(x0_l | z) the denoiser's marginal at masked position l of the block:

* proposal ``x0_l``: argmax_v p_l(v) at temperature 0 (ties -> lowest token id); at tau > 0 a
  draw from softmax(log p_l / tau) = p_l^(1/tau) / sum_v p_l(v)^(1/tau), the law of upstream's
  Gumbel race ``argmax(logits / tau + G)``;
* confidence: ``low_confidence`` c_l = p_l(x0_l) (the probability under p, *no* temperature);
  ``random`` c_l ~ Uniform(0, 1) independent of everything else;
* commit: the k_i masked positions of the current block with the largest confidence take their proposal;
  every other proposal is discarded (those positions stay masked).  Committed tokens never change.

Top-k tie-break (implementation-defined upstream): confidence descending, then by ``tie_rule``: position
ascending ("lowest", default: a stable descending sort over positions in increasing order), descending
("highest"), or uniformly at random ("random").  Ties are exact ties of the denoiser's floating-point output;
under the exact oracle they are frequent, and the rule alone moves the output law (docs/samplers/llada.md).

The sampler is a rule (:mod:`dllm_lit.samplers.rule`): propose p^(1/tau), score the confidence p(x̂) <= max_v p
(the declared bound), blocks after the prompt; the engine owns the loop and the posterior provider.

Efficiency.  ``low_confidence`` needs c_l at every masked position of the current block at
every step: the denoiser is queried there, and only there (O(#masked V) per step, inherent).
``random`` confidences do not depend on the denoiser: a uniform random k-subset of the
remaining masked positions at each step is the same, in law, as a uniformly random order of the
block's positions drawn once at the block's start and consumed k_i at a time (i.i.d. keys,
stable sort): the rule declares ``order = "random"`` and the engine queries the denoiser only at the k_i
committed positions (O(k V) per step; :func:`dllm_lit.decoding.providers.decode_random_order`).

Prompts (:class:`~dllm_lit.samplers.prompts.Prompted`).  ``prompt`` fixes tokens at positions 0..P-1;
``prompt_mode`` (the paper's conditional LLaDA) instead draws one token at position 0 per sequence, from the chain's
stationary law pi ("pi"), from its head ("pi_head": tokens by pi descending while the cumulative mass is <= 30%,
plus the next one, renormalised) or its tail ("pi_tail": the same in ascending order); never changed.

Randomness: token proposals use ``StepUniforms`` (Stream.TOKEN) at (global step, position); random-remasking
orders use Stream.ORDER uniforms keyed by the block index.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.decoding import block_bounds, check_blocks, with_tie_rule
from dllm_lit.samplers.draws import tempered_law, tempered_log_prob
from dllm_lit.samplers.llada_path_law import smc_refusal, with_smc_sandwich
from dllm_lit.samplers.prompts import PROMPT_MODES, Prompted, check_prompt, prompt_law
from dllm_lit.samplers.random_order import RandomRounds, random_order_stats
from dllm_lit.samplers.round_schedules import check_round_counts, check_schedule, round_counts
from dllm_lit.samplers.rule import RuleSampler, posterior_probability_score
from dllm_lit.samplers.selection import TIE_RULES

__all__ = ["LLaDA", "REMASKING", "PROMPT_MODES", "prompt_law"]

REMASKING = ("low_confidence", "random")


class LLaDA(Prompted, RuleSampler):
    """LLaDA ``generate()`` with an exact or learned denoiser (see module docstring).

    Args:
        denoiser: frozen denoiser (oracle built from the data module's chain if None).
        steps: total sampling steps (or a grid); must be divisible by the number of blocks.
        remasking: "low_confidence" (commit the k most confident proposals, c = p(x0)) or
            "random" (commit k uniformly random masked positions).
        temperature: 0 = greedy argmax proposal (upstream default); tau > 0 samples the proposal
            from p^(1/tau) renormalised (the paper's main runs use 1.0).
        block_length: semi-autoregressive block length; None = one block covering the whole
            generated part.  Must divide the generated length T - len(prompt).
        prompt: token ids fixed at positions 0..P-1 (never changed).
        prompt_mode: None, or "pi" / "pi_head" / "pi_tail": one position-0 token per sequence
            drawn from pi, its head or its tail (needs the chain; excludes ``prompt``).
        tie_rule: order of equal confidences in the top-k: "lowest" position first (default),
            "highest" first, or "random" (Stream.ORDER uniforms per (step, position)); unused by
            random remasking, whose confidences never tie.
        schedule: random remasking only: "uniform" (the transfer counts), "optimal" (per block, the round
            sizes minimising the exact expected KL for the chain), "tc" / "dtc" (the templates minimising the
            TC / DTC bound, docs/theory.md) or a list of per-block round sizes.
    """

    sampler_name = "llada"
    bound = "pmax"  # c = p(x̂) <= max_v p

    def __init__(
        self,
        denoiser: Denoiser | None = None,
        steps: int | list[int] = 128,
        remasking: str = "low_confidence",
        temperature: float = 0.0,
        block_length: int | None = None,
        prompt: list[int] | None = None,
        prompt_mode: str | None = None,
        tie_rule: str = "lowest",
        schedule: str | list[int] = "uniform",
    ) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        checks.choice("remasking", remasking, REMASKING)
        temperature = checks.real("temperature", temperature, 0.0)
        checks.optional_integer("block_length", block_length)
        checks.choice("prompt_mode", prompt_mode, PROMPT_MODES)
        self.tie_rule = checks.choice("tie_rule", tie_rule, TIE_RULES)
        self.schedule = check_schedule(schedule)
        if self.schedule != "uniform" and remasking != "random":
            raise ValueError(f"schedule={self.schedule!r} needs remasking='random' (low_confidence ranks by confidence)")
        self.remasking = remasking
        self.order = "random" if remasking == "random" else "score"  # the declared commit order (RuleSampler)
        self.temperature = float(temperature)
        self.block_length = block_length
        self.prompt = check_prompt(prompt, prompt_mode)
        self.prompt_mode = prompt_mode

    @property
    def name(self) -> str:
        return with_tie_rule(self.sampler_name, self.tie_rule)

    #: low-confidence remasking announces each block to the denoiser (random remasking queries committed positions)
    announces_blocks = property(lambda self: self.remasking == "low_confidence")

    # ------------------------------------------------------------------ the rule
    def propose(self, probs: torch.Tensor) -> torch.Tensor | None:
        return tempered_law(probs, self.temperature)  # p^(1/tau); None (argmax) at tau = 0

    @posterior_probability_score  # the engine reads p(x̂) from the draw's row
    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        return self.score_from_probability(probs.gather(1, tok[:, None]).squeeze(1), tok, pos)  # of p(x̂)

    def blocks(self, seq_len: int) -> list[tuple[int, int]]:
        return block_bounds(seq_len, self.prompt_length(), self.block_length)

    def block_schedule(self, seq_len: int, steps: int | None) -> tuple[list[tuple[int, int]], list[list[int]]]:
        """The blocks and their round sizes: the transfer counts, or random remasking's ``schedule``."""
        if self.schedule == "uniform" or steps is None:
            return super().block_schedule(seq_len, steps)
        P, bl, nb = self._blocks(seq_len)
        return self.blocks(seq_len), [round_counts(self.schedule, self.chain, bl, steps // nb,
                                                   left_revealed=blk > 0 or P > 0) for blk in range(nb)]

    # ------------------------------------------------------------------ settings
    def _blocks(self, seq_len: int) -> tuple[int, int, int]:
        """(prompt length P, block length, number of blocks) for ``seq_len``."""
        P = self.prompt_length()
        G = seq_len - P
        bl = self.block_length if self.block_length is not None else G
        return P, bl, (G // bl if bl > 0 else 0)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        """The prompt fits, block_length divides the generated length, steps divide into the blocks."""
        check_blocks(seq_len, self.prompt_length(), self.block_length, None if self.adaptive else steps)
        if self.schedule != "uniform" and steps is not None:
            P, bl, nb = self._blocks(seq_len)
            check_round_counts(self.schedule, self.chain, bl, steps // nb,
                               ("block_length" if self.block_length else "seq_len", "steps"))

    def nfe(self, seq_len: int, steps: int | None) -> float | None:
        """Steps that commit at least one token: min(S, n) per block of n masked positions (S = steps / blocks).

        Upstream calls the model at every step, also at steps with k = 0 (steps > block length);
        those steps change nothing and are not counted (see docs/nfe.md).
        """
        if steps is None and not self.adaptive:
            return 0.0
        return super().nfe(seq_len, steps)

    # ------------------------------------------------------------------ log q and the random order's statistics
    def log_q_reason(self, steps: int | None) -> str | None:
        """None with random remasking (the order is drawn up front); low-confidence remasking ranks
        positions by the confidence of the drawn proposals, so its order depends on the tokens."""
        if self.remasking == "random":
            return None
        return "low_confidence remasking chooses positions by the confidence of the drawn proposals"

    def declares_exact(self, seq_len: int, steps: int | None) -> bool:
        """Random remasking at temperature 1, no fixed prompt, one position per step: exact sequential sampling."""
        if self.remasking != "random" or self.temperature != 1 or self.prompt or self.prompt_mode not in (None, "pi"):
            return False
        nb = self._blocks(seq_len)[2]  # an adaptive rule's blocks may outnumber its steps: no schedule then
        return steps is not None and 0 < nb <= steps and max(max(c) for c in self.block_schedule(seq_len, steps)[1]) <= 1

    sandwich_refusal = smc_refusal

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        if self.remasking != "random":  # low confidence: the SMC sandwich over its path law when asked
            return with_smc_sandwich(self, super().generate_with_stats, indices, seq_len, steps, seed)
        x, stats = super().generate_with_stats(indices, seq_len, steps, seed)
        counts = None if self.schedule == "uniform" else self.block_schedule(seq_len, steps)[1]
        rounds = RandomRounds(*self._blocks(seq_len), counts, self._log_law, predicted=self.temperature == 1)
        return x, random_order_stats(self, rounds, indices, seq_len, steps, seed, x, stats)

    def _log_law(self, j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
        """log q(tok) under the proposal law (argmax at temperature 0: 0 or -inf)."""
        return tempered_log_prob(probs, tok, self.temperature)
