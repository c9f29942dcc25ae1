"""Random draws shared by the samplers, all driven by counter-based uniforms (``dllm_lit.rng``).

Upstream samplers draw categoricals with an exponential race,
``argmax(probs / -log(u))`` (MDLM ``_sample_categorical``, SEDD ``sample_categorical``), or a
Gumbel race for LLaDA.  Both are exact samplers of the normalised ``probs``; here the same law
is drawn by the inverse CDF in float64 from a single uniform per position, which is exact,
cheaper (one uniform instead of V) and free of the float32 precision issue that ReMDM's
"fp64 Gumbel" fixes.
"""
from __future__ import annotations

import torch

from dllm_lit import rng
from dllm_lit.denoisers.local import LocalDenoiser, revealed_neighbours_at
from dllm_lit.util.indices import nonzero_pairs

__all__ = ["categorical", "categorical_from_cdf", "categorical_from_stored_cdf", "sharpen", "tempered_draw",
           "tempered_law", "drawn_log_prob", "argmax_log_prob", "tempered_log_prob", "argmax_fill",
           "masked_posterior_chunks", "neighbour_queries", "StepUniforms", "row_chunks",
           "ROW_CHUNK_ELEMENTS", "ROW_CHUNK_ELEMENTS_ACCELERATOR"]

#: rows x V elements per chunk of posterior rows processed at once on the CPU (4 MB of float64): temporaries
#: stay in cache and below the allocator's mmap threshold, so they are reused instead of page-faulted
ROW_CHUNK_ELEMENTS = 2**19
#: the same on an accelerator (256 MB of float64): there every chunk costs a round of kernel launches, so
#: chunks are as large as memory comfortably allows
ROW_CHUNK_ELEMENTS_ACCELERATOR = 2**25


def row_chunks(n: int, width: int, device: torch.device | None = None) -> list[slice]:
    """Slices covering range(n) in chunks of about ROW_CHUNK_ELEMENTS / width rows (ROW_CHUNK_ELEMENTS_ACCELERATOR
    on a ``device`` other than the CPU).  Row-wise work gives the same numbers in any chunking."""
    budget = ROW_CHUNK_ELEMENTS if device is None or torch.device(device).type == "cpu" else ROW_CHUNK_ELEMENTS_ACCELERATOR
    step = max(1, budget // max(1, width))
    return [slice(i, min(n, i + step)) for i in range(0, n, step)]


def categorical(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index k with F(k-1) <= u * F(V-1) < F(k), F the float64 cumsum of ``probs`` [n, V].

    Unnormalised rows are allowed; zero-probability entries are never returned.
    """
    return categorical_from_cdf(probs.to(torch.float64).cumsum(-1), u)


def categorical_from_cdf(cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`categorical` from a precomputed float64 cumsum ``cdf`` [n, V].

    The target u * total is kept strictly below the total (u * total can round up to it), so the
    first index with cdf > target always has positive mass.
    """
    total = cdf[..., -1]
    target = torch.minimum(u.to(torch.float64) * total, torch.nextafter(total, torch.zeros_like(total)))
    return torch.searchsorted(cdf.contiguous(), target.unsqueeze(-1), right=True).squeeze(-1)


def categorical_from_stored_cdf(cdf_rows: torch.Tensor, rows: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """:func:`categorical_from_cdf` for rows ``rows`` of a stored cdf table [R, V], without gathering whole rows.

    Counts the entries <= target by binary lifting over the row (ceil(log2 V) scalar gathers per
    draw), which is what ``searchsorted(right=True)`` returns: identical draws, less memory traffic.
    """
    V = cdf_rows.shape[-1]
    flat = cdf_rows.reshape(-1)
    base = rows.long() * V
    total = flat[base + (V - 1)]
    target = torch.minimum(u.to(torch.float64) * total, torch.nextafter(total, torch.zeros_like(total)))
    k = torch.zeros_like(base)
    step = 1 << (V.bit_length() - 1)
    while step:
        idx = k + (step - 1)
        ok = (idx < V) & (flat[base + idx.clamp(max=V - 1)] <= target)
        k = torch.where(ok, k + step, k)
        step >>= 1
    return k


def sharpen(p: torch.Tensor, power: float) -> torch.Tensor:
    """Unnormalised p^power in float64, computed as (p / max p)^power so the row maximum is 1.

    The one "sharpen by a power" of the package: LLaDA's proposal temperature (power 1/tau), SEDD's
    score temperature (beta / tau) and AR's local sharpening (beta) all use it.  Zero entries stay
    zero for power > 0; no row underflows to all-zero.
    """
    p = p.to(torch.float64)
    return (p / p.amax(-1, keepdim=True)) ** power


def drawn_log_prob(law: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log q(token) for each row: the log-probability of ``tokens`` [n] under the (possibly unnormalised)
    law rows [n, V] they were drawn from, float64 [n].  A deterministic choice (argmax) has log q = 0.

    The per-position factor of a sampler's path probability (see ``docs/metrics.md``, sequence KL).
    """
    law = law.to(torch.float64)
    return law.gather(-1, tokens.long().unsqueeze(-1)).squeeze(-1).log() - law.sum(-1).log()


def tempered_law(probs: torch.Tensor, temperature: float) -> torch.Tensor | None:
    """The (unnormalised) law :func:`tempered_draw` samples at ``temperature`` > 0: p^(1/temperature);
    None at temperature 0 (argmax, a deterministic choice)."""
    if temperature == 0:
        return None
    return probs if temperature == 1 else sharpen(probs, 1.0 / temperature)


def argmax_log_prob(probs: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log q(token) of the argmax choice (first maximum) of each row of ``probs``: 0 where ``tokens`` is it, -inf
    elsewhere (float64 [n]; a deterministic draw scored against another token)."""
    return torch.where(tokens == probs.argmax(-1), 0.0, float("-inf")).to(torch.float64)


def tempered_log_prob(probs: torch.Tensor, tokens: torch.Tensor, temperature: float) -> torch.Tensor:
    """log q(token) under :func:`tempered_law` (:func:`argmax_log_prob` at temperature 0), float64 [n]."""
    law = tempered_law(probs, temperature)
    return argmax_log_prob(probs, tokens) if law is None else drawn_log_prob(law, tokens)


def tempered_draw(probs: torch.Tensor, u: torch.Tensor, temperature: float, *,
                  with_log_prob: bool = False) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``probs`` [n, V]: argmax (first maximum) at temperature 0, else the
    inverse-CDF draw from p^(1/temperature) renormalised, with uniforms ``u`` [n].

    At temperature tau > 0 this is the law of the Gumbel race ``argmax(log p / tau + G)``.
    With ``with_log_prob`` also returns each token's :func:`drawn_log_prob` under that law (0 for argmax).
    """
    law = tempered_law(probs, temperature)
    tok = probs.argmax(-1) if law is None else categorical(law, u)
    if not with_log_prob:
        return tok
    if law is None:
        return tok, torch.zeros(tok.shape, dtype=torch.float64, device=tok.device)
    return tok, drawn_log_prob(law, tok)


def neighbour_queries(denoiser: LocalDenoiser, z: torch.Tensor, b: torch.Tensor,
                      p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The neighbour queries (x_left, d_left, x_right, d_right) of the masked positions (b, p) of z."""
    a, c = revealed_neighbours_at(z.contiguous(), denoiser.mask_id, b, p)
    return denoiser.neighbour_query(z, b, p, a, c)


def masked_posterior_chunks(denoiser, z: torch.Tensor, b: torch.Tensor, p: torch.Tensor,
                            query: tuple[torch.Tensor, ...] | None = None):
    """Yield (slice, rows): p(x0 | z) at the masked positions (b[slice], p[slice]) of z, every row conditioned
    on z as given.  A :class:`~dllm_lit.denoisers.LocalDenoiser` answers from the nearest revealed neighbours
    (``query``: their :func:`neighbour_queries`, if already known) in chunks of :func:`row_chunks` rows (bounded
    memory, no one-hot rows); any other denoiser is queried once."""
    if not isinstance(denoiser, LocalDenoiser):
        yield slice(0, b.numel()), denoiser.probs_at(z, b, p)
        return
    query = neighbour_queries(denoiser, z, b, p) if query is None else query
    for sl in row_chunks(b.numel(), denoiser.vocab_size, b.device):
        yield sl, denoiser.probs_given_neighbours(*(q[sl] for q in query))


def argmax_fill(denoiser, z: torch.Tensor) -> torch.Tensor:
    """Fill every remaining MASK with argmax_v p(x0 = v | z), all positions in parallel (MDLM's noise removal)."""
    b, p = nonzero_pairs(z == denoiser.mask_id)
    if b.numel() == 0:
        return z
    tok = torch.empty_like(b)
    for sl, rows in masked_posterior_chunks(denoiser, z, b, p):
        tok[sl] = rows.argmax(-1)
    z = z.clone()
    z[b, p] = tok
    return z


def _grid_uniforms(h: torch.Tensor, lo: int, hi: int, slot: int) -> torch.Tensor:
    """``rng.uniform`` at positions lo..hi-1 given the (key, step) hash ``h`` [B, 1] or [B, T]: float64 [B, hi - lo]."""
    pos = torch.arange(lo, hi, device=h.device) * 16 + int(slot)
    return rng.uniform_from_hash(h, pos[None, :])


class StepUniforms:
    """Uniforms for one sampler run: U(seed, sequence index, stream, steps, step j, position, slot).

    ``steps`` (the run's number of steps) is folded into the key so different step counts use
    independent randomness; the sampler name is not, so samplers that coincide in law for some
    settings (ReMDM with sigma = 0 and MDLM) coincide draw for draw.
    """

    def __init__(self, seed: int, indices: torch.Tensor, steps: int, stream: int = rng.Stream.TOKEN) -> None:
        self.keys = rng.mix64(rng.sequence_keys(seed, indices, stream) ^ int(steps or 0))  # None: a rule that ignores steps

    def rows(self, sl: slice) -> "StepUniforms":
        """The same uniforms for the sequences ``sl`` of the batch only."""
        out = StepUniforms.__new__(StepUniforms)
        out.keys = self.keys[sl]
        return out

    def grid(self, step: int, seq_len: int, slot: int = 0) -> torch.Tensor:
        """Float64 [B, T] uniforms for every position of every sequence at step ``step``."""
        return self.block(step, 0, seq_len, slot)

    def block(self, step: int | torch.Tensor, lo: int, hi: int, slot: int = 0) -> torch.Tensor:
        """Float64 [B, hi - lo] uniforms at positions lo..hi-1; ``step`` an int or one step per sequence [B]."""
        if not 0 <= int(slot) < 16:
            raise ValueError(f"slot must lie in [0, 16), got {slot}")
        h = rng._absorb(self.keys, step if isinstance(step, int) else step.to(torch.int64))
        return _grid_uniforms(h[:, None], lo, hi, slot)

    def grid_where(self, other: "StepUniforms", which: torch.Tensor, step: int, slot: int = 0) -> torch.Tensor:
        """Float64 [B, T]: ``self.grid(step, T, slot)`` where ``which`` [B, T] is True, ``other.grid(step, T, slot)``
        elsewhere - the same numbers (``rng.uniform``'s formula) at the cost of one grid instead of two."""
        h = torch.where(which, rng._absorb(self.keys, step)[:, None], rng._absorb(other.keys, step)[:, None])
        return _grid_uniforms(h, 0, which.shape[1], slot)

    def below_where(self, other: "StepUniforms", which: torch.Tensor, step: int, threshold: float,
                    other_threshold: float | torch.Tensor, slot: int = 0) -> torch.Tensor:
        """Bool [B, T]: ``grid_where(other, which, step, slot) < where(which, threshold, other_threshold)``
        (``other_threshold`` a float or a float64 [B, 1] column), decided on the uniforms' integer bits
        (:func:`dllm_lit.rng.uniform_count_below`): the same decisions without forming the float64 grid."""
        B, dev = which.shape[0], which.device

        def counts(thr: float | torch.Tensor) -> torch.Tensor:
            if not isinstance(thr, torch.Tensor):
                thr = torch.tensor([[float(thr)]], dtype=torch.float64, device=dev)
            return rng.uniform_count_below(thr).expand(B, 1)

        pos = torch.arange(which.shape[1], device=dev)[None, :] * 16 + int(slot)
        h_self, h_other = rng._absorb(self.keys, step)[:, None], rng._absorb(other.keys, step)[:, None]
        return rng.bits_below_where(which, h_self, h_other, counts(threshold), counts(other_threshold), pos)

    def at_sequences(self, step: int | torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor,
                     slot: int = 0) -> torch.Tensor:
        """:meth:`at` with ``step`` an int or one step per sequence of the batch [B] (not per pair): the (key, step)
        hash is taken once per sequence, then one finaliser per pair (the same numbers, half the hashing)."""
        if not 0 <= int(slot) < 16:
            raise ValueError(f"slot must lie in [0, 16), got {slot}")
        h = rng._absorb(self.keys, step if isinstance(step, int) else step.to(torch.int64))
        return rng.uniform_from_hash(h.index_select(0, batch_index), position_index.to(torch.int64) * 16 + int(slot))

    def at(self, step: int | torch.Tensor, batch_index: torch.Tensor, position_index: torch.Tensor, slot: int = 0) -> torch.Tensor:
        """Float64 [n] uniforms at the listed (batch, position) pairs (``step``: an int or one per pair)."""
        return rng.uniform(self.keys[batch_index], step, position_index, slot)
