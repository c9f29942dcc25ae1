"""Exact output law of LLaDA's low-confidence loop under a denoiser whose answers depend on the path (a KV cache).

A cached denoiser's answer at a state depends on the states it was called on before (its cache), so the law cannot be
propagated over states as :mod:`dllm_lit.exact.core` does: it is propagated over *paths*.  For each path (the states
of the calls so far) the denoiser is replayed from a fresh decode (``decode_start``, the ``block_start`` events at
the blocks' first steps, one call per earlier state) and asked at the newest state; every joint proposal of the
block's masked positions (law p^(1/temperature)) is enumerated, the k most confident (c = p(x̂), ties: lowest position)
commit.  Tiny worlds only (V^(masked block positions) joint proposals per path and step).
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.exact.core import law_vector
from dllm_lit.samplers.selection import transfer_schedule

__all__ = ["cached_llada_law"]

Path = tuple[tuple[int, ...], ...]


def _probs(make_denoiser: Callable[[], object], path: Path, starts: dict[int, tuple[int, int]], pos: list[int],
           mask_id: int) -> torch.Tensor:
    """The denoiser's rows at positions ``pos`` of the path's last state, replayed from a fresh decode."""
    den = make_denoiser()
    den.decode_start(1)
    out = None
    for j, z in enumerate(path):
        if j in starts:
            den.block_start(*starts[j])
        zt = torch.tensor([z])
        out = den.probs_at(zt, torch.zeros(len(pos), dtype=torch.long), torch.tensor(pos)) if j == len(path) - 1 \
            else den.probs_at(zt, *(t.flatten() for t in torch.nonzero(zt == mask_id, as_tuple=True)))
    return out.to(torch.float64)


def cached_llada_law(make_denoiser: Callable[[], object], V: int, T: int, steps: int, block_length: int,
                     temperature: float = 1.0) -> torch.Tensor:
    """The exact law [V^T] (lexicographic) of ``LLaDA(denoiser, steps, remasking="low_confidence", temperature,
    block_length)`` with ``make_denoiser()`` a fresh bound denoiser (module docstring).  temperature > 0."""
    if temperature <= 0:
        raise ValueError("cached_llada_law enumerates proposals: temperature must be > 0")
    blocks = [(lo, lo + block_length) for lo in range(0, T, block_length)]
    S = steps // len(blocks)
    paths: dict[Path, float] = {(tuple([V] * T),): 1.0}
    starts: dict[int, tuple[int, int]] = {}
    call = 0
    for lo, hi in blocks:
        first = True
        for k in transfer_schedule(hi - lo, S):
            if k == 0:  # a step that commits nothing calls no denoiser
                continue
            if first:  # the block's first call follows its block_start event
                starts[call], first = (lo, hi), False
            new: dict[Path, float] = defaultdict(float)
            for path, mass in paths.items():
                z = path[-1]
                pos = [q for q in range(lo, hi) if z[q] == V]
                rows = _probs(make_denoiser, path, starts, pos, V)
                law = rows ** (1.0 / temperature)
                law = law / law.sum(-1, keepdim=True)
                for combo in itertools.product(range(V), repeat=len(pos)):
                    p = float(torch.prod(law[torch.arange(len(pos)), torch.tensor(combo)]))
                    if p == 0.0:
                        continue
                    conf = [float(rows[n, v]) for n, v in enumerate(combo)]
                    order = sorted(range(len(pos)), key=lambda n: (-conf[n], pos[n]))[:k]
                    nxt = list(z)
                    for n in order:
                        nxt[pos[n]] = combo[n]
                    new[path + (tuple(nxt),)] += mass * p
            paths = new
            call += 1
    final: dict[tuple[int, ...], float] = defaultdict(float)
    for path, mass in paths.items():
        final[path[-1]] += mass
    return law_vector(final, V, T)
