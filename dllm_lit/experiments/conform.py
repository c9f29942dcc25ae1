"""``python cli.py conform``: does a sampler follow a rule's exact law (or another sampler's) on a tiny chain?

    python cli.py conform --sampler examples/llada_external.yaml --law llada \\
        --law-options '{temperature: 1.0, prompt_len: 1}' --chain generic --seq-len 4 --steps 3 --samples 20000
    python cli.py conform --sampler examples/llada_external.yaml --against configs/llada.yaml --steps 4

``--sampler`` / ``--against``: a config file with a ``model:`` block (any shipped config, or one naming
``dllm_lit.samplers.ExternalSampler`` and the user's function), or that block inline as YAML.  The samples are
drawn with seed ``--seed`` (``--against`` with seed + 1) on the chain ``--chain``: ``tiny`` (V = 3, with exact
ties: P(a, a) > 0 and an impossible transition), ``generic`` (V = 3, a random kernel: tie-free given a prompt
token) or a kernel as a YAML list of rows.  The report (dllm_lit.conformance) gives chi-square, dof, p-value,
TV, the most over- and under-sampled sequences, the verdict and the power; the exit status is 0 when the
sampler conforms, 1 when it differs, 2 for bad input.
"""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

import torch
import yaml

from dllm_lit.conformance import Conformance, goodness_of_fit, two_sample
from dllm_lit.markov import MarkovChain

__all__ = ["main", "build_sampler", "named_chain", "CHAINS", "law_options", "law_help", "resolve_law_options"]

#: the chains offered by name (V = 3)
CHAINS = ("tiny", "generic")
#: laws whose ``steps`` option defaults to the sampler's steps
LAWS_WITH_STEPS = ("mdlm", "mdlm_paper", "block_mdlm", "llada", "maskgit", "klass", "dream", "dream_origin",
                   "pc_sampler", "sedd")
TINY = [[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]]


def named_chain(spec: str) -> MarkovChain:
    """``tiny``, ``generic`` or a kernel given as a YAML list of rows."""
    if spec == "tiny":
        return MarkovChain.from_kernel(torch.tensor(TINY, dtype=torch.float64))
    if spec == "generic":
        g = torch.Generator().manual_seed(5)
        K = torch.rand(3, 3, generator=g, dtype=torch.float64) + 0.1
        return MarkovChain.from_kernel(K / K.sum(1, keepdim=True))
    try:
        rows = yaml.safe_load(spec)
        return MarkovChain.from_kernel(torch.tensor(rows, dtype=torch.float64))
    except Exception as exc:  # noqa: BLE001 - any parse / shape / row-sum problem is the user's input
        raise ValueError(f"--chain must be one of {', '.join(CHAINS)} or a kernel as a list of rows ({exc})") from None


def law_options(name: str) -> dict[str, Any]:
    """The options of the named law (its keyword parameters after ``chain, T``) with their defaults
    (``inspect.Parameter.empty`` for a required one)."""
    from dllm_lit.exact import LAWS

    params = list(inspect.signature(LAWS[name]).parameters.values())[2:]
    return {p.name: p.default for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD}


def law_help() -> str:
    """One line per named law: its options, defaults and allowed values (the ``--law`` help)."""
    from dllm_lit.exact import LAWS, OPTION_CHOICES

    lines = []
    for name in LAWS:
        opts = []
        for opt, default in law_options(name).items():
            text = opt if default is inspect.Parameter.empty else f"{opt}={default}"
            if opt in OPTION_CHOICES:
                text += f" ({'|'.join(OPTION_CHOICES[opt])})"
            opts.append(text)
        lines.append(f"  {name}: {', '.join(opts) or '(no options)'}")
    return "\n".join(lines)


def resolve_law_options(name: str, text: str, steps: int) -> dict[str, Any]:
    """``--law-options`` parsed and checked against the law's options (``steps`` defaults to the run's)."""
    from dllm_lit.exact import LAWS, OPTION_CHOICES

    if name not in LAWS:
        raise ValueError(f"--law must be one of {', '.join(LAWS)}, got {name!r}")
    options = yaml.safe_load(text) or {}
    if not isinstance(options, dict):
        raise ValueError(f"--law-options must be a mapping, got {text!r}")
    allowed = law_options(name)
    for key, value in options.items():
        if key not in allowed:
            raise ValueError(f"--law-options: {key!r} is not an option of the {name} law; "
                             f"allowed: {', '.join(allowed) or 'none'}")
        if key in OPTION_CHOICES and value not in OPTION_CHOICES[key]:
            raise ValueError(f"--law-options: {key} must be one of {', '.join(OPTION_CHOICES[key])}, got {value!r}")
    if name in LAWS_WITH_STEPS:
        options.setdefault("steps", steps)
    missing = [k for k, d in allowed.items() if d is inspect.Parameter.empty and k not in options]
    if missing:
        raise ValueError(f"--law-options: the {name} law needs {', '.join(missing)}")
    return options


def _model_block(spec: str, field: str) -> dict[str, Any]:
    path = Path(spec)
    data = yaml.safe_load(path.read_text()) if path.suffix in (".yaml", ".yml") and path.is_file() else yaml.safe_load(spec)
    if isinstance(data, dict) and "model" in data:
        data = data["model"]
    if isinstance(data, str):
        data = {"class_path": data}
    if not isinstance(data, dict) or "class_path" not in data:
        raise ValueError(f"{field} must be a config file with a model: block, or the block itself "
                         f"({{class_path: ..., init_args: {{...}}}}), got {spec!r}")
    return data


def build_sampler(spec: str, field: str = "--sampler"):
    """The sampler a config's ``model:`` block describes (class path and init args)."""
    from dllm_lit.config_classes import instantiate

    return instantiate(_model_block(spec, field), "sampler", field)  # a sampler class only: nothing else runs


def _draw(sampler, chain: MarkovChain, n: int, T: int, steps: int, seed: int, chunk: int,
          timeout: float | None = None) -> torch.Tensor:
    from dllm_lit.user_code import user_code

    # the sampler may be the user's code: a SystemExit in it, or a draw past --timeout, is one line (exit 2)
    with user_code(f"the sampler {getattr(sampler, 'name', type(sampler).__name__)}", timeout, "--timeout"):
        sampler.connect(chain)
        sampler.check_run(T, steps)
        return torch.cat([sampler.generate(torch.arange(i, min(i + chunk, n)), T, steps, seed)
                          for i in range(0, n, chunk)])


def run(ns: argparse.Namespace) -> Conformance:
    from dllm_lit.exact import LAWS

    chain = named_chain(ns.chain)
    sampler = build_sampler(ns.sampler)
    steps = sampler.steps_grid[0] if ns.steps is None else ns.steps
    if ns.law is not None:
        options = resolve_law_options(ns.law, ns.law_options, steps)
        try:
            law = LAWS[ns.law](chain, ns.seq_len, **options)
        except TypeError as exc:
            raise ValueError(f"--law-options do not fit the {ns.law} law: {exc}") from None
    x = _draw(sampler, chain, ns.samples, ns.seq_len, steps, ns.seed, ns.chunk, ns.timeout)
    if ns.law is not None:
        return goodness_of_fit(x, law, ns.alpha, reference=f"exact {ns.law} law")
    other = build_sampler(ns.against, "--against")
    y = _draw(other, chain, ns.samples, ns.seq_len, steps, ns.seed + 1, ns.chunk, ns.timeout)
    return two_sample(x, y, chain.vocab_size, ns.alpha, reference=getattr(other, "name", "reference sampler"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cli.py conform", description=__doc__,
                                 epilog="named laws (--law) and their --law-options, defaults and allowed values "
                                        "(steps defaults to --steps):\n" + law_help(),
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sampler", required=True, help="config file with a model: block, or the block as YAML")
    ref = ap.add_mutually_exclusive_group(required=True)
    ref.add_argument("--law", help="an exact rule by name (listed below; dllm_lit.exact.LAWS)")
    ref.add_argument("--against", help="a second sampler (two-sample test), as --sampler")
    ap.add_argument("--law-options", default="{}", help="the rule's options as a YAML mapping (listed below)")
    ap.add_argument("--chain", default="tiny", help="tiny, generic, or a kernel as a YAML list of rows")
    ap.add_argument("--seq-len", type=int, default=4, help="T (V^T outcomes; at most 2^24)")
    ap.add_argument("--steps", type=int, default=None, help="steps (default: the sampler's first steps value)")
    ap.add_argument("--samples", type=int, default=20000, help="N samples per sampler")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.01, help="level of the test")
    ap.add_argument("--chunk", type=int, default=4000, help="sequences per work item")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds each sampler may take to draw its samples (default: no limit)")
    ns = ap.parse_args(argv)
    for name in ("seq_len", "samples", "chunk"):
        if getattr(ns, name) < 1:
            print(f"error: --{name.replace('_', '-')} must be >= 1, got {getattr(ns, name)}", file=sys.stderr)
            return 2
    if ns.timeout is not None and not 0 < ns.timeout < float("inf"):
        print(f"error: --timeout must be a number of seconds > 0, got {ns.timeout}", file=sys.stderr)
        return 2
    if not 0 < ns.alpha < 1:
        print(f"error: --alpha must lie in (0, 1), got {ns.alpha}", file=sys.stderr)
        return 2
    try:
        res = run(ns)
    except (ValueError, OSError, yaml.YAMLError) as exc:
        print(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", file=sys.stderr)
        return 2
    print(res)
    return 0 if res.passed else 1
