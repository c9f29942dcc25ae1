"""Exact laws of confidence-ranked samplers with their own schedules: proposals, MaskGIT, KLASS."""
from __future__ import annotations

import itertools
from collections import defaultdict

import torch

from dllm_lit.markov import MarkovChain
from dllm_lit.exact.core import PosteriorCache, State, law_vector

__all__ = ["TIE_DECIMALS", "proposal_options", "plackett_luce_sets", "maskgit_keep", "maskgit_law", "transfer_counts",
           "klass_law"]

TIE_DECIMALS = 9  # confidences equal to 9 decimals are ties (exact ties in the sampler's float output)


def proposal_options(g: torch.Tensor, temperature: float, tol: float = 1e-9) -> list[tuple[int, float]]:
    """(token, prob) options of a proposal at one position with exact marginal g [V]: argmax
    (lowest id among maxima within ``tol``) at temperature 0, else g^(1/temperature) renormalised."""
    V = g.numel()
    if temperature == 0:
        top = float(g.max())
        return [(next(v for v in range(V) if float(g[v]) >= top - tol), 1.0)]
    w = g.clamp_min(0) ** (1.0 / temperature)
    w = w / w.sum()
    return [(v, float(w[v])) for v in range(V) if w[v] > 0]


def plackett_luce_sets(weights: list[float]) -> list[float]:
    """P(the first |A| items drawn without replacement, proportionally to ``weights``, are the set A)
    for every subset A (bitmask index): the law of the Gumbel top-|A| set of log weights."""
    m = len(weights)
    W = sum(weights)
    f = [0.0] * (1 << m)
    f[0] = 1.0
    for S in sorted(range(1 << m), key=lambda s: bin(s).count("1")):
        if f[S] == 0:
            continue
        rest = W - sum(weights[i] for i in range(m) if S >> i & 1)
        for i in range(m):
            if not S >> i & 1:
                f[S | 1 << i] += f[S] * weights[i] / rest
    return f


def maskgit_keep(N: int, t: int, S: int, unknown: int, schedule: str) -> int:
    """Positions left masked after step t < S - 1 (upstream parallel_decode, float64 schedule)."""
    import math

    r = (t + 1) / S
    g = math.cos(math.pi / 2 * r) if schedule == "cosine" else 1 - r
    g = min(max(g, 1e-6), 1.0)
    return max(1, min(unknown - 1, math.floor(N * g)))


def maskgit_law(chain: MarkovChain, T: int, steps: int, choice_temperature: float, schedule: str = "cosine",
                temperature: float = 1.0) -> torch.Tensor:
    """Exact output law of MaskGIT decoding: enumerate the proposals at the masked positions, then
    the committed set - the complement of the ``keep`` lowest scores log p(x̂) + c G, a Gumbel top-k
    (Plackett-Luce with weights p(x̂)^(1/c)) for c > 0, the strict-threshold rule with ties at c = 0."""
    import math

    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)
    dist: dict[State, float] = {(M,) * T: 1.0}
    for t in range(steps):
        new: dict[State, float] = defaultdict(float)
        c = choice_temperature * (1 - (t + 1) / steps)
        for z, pz in dist.items():
            masked = [i for i in range(T) if z[i] == M]
            if not masked:
                new[z] += pz
                continue
            g = post(z)
            opts = [proposal_options(g[i], temperature) for i in masked]
            keep = maskgit_keep(T, t, steps, len(masked), schedule)
            for combo in itertools.product(*opts):
                pr = pz
                for _, q in combo:
                    pr *= q
                conf = [float(g[i, v]) for i, (v, _) in zip(masked, combo)]
                if t == steps - 1:
                    outcomes = [(tuple(range(len(masked))), 1.0)]
                elif c > 0:
                    top = max(conf)
                    f = plackett_luce_sets([(x / top) ** (1.0 / c) for x in conf])
                    size = len(masked) - keep
                    outcomes = [(tuple(i for i in range(len(masked)) if A >> i & 1), f[A])
                                for A in range(1 << len(masked)) if bin(A).count("1") == size and f[A] > 0]
                else:
                    rc = [round(x, TIE_DECIMALS) for x in conf]
                    cut = (sorted(rc) + [math.inf] * (T - len(masked)))[keep]  # committed tokens score +inf
                    outcomes = [(tuple(i for i in range(len(masked)) if not rc[i] < cut), 1.0)]
                for committed, q in outcomes:
                    zz = list(z)
                    for i in committed:
                        zz[masked[i]] = combo[i][0]
                    new[tuple(zz)] += pr * q
        dist = new
    return law_vector(dist, V, T)


def transfer_counts(n: int, S: int) -> list[int]:
    return [n // S + (1 if i < n % S else 0) for i in range(S)]


def klass_law(chain: MarkovChain, T: int, steps: int, conf_threshold: float, kl_threshold: float, history: int,
              block_length: int | None = None, temperature: float = 0.0, margin: float = 1e-6) -> torch.Tensor:
    """Exact output law of KLASS (shkim0116/KLASS ``stable_confident_decode``, alg "klass", strategy
    "all", with the fallback capped at the masked count and the last step of a block committing all).

    The DP state is (z, the states of the last ``history`` denoiser calls): the KL history of a
    position is a function of the posteriors at those calls.  Raises if a confidence or KL value
    lies within ``margin`` of its threshold (float32 sampler vs float64 DP could then disagree).
    """
    import math

    M, V, H = chain.mask_id, chain.vocab_size, history
    post = PosteriorCache(chain)
    zero = torch.zeros(T, V, dtype=torch.float64)

    def rows(state):
        return zero if state is None else post(state)

    def kl(p: torch.Tensor, q: torch.Tensor) -> float:
        return float((p * (torch.log(p + 1e-12) - torch.log(q + 1e-12))).sum())

    bl = block_length or T
    nb = T // bl
    S = steps // nb
    dist: dict = {((M,) * T, (None,) * H): 1.0}
    for blk in range(nb):
        lo, hi = blk * bl, (blk + 1) * bl
        for s, k in enumerate(transfer_counts(bl, S)):
            new: dict = defaultdict(float)
            for (z, past), pz in dist.items():
                masked = [i for i in range(lo, hi) if z[i] == M]
                if not masked:
                    new[(z, past)] += pz
                    continue
                g = post(z)
                calls = past + (z,)
                stable = {}
                for i in masked:
                    kls = [kl(rows(calls[j + 1])[i], rows(calls[j])[i]) for j in range(H)]
                    if s >= H - 1 and any(abs(x - kl_threshold) < margin for x in kls):
                        raise ValueError(f"a KL value {kls} is within {margin} of kl_threshold")
                    stable[i] = s >= H - 1 and all(x < kl_threshold for x in kls)
                new_past = calls[1:]
                opts = [proposal_options(g[i], temperature) for i in masked]
                for combo in itertools.product(*opts):
                    pr = pz * math.prod(q for _, q in combo)
                    conf = {i: float(g[i, v]) for i, (v, _) in zip(masked, combo)}
                    if s == S - 1:
                        commit = set(masked)
                    else:
                        if any(stable[i] and abs(conf[i] - conf_threshold) < margin for i in masked):
                            raise ValueError("a confidence is within margin of conf_threshold")
                        ready = {i for i in masked if stable[i] and conf[i] > conf_threshold}
                        if ready:
                            commit = ready
                        else:
                            ranked = sorted((-round(conf[i], TIE_DECIMALS), i) for i in masked)
                            commit = {i for _, i in ranked[:k]}
                    zz = list(z)
                    for i, (v, _) in zip(masked, combo):
                        if i in commit:
                            zz[i] = v
                    new[(tuple(zz), new_past)] += pr
            dist = new
    out: dict[State, float] = defaultdict(float)
    for (z, _), p in dist.items():
        out[z] += p
    return law_vector(out, V, T)
