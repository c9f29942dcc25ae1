"""LLaDA 2.1 block refinement with token editing; see ``docs/samplers/llada21.md``.

LLaDA 2.1's decoding as diffusers runs it: ``BlockRefinementScheduler.step`` (``threshold``, ``editing_threshold``)
in ``schedulers/scheduling_block_refinement.py`` and the loop of ``pipelines/llada2/pipeline_llada2.py``
(``max_post_steps``).

Blocks of ``block_length`` left to right, S = steps / blocks steps per block with LLaDA's transfer counts k_j.  One
call scores every position of the block: a token x^_i is drawn from p^(1/tau) (argmax at tau = 0) with confidence
c_i = its probability under that law, where p is p(x_i | z) at a masked position and the leave-one-out
p(x_i | z_{-i}) at a revealed one (what an editing model is trained to predict; :mod:`.row_providers` answers it).  Then

* mask filling (while the block has masks, step j): commit every masked i with c_i > ``threshold`` if there are at
  least k_j of them, else the min(k_j, #masked) most confident;
* editing (``editing_threshold`` not None): replace every revealed token with x^_i when x^_i differs from it and
  c_i > ``editing_threshold``;
* once the block has no mask, up to ``max_post_steps`` more calls edit it; the first call that edits nothing ends
  the block (and a block without masks ends at once when editing is off).

Ties: the lower position first.  NFE = calls, per sequence (adaptive: threshold commits end the mask phase early,
edits extend the post phase).  Randomness: Stream.TOKEN uniforms at (the sequence's call count, position).  An editing rule with
``edit_law = "refine"``: the engine runs the calls (:func:`dllm_lit.decoding.decode_edits`), on the exact oracle
drawing only where a proposal can commit or edit.
"""
from __future__ import annotations

import torch

from dllm_lit import checks
from dllm_lit.decoding import check_blocks
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.draws import tempered_law
from dllm_lit.samplers.edit_rule import EditRule

__all__ = ["LLaDA21"]


class LLaDA21(EditRule):
    """Threshold block refinement with token editing (T2T) from leave-one-out confidences.

    Args:
        denoiser: frozen denoiser answering leave-one-out posteriors (None: the world's exact oracle).
        steps: mask-filling steps in all (a grid: one row each); must be divisible by the number of blocks.
        block_length: block size; None = one block of length T.
        threshold: commit masked proposals above this confidence (diffusers / LLaDA 2.1 default 0.7).
        editing_threshold: replace revealed tokens whose proposal beats this confidence (default 0.5); None: off.
        max_post_steps: editing calls allowed per block once it has no mask (default 16).
        temperature: proposal temperature (diffusers' default 0, argmax).
    """

    sampler_name = "llada21"
    edit_law = "refine"

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, block_length: int | None = None,
                 threshold: float = 0.7, editing_threshold: float | None = 0.5, max_post_steps: int = 16,
                 temperature: float = 1.0) -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_length = checks.optional_integer("block_length", block_length)
        self.threshold = checks.real("threshold", threshold, 0.0, 1.0)
        self.editing_threshold = None if editing_threshold is None else \
            checks.real("editing_threshold", editing_threshold, 0.0, 1.0, low_open=True)
        self.max_post_steps = checks.integer("max_post_steps", max_post_steps, 0)
        self.temperature = checks.real("temperature", temperature, 0.0)

    @property
    def name(self) -> str:
        return self.sampler_name if self.editing_threshold is not None else f"{self.sampler_name}_noedit"

    def check_run(self, seq_len: int, steps: int | None) -> None:
        check_blocks(seq_len, 0, self.block_length, steps)

    def row_features(self, rows: torch.Tensor) -> dict[str, torch.Tensor]:
        """What a call reads of a float64 row: the proposal's cdf, its law and the law's sum (the confidence is
        law[x] / sum); at tau = 0 the argmax and the row itself.  ``cmax`` = max law / sum bounds every confidence
        of the row (division is monotone in IEEE arithmetic), so a revealed position whose ``cmax`` does not exceed
        the editing threshold cannot be edited and draws no proposal (its uniform is its own: no other draw moves)."""
        law = tempered_law(rows, self.temperature)
        if law is None:
            return {"argmax": rows.argmax(-1), "law": rows, "cmax": rows.amax(-1)}
        total = law.sum(-1)
        return {"cdf": law.cumsum(-1), "law": law, "sum": total, "cmax": law.amax(-1) / total}
