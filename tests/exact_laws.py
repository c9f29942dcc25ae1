"""Exact laws of sampler algorithms by dynamic programming over partially masked states.

For a tiny chain (V^T small) the distribution over the (V+1)^T partially masked states is
propagated step by step with the exact oracle posterior (float64 forward-backward), giving the
exact law of a sampler's output - the reference its samples are tested against.
"""
from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable

import torch

from dllm_lit.denoisers import forward_backward_posterior
from dllm_lit.denoisers.hmm_posterior import hmm_posterior
from dllm_lit.markov import HMMWorld, MarkovChain

State = tuple[int, ...]


class PosteriorCache:
    def __init__(self, chain: MarkovChain) -> None:
        self.chain = chain
        self._cache: dict[State, torch.Tensor] = {}

    def __call__(self, z: State) -> torch.Tensor:
        if z not in self._cache:
            if isinstance(self.chain, HMMWorld):  # beyond first order: the HMM forward-backward (float64)
                self._cache[z] = hmm_posterior(self.chain, torch.tensor([z]))[0]
            else:
                self._cache[z] = forward_backward_posterior(self.chain, torch.tensor([z]))[0]
        return self._cache[z]


def product_step(dist: dict[State, float], options: Callable[[State], list[list[tuple[int, float]]]]) -> dict[State, float]:
    """One parallel step: each position independently takes one of its (value, prob) options."""
    new: dict[State, float] = defaultdict(float)
    for z, pz in dist.items():
        for combo in itertools.product(*options(z)):
            p = pz
            for _, q in combo:
                p *= q
            if p > 0:
                new[tuple(v for v, _ in combo)] += p
    return new


def law_vector(dist: dict[State, float], V: int, T: int) -> torch.Tensor:
    """Probability vector over V^T complete sequences (lexicographic index)."""
    out = torch.zeros(V**T, dtype=torch.float64)
    for z, p in dist.items():
        assert all(v < V for v in z), "a MASK was left"
        code = 0
        for v in z:
            code = code * V + v
        out[code] += p
    return out


def argmax_fill_law(dist: dict[State, float], post: PosteriorCache) -> dict[State, float]:
    M = post.chain.mask_id
    out: dict[State, float] = defaultdict(float)
    for z, p in dist.items():
        if M in z:
            g = post(z)
            z = tuple(int(g[i].argmax()) if v == M else v for i, v in enumerate(z))
        out[z] += p
    return out


def mdlm_law(chain: MarkovChain, T: int, steps: int) -> torch.Tensor:
    """Exact output law of MDLM ddpm_cache + argmax fill (docs/samplers/mdlm.md)."""
    from dllm_lit.samplers.schedules import time_grid

    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)
    ts = time_grid(steps).tolist()
    dist: dict[State, float] = {(M,) * T: 1.0}
    for j in range(steps):
        t, s = ts[j], ts[j + 1]

        def options(z: State) -> list[list[tuple[int, float]]]:
            g = post(z)
            out = []
            for i, v in enumerate(z):
                if v != M:
                    out.append([(v, 1.0)])
                else:
                    out.append([(M, s / t)] + [(w, float(g[i, w]) * (t - s) / t) for w in range(V) if g[i, w] > 0])
            return out

        dist = product_step(dist, options)
    return law_vector(argmax_fill_law(dist, post), V, T)


def chain_law(chain: MarkovChain, T: int) -> torch.Tensor:
    from conftest import all_sequences

    return chain.log_prob(all_sequences(chain.vocab_size, T)).exp()


def nucleus_row(q: list[float], p: float) -> tuple[list[float], float]:
    """Strict top-p on one row (cumsum <= p kept, the first always, ties: lower id first), renormalised.

    Returns (filtered row, min |cumsum - p|): a margin near 0 means float32 and float64 posteriors could
    disagree on the keep set, so a test built on it would be ill-posed.
    """
    tot = sum(q)
    q = [x / tot for x in q]
    if p >= 1.0:
        return q, float("inf")
    order = sorted(range(len(q)), key=lambda v: (-q[v], v))
    keep, c, margin = set(), 0.0, float("inf")
    for rank, v in enumerate(order):
        c += q[v]
        margin = min(margin, abs(c - p))
        if rank == 0 or c <= p:
            keep.add(v)
    kept = sum(q[v] for v in keep)
    return [q[v] / kept if v in keep else 0.0 for v in range(len(q))], margin


def block_mdlm_law(chain: MarkovChain, T: int, block_size: int, steps: int, grid: str = "bd3",
                   nucleus_p: float = 1.0, first_hitting: bool = False) -> tuple[torch.Tensor, float]:
    """Exact output law of BD3-LM's semi-AR sampler (block MDLM), ``steps`` steps per block.

    Written from the upstream definition, independently of ``dllm_lit.samplers.block_mdlm``: blocks
    left to right; grid "bd3": t_j = 1 - j/(S-1) (t_0 = 1 when S = 1), s_j = max(t_j - 1/S, 0), a masked
    position of the block moves w.p. (t - s)/t (1 at t = 0) to a token of the nucleus-filtered
    posterior; grid "mdlm": t_j = 1 - j (1 - 1e-5)/S, s_j = t_{j+1}, then the argmax fill of the block.
    First hitting: per step one masked position of the block, uniformly, draws its token.  The posterior
    is the float64 forward-backward one given the whole state (later blocks are all MASK).
    Returns (law over V^T, smallest nucleus margin met).
    """
    M, V = chain.mask_id, chain.vocab_size
    post = PosteriorCache(chain)
    margin = [float("inf")]

    def filt(g_row: torch.Tensor) -> list[float]:
        row, mg = nucleus_row(g_row.tolist(), nucleus_p)
        margin[0] = min(margin[0], mg)
        return row

    S = steps
    if grid == "bd3":
        ts = [1.0] if S == 1 else [1.0 - j / (S - 1) for j in range(S)]
        ss = [max(t - 1.0 / S, 0.0) for t in ts]
    else:
        full = [1.0 - j * (1.0 - 1e-5) / S for j in range(S + 1)]
        ts, ss = full[:-1], full[1:]
    dist: dict[State, float] = {(M,) * T: 1.0}
    for blk in range(T // block_size):
        lo, hi = blk * block_size, (blk + 1) * block_size
        if first_hitting:
            for _ in range(block_size):
                new: dict[State, float] = defaultdict(float)
                for z, pz in dist.items():
                    masked = [i for i in range(lo, hi) if z[i] == M]
                    g = post(z)
                    for i in masked:
                        q = filt(g[i])
                        for w in range(V):
                            if q[w] > 0:
                                new[z[:i] + (w,) + z[i + 1:]] += pz * q[w] / len(masked)
                dist = new
            continue
        for t, s in zip(ts, ss):
            move = (t - s) / t if t > 0 else 1.0

            def options(z: State, lo=lo, hi=hi, move=move) -> list[list[tuple[int, float]]]:
                g = post(z)
                out = []
                for i, v in enumerate(z):
                    if v != M or not lo <= i < hi:
                        out.append([(v, 1.0)])
                        continue
                    q = filt(g[i])
                    stay = [(M, 1.0 - move)] if move < 1.0 else []
                    out.append(stay + [(w, q[w] * move) for w in range(V) if q[w] > 0])
                return out

            dist = product_step(dist, options)
        if grid == "mdlm":
            filled: dict[State, float] = defaultdict(float)
            for z, pz in dist.items():
                g = post(z)
                filled[tuple(int(g[i].argmax()) if (v == M and lo <= i < hi) else v for i, v in enumerate(z))] += pz
            dist = filled
    return law_vector(dist, V, T), margin[0]
# ----------------------------------------------------------------------------------------------
# Confidence-ranked samplers: proposals, MaskGIT, KLASS

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

# ---------------------------------------------------------------------------------------------
# Score-and-select rules (LLaDA low-confidence, Fast-dLLM, Dream's alg family, EB, PC-sampler)
# ---------------------------------------------------------------------------------------------

#: scores equal to this many decimals are ties (the samplers' ties are exact ties of the float output)
TIE_DECIMALS = 9

Selection = list[tuple[tuple[int, ...], float]]


def tempered_options(q: torch.Tensor, temperature: float) -> list[tuple[int, float]]:
    """(token, prob) options of a proposal from the law q [V]: argmax (lowest id) at 0, else q^(1/tau) normalised."""
    return proposal_options(q, temperature, tol=1e-12)


def ranked_choice(positions: list[int], scores: list[float], n: int, tie_rule: str) -> Selection:
    """The n best positions by score (ties to TIE_DECIMALS) under ``tie_rule``: (chosen set, prob) pairs.

    "lowest" / "highest": one set; "random": every subset of the boundary tie group equally likely.
    """
    import math

    if n <= 0:
        return [((), 1.0)]
    key = {i: round(s, TIE_DECIMALS) for i, s in zip(positions, scores)}
    sign = 1 if tie_rule != "highest" else -1
    ranked = sorted(positions, key=lambda i: (-key[i], sign * i))
    if tie_rule != "random":
        return [(tuple(sorted(ranked[:n])), 1.0)]
    cut = key[ranked[n - 1]]
    above = [i for i in positions if key[i] > cut]
    group = [i for i in positions if key[i] == cut]
    need = n - len(above)
    sets = list(itertools.combinations(group, need))
    return [(tuple(sorted(above + list(s))), 1.0 / math.comb(len(group), need)) for s in sets]


def plackett_luce_choice(positions: list[int], weights: list[float], n: int) -> Selection:
    """Law of the set drawn by n successive draws without replacement with probabilities ∝ weights."""
    out: dict[tuple[int, ...], float] = defaultdict(float)

    def rec(chosen: list[int], prob: float) -> None:
        if len(chosen) == n:
            out[tuple(sorted(chosen))] += prob
            return
        rest = [(i, w) for i, w in zip(positions, weights) if i not in chosen]
        total = sum(w for _, w in rest)
        for i, w in rest:
            if w > 0:
                rec(chosen + [i], prob * w / total)

    rec([], 1.0)
    return list(out.items())


def score_select_law(chain: MarkovChain, T: int, blocks: list[tuple[int, int]],
                     propose: Callable[[torch.Tensor], list[tuple[int, float]]],
                     score: Callable[[int, int, torch.Tensor, int], float],
                     select: Callable[[int, list[int], list[float]], Selection],
                     schedule: list[list[int]] | None = None,
                     init: dict[State, float] | None = None) -> torch.Tensor:
    """Exact output law of a score-and-select rule by DP over partially masked states.

    Blocks are decoded left to right.  At a step every masked position i of the block proposes
    from ``propose(g_i)`` (g the float64 forward-backward posterior), independently; for each joint
    proposal the scores ``score(i, v, g, lo)`` and ``select(j, masked, scores)`` give the committed
    sets with their probabilities.  ``schedule[blk]`` lists the steps of a block (a step with j's
    count 0 is skipped by the caller's ``select``); None runs a block until no mask is left.
    """
    M = chain.mask_id
    post = PosteriorCache(chain)
    dist: dict[State, float] = dict(init) if init is not None else {(M,) * T: 1.0}
    j = 0
    for blk, (lo, hi) in enumerate(blocks):
        i = 0
        while True:
            if schedule is not None and i >= len(schedule[blk]):
                break
            if schedule is None and all(M not in z[lo:hi] for z in dist):
                break
            new: dict[State, float] = defaultdict(float)
            for z, pz in dist.items():
                masked = [k for k in range(lo, hi) if z[k] == M]
                if not masked:
                    new[z] += pz
                    continue
                g = post(z)
                for combo in itertools.product(*(propose(g[k]) for k in masked)):
                    pr = pz
                    for _, q in combo:
                        pr *= q
                    toks = [v for v, _ in combo]
                    scores = [score(k, v, g, lo) for k, v in zip(masked, toks)]
                    for chosen, ps in select(j + i, masked, scores):
                        zz = list(z)
                        for k, v in zip(masked, toks):
                            if k in chosen:
                                zz[k] = v
                        new[tuple(zz)] += pr * ps
            dist = new
            i += 1
        j += i
    return law_vector(dist, chain.vocab_size, T)
