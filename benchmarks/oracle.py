"""Time the oracle denoiser against the paper's App. A forward-backward on identical inputs.

The baseline is a straightforward implementation of the algorithm the paper describes and its
authors ran in their released code (the oracle is described in docs/oracle.md): a normalised
forward pass and a log-domain backward pass over all B x T positions, with the sparse top-K part
as scatter-add / gather over the neighbour lists and the teleport as a rank-one term - O(B T V K)
per call, recomputed at every sampler step.  (It keeps messages in float32 rather than the
authors' float16.)

    python benchmarks/oracle.py [--repeats 3] [--skip-owt] [--cache-dir DIR] [--compare-dense]

Prints, for a text8-sized chain (V = 27, dense) and an OWT-sized synthetic chain (V = 4096,
K = 206, eps = 1e-4) with B = 8, T = 1024 and half the positions masked: the one-off cache build
time (and which matrix product built the powers), the time per call of both, the speed-up, and the
max abs difference of their outputs.  Times per call are given as wall and CPU (process) time; on a shared
machine the CPU time is the one to compare.  ``--compare-dense`` also times the build with dense products for
every chain (the arithmetic before sparse chains got the sparse product) and counts the float32 table
entries in which the two builds differ (both tables in memory: ~11 GiB peak at V = 4096).  It runs with
``DLLM_LIT_THREADS`` intra-op threads (default 1), as the CLI's sampling does.
"""
from __future__ import annotations

import argparse
import resource
import time

import torch

from dllm_lit.denoisers import OracleDenoiser, oracle_cache
from dllm_lit.engine.threads import sampling_threads
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import english_char_chain


def paper_forward_backward(chain: MarkovChain, z: torch.Tensor) -> torch.Tensor:
    """App. A: gamma [B, T, V] by sparse forward-backward over every position (float32)."""
    B, T = z.shape
    V, K = chain.vocab_size, chain.top_k
    M = chain.mask_id
    idx = chain.nbr_idx
    prob = chain.nbr_prob.float()
    eps, nu, pi = chain.eps, chain.nu.float(), chain.stationary.float()
    revealed = z != M
    tok = z.clamp(max=V - 1)
    ev = torch.where(revealed[..., None], torch.nn.functional.one_hot(tok, V).bool(), torch.ones(B, T, V, dtype=torch.bool))
    flat_idx = idx.reshape(-1)

    def step_right(a: torch.Tensor) -> torch.Tensor:  # a P'  via scatter over neighbour lists
        contrib = (a[:, :, None] * prob[None]).reshape(B, V * K)
        out = torch.zeros(B, V).index_add_(1, flat_idx, contrib)
        return (1 - eps) * out + eps * a.sum(1, keepdim=True) * nu[None]

    def step_left(b: torch.Tensor) -> torch.Tensor:  # P' b  via gather over neighbour lists
        g = b[:, idx]  # [B, V, K]
        return (1 - eps) * (g * prob[None]).sum(-1) + eps * (b * nu[None]).sum(1, keepdim=True)

    log_alpha = torch.empty(B, T, V)
    a = pi[None].expand(B, V) * ev[:, 0]
    a = a / a.sum(1, keepdim=True)
    log_alpha[:, 0] = a.log()
    for t in range(1, T):
        a = step_right(a) * ev[:, t]
        s = a.sum(1, keepdim=True)
        a = torch.where(s > 0, a / s, ev[:, t].float() / ev[:, t].sum(1, keepdim=True))
        log_alpha[:, t] = a.log()
    log_beta = torch.zeros(B, T, V)
    b = torch.ones(B, V)
    for t in range(T - 1, 0, -1):
        m = b * ev[:, t]
        m = m / m.amax(1, keepdim=True).clamp_min(1e-30)
        b = step_left(m)
        b = b / b.amax(1, keepdim=True).clamp_min(1e-30)
        log_beta[:, t - 1] = b.log()
    return torch.softmax(log_alpha + log_beta, dim=-1)


def dense_build(chain: MarkovChain, oracle: OracleDenoiser) -> None:
    """Build the same table with dense products (the previous arithmetic) and compare it with ``oracle``'s."""
    saved = oracle_cache.SPARSE_MIN_VOCAB
    oracle_cache.SPARSE_MIN_VOCAB = 2**62  # every chain takes the dense product
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        ref = oracle_cache.build_power_table(chain, oracle.mixing_tol, 4 * 2**30, oracle.table.dtype)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    finally:
        oracle_cache.SPARSE_MIN_VOCAB = saved
    a, b = oracle.table, ref.table
    differ = a != b
    n = int(differ.sum())
    rel = ((a[differ] - b[differ]).abs() / b[differ].abs()).max().item() if n else 0.0
    print(f"  table built with dense products    : {wall:8.2f} s wall {cpu:8.2f} s cpu  (depth {ref.depth}, "
          f"certified={ref.certified}, residual {ref.residual:.6g} vs {oracle.mixing_residual:.6g})")
    print(f"  float32 entries differing          : {n} of {a.numel()} (max relative difference {rel:.2g})")


def bench(name: str, chain: MarkovChain, B: int, T: int, repeats: int, baseline_repeats: int,
          cache_dir: str | None = None, compare_dense: bool = False) -> None:
    z = chain.sample(B, T, seed=0)  # also solves the stationary law: not part of the set-up times below
    g = torch.Generator().manual_seed(0)
    z = torch.where(torch.rand(B, T, generator=g) < 0.5, chain.mask_id, z)
    product = "dense" if oracle_cache._sparse_kernel(chain) is None else "sparse"
    t0, c0 = time.perf_counter(), time.process_time()
    oracle = OracleDenoiser(chain, cache_dir=cache_dir)
    build, build_cpu = time.perf_counter() - t0, time.process_time() - c0
    warm = None
    if cache_dir is not None:  # a second process on the node: memory-maps and verifies the cached table
        t0, c0 = time.perf_counter(), time.process_time()
        oracle = OracleDenoiser(chain, cache_dir=cache_dir)
        warm = (time.perf_counter() - t0, time.process_time() - c0)
    oracle(z)  # warm-up
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        out = oracle(z).exp()
    t_full, c_full = (time.perf_counter() - t0) / repeats, (time.process_time() - c0) / repeats
    b, p = (z == chain.mask_id).nonzero(as_tuple=True)
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(repeats):
        oracle.probs_at(z, b, p)
    t_masked, c_masked = (time.perf_counter() - t0) / repeats, (time.process_time() - c0) / repeats
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(baseline_repeats):
        ref = paper_forward_backward(chain, z)
    t_base, c_base = (time.perf_counter() - t0) / baseline_repeats, (time.process_time() - c0) / baseline_repeats
    diff = (out - ref).abs().max().item()
    print(f"{name}: V={chain.vocab_size} K={chain.top_k} eps={chain.eps:g} B={B} T={T}, half masked")
    print(f"  oracle set-up (first)              : {build:8.2f} s wall {build_cpu:8.2f} s cpu  (depth {oracle.depth}, "
          f"certified={oracle.certified}, table {oracle.table.numel() * oracle.table.element_size() / 2**30:.2f} GiB, "
          f"{product} products)")
    if warm is not None:
        print(f"  oracle set-up (table cached on disk): {warm[0]:7.2f} s wall {warm[1]:8.2f} s cpu")
    if compare_dense:
        dense_build(chain, oracle)
    print(f"  paper App. A forward-backward      : {t_base * 1e3:10.1f} ms/call wall {c_base * 1e3:10.1f} ms cpu")
    print(f"  oracle, all B*T positions          : {t_full * 1e3:10.1f} ms/call wall {c_full * 1e3:10.1f} ms cpu"
          f"   speed-up {c_base / c_full:8.1f}x (cpu)")
    print(f"  oracle, masked positions only      : {t_masked * 1e3:10.1f} ms/call wall {c_masked * 1e3:10.1f} ms cpu"
          f"   speed-up {c_base / c_masked:8.1f}x (cpu)")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(f"  peak resident memory so far        : {peak:8.2f} GiB (mapped table pages are shared on a node)")
    print(f"  max |oracle - baseline|            : {diff:.2e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--baseline-repeats", type=int, default=1)
    ap.add_argument("--skip-owt", action="store_true", help="only the text8-sized chain")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--cache-dir", default=None, help="cache the power tables here (also times a warm set-up)")
    ap.add_argument("--compare-dense", action="store_true",
                    help="also build each table with dense products (the previous arithmetic) and compare")
    args = ap.parse_args()
    torch.set_num_threads(sampling_threads())  # as the CLI samples: DLLM_LIT_THREADS, default 1
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads (DLLM_LIT_THREADS)")
    B, T = args.batch, args.seq_len
    bench("text8-sized (bundled English chars)", english_char_chain(), B, T, args.repeats, args.baseline_repeats,
          args.cache_dir, args.compare_dense)
    if not args.skip_owt:
        bench("OWT-sized synthetic", synthetic_chain(4096, 206, eps=1e-4, seed=0), B, T, args.repeats,
              args.baseline_repeats, args.cache_dir, args.compare_dense)


if __name__ == "__main__":
    main()
