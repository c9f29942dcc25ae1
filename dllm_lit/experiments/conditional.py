"""``python -m dllm_lit.experiments.conditional``: a sampler continuing prompts, against the exact conditional law.

    python -m dllm_lit.experiments.conditional --sampler configs/mdlm_paper.yaml --world english_order2 \\
        --seq-len 32 --prefix 8 --prompts 64 --repeats 4 --steps 24
    python -m dllm_lit.experiments.conditional --sampler configs/llada.yaml --world hmm --seq-len 6 \\
        --prompt '[0, null, null, 2, null, null]' --repeats 200 --steps 4

Prompts are drawn from the world (``--prefix P`` keeps positions 0..P-1, ``--reveal`` a list of positions: infilling)
or given (``--prompt``: a list of token ids with null at the free positions, or a list of such lists).  The sampler
(a config file or its ``model:`` block, as ``cli.py conform`` takes it) continues each prompt ``--repeats`` times on
the conditioned oracle, and so do exact conditional samples (the reference, "AR from the prompt").  It prints the
conditional bracket, NLL excess and transition metrics against the exact conditional pair law, with their
exact-continuation floor subtracted (:mod:`dllm_lit.metrics.functional.conditional`), and the exact greedy scores
(:mod:`dllm_lit.metrics.functional.greedy`) of both, with their intervals over prompts.  Bad input (a prompt longer
than T, a token outside the vocabulary, nothing left to fill, an unknown world) is refused in one line, exit 2.
"""
from __future__ import annotations

import argparse
import sys

import torch
import yaml

__all__ = ["main", "WORLD_SOURCES"]

#: worlds by name (besides the tiny ones of ``cli.py conform --chain``)
WORLD_SOURCES = ("english", "english_order2", "switching", "hmm_synthetic")


def world_by_name(name: str):
    from dllm_lit.experiments.conform import CHAINS, named_chain

    if name in CHAINS:
        return named_chain(name)
    from dllm_lit.sources import EnglishChars, HMMSynthetic, KthOrderChars, SwitchingChains

    sources = {"english": EnglishChars, "english_order2": lambda: KthOrderChars(order=2),
               "switching": SwitchingChains, "hmm_synthetic": HMMSynthetic}
    if name not in sources:
        raise ValueError(f"--world must be one of {', '.join((*CHAINS, *WORLD_SOURCES))}, got {name!r}")
    return sources[name]().build()


def given_prompts(text: str, vocab_size: int, seq_len: int) -> torch.Tensor:
    """``--prompt`` as canvases [M, T] (null -> MASK), checked in one line."""
    from dllm_lit.markov.world_api import check_canvas

    rows = yaml.safe_load(text)
    if not isinstance(rows, list) or not rows:
        raise ValueError(f"--prompt must be a list of token ids (null where free) or a list of such lists, got {text!r}")
    rows = rows if isinstance(rows[0], list) else [rows]
    if any(not isinstance(r, list) or any(v is not None and (isinstance(v, bool) or not isinstance(v, int)) for v in r)
           for r in rows):
        raise ValueError("--prompt entries must be integer token ids or null")
    if any(len(r) != len(rows[0]) for r in rows):
        raise ValueError("--prompt rows must have one length")
    canvas = torch.tensor([[vocab_size if v is None else v for v in r] for r in rows], dtype=torch.long)
    return check_canvas(canvas, vocab_size, seq_len, name="--prompt")


def _fmt(value, interval) -> str:
    if value is None:
        return "n/a"
    return f"{value:.5f}" + ("" if interval is None else f" [{interval[0]:.5f}, {interval[1]:.5f}]")


def run(ns: argparse.Namespace) -> str:
    from dllm_lit.experiments.prompted import draw_prompts, sample_prompted
    from dllm_lit.experiments.conform import build_sampler
    from dllm_lit.metrics.functional.conditional import conditional_values, per_prompt_mean
    from dllm_lit.metrics.functional.greedy import greedy_scores
    from dllm_lit.metrics.functional.mean_interval import skew_corrected_t_interval

    world = world_by_name(ns.world)
    if ns.prompt is not None:
        canvases = given_prompts(ns.prompt, world.vocab_size, ns.seq_len)
    else:
        reveal = yaml.safe_load(ns.reveal) if ns.reveal is not None else None
        canvases = draw_prompts(world, ns.prompts, ns.seq_len, ns.seed, prefix=ns.prefix if reveal is None else None,
                                reveal=reveal)
    sampler = build_sampler(ns.sampler)
    steps = sampler.steps_grid[0] if ns.steps is None else ns.steps
    sampler.connect(world)
    ref = sample_prompted(None, world, canvases, ns.repeats, None, ns.seed)
    row = sample_prompted(sampler, world, canvases, ns.repeats, steps, ns.seed)
    lines = [f"world {ns.world} (V = {world.vocab_size}), T = {ns.seq_len}, {canvases.shape[0]} prompts x "
             f"{ns.repeats} continuations, {type(sampler).__name__} at {steps} steps, seed {ns.seed}"]
    for name, r in (("exact (AR from the prompt)", ref), (type(sampler).__name__, row)):
        vals = conditional_values(world, r.samples, r.prompt, r.canvases, r.stats["log_q"], r.stats["log_p"],
                                  ref.stats["log_p"], ns.confidence, reference_samples=ref.samples,
                                  exact=bool((r.stats["exact_law"] > 0).all()))
        g = greedy_scores(world, r.samples, r.canvases[r.prompt], ns.rank_limit)
        per = per_prompt_mean(g.regret, r.prompt, canvases.shape[0])
        lines.append(f"{name}:")
        lines += [f"  {k}: {_fmt(*vals[k])}" for k in vals]
        lines.append(f"  greedy_regret: {_fmt(float(per.mean()), skew_corrected_t_interval(per, ns.confidence))}; "
                     f"equal to the mode: {float(g.is_mode.double().mean()):.3f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m dllm_lit.experiments.conditional", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampler", required=True, help="config file with a model: block, or the block as YAML")
    ap.add_argument("--world", default="english", help="a tiny world (tiny, generic, order2, hmm) or "
                                                       + ", ".join(WORLD_SOURCES))
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--prefix", type=int, default=8, help="prompts drawn from the world: the first P tokens kept")
    ap.add_argument("--reveal", default=None, help="prompts drawn from the world: these positions kept (a YAML list)")
    ap.add_argument("--prompt", default=None, help="given prompts: token ids with null where free (YAML)")
    ap.add_argument("--prompts", type=int, default=64, help="M prompts drawn from the world")
    ap.add_argument("--repeats", type=int, default=4, help="R continuations per prompt")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--rank-limit", type=int, default=20)
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ns = ap.parse_args(argv)
    for field in ("seq_len", "prompts", "repeats", "rank_limit"):
        if getattr(ns, field) < 1:
            print(f"error: --{field.replace('_', '-')} must be >= 1, got {getattr(ns, field)}", file=sys.stderr)
            return 2
    try:
        print(run(ns))
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
