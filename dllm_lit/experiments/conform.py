"""The work of ``python cli.py conform`` (its command line and usage: :mod:`dllm_lit.experiments.conform_cli`):
the named chains and worlds, the sampler built from a config block, the exact law or second sampler it is tested
against (:mod:`dllm_lit.exact.conformance`), and the dtype-sensitivity note (:func:`confidence_ties`)."""
from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

import torch
import yaml

from dllm_lit.exact.conformance import Conformance, goodness_of_fit, law_dof, samples_for_tv, two_sample
from dllm_lit.markov import HMMWorld, MarkovChain

__all__ = ["build_sampler", "named_chain", "CHAINS", "law_options", "law_help", "resolve_law_options",
           "confidence_ties", "run"]

#: the chains offered by name (V = 3), and the worlds beyond first order
CHAINS = ("tiny", "generic", "order2", "hmm")
WORLDS = ("order2", "hmm")
#: laws whose ``steps`` option defaults to the sampler's steps
LAWS_WITH_STEPS = ("mdlm", "mdlm_paper", "block_mdlm", "llada", "maskgit", "klass", "dream", "dream_origin",
                   "pc_sampler", "sedd")
TINY = [[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]]
#: laws that never rank probabilities of different positions (ties and near-ties cannot move them)
UNRANKED_LAWS = ("chain", "mdlm", "mdlm_paper", "block_mdlm", "dream_origin", "sedd")
#: probabilities closer than this (relative) are near-ties: float32 (eps 1.2e-7) and a softmax's few ulps blur them
NEAR_TIE = 1e-6


def named_chain(spec: str) -> MarkovChain | HMMWorld:
    """``tiny``, ``generic``, ``order2`` / ``hmm`` (tie-free worlds beyond first order) or a kernel given as a YAML
    list of rows."""
    if spec in WORLDS:
        return named_world(spec)
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


def named_world(spec: str) -> HMMWorld:
    """V = 3 worlds with random (tie-free) rows: ``order2`` (an order-2 context chain), ``hmm`` (4 hidden states)."""
    g = torch.Generator().manual_seed(7)
    if spec == "order2":
        rows = torch.rand(9, 3, generator=g, dtype=torch.float64) + 0.1
        return HMMWorld(context_rows=rows / rows.sum(1, keepdim=True), metadata={"source": "conform_order2"})
    A = torch.rand(4, 4, generator=g, dtype=torch.float64) + 0.1
    B = torch.rand(4, 3, generator=g, dtype=torch.float64) + 0.1
    return HMMWorld(emission=B / B.sum(1, keepdim=True), transition=A / A.sum(1, keepdim=True),
                    metadata={"source": "conform_hmm"})


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
    from dllm_lit.cli.config_classes import instantiate

    return instantiate(_model_block(spec, field), "sampler", field)  # a sampler class only: nothing else runs


def confidence_ties(chain: MarkovChain | HMMWorld, T: int, prompt_len: int = 0,
                    max_states: int = 2**16) -> tuple[int, int, int] | None:
    """(states, tied, near): over every evidence state of length T with the first ``prompt_len`` tokens revealed
    and at least two masked positions, the states of positive probability, those in which two masked positions
    have probabilities equal to :data:`~dllm_lit.exact.TIE_DECIMALS` decimals (an exact tie: a tie rule decides),
    and those in which two are closer than :data:`NEAR_TIE` (relative) without being tied (rounding decides in
    float32).  Exact float64 posteriors (forward-backward, in a chain or a world beyond first order); None when
    (V + 1)^T exceeds ``max_states``."""
    from dllm_lit.denoisers.forward_backward import forward_backward_posterior
    from dllm_lit.exact import TIE_DECIMALS

    V, M = chain.vocab_size, chain.mask_id
    if (V + 1) ** T > max_states:
        return None
    grid = torch.cartesian_prod(*[torch.arange(V if t < prompt_len else V + 1) for t in range(T)]).view(-1, T)
    masked = grid == M
    grid = grid[masked.sum(1) >= 2]
    if grid.numel() == 0:
        return 0, 0, 0
    if isinstance(chain, MarkovChain):
        ev = torch.where((grid == M)[..., None], 1.0, torch.nn.functional.one_hot(grid.clamp(max=V - 1), V).double())
        mass = chain.stationary[None] * ev[:, 0]
        for t in range(1, T):  # p(z) > 0: the evidence is possible
            mass = (mass @ chain.kernel) * ev[:, t]
        possible = mass.sum(1) > 0
        post = forward_backward_posterior(chain, grid)  # [S, T, V]
    else:  # a world beyond first order: its exact posterior of the possible states (dllm_lit.markov.world_api)
        from dllm_lit.markov.world_api import exact_world

        world = exact_world(chain)
        possible = torch.isfinite(world.log_evidence(grid))
        post = torch.zeros(grid.shape[0], T, V, dtype=torch.float64)
        if bool(possible.any()):
            post[possible] = world.posterior(grid[possible])
    masked = (grid == M)[..., None].expand_as(post)
    vals = torch.where(masked & (post > 0), post, torch.nan).flatten(1)  # [S, T V]
    pos = torch.arange(T).repeat_interleave(V)
    a, b = vals[:, :, None], vals[:, None, :]
    other = pos[:, None] != pos[None, :]
    scale = 10.0 ** TIE_DECIMALS
    tie = ((a * scale).round() == (b * scale).round()) & other
    near = ((a - b).abs() <= NEAR_TIE * torch.maximum(a, b)) & other & ~tie
    return (int(possible.sum()), int((tie.flatten(1).any(1) & possible).sum()),
            int((near.flatten(1).any(1) & possible).sum()))


def _draw(sampler, chain: MarkovChain, n: int, T: int, steps: int, seed: int, chunk: int,
          timeout: float | None = None) -> torch.Tensor:
    from dllm_lit.util.user_code import user_code

    # the sampler may be the user's code: a SystemExit in it, or a draw past --timeout, is one line (exit 2)
    with user_code(f"the sampler {getattr(sampler, 'name', type(sampler).__name__)}", timeout, "--timeout"):
        sampler.connect(chain)
        sampler.check_run(T, steps)
        return torch.cat([sampler.generate(torch.arange(i, min(i + chunk, n)), T, steps, seed)
                          for i in range(0, n, chunk)])


def _samples(ns: argparse.Namespace, law: torch.Tensor | None, chain: MarkovChain) -> int:
    """``--samples``, or the smallest N whose test detects ``--target-tv`` (two samples: N each, the degrees of
    freedom estimated from the chain's own law)."""
    if ns.samples is not None:
        return ns.samples
    from dllm_lit.exact import chain_law

    ref = law if law is not None else chain_law(chain, ns.seq_len)
    return samples_for_tv(ns.target_tv, lambda n: law_dof(ref, n), ns.alpha, pairs=law is None)


def _dtype_note(ns: argparse.Namespace, chain: MarkovChain, sampler, options: dict[str, Any]) -> list[str]:
    """The dtype-sensitivity line (:func:`confidence_ties`), or nothing for a law that ranks no probabilities."""
    if ns.law in UNRANKED_LAWS or options.get("remasking") == "random":
        return []
    length = getattr(sampler, "prompt_length", 0)  # LLaDA's family: a method; other samplers: absent
    prompt = int(options.get("prompt_len", (length() if callable(length) else length) or 0))
    got = confidence_ties(chain, ns.seq_len, prompt)
    if got is None or got[1] + got[2] == 0:
        return []
    states, tied, near = got
    return [f"dtype-sensitive: in {tied} of the {states} evidence states with >= 2 masked positions two positions' "
            f"probabilities are equal, in {near} closer than {NEAR_TIE:g} (relative): code that ranks float32 "
            f"confidences decides these by rounding, not by its tie rule (the oracle model's logits are float64 by "
            f"default; a softmax can still move an exact tie by 1 ulp, docs/oracle_model.md)"]


def run(ns: argparse.Namespace) -> Conformance:
    from dllm_lit.exact import LAWS

    chain = named_chain(ns.chain)
    sampler = build_sampler(ns.sampler)
    steps = sampler.steps_grid[0] if ns.steps is None else ns.steps
    options: dict[str, Any] = {}
    law = None
    if ns.law is not None:
        options = resolve_law_options(ns.law, ns.law_options, steps)
        try:
            law = LAWS[ns.law](chain, ns.seq_len, **options)
        except TypeError as exc:
            raise ValueError(f"--law-options do not fit the {ns.law} law: {exc}") from None
    n = _samples(ns, law, chain)
    x = _draw(sampler, chain, n, ns.seq_len, steps, ns.seed, ns.chunk, ns.timeout)
    if law is not None:
        res = goodness_of_fit(x, law, ns.alpha, reference=f"exact {ns.law} law")
    else:
        other = build_sampler(ns.against, "--against")
        y = _draw(other, chain, n, ns.seq_len, steps, ns.seed + 1, ns.chunk, ns.timeout)
        res = two_sample(x, y, chain.vocab_size, ns.alpha, reference=getattr(other, "name", "reference sampler"))
    res.notes = _dtype_note(ns, chain, sampler, options)
    return res
