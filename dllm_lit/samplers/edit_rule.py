"""The rule interface's editing capability: a sampler that revisits revealed tokens declares it, the engine runs it.

An :class:`EditRule` (``edits = True``) declares ``block_length`` (None: one block), whether it reads leave-one-out
rows at revealed positions (``reads_revealed``: WINO, LLaDA 2.1 and P2 do; SlowFast reads masked rows only), its
``row_features`` (what a call reads of a float64 row: ``probs``, and ``cdf`` or ``argmax`` for the proposal; an
optional bool ``revisit``: draw a proposal at a revealed position too) and its ``edit_law``:

* None: its own hook ``edit(call, state) -> (new block tokens [R, L], block done [R])``, from the engine's
  :class:`~dllm_lit.decoding.EditCall` (tokens, masks, proposals and their probabilities, the held tokens'
  leave-one-out probabilities, calls made in the block and in all) and its per-sequence ``state`` (``begin``; reset
  when a block ends) - WINO's wide-in narrow-out, SlowFast's spans;
* "refine": LLaDA 2.1's threshold fill and token editing, declared by ``threshold``, ``editing_threshold`` and
  ``max_post_steps`` (its ``row_features``: ``law``, ``sum``, ``cmax``);
* "plan": P2's Gumbel re-planning of the masked set, declared by ``eta``, ``gumbel_scale`` and ``masked_after``.

:func:`~dllm_lit.decoding.decode_edits` owns the loop, the keyed randomness (proposals from Stream.TOKEN uniforms at
(the sequence's call count, position)), the row provider, NFE (calls per sequence) and, for the engine's laws, the
bounded paths that draw only where a proposal can matter (same draws, tested).
"""
from __future__ import annotations

from abc import abstractmethod

import torch

from dllm_lit import checks
from dllm_lit.decoding import EDIT_LAWS, EditCall, check_leave_one_out, decode_edits
from dllm_lit.samplers.base import NFECountingSampler
from dllm_lit.samplers.draws import tempered_law

__all__ = ["EditRule", "EDIT_LAWS"]


class EditRule(NFECountingSampler):
    """A sampler that revisits revealed tokens, written as a declaration (module docstring)."""

    edits = True

    @property
    @abstractmethod
    def edit_law(self) -> str | None:
        """None (the rule's :meth:`edit`), "refine" or "plan" (:data:`EDIT_LAWS`): every editing rule declares it,
        as a class attribute (``edit_law = None``)."""
    #: True: leave-one-out rows at revealed positions (the denoiser must answer them); False: masked rows only
    reads_revealed: bool = True
    block_length: int | None = None
    temperature: float = 1.0

    def check_options(self) -> None:
        """The declared law is one of :data:`EDIT_LAWS`; a rule reading revealed rows needs leave-one-out rows."""
        checks.choice("edit_law", self.edit_law, EDIT_LAWS)
        if self.reads_revealed:
            check_leave_one_out(self.denoiser, type(self).__name__)

    def row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a call reads of a float64 row: the row, and the proposal's cdf (or the argmax at tau = 0)."""
        law = tempered_law(rows, self.temperature)
        return {"probs": rows, "argmax": rows.argmax(-1)} if law is None else {"probs": rows, "cdf": law.cumsum(-1)}

    def begin(self, batch: int, block_length: int, device: torch.device) -> dict[str, torch.Tensor]:
        """The per-sequence state [batch, ...] at a block's start (the engine resets it there)."""
        return {}

    def edit(self, call: EditCall, state: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """With ``edit_law = None``: the new tokens of the call's blocks [R, L] and whether each block is done [R]."""
        raise TypeError(f"{type(self).__name__} declares edit_law={self.edit_law!r}: the engine runs it, not edit()")

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int, cache: bool = True):
        """Samples and NFE; ``cache=False`` computes every call's rows afresh (identical draws, tested)."""
        self.check_run(seq_len, steps)
        return decode_edits(self, indices, seq_len, steps, seed, cache=cache)
