"""Block (semi-autoregressive) MDLM as BD3-LM samples it; see ``docs/samplers/bd3.md``.

Paper: *Block Diffusion: Interpolating Between Autoregressive and Diffusion Language Models* (Arriola et al., ICLR
2025, arXiv:2503.09573).  Upstream: ``kuleshov-group/bd3lms``, ``diffusion.py`` (``_semi_ar_sampler``,
``_ddpm_caching_update``, ``_nucleus_sample``).

Blocks of ``block_size`` tokens are decoded left to right, each with S steps (``step_budget="per_block"``, upstream:
S = ``steps``; ``"total"``: S = steps / blocks) on upstream's grid (``grid="bd3"``, move chance m_t = t)
t_j = linspace(1, 0, S)[j], s_j = max(t_j - 1/S, 0): a masked position of the current block moves at step j with
probability (t_j - s_j)/t_j (1 at t_j = 0), taking a token from the nucleus-filtered posterior p(x0_i | z).
``grid="mdlm"`` runs MDLM's grid ``linspace(1, 1e-5, S + 1)`` in each block plus MDLM's argmax fill of the block's
remaining masks (with ``block_size = T``: :class:`~dllm_lit.samplers.mdlm.MDLM` draw for draw).  ``first_hitting``
(Zheng et al., arXiv:2409.02908) decodes one uniformly chosen masked position of the block per step (S >=
block_size).  The oracle conditions on exactly the revealed positions: later blocks are all MASK and carry no
evidence, so block-causal and bidirectional attention coincide here.

Which positions move never depends on the tokens, so this is a random-order rule (:mod:`dllm_lit.samplers.rule`)
declaring per-block step grids (``step_grid``): :meth:`BlockMDLM.decode_steps` gives each position its global step
block * slots + j up front; the engine decodes each sequence by the dense ranks of its steps, draws keyed by the
global step.  ``decoding="ordered"`` (default) draws the step from one uniform per position; ``"stepwise"`` from
upstream's loop's coins (a fresh one per masked position and step).  Same law, different draws.  NFE per sequence:
upstream's ``_ddpm_caching_update`` reuses p_x0 while the state is unchanged, so one call per step at which its
block changed (plus the fill of ``grid="mdlm"``).
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import check_top_p, dense_ranks, top_p_filter
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.samplers.draws import StepUniforms, argmax_log_prob, drawn_log_prob
from dllm_lit.samplers.reference_scoring import forward_stats, random_order_theory
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.samplers.schedules import block_times, stay_probs

__all__ = ["BlockMDLM", "block_times", "GRIDS", "STEP_BUDGETS", "DECODING"]

GRIDS = ("bd3", "mdlm")
STEP_BUDGETS = ("per_block", "total")
DECODING = ("ordered", "stepwise")


class BlockMDLM(RuleSampler):
    """BD3-LM's semi-autoregressive sampler (block MDLM) with the oracle; see the module docstring.

    Args: ``block_size`` (tokens per block, dividing the length), ``nucleus_p`` (top-p mass in (0, 1] applied to
    p(x0 | z) before every draw; 1 = off), ``first_hitting`` (one uniformly chosen masked position per step; upstream
    default True), ``grid`` ("bd3" or "mdlm"), ``step_budget`` ("per_block": ``steps`` in every block, upstream's;
    "total": split over the blocks), ``decoding`` ("ordered": one uniform per position; "stepwise": upstream's coins).
    """

    sampler_name = "bd3"
    order = "random"
    token_slot = 1
    announces_blocks = False  # the oracle's posterior needs no block events: later blocks carry no evidence

    def __init__(self, denoiser: Denoiser | None = None, steps: int | list[int] = 128, block_size: int = 16,
                 nucleus_p: float = 1.0, first_hitting: bool = False, grid: str = "bd3", step_budget: str = "per_block",
                 decoding: str = "ordered") -> None:
        super().__init__(denoiser=denoiser, steps=steps)
        self.block_size = checks.integer("block_size", block_size)
        self.nucleus_p = check_top_p(nucleus_p, "nucleus_p")
        self.first_hitting = checks.boolean("first_hitting", first_hitting)
        self.grid = checks.choice("grid", grid, GRIDS)
        self.step_budget = checks.choice("step_budget", step_budget, STEP_BUDGETS)
        self.decoding = checks.choice("decoding", decoding, DECODING)

    @property
    def name(self) -> str:
        return "bd3_fh" if self.first_hitting else "bd3"

    # ------------------------------------------------------------------ the rule
    def score(self, probs: torch.Tensor, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        raise TypeError("BlockMDLM draws its order up front (order = 'random'): the engine never asks a score")

    def propose(self, probs: torch.Tensor) -> torch.Tensor:
        """The nucleus-filtered posterior (upstream skips the filter at p = 1)."""
        return top_p_filter(probs, self.nucleus_p) if self.nucleus_p < 1.0 else probs

    def step_grid(self, seq_len: int, steps: int | None) -> tuple[int, int | None]:
        """Each block its own grid of S steps, plus the argmax fill slot S of grid "mdlm" (not with first hitting)."""
        S = self.steps_per_block(seq_len, steps)
        fill = self.grid == "mdlm" and not self.first_hitting
        return S + fill, S if fill else None

    def log_q_reason(self, steps: int | None) -> None:
        return None  # the decode steps (or the first-hitting order) do not depend on the tokens: log q is recorded

    def nfe(self, seq_len: int, steps: int | None) -> None:
        return None  # counted per sequence by the engine (its distinct steps)

    # ------------------------------------------------------------------ run checks
    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_size divides seq_len; a "total" budget splits evenly; first hitting has a step per token."""
        bs = self.block_size
        checks.divides("block_size", bs, seq_len)
        nb = seq_len // bs
        if steps is None:
            return
        if self.step_budget == "total" and steps % nb:
            raise ValueError(f"steps={steps} must be a multiple of the number of blocks ({nb} = seq_len / block_size) "
                             f"with step_budget='total'")
        S = self.steps_per_block(seq_len, steps)
        if self.first_hitting and S < bs:
            raise ValueError(f"steps={steps} gives {S} steps per block, fewer than block_size={bs}: first_hitting "
                             f"decodes one token per step (upstream would leave MASKs)")

    def steps_per_block(self, seq_len: int, steps: int) -> int:
        return steps if self.step_budget == "per_block" else steps // (seq_len // self.block_size)

    # ------------------------------------------------------------------ the order
    def decode_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """Global decode step of every position [B, T]: block * slots + step within the block (:meth:`step_grid`)."""
        if self.decoding == "stepwise":
            return self._stepwise_steps(indices, seq_len, steps, seed)
        return self._ordered_steps(indices, seq_len, steps, seed)

    def _ordered_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """First hitting: the rank of the position's ORDER key within its block (a uniformly random order,
        one position per step).  Otherwise the inverse CDF of P(decoded at step j) = prod_{j'<j} s/t (1 - s_j/t_j)
        from one uniform per position (TOKEN stream, slot 2, step 0: MDLM's uniforms)."""
        B, T, bs, dev = indices.numel(), seq_len, self.block_size, indices.device
        nb, S = T // bs, self.steps_per_block(T, steps)
        if self.first_hitting:
            keys = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER).grid(0, T).view(B, nb, bs)
            local = torch.sort(keys, dim=-1, stable=True).indices.argsort(dim=-1).view(B, T)
        else:
            # "mdlm": P(step <= j) = 1 - t_{j+1}, as MDLM computes it
            cdf = 1.0 - (torch.tensor(block_times(S, "mdlm")[1], dtype=torch.float64) if self.grid == "mdlm"
                         else stay_probs(S, self.grid).cumprod(0))
            u = StepUniforms(seed, indices, steps).grid(0, T, slot=2)
            local = torch.searchsorted(cdf.to(dev), u, right=True)
        return (torch.arange(T, device=dev) // bs)[None, :] * self.step_grid(T, steps)[0] + local

    def _stepwise_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """Upstream's loop, per block and step g = block * slots + j: a masked position moves when its fresh coin
        (TOKEN, slot 0, at (g, position)) falls below (t_j - s_j) / t_j (always at t_j = 0), or, first hitting,
        the (floor(u n) + 1)-th of the block's n masked positions moves (u: ORDER, slot 1, at (g, 0)); the
        positions still masked after the S steps take the fill slot."""
        B, T, bs, S = indices.numel(), seq_len, self.block_size, self.steps_per_block(seq_len, steps)
        slots, ts, ss = self.step_grid(T, steps)[0], *block_times(S, self.grid)[:2]
        uni = StepUniforms(seed, indices, steps)
        pick = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
        rows = torch.arange(B, device=indices.device)
        decode = torch.full((B, T), -1, dtype=torch.long, device=indices.device)
        for blk in range(T // bs):
            lo, hi = blk * bs, (blk + 1) * bs
            masked = torch.ones((B, bs), dtype=torch.bool, device=indices.device)
            for j in range(S):
                g = blk * slots + j
                if not bool(masked.any()):
                    break
                if self.first_hitting:
                    k = (pick.at(g, rows, torch.zeros_like(rows), slot=1) * masked.sum(1)).floor().long()
                    move = masked & (masked.long().cumsum(1) == (k + 1)[:, None])
                else:
                    t, s = ts[j], ss[j]
                    move = masked & (uni.block(g, lo, hi) < ((t - s) / t if t > 0 else 2.0))
                decode[:, lo:hi][move] = g
                masked &= ~move
            decode[:, lo:hi][masked] = blk * slots + S  # the fill slot (grid "mdlm"; none is left otherwise)
        return decode

    # ------------------------------------------------------------------ statistics
    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        x, stats = super().generate_with_stats(indices, seq_len, steps, seed)
        if self.score_reference:
            stats.update(self._forward_stats(indices, seq_len, steps, seed))
        return x, stats

    def _forward_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
        """The forward KL of the reference samples in an order of the ordered path's law, and its prediction
        (blocks left to right; none with nucleus filtering or the argmax fill of grid "mdlm")."""
        T, bs = seq_len, self.block_size
        S, nb = self.steps_per_block(T, steps), T // bs
        decode = self._ordered_steps(indices, T, steps, seed)
        slots, fill_slot = self.step_grid(T, steps)

        def log_law(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
            lq = drawn_log_prob(self.propose(probs), tok)
            if fill_slot is not None:
                fill = (decode[b, p] % slots) == fill_slot
                lq = torch.where(fill, argmax_log_prob(probs, tok), lq)
            return lq

        theory = None
        if self.nucleus_p == 1.0 and fill_slot is None:
            if self.first_hitting:
                blocks = [(bs, k > 0, "sizes", [1] * bs + [0] * (S - bs)) for k in range(nb)]
            else:
                stay = stay_probs(S, self.grid)
                before = torch.cat([torch.ones(1, dtype=torch.float64), stay.cumprod(0)[:-1]])
                blocks = [(bs, k > 0, "weights", (before * (1 - stay)).tolist()) for k in range(nb)]
            theory = random_order_theory(self, blocks)
        # per-row dense ranks, as the engine decodes (at most T loop steps instead of one per distinct global step
        # of the batch: 64260 at T = 1024, 1024 steps); log_law reads the global step itself
        dense, _ = dense_ranks(decode)
        return forward_stats(self.chain, self.denoiser, indices, T, seed, dense, int(dense.max()), log_law, theory)
