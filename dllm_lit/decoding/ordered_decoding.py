"""Decoding when *which* positions unmask at each step does not depend on the denoiser.

For MDLM's ddpm_cache step the stay-masked probability s/t is the same for every masked
position whatever p(x0 | z), so each position's unmasking step is an independent draw,
known in advance:

    P(position decoded at step j) = prod_{j' < j} (s_j'/t_j') * (t_j - s_j)/t_j = t_j - t_{j+1},

and P(never) = t_min (filled by the final step).  The same holds for the paper's "MDLM"
(a uniformly random order cut into fixed counts per step) and for SEDD's analytic/Euler steps
with the exact score at temperature 1.  Given the decode steps ``s[b, i]``, a position decoded
at step j sees as revealed exactly the positions with s < j, so its nearest revealed neighbours
are the *previous / next strictly smaller* elements of s - computable for all positions at
once by binary lifting in O(B T log T).  Each step then queries the denoiser only at its k
positions: with a :class:`~dllm_lit.denoisers.LocalDenoiser` (the oracle) a step costs O(k V)
and a whole run O(B T V), independent of the number of steps.  Other denoisers are queried
through ``probs_at(z, b, p)`` on the current state, which gives identical draws (tested).

:func:`random_order_steps` assigns decode steps from a uniformly random order cut into LLaDA's
transfer counts (LLaDA's ``random`` remasking and the paper's "MDLM").
"""
from __future__ import annotations

from collections.abc import Callable

import torch

from dllm_lit import rng
from dllm_lit.denoisers.local import LocalDenoiser
from dllm_lit.samplers.draws import StepUniforms, row_chunks
from dllm_lit.samplers.selection import topk_stable, transfer_schedule

__all__ = ["previous_smaller", "next_smaller", "decode_in_order", "random_order_steps", "coin_decode_steps",
           "dense_ranks"]


def previous_smaller(s: torch.Tensor) -> torch.Tensor:
    """For each i, the largest a < i with s[a] < s[i] (-1 if none), per row of s [B, T] (int64).

    Binary lifting: level k holds min(s[a - 2^k + 1 .. a]); from a = i - 1 the search jumps
    over every window with no smaller element, from the widest window down.
    """
    B, T = s.shape
    s = s.long()
    inf = torch.iinfo(torch.int64).max
    levels = [s]
    k = 1
    while (1 << k) <= T:
        prev = levels[-1]
        shift = 1 << (k - 1)
        shifted = torch.cat([torch.full((B, shift), inf, dtype=s.dtype, device=s.device), prev[:, :-shift]], 1)
        levels.append(torch.minimum(prev, shifted))
        k += 1
    a = (torch.arange(T, device=s.device) - 1).expand(B, T).clone()
    for k in range(len(levels) - 1, -1, -1):
        m = levels[k].gather(1, a.clamp(min=0))
        a = torch.where((a >= 0) & (m >= s), a - (1 << k), a)
    return a.clamp(min=-1)


def next_smaller(s: torch.Tensor) -> torch.Tensor:
    """For each i, the smallest c > i with s[c] < s[i] (T if none)."""
    T = s.shape[1]
    return (T - 1 - previous_smaller(s.flip(1))).flip(1)


#: ``draw(j, b, p, probs)`` -> tokens, or (tokens, log q of each token under the law it was drawn from)
TokenDraw = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], "torch.Tensor | tuple[torch.Tensor, torch.Tensor]"]


def decode_in_order(denoiser, z: torch.Tensor, decode_step: torch.Tensor, num_steps: int, draw: TokenDraw,
                    log_q: torch.Tensor | None = None) -> torch.Tensor:
    """Decode every masked position of ``z`` at its step ``decode_step[b, i]`` in [0, num_steps].

    ``decode_step`` must be negative at positions already revealed in ``z`` (e.g. a prompt).
    At step j the positions with decode_step == j are decoded in parallel from the posterior
    given the positions with decode_step < j; ``draw(j, b, p, probs) -> tokens`` (row-wise: it may
    be called on chunks of a step's positions) turns the
    posterior rows into tokens (sampling, argmax, ...).  Returns the decoded LongTensor[B, T].

    ``log_q`` (float64 [B, T], optional) records the path probability: ``draw`` then returns
    ``(tokens, log_probs)`` and ``log_q[b, p]`` is set to the log-probability of the token drawn at
    (b, p) under the law it was drawn from (``draws.drawn_log_prob``; 0 for a deterministic choice).
    Because the decode steps do not depend on the tokens, sum_p log_q[b, p] = log p_s(x_b | order)
    (see ``docs/metrics.md``, sequence-level KL).
    """
    B, T = z.shape
    M, V = denoiser.mask_id, denoiser.vocab_size
    z = z.clone()
    s = torch.where(z != M, torch.full_like(decode_step, -1), decode_step.long())
    fast = isinstance(denoiser, LocalDenoiser)
    if fast:
        prev, nxt = previous_smaller(s), next_smaller(s)
    flat = s.reshape(-1)
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount((flat + 1).clamp(min=0), minlength=num_steps + 2).tolist()  # one host sync per run
    offset = counts[0]  # revealed positions come first
    for j in range(num_steps + 1):
        k = counts[j + 1]
        if k == 0:
            continue
        idx = order[offset: offset + k]
        offset += k
        b, p = idx // T, idx % T
        if fast:  # the step's positions see only earlier steps: rows are independent, done in chunks
            a, c = prev[b, p], nxt[b, p]
            tok = torch.empty_like(b)
            for sl in row_chunks(k, V, z.device):
                probs = denoiser.probs_from_neighbours(z, b[sl], p[sl], a[sl], c[sl])
                tok[sl] = _tokens(draw(j, b[sl], p[sl], probs), b[sl], p[sl], log_q)
            z[b, p] = tok
        else:
            z[b, p] = _tokens(draw(j, b, p, denoiser.probs_at(z, b, p)), b, p, log_q)
    return z


def _tokens(out, b: torch.Tensor, p: torch.Tensor, log_q: torch.Tensor | None) -> torch.Tensor:
    """The tokens of a draw's output; ``(tokens, log_probs)`` also records log q at (b, p) when asked."""
    if isinstance(out, tuple):
        out, lq = out
        if log_q is not None:
            log_q[b, p] = lq.to(log_q.dtype)
    elif log_q is not None:
        raise ValueError("recording log q needs a draw that returns (tokens, log_probs)")
    return out


def dense_ranks(decode: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(rank of each position's decode step among its row's distinct steps [B, T], distinct steps per row [B])."""
    srt, order = decode.sort(dim=1, stable=True)
    new = torch.cat([torch.zeros_like(srt[:, :1]), (srt[:, 1:] != srt[:, :-1]).long().cumsum(1)], 1)
    return torch.empty_like(new).scatter_(1, order, new), new[:, -1] + 1


def coin_decode_steps(u: torch.Tensor, ts: torch.Tensor) -> torch.Tensor:
    """Decode step of each position when a masked position unmasks at step j with probability
    1 - ts[j+1]/ts[j] (grid ``ts`` from ts[0] = 1 down): P(step <= j) = 1 - ts[j+1], so the step is
    ``#{j : 1 - ts[j+1] <= u}`` in [0, len(ts) - 1] (len(ts) - 1: never, left for a final step)."""
    return torch.searchsorted((1.0 - ts[1:]).to(torch.float64).contiguous(), u.contiguous(), right=True)


def random_order_steps(seed: int, indices: torch.Tensor, steps: int, seq_len: int, prompt_length: int,
                       block_length: int, num_blocks: int, counts: list[list[int]] | None = None) -> torch.Tensor:
    """Decode step of every position [B, T] (-1 in the prompt) under LLaDA's random remasking.

    Each block gets a uniformly random order of its positions (i.i.d. Stream.ORDER keys, stable
    sort), cut into :func:`transfer_schedule` counts over its ``steps // num_blocks`` steps (or
    ``counts[block]``, a schedule's round sizes): the same law as drawing a uniform k-subset of the
    still-masked positions at every step.
    """
    B, dev = indices.numel(), indices.device
    P, bl, nb = prompt_length, block_length, num_blocks
    S = steps // nb
    ord_keys = StepUniforms(seed, indices, steps, stream=rng.Stream.ORDER).keys
    decode = torch.full((B, seq_len), -1, dtype=torch.long, device=dev)
    rows = torch.arange(B, device=dev)[:, None]
    step_of_rank = torch.repeat_interleave(torch.arange(S, device=dev), torch.tensor(transfer_schedule(bl, S), device=dev))
    for blk in range(nb):
        if counts is not None:
            step_of_rank = torch.repeat_interleave(torch.arange(S, device=dev), torch.tensor(counts[blk], device=dev))
        lo, hi = P + blk * bl, P + (blk + 1) * bl
        keys = rng.uniform(ord_keys[:, None], blk, torch.arange(lo, hi, device=dev)[None, :])
        order = topk_stable(keys, bl)  # [B, bl]: a uniformly random order of the block
        decode[rows, order + lo] = (blk * S + step_of_rank)[None, :].expand(B, bl)
    return decode
