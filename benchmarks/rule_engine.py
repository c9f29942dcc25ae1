"""What a sampler written as a plain rule costs against the built-in fast path, and what the engine's provider
choice buys back.

    python benchmarks/rule_engine.py [--sampler llada] [--num-sequences 16] [--seq-len 1024] [--steps 1024 ...]
                                     [--temperature 1.0] [--plain]

On the bundled English chain with the exact oracle, one shipped sampler's rule two or three ways, same seed: the
built-in class (fast paths chosen by hand; ``--sampler`` llada or pc_sampler with its shipped config's options), the
same rule through the engine-chosen provider (:func:`~dllm_lit.decoding.providers.decode_rule`:
:class:`~dllm_lit.samplers.llada_rule.LLaDARule`, :class:`~dllm_lit.samplers.pc_rule.PCRule`) and, with
``--plain``, the rule run plainly (:func:`~dllm_lit.decoding.reference.reference_decode`: ``probs_at`` at every masked
position every step, the loop the docs once showed).  Prints wall and CPU (process) seconds per step count and in
all, the ratios to the built-in path, and checks that the paths give identical samples.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.samplers import LLaDA
from dllm_lit.samplers.llada_rule import LLaDARule
from dllm_lit.decoding.providers import choose_provider
from dllm_lit.decoding.reference import reference_decode
from dllm_lit.sources import english_char_chain


def plain(rule_cls: type) -> type:
    """``rule_cls`` on the dense direct provider whatever the denoiser declares."""

    def generate(self, indices, seq_len, steps, seed, log_q=None):
        x = self.initial_state(indices, seq_len, seed)
        reference_decode(self, self.denoiser, x, indices, steps, seed)
        return x

    return type(f"Plain{rule_cls.__name__}", (rule_cls,), {"generate": generate})


def pairs() -> dict[str, tuple[type, type, dict]]:
    """--sampler: (built-in class, rule class, options of the shipped config but the temperature)."""
    from dllm_lit.samplers import PCSampler
    from dllm_lit.samplers.pc_rule import PCRule

    return {"llada": (LLaDA, LLaDARule, {}),
            "pc_sampler": (PCSampler, PCRule, {"lambd": 0.25, "alpha": 10.0})}


def timed(fn) -> tuple[torch.Tensor, float, float]:
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-sequences", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--sampler", choices=sorted(pairs()), default="llada")
    ap.add_argument("--steps", type=int, nargs="+", default=[1024])
    ap.add_argument("--plain", action="store_true", help="also time the rule on the dense direct provider")
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: CPU seconds are not inflated "
                    "by threads spinning on a loaded machine)")
    ap.add_argument("--repeats", type=int, default=1, help="interleaved runs of each path (the least CPU time is reported)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    chain = english_char_chain()
    N, T, tau = args.num_sequences, args.seq_len, args.temperature
    built_in, rule_cls, options = pairs()[args.sampler]
    options = {**options, "temperature": tau}
    paths = {"built-in": built_in(**options).connect(chain), "rule via engine": rule_cls(**options).connect(chain)}
    if args.plain:
        paths["plain rule"] = plain(rule_cls)(**options).connect(chain)
    engine = paths["rule via engine"]
    print(f"{args.sampler} {options}, English chain (V={chain.vocab_size}), N={N}, T={T}, steps={args.steps}, "
          f"{torch.get_num_threads()} threads; engine provider: {choose_provider(engine, engine.denoiser)}")
    for s in paths.values():  # warm-up: first-call costs (allocator, lazy tables) are not the path's
        s.sample(2, 64, 64, seed=args.seed)
    print(f"{'steps':>6} {'path':<16}{'wall s':>9}{'cpu s':>9}{'wall x':>9}{'cpu x':>9}")
    total = {name: [0.0, 0.0] for name in paths}
    same = True
    for S in args.steps:
        runs: dict[str, list] = {name: [] for name in paths}
        for _ in range(args.repeats):  # interleaved, so that a change in the machine's load hits every path alike
            for name, s in paths.items():
                runs[name].append(timed(lambda s=s: s.sample(N, T, S, seed=args.seed)))
        results = {name: min(r, key=lambda t: t[2]) for name, r in runs.items()}
        base = results["built-in"]
        for name, (x, wall, cpu) in results.items():
            print(f"{S:>6} {name:<16}{wall:9.2f}{cpu:9.2f}{wall / base[1]:9.2f}{cpu / base[2]:9.2f}")
            total[name][0] += wall
            total[name][1] += cpu
        same = same and all(torch.equal(x, base[0]) for x, _, _ in results.values())
    for name, (wall, cpu) in total.items():
        print(f"{'all':>6} {name:<16}{wall:9.2f}{cpu:9.2f}{wall / total['built-in'][0]:9.2f}"
              f"{cpu / total['built-in'][1]:9.2f}")
    print(f"identical samples: {same}")
    if not same:
        raise SystemExit("the paths disagree")


if __name__ == "__main__":
    main()
