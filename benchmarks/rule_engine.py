"""What a rule written from the recipe costs against the built-in sampler of its family, and what the engine's
provider choice buys back.

    python benchmarks/rule_engine.py [--sampler llada|dream_entropy] [--num-sequences 16] [--seq-len 1024]
                                     [--steps 1024 ...] [--temperature 1.0] [--plain]

On the bundled English chain with the exact oracle, the same seed, two or three ways: the built-in class (``LLaDA``
or ``Dream(alg="entropy")``, themselves rules with declared capabilities), a rule a newcomer writes from the recipe
of docs/architecture.md in a few lines (below: "commit the k most confident proposals", "commit the k tokens of
lowest entropy"), run through the engine-chosen provider, and, with ``--plain``, that rule run plainly
(:func:`~dllm_lit.decoding.reference.reference_decode`: ``probs_at`` at every masked position every step).  Prints wall
and CPU (process) seconds per step count and in all, the ratios to the built-in path (target: the recipe within
1.2x), and checks that the paths give identical samples.
"""
from __future__ import annotations

import argparse
import time

import torch

from dllm_lit.samplers.draws import tempered_law
from dllm_lit.decoding.providers import choose_provider
from dllm_lit.decoding.reference import reference_decode
from dllm_lit.samplers.rule import RuleSampler
from dllm_lit.sources import english_char_chain


class Confidence(RuleSampler):
    """The recipe "commit the k most confident proposals" (LLaDA's low-confidence remasking, one block)."""

    sampler_name = "confidence_recipe"
    bound = "pmax"  # p(x̂) <= max_v p

    def __init__(self, denoiser=None, steps=128, temperature: float = 1.0) -> None:
        super().__init__(denoiser, steps)
        self.temperature = temperature

    def propose(self, probs):
        return tempered_law(probs, self.temperature)

    def score(self, probs, tok, pos):
        return probs.gather(1, tok[:, None]).squeeze(1).double()


class LowestEntropy(RuleSampler):
    """The recipe "commit the k tokens of lowest entropy" with Dream's schedule, law and entropy (Dream, alg=entropy,
    temperature 1)."""

    sampler_name = "entropy_recipe"
    reads_tokens = False  # the score reads the row only: proposals are drawn where positions commit

    def __init__(self, denoiser=None, steps=128, temperature: float = 1.0) -> None:
        super().__init__(denoiser, steps)

    def propose(self, probs):
        q = probs.double()
        return q / q.sum(-1, keepdim=True)

    def score(self, probs, tok, pos):
        q = self.propose(probs)
        return (q * torch.log(q + 1e-10)).sum(-1)  # minus the entropy of q

    def counts(self, n, steps):
        from dllm_lit.samplers.dream import dream_schedule

        return dream_schedule(n, steps, 1e-3)


def plain(rule_cls: type) -> type:
    """``rule_cls`` on the dense direct provider whatever the denoiser declares."""

    def generate(self, indices, seq_len, steps, seed, log_q=None):
        x = self.initial_state(indices, seq_len, seed)
        reference_decode(self, x, indices, steps, seed)
        return x

    return type(f"Plain{rule_cls.__name__}", (rule_cls,), {"generate": generate})


def pairs() -> dict[str, tuple[type, type, dict]]:
    """--sampler: (built-in class, recipe rule, the built-in's options but the temperature)."""
    from dllm_lit.samplers import Dream, LLaDA

    return {"llada": (LLaDA, Confidence, {}), "dream_entropy": (Dream, LowestEntropy, {"alg": "entropy"})}


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
    paths = {"built-in": built_in(**options).connect(chain), "rule via engine": rule_cls(temperature=tau).connect(chain)}
    if args.plain:
        paths["plain rule"] = plain(rule_cls)(temperature=tau).connect(chain)
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
