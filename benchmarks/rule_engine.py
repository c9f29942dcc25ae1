"""What a sampler written as a plain rule costs against the built-in fast path, and what the engine's provider
choice buys back.

    python benchmarks/rule_engine.py [--num-sequences 16] [--seq-len 1024] [--steps 1024] [--temperature 1.0]

On the bundled English chain with the exact oracle, LLaDA low-confidence remasking (one block) three ways, same
seed: the built-in ``LLaDA`` (fast paths chosen by hand), the rule :class:`~dllm_lit.samplers.llada_rule.LLaDARule`
run plainly (:func:`~dllm_lit.samplers.rule.reference_decode`: ``probs_at`` at every masked position every step,
the loop the docs once showed), and the same rule through the engine-chosen provider
(:func:`~dllm_lit.samplers.providers.decode_rule`).  Prints wall and CPU (process) seconds per run, the ratios to
the built-in path, and checks that the three give identical samples.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.llada_rule import LLaDARule
from dllm_lit.samplers.providers import choose_provider
from dllm_lit.samplers.rule import reference_decode
from dllm_lit.sources import english_char_chain


class PlainLLaDA(LLaDARule):
    """The rule on the dense direct provider whatever the denoiser declares."""

    def generate(self, indices, seq_len, steps, seed, log_q=None):
        x = self.initial_state(indices, seq_len, seed)
        reference_decode(self, self.denoiser, x, indices, steps, seed)
        return x


def timed(fn) -> tuple[torch.Tensor, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-sequences", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=1024)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: CPU seconds are not inflated "
                    "by threads spinning on a loaded machine)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved runs of each path (the least CPU time is reported)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    chain = english_char_chain()
    N, T, S, tau = args.num_sequences, args.seq_len, args.steps, args.temperature
    paths = {"built-in LLaDA": LLaDA(temperature=tau).connect(chain),
             "plain rule": PlainLLaDA(temperature=tau).connect(chain),
             "rule via engine": LLaDARule(temperature=tau).connect(chain)}
    engine = paths["rule via engine"]
    print(f"LLaDA low-confidence, temperature {tau}, English chain (V={chain.vocab_size}), N={N}, T={T}, steps={S}, "
          f"{torch.get_num_threads()} threads; engine provider: {choose_provider(engine, engine.denoiser)}")
    for s in paths.values():  # warm-up: first-call costs (allocator, lazy tables) are not the path's
        s.sample(2, 64, 64, seed=args.seed)
    runs: dict[str, list] = {name: [] for name in paths}
    for _ in range(args.repeats):  # interleaved, so that a change in the machine's load hits every path alike
        for name, s in paths.items():
            runs[name].append(timed(lambda s=s: s.sample(N, T, S, seed=args.seed)))
    results = {name: min(r, key=lambda t: t[2]) for name, r in runs.items()}
    base = results["built-in LLaDA"]
    print(f"{'path':<18}{'wall s':>9}{'cpu s':>9}{'wall x':>9}{'cpu x':>9}")
    for name, (x, wall, cpu) in results.items():
        print(f"{name:<18}{wall:9.2f}{cpu:9.2f}{wall / base[1]:9.2f}{cpu / base[2]:9.2f}")
    same = all(torch.equal(x, base[0]) for x, _, _ in results.values())
    print(f"identical samples: {same}")
    if not same:
        raise SystemExit("the three paths disagree")


if __name__ == "__main__":
    main()
