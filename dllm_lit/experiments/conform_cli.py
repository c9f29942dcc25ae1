"""``python cli.py conform``: does a sampler follow a rule's exact law (or another sampler's) on a tiny chain?

    python cli.py conform --sampler examples/llada_conform.yaml --law llada \\
        --law-options '{temperature: 1.0, prompt_len: 1}' --chain generic --seq-len 4
    python cli.py conform --sampler configs/fhs.yaml --against configs/ar.yaml --seq-len 3 --target-tv 0.02

``--sampler`` / ``--against``: a config file with a ``model:`` block (any shipped config, or one naming
``dllm_lit.samplers.ExternalSampler`` and the user's function), or that block inline as YAML.  The samples are
drawn with seed ``--seed`` (``--against`` with seed + 1) on the chain ``--chain``: ``tiny`` (V = 3, with exact
ties: P(a, a) > 0 and an impossible transition), ``generic`` (V = 3, a random kernel: tie-free given a prompt
token), ``order2`` / ``hmm`` (V = 3 worlds beyond first order: an order-2 context chain, a 4-state hidden HMM;
random rows, tie-free given a prompt token) or a kernel as a YAML list of rows.  The report
(dllm_lit.exact.conformance) gives chi-square, dof, p-value, TV, the most over- and under-sampled sequences, the
verdict and the power (the TV the test detects); N is
``--samples``, or by default the smallest N whose test detects ``--target-tv`` (0.01).  Where two positions'
probabilities are equal or closer than float32 resolves, a ``dtype-sensitive`` line says in how many states
(:func:`dllm_lit.experiments.conform.confidence_ties`).  The exit status is 0 when the sampler conforms, 1 when it differs, 2 for bad input.

The arguments are parsed and checked here, before torch and the samplers load, so a bad value is refused in a
fraction of a second.
"""
from __future__ import annotations

import argparse
import sys

__all__ = ["main", "TARGET_TV"]

#: the default N detects any law at this TV from the reference (probability 0.8, level alpha); a float32 oracle
#: model moved LLaDA's law on the generic chain by TV 0.0156, which N = 20000 (TV 0.024) did not detect
TARGET_TV = 0.01


def _epilog(argv: list[str]) -> str | None:
    """The named laws' options (they need the exact package, so only when help is asked for)."""
    if not {"-h", "--help"} & set(argv):
        return None
    from dllm_lit.experiments.conform import law_help

    return "named laws (--law) and their --law-options, defaults and allowed values (steps defaults to --steps):\n" \
        + law_help()


def main(argv: list[str] | None = None) -> int:
    """Parse and check the arguments, then run the test; the exit status is 0 (conforms), 1 (differs) or 2."""
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(prog="cli.py conform", description=__doc__, epilog=_epilog(argv),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampler", required=True, help="config file with a model: block, or the block as YAML")
    ref = ap.add_mutually_exclusive_group(required=True)
    ref.add_argument("--law", help="an exact rule by name (listed below; dllm_lit.exact.LAWS)")
    ref.add_argument("--against", help="a second sampler (two-sample test), as --sampler")
    ap.add_argument("--law-options", default="{}", help="the rule's options as a YAML mapping (listed below)")
    ap.add_argument("--chain", default="tiny", help="tiny, generic, order2, hmm, or a kernel as a YAML list of rows")
    ap.add_argument("--seq-len", type=int, default=4, help="T (V^T outcomes; at most 2^24)")
    ap.add_argument("--steps", type=int, default=None, help="steps (default: the sampler's first steps value)")
    ap.add_argument("--samples", type=int, default=None,
                    help="N samples per sampler (default: the smallest N whose test detects --target-tv)")
    ap.add_argument("--target-tv", type=float, default=TARGET_TV,
                    help=f"choose N so that the test detects, with probability 0.8, any law at this total-variation "
                         f"distance from the reference (default {TARGET_TV}; ignored with --samples)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.01, help="level of the test")
    ap.add_argument("--chunk", type=int, default=4000, help="sequences per work item")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds each sampler may take to draw its samples (default: no limit)")
    ns = ap.parse_args(argv)
    for name in ("seq_len", "samples", "chunk"):
        if getattr(ns, name) is not None and getattr(ns, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1, got {getattr(ns, name)}", file=sys.stderr)
            return 2
    if ns.timeout is not None and not 0 < ns.timeout < float("inf"):
        print(f"error: --timeout must be a number of seconds > 0, got {ns.timeout}", file=sys.stderr)
        return 2
    for name in ("alpha", "target_tv"):
        if not 0 < getattr(ns, name) < 1:
            print(f"error: --{name.replace('_', '-')} must lie in (0, 1), got {getattr(ns, name)}", file=sys.stderr)
            return 2
    import yaml

    from dllm_lit.experiments.conform import run

    try:
        res = run(ns)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    print(res)
    return 0 if res.passed else 1
