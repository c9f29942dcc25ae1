"""Block (semi-autoregressive) MDLM as BD3-LM samples it; see ``docs/samplers/bd3.md``.

Paper: *Block Diffusion: Interpolating Between Autoregressive and Diffusion Language Models*
(Arriola et al., ICLR 2025, arXiv:2503.09573).  Upstream: ``kuleshov-group/bd3lms``,
``diffusion.py`` (``_semi_ar_sampler``, ``_ddpm_caching_update``, ``_nucleus_sample``).

The sequence is cut into blocks of ``block_size`` tokens, decoded left to right.  A block gets S
steps (``step_budget="per_block"``, upstream: S = ``steps``; ``"total"``: S = steps / blocks).
Upstream's grid (``grid="bd3"``, log-linear noise, move chance m_t = t):

    t_j = linspace(1, 0, S)[j],   s_j = max(t_j - 1/S, 0),   j = 0..S-1,

and a masked position of the current block moves at step j with probability (t_j - s_j)/t_j (1 at
t_j = 0), taking a token from the nucleus-filtered posterior p(x0_i | z):

    P(x_s = v) = top_p(p)_v (t - s)/t,      P(x_s = MASK) = s/t.

Revealed positions are copied; later blocks are all MASK.  The last step (t = 0) decodes every
position still masked, so no fill is needed.  ``grid="mdlm"`` runs MDLM's grid
``linspace(1, 1e-5, S + 1)`` inside each block plus MDLM's argmax fill of the block's remaining
masks; with ``block_size = T`` it is :class:`~dllm_lit.samplers.mdlm.MDLM` draw for draw.
``first_hitting=True`` (upstream's first-hitting sampler, Zheng et al., arXiv:2409.02908) decodes
one uniformly chosen masked position of the block per step (needs S >= block_size).

The oracle's posterior conditions on exactly the revealed positions, which are the earlier blocks
and the revealed part of the current block: later blocks are fully masked and carry no evidence,
so block-causal and bidirectional attention coincide here.

Which positions move never depends on the tokens (the stay probability s/t, or a uniform choice
among the masked), so ``decoding="ordered"`` (default) draws every position's decode step up front
and decodes with :func:`~dllm_lit.decoding.ordered_decoding.decode_in_order` over each sequence's
dense ranks of its decode steps (draws keyed by the true global step, so the same draws); ``"stepwise"``
follows upstream's loop literally (fresh coins each step).  Same law, different draws.

NFE per sequence: upstream's ``_ddpm_caching_update`` reuses p_x0 while the state is unchanged,
and the block loop stops once the block is complete, so a sequence costs one denoiser call per step
at which its block changed (plus the fill call of ``grid="mdlm"``).
"""
from __future__ import annotations

import torch

from dllm_lit import checks, rng
from dllm_lit.decoding import decode_in_order
from dllm_lit.denoisers.base import Denoiser
from dllm_lit.util.indices import nonzero_pairs
from dllm_lit.samplers.base import Sampler
from dllm_lit.samplers.draws import StepUniforms, categorical, drawn_log_prob
from dllm_lit.decoding import check_top_p, top_p_filter
from dllm_lit.samplers.reference_scoring import forward_stats, random_order_theory
from dllm_lit.samplers.schedules import time_grid

__all__ = ["BlockMDLM", "block_times", "GRIDS", "STEP_BUDGETS", "DECODING"]

GRIDS = ("bd3", "mdlm")
STEP_BUDGETS = ("per_block", "total")
DECODING = ("ordered", "stepwise")


def dense_ranks(decode: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank of each position's decode step among its row's distinct steps [B, T], distinct steps per row [B])."""
    srt, order = decode.sort(dim=1, stable=True)
    new = torch.cat([torch.zeros_like(srt[:, :1]), (srt[:, 1:] != srt[:, :-1]).long().cumsum(1)], 1)
    return torch.empty_like(new).scatter_(1, order, new), new[:, -1] + 1


def block_times(S: int, grid: str) -> tuple[list[float], list[float], bool]:
    """(t_j, s_j for j < S, final argmax fill?) of one block's S steps.

    ``"bd3"``: upstream ``linspace(1, 0, S)`` with s = max(t - 1/S, 0) (upstream's s = t - 1/S is
    negative at the last point t = 0, where its ratio s/t is -inf; see the docs).  ``"mdlm"``:
    MDLM's ``linspace(1, 1e-5, S + 1)`` and its argmax fill.
    """
    if grid == "mdlm":
        ts = time_grid(S).tolist()
        return ts[:-1], ts[1:], True
    ts = torch.linspace(1.0, 0.0, S, dtype=torch.float64).tolist()
    return ts, [max(t - 1.0 / S, 0.0) for t in ts], False


class BlockMDLM(Sampler):
    """BD3-LM's semi-autoregressive sampler (block MDLM) with the oracle; see the module docstring.

    Args:
        denoiser, steps: as :class:`Sampler`.
        block_size: tokens per block; must divide the sequence length (checked per run).
        nucleus_p: top-p mass in (0, 1] applied to p(x0 | z) before every token draw (1 = off).
        first_hitting: one uniformly chosen masked position per step (upstream default True).
        grid: "bd3" (upstream's per-block grid) or "mdlm" (MDLM's grid and argmax fill per block).
        step_budget: "per_block" (upstream: ``steps`` steps in every block) or "total" (``steps``
            split evenly over the blocks).
        decoding: "ordered" (decode steps drawn up front) or "stepwise" (upstream's loop).
    """

    sampler_name = "bd3"

    def __init__(
        self,
        denoiser: Denoiser | None = None,
        steps: int | list[int] = 128,
        block_size: int = 16,
        nucleus_p: float = 1.0,
        first_hitting: bool = False,
        grid: str = "bd3",
        step_budget: str = "per_block",
        decoding: str = "ordered",
    ) -> None:
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

    # ------------------------------------------------------------------ run checks
    def check_run(self, seq_len: int, steps: int | None) -> None:
        """block_size divides seq_len; a "total" budget splits evenly; first hitting has a step per token."""
        bs = self.block_size
        checks.divides("block_size", bs, seq_len)
        if steps is None:
            return
        nb = seq_len // bs
        if self.step_budget == "total" and steps % nb:
            raise ValueError(f"steps={steps} must be a multiple of the number of blocks ({nb} = seq_len / block_size) "
                             f"with step_budget='total'")
        S = self.steps_per_block(seq_len, steps)
        if self.first_hitting and S < bs:
            raise ValueError(f"steps={steps} gives {S} steps per block, fewer than block_size={bs}: first_hitting "
                             f"decodes one token per step (upstream would leave MASKs)")

    def steps_per_block(self, seq_len: int, steps: int) -> int:
        return steps if self.step_budget == "per_block" else steps // (seq_len // self.block_size)

    def _slots(self, S: int) -> int:
        """Step indices per block: S, plus one for the argmax fill of grid "mdlm"."""
        return S + (1 if self.grid == "mdlm" and not self.first_hitting else 0)

    # ------------------------------------------------------------------ sampling
    def decode_steps(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        """Global decode step of every position [B, T]: block * slots + step within the block.

        First hitting: the rank of the position's ORDER key within its block (a uniformly random order,
        one position per step).  Otherwise the inverse CDF of P(decoded at step j) = prod_{j'<j} s/t (1 - s_j/t_j)
        from one uniform per position (TOKEN stream, slot 2, step 0: MDLM's uniforms).
        """
        B, T, bs = indices.numel(), seq_len, self.block_size
        nb, S = T // bs, self.steps_per_block(T, steps)
        dev = indices.device
        if self.first_hitting:
            keys = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER).grid(0, T).view(B, nb, bs)
            local = torch.sort(keys, dim=-1, stable=True).indices.argsort(dim=-1).view(B, T)
        else:
            ts, ss, _ = block_times(S, self.grid)
            if self.grid == "mdlm":  # P(step <= j) = 1 - t_{j+1}, as MDLM computes it
                cdf = 1.0 - torch.tensor(ss, dtype=torch.float64)
            else:
                stay = torch.tensor([s / t if t > 0 else 0.0 for t, s in zip(ts, ss)], dtype=torch.float64)
                cdf = 1.0 - stay.cumprod(0)
            u = StepUniforms(seed, indices, steps).grid(0, T, slot=2)
            local = torch.searchsorted(cdf.to(dev), u, right=True)
        block = torch.arange(T, device=dev) // bs
        return block[None, :] * self._slots(S) + local

    def _token_draw(self, uni: StepUniforms, fill_slot: int | None, slots: int, step_of=None, with_log_prob: bool = False):
        """Token rule at global step j: argmax at the fill slot, else a (nucleus-filtered) draw keyed by j.

        ``step_of(b, p)``, if given, returns each position's global step (the ordered path calls the
        draw with per-sequence dense step ranks, see :meth:`generate_with_nfe`).  With ``with_log_prob``
        the draw also returns each token's log-probability under the law it was drawn from (0 at the fill).
        """
        p_nuc = self.nucleus_p

        def draw(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor):
            g = j if step_of is None else step_of(b, p)
            law = top_p_filter(probs, p_nuc) if p_nuc < 1.0 else probs  # upstream skips the filter at p = 1
            tok = categorical(law, uni.at(g, b, p, slot=1))
            lq = drawn_log_prob(law, tok) if with_log_prob else None
            if fill_slot is not None:
                fill = torch.as_tensor(g % slots == fill_slot, device=tok.device)
                tok = torch.where(fill, probs.argmax(-1), tok)
                if lq is not None:
                    lq = torch.where(fill, torch.zeros_like(lq), lq)
            return tok if lq is None else (tok, lq)

        return draw

    def generate(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> torch.Tensor:
        return self.generate_with_nfe(indices, seq_len, steps, seed)[0]

    def log_q_reason(self, steps: int | None) -> str | None:
        """None: decode steps (or the first-hitting order) do not depend on the tokens (log q is recorded)."""
        return None

    def generate_with_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int):
        log_q = self._log_q_buffer(indices, seq_len)
        x, nfe = self.generate_with_nfe(indices, seq_len, steps, seed, log_q=log_q)
        stats = self._stats(nfe, log_q, indices.numel())
        if self.score_reference:
            stats.update(self._forward_stats(indices, seq_len, steps, seed))
        return x, stats

    def _forward_stats(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int) -> dict[str, torch.Tensor]:
        """The forward KL of the reference samples in an order of the ordered path's law, and its prediction
        (blocks left to right; none with nucleus filtering or the argmax fill of grid "mdlm")."""
        T, bs = seq_len, self.block_size
        S, nb = self.steps_per_block(T, steps), T // bs
        decode = self.decode_steps(indices, T, steps, seed)
        slots = self._slots(S)
        fill_slot = S if slots > S else None
        p_nuc = self.nucleus_p

        def log_law(j: int, b: torch.Tensor, p: torch.Tensor, probs: torch.Tensor, tok: torch.Tensor) -> torch.Tensor:
            law = top_p_filter(probs, p_nuc) if p_nuc < 1.0 else probs
            lq = drawn_log_prob(law, tok)
            if fill_slot is not None:
                fill = (decode[b, p] % slots) == fill_slot
                lq = torch.where(fill, torch.where(tok == probs.argmax(-1), 0.0, float("-inf")).to(lq.dtype), lq)
            return lq

        theory = None
        if p_nuc == 1.0 and fill_slot is None:
            if self.first_hitting:
                blocks = [(bs, k > 0, "sizes", [1] * bs + [0] * (S - bs)) for k in range(nb)]
            else:
                ts, ss, _ = block_times(S, self.grid)
                stay = torch.tensor([s / t if t > 0 else 0.0 for t, s in zip(ts, ss)], dtype=torch.float64)
                before = torch.cat([torch.ones(1, dtype=torch.float64), stay.cumprod(0)[:-1]])
                blocks = [(bs, k > 0, "weights", (before * (1 - stay)).tolist()) for k in range(nb)]
            theory = random_order_theory(self, blocks)
        # per-row dense ranks, as generate_with_nfe decodes (same rows, at most T loop steps instead of one per
        # distinct global step of the batch: 64260 at T = 1024, 1024 steps); log_law reads the global step itself
        dense, _ = dense_ranks(decode)
        return forward_stats(self.chain, self.denoiser, indices, T, seed, dense, int(dense.max()), log_law, theory)

    def generate_with_nfe(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                          log_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples and NFE per sequence; with ``log_q`` ([B, T] float64) the log-probability of every drawn token."""
        if self.decoding == "stepwise":
            return self._generate_stepwise(indices, seq_len, steps, seed, log_q=log_q)
        B, T = indices.numel(), seq_len
        S = self.steps_per_block(T, steps)
        slots = self._slots(S)
        decode = self.decode_steps(indices, T, steps, seed)
        # Sequences are independent, so only each row's order of decode steps matters: decode by
        # per-row dense ranks (at most T loop iterations instead of one per distinct global step of
        # the batch) and key the draws by the true global step.  One denoiser call per distinct step.
        dense, nfe = dense_ranks(decode)
        draw = self._token_draw(StepUniforms(seed, indices, steps), S if slots > S else None, slots,
                                step_of=lambda b, p: decode[b, p], with_log_prob=log_q is not None)
        z = torch.full((B, T), self.mask_id, dtype=torch.long, device=indices.device)
        x = decode_in_order(self.denoiser, z, dense, int(nfe.max()) - 1, draw, log_q=log_q)
        return x, nfe.to(torch.float64).cpu()

    def _generate_stepwise(self, indices: torch.Tensor, seq_len: int, steps: int, seed: int,
                           log_q: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Upstream's loop: per block, per step, a fresh coin (or a uniform choice) per masked position."""
        den, M = self.denoiser, self.mask_id
        B, T, bs = indices.numel(), seq_len, self.block_size
        dev = indices.device
        S = self.steps_per_block(T, steps)
        slots = self._slots(S)
        ts, ss, fill = block_times(S, self.grid)
        fill = fill and not self.first_hitting
        uni = StepUniforms(seed, indices, steps)
        pick = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER)
        draw = self._token_draw(uni, None, slots, with_log_prob=log_q is not None)  # the fill below is separate
        rows = torch.arange(B, device=dev)
        z = torch.full((B, T), M, dtype=torch.long, device=dev)
        nfe = torch.zeros(B, dtype=torch.float64, device=dev)
        for blk in range(T // bs):
            lo, hi = blk * bs, (blk + 1) * bs
            for j in range(S):
                g = blk * slots + j
                masked = z[:, lo:hi] == M
                if not bool(masked.any()):
                    break
                if self.first_hitting:  # upstream: randint(0, num_masked) among the masked positions
                    n = masked.sum(1)
                    k = (pick.at(g, rows, torch.zeros_like(rows), slot=1) * n).floor().long()
                    move = masked & (masked.long().cumsum(1) == (k + 1)[:, None])
                else:
                    t, s = ts[j], ss[j]
                    move = masked & (uni.grid(g, T)[:, lo:hi] < ((t - s) / t if t > 0 else 2.0))
                b, p = nonzero_pairs(move)
                if b.numel() == 0:
                    continue
                p = p + lo
                out = draw(g, b, p, den.probs_at(z, b, p))
                if log_q is not None:
                    out, log_q[b, p] = out
                z[b, p] = out
                nfe += torch.bincount(b, minlength=B).clamp(max=1).to(torch.float64)
            if fill:
                b, p = nonzero_pairs(z[:, lo:hi] == M)
                if b.numel():
                    p = p + lo
                    z[b, p] = den.probs_at(z, b, p).argmax(-1)  # log q = 0
                    nfe += torch.bincount(b, minlength=B).clamp(max=1).to(torch.float64)
        return z, nfe.cpu()
