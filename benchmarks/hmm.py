"""HMM worlds: the exact posterior's cost, and the paper's grid on the order-2 English world.

    python benchmarks/hmm.py posterior [--states 64 256 1024] [--switching] [--batch 64] [--seq-len 1024] [--device cpu]
    python benchmarks/hmm.py calls [--configs configs/duo.yaml ...] [--steps 8] [--batch 512] [--save FILE]
    python benchmarks/hmm.py grid [--jobs 2]     # the 7 paper configs, order-2 English, N = T = 256, steps 8 32 128 256

``posterior`` times :func:`dllm_lit.denoisers.hmm_posterior` (batched forward-backward, float64, absorbing masks,
half the positions masked) on random dense HMMs (``hmm_synthetic``, V = 27; ``--switching`` adds the two-chain
switching world, S = 54) against a dense forward-backward run one sequence at a time as hmmlearn does (scaled
forward and backward passes with numpy matrix-vector products, then the state posteriors pushed through B and the
channel); both give the same posteriors (checked, 1e-10).
The baseline's per-call time is measured on ``--baseline-sequences`` sequences and scaled to the batch (it is
linear in the number of sequences).  It prints wall and CPU (process) seconds per call and the ratio of CPU
seconds (ours / theirs: below 1, ours is faster); with hmmlearn installed, also hmmlearn's own
``CategoricalHMM.predict_proba`` (its compiled scaled forward-backward, state posteriors) on the same sequences.
``calls`` times whole runs of uniform-state configs (Duo, Psi, SEDD-uniform, GIDD, DiffusionGemma) on the bundled
English chain with the exact oracle and prints CPU seconds per denoiser call (each call: one leave-one-out
forward-backward of the batch, then the step's draws) and, last, the CPU seconds per call inside the compiled
forward-backward kernel (the rest is the step's law and draws); ``--save`` writes the samples, to compare two checkouts.
``grid`` runs ``benchmarks/grid.py`` with ``configs/data/kth_order.yaml`` (same parser and engine as the CLI).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's dllm_lit, also when another copy is installed


def dense_forward_backward(A: np.ndarray, B: np.ndarray, mu: np.ndarray, L: np.ndarray, z: np.ndarray) -> np.ndarray:
    """Token posteriors [T, V] of one sequence by the textbook scaled forward-backward (dense A, numpy)."""
    T, S = z.shape[0], A.shape[0]
    E = L[z] @ B.T  # [T, S] evidence per state
    alpha = np.empty((T, S))
    a = mu * E[0]
    alpha[0] = a / a.sum()
    for t in range(1, T):
        a = (alpha[t - 1] @ A) * E[t]
        alpha[t] = a / a.sum()
    beta = np.empty((T, S))
    beta[T - 1] = 1.0
    for t in range(T - 1, 0, -1):
        b = A @ (E[t] * beta[t])
        beta[t - 1] = b / b.sum()
    gamma = alpha * beta
    gamma /= gamma.sum(1, keepdims=True)
    # p(x_t | z) from the state posterior: p(x_t = v, s_t = s | z) propto gamma(s) B(s, v) L(z_t, v) / E(z_t, s)
    with np.errstate(divide="ignore", invalid="ignore"):
        w = np.where(E > 0, gamma / E, 0.0)
    post = (w @ B) * L[z]
    return post / post.sum(1, keepdims=True)


def posterior(args: argparse.Namespace) -> None:
    from dllm_lit.denoisers import ABSORBING, hmm_posterior
    from dllm_lit.sources import SwitchingChains
    from dllm_lit.sources.hmm_synthetic import synthetic_hmm

    torch.set_num_threads(1)
    dev = torch.device(args.device)
    print(f"B={args.batch} T={args.seq_len} V=27, absorbing masks (half masked), float64, device={dev}, one thread")
    try:
        import hmmlearn.hmm as hmmlearn
    except ImportError:
        hmmlearn = None
    head = f"{'S':>6s} {'ours wall':>10s} {'ours cpu':>9s} {'dense wall':>11s} {'dense cpu':>10s} {'ratio':>6s}"
    print(head + (f" {'hmmlearn cpu':>13s} {'ratio':>6s}" if hmmlearn is not None else "  (hmmlearn not installed)"))
    print("ratio = our CPU seconds / theirs per call (< 1: ours is faster)")
    worlds = [(str(S), lambda S=S: synthetic_hmm(S, 27, stay=0.5, emission_support=3, seed=0)) for S in args.states]
    for name, make in worlds + ([("switch", lambda: SwitchingChains().build())] if args.switching else []):
        world = make()
        g = torch.Generator().manual_seed(1)
        x = world.sample(args.batch, args.seq_len, seed=2)
        z = torch.where(torch.rand(x.shape, generator=g) < 0.5, world.mask_id, x)
        zd = z.to(dev)
        hmm_posterior(world, zd[:2, :16])
        if dev.type == "cuda":
            torch.cuda.synchronize()
        w0, c0 = time.perf_counter(), time.process_time()
        ours = hmm_posterior(world, zd)
        if dev.type == "cuda":
            torch.cuda.synchronize()
        w1, c1 = time.perf_counter() - w0, time.process_time() - c0
        A, B, mu = world.A.numpy(), world.B.numpy(), world.initial.numpy()
        L = ABSORBING.likelihood(27).numpy()
        n = min(args.baseline_sequences, args.batch)
        w0, c0 = time.perf_counter(), time.process_time()
        ref = [dense_forward_backward(A, B, mu, L, z[b].numpy()) for b in range(n)]
        w2, c2 = (time.perf_counter() - w0) * args.batch / n, (time.process_time() - c0) * args.batch / n
        err = max(float(np.abs(ours[b].cpu().numpy() - ref[b]).max()) for b in range(n))
        assert err <= 1e-10, f"posteriors differ by {err}"
        line = f"{name:>6s} {w1:>9.2f}s {c1:>8.2f}s {w2:>10.2f}s {c2:>9.2f}s {c1 / c2:>6.2f}"
        if hmmlearn is not None:  # hmmlearn's own forward-backward (state posteriors), same n sequences, scaled
            m = hmmlearn.CategoricalHMM(n_components=world.num_states, n_features=28, implementation="scaling",
                                        init_params="", params="")
            pz = np.vstack([0.5 * np.eye(27), np.full((1, 27), 0.5)])  # p(z | v): keep or MASK
            m.startprob_, m.transmat_, m.emissionprob_ = mu, A, B @ pz.T
            c0 = time.process_time()
            m.predict_proba(z[:n].reshape(-1, 1).numpy(), lengths=[args.seq_len] * n)
            c3 = (time.process_time() - c0) * args.batch / n
            line += f" {c3:>12.2f}s {c1 / c3:>6.2f}"
        print(line + f"   (max |diff| {err:.1e})", flush=True)


def calls(args: argparse.Namespace) -> None:
    import yaml

    from dllm_lit.cli.config_classes import documented_class
    from dllm_lit.denoisers.oracle import OracleDenoiser
    from dllm_lit.sources.english import english_char_chain

    torch.set_num_threads(1)
    den = OracleDenoiser(english_char_chain())
    count = [0]
    evaluate = den.transient_posterior  # what the uniform-state samplers call (docs/performance.md)

    def counted(*a, **k):
        count[0] += 1
        return evaluate(*a, **k)

    den.transient_posterior = counted
    from dllm_lit.denoisers import hmm_first_order_kernel as kernel  # compiled forward-backward (the `fast` extra)
    compiled, in_kernel = kernel.first_order_batch, [0.0]

    def timed(*a):  # first_order_posterior imports the kernel at each call, so this wrapper is what it runs
        c = time.process_time()
        ok = compiled(*a)
        in_kernel[0] += time.process_time() - c
        return ok

    kernel.first_order_batch = timed
    print(f"English chain (V = 27), exact oracle, N = {args.batch}, T = {args.seq_len}, one thread; CPU = process time")
    print(f"{'config':<22s} {'steps':>5s} {'calls':>5s} {'wall s':>8s} {'CPU s':>8s} {'CPU s/call':>10s} "
          f"{'kernel s/call':>13s}")
    saved = {}
    for cfg in args.configs:
        spec = yaml.safe_load(Path(cfg).read_text())["model"]
        options = {k: v for k, v in spec.get("init_args", {}).items() if k != "steps"}
        sampler = documented_class(spec["class_path"], "sampler", f"{cfg}: model.class_path")(den, **options)
        sampler.sample(2, 16, 2, seed=0)  # compiles the kernel outside the timing
        for steps in args.steps:
            count[0], in_kernel[0] = 0, 0.0
            w0, c0 = time.perf_counter(), time.process_time()
            x = sampler.sample(args.batch, args.seq_len, steps, seed=args.seed)
            w, c = time.perf_counter() - w0, time.process_time() - c0
            print(f"{Path(cfg).stem:<22s} {steps:>5d} {count[0]:>5d} {w:>8.2f} {c:>8.2f} {c / count[0]:>10.3f} "
                  f"{in_kernel[0] / count[0]:>13.3f}", flush=True)
            saved[f"{Path(cfg).stem}/{steps}"] = x
    if args.save:
        torch.save(saved, args.save)


def grid(args: argparse.Namespace) -> None:
    cmd = [sys.executable, str(ROOT / "benchmarks" / "grid.py"), "--data-config",
           str(ROOT / "configs" / "data" / "kth_order.yaml"), "--num-sequences", str(args.num_sequences),
           "--seq-len", str(args.seq_len), "--chunk-size", str(args.num_sequences), "--steps", *map(str, args.steps),
           "--jobs", str(args.jobs)]
    if args.configs:
        cmd += ["--configs", *args.configs]
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    subprocess.run(cmd, check=True, env=env)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="what", required=True)
    p = sub.add_parser("posterior")
    p.add_argument("--states", nargs="*", type=int, default=[64, 256, 1024])
    p.add_argument("--switching", action="store_true", help="also time the switching-chains world (S = 54)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--baseline-sequences", type=int, default=4)
    p.add_argument("--device", default="cpu")
    c = sub.add_parser("calls")
    c.add_argument("--configs", nargs="+", default=[str(ROOT / "configs" / f"{n}.yaml") for n in (
        "duo", "duo_greedy", "psi", "sedd_uniform", "gidd", "diffusion_gemma")])
    c.add_argument("--steps", nargs="+", type=int, default=[8])
    c.add_argument("--batch", type=int, default=512)
    c.add_argument("--seq-len", type=int, default=1024)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--save", default=None, help="write the samples here (torch.save), to compare two checkouts")
    g = sub.add_parser("grid")
    g.add_argument("--num-sequences", type=int, default=256)
    g.add_argument("--seq-len", type=int, default=256)
    g.add_argument("--steps", nargs="*", type=int, default=[8, 32, 128, 256])
    g.add_argument("--jobs", type=int, default=2)
    g.add_argument("--configs", nargs="*", default=None)
    args = ap.parse_args()
    {"posterior": posterior, "calls": calls, "grid": grid}[args.what](args)


if __name__ == "__main__":
    main()
