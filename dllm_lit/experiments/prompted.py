"""Prompted runs: M prompts (drawn from the world or given), R continuations each, by any sampler or exactly.

A prompt is a canvas [T] (:mod:`dllm_lit.denoisers.conditioned`): revealed tokens (a prefix, or spans anywhere)
and MASK = V at the free positions.  Sequence n = m R + r continues prompt m; the sampler decodes the G_m free
positions of prompt m on the conditioned oracle (:class:`~dllm_lit.denoisers.conditioned.ConditionedDenoiser`),
with the global indices of those sequences, so a sample depends only on (seed, n).  The reference continuation,
"AR from the prompt", is exact conditional sampling (:meth:`~dllm_lit.markov.world_api.ExactWorld.sample_given`);
an ``AR`` sampler at beta = 1 is that reference.  An ``ExternalSampler`` (the user's own ``generate()`` on the
oracle model) continues prefix prompts only: its code receives the prompt's first P tokens as its prompt and
generates the rest of the T positions (its own ``prompt_length`` is set to P for the run); it records no log q.

Prompts drawn from the world: sequence m of an exact sample (seed mixed with ``Stream.PROMPT``, index m), its
positions ``reveal`` kept (``prefix`` P: positions 0..P-1).

Declared exactness: ``stats["exact_law"]`` is 1 for a row whose law is the exact conditional law by construction
(:func:`law_is_exact`: exact conditional sampling, or a sampler that declares its law exact at (G, steps)
through ``declares_exact`` and runs on the world's exact oracle), so the conditional bracket reads exactly 0 for
it whatever the float32 rounding of log q - log p (the unconditional bracket's rule, issue 37).

Bad prompts are refused in one line before any work (:func:`~dllm_lit.markov.world_api.check_canvas`: a prompt
longer than T, a token outside the vocabulary, nothing left to fill).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from dllm_lit import checks, rng
from dllm_lit.denoisers.conditioned import ConditionedDenoiser
from dllm_lit.markov.world_api import check_canvas, conditional_log_prob, exact_world

__all__ = ["PromptedSamples", "draw_prompts", "law_is_exact", "sample_prompted", "prompt_seed"]


@dataclass
class PromptedSamples:
    """``samples`` [N, T] (prompt included), ``prompt`` [N] (each sequence's row of ``canvases`` [M, T]),
    ``index`` [N] (global sequence indices), ``stats``: ``nfe`` and ``log_q`` (of the free positions; NaN =
    not recorded), ``log_p`` = log p(x | its prompt) and ``exact_law`` (1: the law is declared exact, module
    docstring), float64 [N] each."""

    samples: torch.Tensor
    prompt: torch.Tensor
    index: torch.Tensor
    canvases: torch.Tensor
    stats: dict[str, torch.Tensor]

    @property
    def free(self) -> torch.Tensor:
        """G_m, the free positions of each sequence's prompt: int64 [N]."""
        return (self.canvases[self.prompt] == self.mask_id).sum(1)

    mask_id: int = -1


def prompt_seed(seed: int) -> int:
    """The seed of prompts drawn from the world (``Stream.PROMPT`` mixed in, as ExternalSampler's prompts)."""
    return int(rng.mix64(torch.tensor([int(seed) ^ rng.Stream.PROMPT]))[0])


def draw_prompts(world, num_prompts: int, seq_len: int, seed: int, prefix: int | None = None,
                 reveal: Sequence[int] | None = None) -> torch.Tensor:
    """Canvases [M, T] of exact world samples with ``prefix`` (positions 0..P-1) or the positions ``reveal`` kept."""
    M = checks.integer("num_prompts", num_prompts)
    T = checks.integer("seq_len", seq_len)
    if (prefix is None) == (reveal is None):
        raise ValueError("give exactly one of prefix (a prompt length) and reveal (the prompt's positions)")
    if prefix is not None:
        P = checks.integer("prefix", prefix, minimum=0)
        if P >= T:
            raise ValueError(f"prefix ({P}) must be shorter than seq_len ({T}): the prompt would leave nothing to fill")
        keep = torch.arange(P)
    else:
        keep = torch.as_tensor(list(reveal), dtype=torch.long)
        if keep.numel() and (int(keep.min()) < 0 or int(keep.max()) >= T):
            raise ValueError(f"reveal positions must lie in [0, seq_len = {T}), got {list(reveal)}")
        if torch.unique(keep).numel() >= T:
            raise ValueError(f"reveal covers every position of seq_len = {T}: nothing to fill")
    w = exact_world(world)
    x = w.sample(M, T, seed=prompt_seed(seed))
    canvas = torch.full_like(x, w.mask_id)
    canvas[:, keep] = x[:, keep]
    return canvas


def law_is_exact(sampler, base, world, free: int, steps: int | None) -> bool:
    """Whether ``sampler`` continuing a prompt with ``free`` = G positions at ``steps`` draws from the exact
    conditional law: it declares its law exact at (G, steps) (``declares_exact``, the sampler method the
    unconditional bracket reads; a sampler without it declares nothing) and needs no denoiser or its denoiser
    ``base`` is the exact oracle of ``world`` (the conditioned oracle then answers the exact conditionals)."""
    declares = getattr(sampler, "declares_exact", None)
    if declares is None or not declares(int(free), steps):
        return False
    if not sampler.requires_denoiser:
        return True
    from dllm_lit.denoisers.hmm_oracle import HMMOracleDenoiser
    from dllm_lit.denoisers.oracle import OracleDenoiser

    return isinstance(base, (OracleDenoiser, HMMOracleDenoiser)) and base.chain is world


def _prefix_length(canvas: torch.Tensor, mask_id: int) -> int:
    """P when the canvas reveals exactly positions 0..P-1, else -1."""
    P = int((canvas < mask_id).sum())
    return P if bool((canvas[:P] < mask_id).all()) else -1


def _check_sampler(sampler, canvases: torch.Tensor, mask_id: int) -> None:
    from dllm_lit.samplers.external import ExternalSampler

    if isinstance(sampler, ExternalSampler):
        bad = [m for m in range(canvases.shape[0]) if _prefix_length(canvases[m], mask_id) < 0]
        if bad:
            raise ValueError(f"ExternalSampler continues prefix prompts only (its generate() receives a prefix): "
                             f"prompt {bad[0]} reveals positions that are not a prefix")
        return
    plen = getattr(sampler, "prompt_length", None)
    if callable(plen) and plen() > 0:
        raise ValueError(f"{type(sampler).__name__} has a prompt of its own (prompt / prompt_mode): give the prompt "
                         "to the prompted run instead")
    if not sampler.requires_denoiser and getattr(sampler, "beta", 1.0) != 1.0:
        raise ValueError(f"{type(sampler).__name__} with beta != 1 has no conditional version (it sharpens a "
                         "first-order chain): a prompted AR row is exact conditional sampling")


def sample_prompted(sampler, world, canvases: torch.Tensor, repeats: int, steps: int | None, seed: int) -> PromptedSamples:
    """R = ``repeats`` continuations of each prompt: by ``sampler`` (connected to ``world``; None or ``AR`` at
    beta 1: exact conditional sampling) with ``steps``."""
    w = exact_world(world)
    z = check_canvas(canvases, w.vocab_size)
    R = checks.integer("repeats", repeats)
    M, T = z.shape
    if sampler is not None:
        _check_sampler(sampler, z, w.mask_id)
    from dllm_lit.samplers.external import ExternalSampler

    exact = sampler is None or not sampler.requires_denoiser
    external = isinstance(sampler, ExternalSampler)
    out, nfe, log_q, exact_law = [], [], [], []
    for m in range(M):
        idx = torch.arange(m * R, (m + 1) * R)
        canvas = z[m]
        if exact:
            x = w.sample_given(canvas.expand(R, -1), seed, idx)
            nfe.append(torch.full((R,), float("nan"), dtype=torch.float64))
            log_q.append(conditional_log_prob(w, x, canvas.expand(R, -1)))
            exact_law.append(torch.ones(R, dtype=torch.float64))
        elif external:  # the user's code on the full-length oracle model, the prompt's prefix as its prompt
            saved = sampler.prompt_length, sampler.given_prompt
            P = _prefix_length(canvas, w.mask_id)
            sampler.prompt_length, sampler.given_prompt = P, canvas[:P]
            try:
                sampler.check_run(T, steps)
                x, calls = sampler.generate_with_nfe(idx.to(sampler.device), T, steps, seed)
            finally:
                sampler.prompt_length, sampler.given_prompt = saved
            x = x.long().cpu()
            nfe.append(calls.to(torch.float64).cpu())
            log_q.append(torch.full((R,), float("nan"), dtype=torch.float64))
            exact_law.append(torch.zeros(R, dtype=torch.float64))
        else:
            base = sampler.denoiser
            sampler.denoiser = ConditionedDenoiser(base, canvas).to(sampler.device)
            try:
                G = int(sampler.denoiser.free.numel())
                sampler.check_run(G, steps)
                gen, stats = sampler.generate_with_stats(idx.to(sampler.device), G, steps, seed)
            finally:
                sampler.denoiser = base
            x = canvas.expand(R, -1).clone()
            x[:, canvas == w.mask_id] = gen.long().cpu()
            nfe.append(stats["nfe"].to(torch.float64).cpu())
            log_q.append(stats["log_q"].to(torch.float64).cpu())
            exact_law.append(torch.full((R,), float(law_is_exact(sampler, base, world, G, steps)), dtype=torch.float64))
        out.append(x)
    x = torch.cat(out)
    prompt = torch.arange(M).repeat_interleave(R)
    stats = {"nfe": torch.cat(nfe), "log_q": torch.cat(log_q), "log_p": conditional_log_prob(w, x, z[prompt]),
             "exact_law": torch.cat(exact_law)}
    return PromptedSamples(x, prompt, torch.arange(M * R), z, stats, mask_id=w.mask_id)
