"""Time the oracle as a Hugging Face model (``OracleForMaskedLM``) against the native oracle call.

    python benchmarks/oracle_model.py [--batch 64] [--seq-len 1024] [--repeats 3] [--skip-owt] [--cache-dir DIR]

On the English chain (V = 27) and an OWT-sized synthetic chain (V = 4096, K = 206, eps = 1e-4), with half the
positions masked at random: the native call ``OracleDenoiser.forward(z)`` (log posteriors [B, T, V]) and
``model(z).logits`` ([B, T, V + 3]) with float32 logits computed directly (``exact_ties: false``, the native
arithmetic) and with the default exact ties (rows in float64, rounded to float32).  Prints the best wall and
CPU (process) time per call of each and the ratio to the native call.  The power tables are built once
beforehand (not timed); ``--cache-dir`` keeps them on disk between runs.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.hf import OracleForMaskedLM
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import english_char_chain


def best_time(fn, repeats: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds) over ``repeats`` calls (after one warm-up call)."""
    fn()
    wall, cpu = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - w)
        cpu.append(time.process_time() - c)
    return min(wall), min(cpu)


def bench(name: str, chain: MarkovChain, B: int, T: int, repeats: int, cache_dir: str | None, exact: bool) -> None:
    g = torch.Generator().manual_seed(0)
    V = chain.vocab_size
    z = torch.randint(0, V, (B, T), generator=g)
    z = torch.where(torch.rand(B, T, generator=g) < 0.5, V, z)
    t0 = time.perf_counter()
    native = OracleDenoiser(chain, cache_dir=cache_dir)
    fast = OracleForMaskedLM.from_chain(chain, cache_dir=cache_dir, exact_ties=False)
    fast.oracle(torch.float32, z.device)
    models = [("model, exact_ties false", fast)]
    if exact:
        tied = OracleForMaskedLM.from_chain(chain, cache_dir=cache_dir)
        tied.oracle(torch.float64, z.device)
        models.append(("model, exact_ties true", tied))
    print(f"{name}: V = {V}, B = {B}, T = {T}, half masked; tables built in {time.perf_counter() - t0:.1f} s")
    base_wall, base_cpu = best_time(lambda: native(z), repeats)
    print(f"  native OracleDenoiser(z)      {base_wall * 1e3:9.1f} ms wall {base_cpu * 1e3:9.1f} ms CPU")
    for label, model in models:
        wall, cpu = best_time(lambda: model(z).logits, repeats)
        print(f"  {label:28s}  {wall * 1e3:9.1f} ms wall {cpu * 1e3:9.1f} ms CPU   "
              f"x{wall / base_wall:.2f} wall, x{cpu / base_cpu:.2f} CPU")
    same = torch.equal(fast(z).logits[..., :V], native(z))
    print(f"  exact_ties false gives the native log posteriors bit for bit: {same}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-owt", action="store_true")
    ap.add_argument("--skip-owt-exact", action="store_true", help="skip exact ties on the OWT-sized chain "
                    "(its float64 power table takes twice the float32 table's memory)")
    ap.add_argument("--cache-dir", default=None)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    bench("English", english_char_chain(), args.batch, args.seq_len, args.repeats, args.cache_dir, True)
    if not args.skip_owt:
        bench("OWT-sized synthetic", synthetic_chain(4096, 206, eps=1e-4, seed=0), args.batch, args.seq_len,
              args.repeats, args.cache_dir, not args.skip_owt_exact)


if __name__ == "__main__":
    main()
