"""Where a run's error comes from when the denoiser is learned and cached: sampler, model and cache parts.

    python cli.py decompose --config configs/cache_study.yaml      # decompose with a ``caches:`` list

For the sampler's steps grid and each cache setting (a dict of :class:`~dllm_lit.denoisers.LearnedDenoiser` cache
options), with common random numbers (same seed, same sequence indices in every run) and one bootstrap over
sequences shared by every row:

    sampler error  M(oracle run)                              the exact denoiser
    model error    M(learned, no cache) - M(oracle run)
    cache error    M(learned + cache) - M(learned, no cache)
    total          M(learned + cache) = sampler + model + cache (exactly: the parts telescope)

for M = the transition KL and the sequence-level NLL gap (mean -log p_chain(x) / T minus that of exact chain samples
at the same indices).  Each learned run is scored call by call (:class:`~dllm_lit.denoisers.ScoredDenoiser`: mean
KL(p_exact || p_model) over the positions it read, top-1 agreement, the per-step profile), and timed: wall and CPU
seconds per sequence of ``sampler.sample``, less the time the scoring itself took.  A law test asks whether the cache
changes the output law: a permutation test on independent halves (no-cache samples of the first N/2 indices against
cached samples of the last N/2), statistic the total-variation distance of their transition-pair frequencies.
"""
from __future__ import annotations

import copy
import time
from typing import Any

import torch

from dllm_lit.denoisers.scored import ScoredDenoiser
from dllm_lit.experiments.decompose_stats import DIFF_INTERVAL, KL_INTERVAL
from dllm_lit.experiments.decompose_stats import centred_interval as _centred
from dllm_lit.experiments.decompose_stats import transition_kl as _kl
from dllm_lit.metrics.functional.bootstrap import bootstrap_ci
from dllm_lit.metrics.functional.transition import transition_codes

__all__ = ["cache_label", "timed_run", "law_test", "cache_rows", "check_caches"]

#: the keys a cache setting may hold (the LearnedDenoiser options)
CACHE_KEYS = ("cache", "refresh_interval", "drift_threshold")


def check_caches(caches: list[dict[str, Any]], sampler) -> list[dict[str, Any]]:
    """The cache settings, each a dict of :data:`CACHE_KEYS` with a ``cache`` that ``sampler``'s learned denoiser can
    take (its model's keys and values readable, a block policy only with a block sampler); one-line ValueError."""
    from dllm_lit.denoisers.kv_cache import BLOCK_POLICIES
    from dllm_lit.denoisers.kv_stack import kv_stack
    from dllm_lit.denoisers.learned import LearnedDenoiser

    out = []
    for c in caches:
        if not isinstance(c, dict) or "cache" not in c or set(c) - set(CACHE_KEYS):
            raise ValueError(f"caches: each entry must be a dict with 'cache' and optionally 'refresh_interval', "
                             f"'drift_threshold'; got {c!r}")
        probe = LearnedDenoiser(**c)  # the denoiser's own checks: policy names, refresh_interval >= 1, threshold
        if not isinstance(sampler.denoiser, LearnedDenoiser):
            raise ValueError("caches need a learned denoiser (CheckpointDenoiser or HFDenoiser) in the sampler")
        if probe.cache != "none":
            kv_stack(sampler.denoiser.model, probe.cache)
        if probe.cache in BLOCK_POLICIES and not sampler.announces_blocks:
            raise ValueError(f"caches: cache={probe.cache!r} needs a sampler that announces its blocks (LLaDA with "
                             f"low_confidence, FastDLLM or another rule sampler); {type(sampler).__name__} does not")
        out.append({k: getattr(probe, k) for k in CACHE_KEYS if k in c})
    return out


def cache_label(setting: dict[str, Any]) -> str:
    """``dual``, ``dual/r4``, ``adaptive/d0.1``: the policy, its refresh interval and drift threshold when set."""
    r, d = setting.get("refresh_interval"), setting.get("drift_threshold")
    return setting["cache"] + (f"/r{r}" if r is not None else "") + (f"/d{d:g}" if d is not None else "")


def with_cache(learned, setting: dict[str, Any]):
    """A copy of the learned denoiser with the cache ``setting`` (its KV cache built for its own model copy)."""
    den = copy.deepcopy(learned)
    den.cache, den.refresh_interval = setting["cache"], setting.get("refresh_interval")
    den.drift_threshold = setting.get("drift_threshold", den.drift_threshold)
    den._kv = None
    den._setup_cache()
    den.clear_cache()
    return den


def timed_run(sampler, N: int, T: int, steps: int, seed: int) -> tuple[torch.Tensor, float, float]:
    """(samples, wall s, CPU s) of ``sampler.sample``, less the scoring time of a ScoredDenoiser."""
    den = sampler.denoiser
    before = list(den.seconds) if isinstance(den, ScoredDenoiser) else [0.0, 0.0]
    w0, c0 = time.perf_counter(), time.process_time()
    x = sampler.sample(N, T, steps, seed=seed).cpu()
    wall, cpu = time.perf_counter() - w0, time.process_time() - c0
    if isinstance(den, ScoredDenoiser):
        wall, cpu = wall - (den.seconds[0] - before[0]), cpu - (den.seconds[1] - before[1])
    return x, wall, cpu


def _pair_freq(x: torch.Tensor, V: int) -> torch.Tensor:
    """Per-sequence transition-pair counts, float64 [N, V * V]."""
    codes = transition_codes(x, V)
    out = torch.zeros((x.shape[0], V * V), dtype=torch.float64)
    return out.scatter_add_(1, codes.long(), torch.ones_like(codes, dtype=torch.float64))


def law_test(x: torch.Tensor, y: torch.Tensor, V: int, permutations: int = 999, seed: int = 0) -> dict[str, float]:
    """Permutation test of "x and y (independent samples, sequences [n, T]) have the same law": statistic the TV
    distance of the two transition-pair frequency tables; p = (1 + #{perm >= observed}) / (1 + permutations)."""
    c = torch.cat([_pair_freq(x, V), _pair_freq(y, V)])
    n = x.shape[0]

    def tv(labels: torch.Tensor) -> torch.Tensor:  # labels [P, 2n] bool (True: first sample)
        a = labels.to(torch.float64) @ c
        b = (~labels).to(torch.float64) @ c
        return 0.5 * (a / a.sum(1, keepdim=True) - b / b.sum(1, keepdim=True)).abs().sum(1)

    first = torch.zeros((1, c.shape[0]), dtype=torch.bool)
    first[0, :n] = True
    observed = float(tv(first)[0])
    g = torch.Generator().manual_seed(seed)
    perms = torch.stack([torch.randperm(c.shape[0], generator=g) < n for _ in range(permutations)])
    null = tv(perms)
    return {"tv": observed, "p_value": float((1 + (null >= observed).sum()) / (1 + permutations)),
            "permutations": permutations}


def _nll(x: torch.Tensor, chain) -> torch.Tensor:
    """Per-sequence NLL per token under the chain, float64 [N]."""
    return -chain.log_prob(x).to(torch.float64) / x.shape[1]


def _call_error(den: ScoredDenoiser, resamples: int, seed: int) -> dict[str, Any]:
    s = den.summary()
    seq = den.per_sequence()
    keep = seq[:, 1] > 0
    k, c = seq[keep, 0], seq[keep, 1]
    s["kl_ci"] = (list(bootstrap_ci(lambda w: (w @ k) / (w @ c), int(keep.sum()), num_resamples=resamples, seed=seed))
                  if int(keep.sum()) >= 2 else None)
    return s


def cache_rows(oracle_sampler, learned_sampler, caches: list[dict[str, Any]], chain, N: int, T: int, seed: int,
               resamples: int, permutations: int) -> list[dict[str, Any]]:
    """One row per steps value of the grid: the parts, per-call errors, speed and law tests (module docstring)."""
    ref = chain.sample(N, T, seed=seed, start_index=0)
    ref_nll = _nll(ref, chain)
    learned = learned_sampler.denoiser
    runs = [("learned", ScoredDenoiser(learned))] + [(cache_label(c), ScoredDenoiser(with_cache(learned, c)))
                                                      for c in caches]
    for _, den in runs:  # every denoiser wired and checked (a block cache needs a block sampler) before any run
        learned_sampler.denoiser = den
        learned_sampler.connect(chain)
    learned_sampler.denoiser = learned
    rows = []
    for steps in learned_sampler.steps_grid:
        xo, wo, co = timed_run(oracle_sampler, N, T, steps, seed)
        samples: dict[str, torch.Tensor] = {"oracle": xo}
        row: dict[str, Any] = {"steps": steps, "runs": {"oracle": {"wall_per_seq": wo / N, "cpu_per_seq": co / N}}}
        for label, den in runs:
            den.reset()
            learned_sampler.denoiser = den
            x, wall, cpu = timed_run(learned_sampler, N, T, steps, seed)
            learned_sampler.denoiser = learned
            samples[label] = x
            row["runs"][label] = {"wall_per_seq": wall / N, "cpu_per_seq": cpu / N,
                                  "call_error": _call_error(den, resamples, seed)}
        metrics = {"kl": lambda x, w=None: _kl(x, chain, w),
                   "nll_gap": lambda x, w=None: float(((_nll(x, chain) - ref_nll) * (1.0 if w is None else w)).sum()
                                                      / (N if w is None else w.sum()))}
        for name, fn in metrics.items():
            for label, x in samples.items():
                row["runs"][label][name] = fn(x)
                row["runs"][label][name + "_ci"] = _centred(lambda w, x=x: fn(x, w), N, resamples, seed,
                                                            KL_INTERVAL if name == "kl" else DIFF_INTERVAL)
        row["parts"] = {}
        base = samples["learned"]
        for label in [lab for lab, _ in runs[1:]]:
            parts = {}
            for name, fn in metrics.items():
                pairs = {"sampler": (samples["oracle"], None), "model": (base, samples["oracle"]),
                         "cache": (samples[label], base), "total": (samples[label], None)}
                for part, (a, b) in pairs.items():
                    value = fn(a) - (fn(b) if b is not None else 0.0)
                    ci = _centred(lambda w, a=a, b=b: fn(a, w) - (fn(b, w) if b is not None else 0.0), N, resamples,
                                  seed, DIFF_INTERVAL if b is not None else KL_INTERVAL)
                    parts[f"{name}_{part}"], parts[f"{name}_{part}_ci"] = value, ci
                total = parts[f"{name}_total"]
                parts[f"{name}_adds_up"] = abs(parts[f"{name}_sampler"] + parts[f"{name}_model"]
                                               + parts[f"{name}_cache"] - total) <= 1e-12 * max(1.0, abs(total))
            half = N // 2
            parts["law_test"] = law_test(base[:half], samples[label][half:2 * half], chain.vocab_size, permutations,
                                         seed)
            cost = row["runs"]["learned"]["cpu_per_seq"]
            parts["speedup_cpu"] = cost / row["runs"][label]["cpu_per_seq"]
            parts["speedup_wall"] = row["runs"]["learned"]["wall_per_seq"] / row["runs"][label]["wall_per_seq"]
            row["parts"][label] = parts
        rows.append(row)
    return rows
