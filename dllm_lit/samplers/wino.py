"""WINO, wide-in narrow-out decoding with revocable tokens; see ``docs/samplers/wino.md``.

Hong et al., "Wide-In, Narrow-Out: Revokable Decoding for Diffusion Large Language Models" (arXiv:2507.18578);
followed in Kamichanw/d2Cache ``src/generation/wino_official.py`` at commit b8d5f1e (``decoding_wino``, the authors'
loop; deleted later).  d2Cache's HEAD ``src/generation/wino.py`` commits at >= the threshold and caps re-masking by
the current call's commit count (docs).

Blocks of ``block_length`` (None: one block) left to right; inside a block, every call scores all block positions
at once (upstream's "shadow block" with a leave-one-out attention mask):

* masked i: a proposal x^_i ~ p(x_i | z)^(1/tau) (argmax at tau = 0), confidence c_i = p(x^_i | z);
* revealed i: the back-confidence b_i = p(z_i | z_{-i}), the leave-one-out probability of the token it holds.

Wide in: commit every proposal with c_i > ``wide_in_threshold``; more than a = min(max(floor(0.7 |M|), 5), 20) of
them (|M| masked in the block): the a most confident; none: the single most confident.  Narrow out, only when
more than one token was committed: re-mask the revealed tokens with b_i < ``narrow_out_threshold`` (scored before
this call's commits); when they number at least the previous call's commit count n_prev (30 at a block's start),
re-mask only the n_prev - 1 least confident of them.  A block ends when it has no mask left.

Ties (frequent under the exact oracle): the lower position first, in the top-a, the argmax and the re-mask order.
Termination (a departure): after ``max_steps_per_block`` calls in a block (default 4 x block_length) re-masking
stops, so every later call commits at least one token.  NFE = calls, counted per sequence (adaptive).
Randomness: proposals from Stream.TOKEN uniforms at (the sequence's call count, position).  An editing rule: the
engine runs the calls (:func:`dllm_lit.decoding.decode_edits`), :meth:`WINO.edit` decides each.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import EditCall, stable_ranks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.edit_rule import EditRule

__all__ = ["WINO", "stable_ranks"]

#: upstream's back-off count at the start of every block (``last_accept = 30``)
FIRST_LAST_ACCEPT = 30


class WINO(EditRule):
    """Wide-in narrow-out: threshold commits plus leave-one-out re-masking of weak tokens, block by block.

    Args:
        denoiser: frozen denoiser answering leave-one-out posteriors (None: the world's exact oracle).
        steps: keys the randomness only (a grid gives replicates); the step count is adaptive.
        block_length: block size (None: one block of length T; upstream's default, 128, is in the config); must
            divide T.
        wide_in_threshold: commit proposals with confidence above this (upstream 0.6).
        narrow_out_threshold: re-mask revealed tokens whose leave-one-out probability is below this (upstream 0.9).
        temperature: proposal temperature (upstream: 0, argmax).
        max_steps_per_block: calls per block after which re-masking stops (None: 4 x block_length).
    """

    sampler_name = "wino"
    edit_law = None  # its own edit hook

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, block_length: int | None = None,
                 wide_in_threshold: float = 0.6, narrow_out_threshold: float = 0.9, temperature: float = 1.0,
                 max_steps_per_block: int | None = None) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.wide_in_threshold = checks.real("wide_in_threshold", wide_in_threshold, 0.0, 1.0)
        self.narrow_out_threshold = checks.real("narrow_out_threshold", narrow_out_threshold, 0.0, 1.0)
        self.temperature = checks.real("temperature", temperature, 0.0)
        self.max_steps_per_block = checks.optional_integer("max_steps_per_block", max_steps_per_block)

    def check_run(self, seq_len: int, steps: int | None) -> None:
        checks.divides("block_length", self.block_length, seq_len)

    def begin(self, batch: int, block_length: int, device: torch.device) -> dict[str, torch.Tensor]:
        """``last``: the previous call's commit count (30 at a block's start)."""
        return {"last": torch.full((batch,), FIRST_LAST_ACCEPT, dtype=torch.long, device=device)}

    def edit(self, call: EditCall, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Wide in (threshold commits, at most a, at least one), narrow out (re-mask weak revealed tokens)."""
        masked, last = call.masked, state["last"][call.rows]
        L = masked.shape[1]
        cap = self.max_steps_per_block if self.max_steps_per_block is not None else 4 * L
        # wide in
        n_mask = masked.sum(1)
        most = (n_mask.double() * 0.7).floor().long().clamp(min=5).clamp(max=20)
        score = torch.where(masked, call.prob, float("-inf"))
        above = (score > self.wide_in_threshold) & masked
        n_above = above.sum(1, keepdim=True)
        rank = stable_ranks(score, descending=True)
        commit = torch.where(n_above > most[:, None], rank < most[:, None],
                             torch.where(n_above == 0, rank == 0, above)) & masked
        n_commit = commit.sum(1)
        # narrow out (scored on the tokens revealed before this call)
        back = torch.where(masked, float("inf"), call.held)
        low = back < self.narrow_out_threshold
        fewest = stable_ranks(back, descending=False) < (last - 1)[:, None]
        remask = torch.where((low.sum(1) >= last)[:, None], fewest & low, low)
        remask &= ((n_commit > 1) & (call.in_block < cap))[:, None] & ~masked
        new = torch.where(commit, call.proposal, torch.where(remask, self.mask_id, call.tokens))
        state["last"][call.rows] = n_commit
        return new, ~(new == self.mask_id).any(1)
