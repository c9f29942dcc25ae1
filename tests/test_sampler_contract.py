"""The contract every sampler keeps, checked on every exported sampler and every shipped config.

The cases are collected, not listed: every ``configs/*.yaml`` whose ``model:`` block is a ``dllm_lit.samplers``
class, a few option variants that take other code paths, every sampler class exported by :mod:`dllm_lit.samplers`
or defined in one of its modules that no config uses (default options, or :data:`EXPORT_ARGS`), and the docs'
example (:data:`EXTRA`).  A new sampler with a
config or an export line is covered without editing this file; one that cannot keep an item goes into
:data:`EXEMPT` with the reason.

Items (each a test below):

* ``chunks``: a sequence's sample and statistics depend only on (seed, sequence index): the batch whole, in
  uneven consecutive pieces run out of order, or one sequence at a time (what a process with any share of the
  work items runs) gives the same;
* ``generic``: the oracle's fast paths draw exactly what the generic ``Denoiser`` interface (``probs_at`` on the
  actual state, no neighbour structure) draws, on a sparse chain with teleport and on one with zero transitions;
* ``nfe``: the reported NFE of a sequence (run as a batch of one) equals the number of distinct consecutive states
  at which a counting wrapper saw the denoiser queried; samplers that report upstream's count (one per step, also
  for steps that change nothing and so query nothing here) are exempt from equality but may never query more;
* ``log_q``: ``log_q`` is finite and <= 0 for every sequence when ``log_q_reason(steps)`` is None, NaN for every
  sequence otherwise (and the reason is one line); ``generate``, ``generate_with_nfe`` and ``generate_with_stats``
  return the same samples;
* ``steps``: bad step counts are refused with a one-line ValueError naming ``steps``.

Tolerances: samples and NFE are compared exactly (integers); log q sums are compared with ``torch.equal`` across
chunkings (the same float64 operations on the same rows) and bounded by 1e-12 above 0.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
from pathlib import Path

import pytest
import torch
import yaml

import dllm_lit.samplers as samplers
from conftest import GenericDenoiser as _GenericProbs
from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.denoisers.channels import AbsorbingMask
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.samplers.base import Sampler

pytestmark = pytest.mark.usefixtures("single_thread")

REPO = Path(__file__).resolve().parents[1]
#: run length: a multiple of every shipped block length (Fast-dLLM 32, BD3 16)
T = 32
#: step counts: few (several tokens per step) and one per position
STEPS = (4, T)
SEED = 3

#: option variants whose code paths the shipped configs do not take
VARIANTS: dict[str, tuple[str, dict]] = {
    "llada_random": ("LLaDA", {"remasking": "random", "temperature": 1.0}),
    "llada_greedy_blocks": ("LLaDA", {"temperature": 0.0, "block_length": 8}),
    "llada_tie_random": ("LLaDA", {"temperature": 1.0, "tie_rule": "random"}),
    "llada_prompt_pi": ("LLaDA", {"temperature": 0.0, "prompt_mode": "pi"}),
    "mdlm_stepwise": ("MDLM", {"decoding": "stepwise"}),
    "sedd_beta3": ("SEDD", {"beta": 3.0}),
    "dream_entropy_tie_highest": ("Dream", {"alg": "entropy", "temperature": 1.0, "tie_rule": "highest"}),
    "slowfast_blocks": ("SlowFast", {"block_length": 8}),
}
#: samplers outside the export list that the contract covers too (the docs' example); every concrete sampler class
#: defined in a dllm_lit.samplers module but not exported (e.g. a rule port) is collected as well
EXTRA: dict[str, tuple[str, dict]] = {
    "example:left_to_right": ("examples.my_sampler:LeftToRight", {}),
}
#: constructor options for exported classes that cannot be built with defaults
EXPORT_ARGS: dict[str, dict] = {
    "ExternalSampler": {"generate": "examples.llada_generate:generate", "steps_kwarg": "steps",
                        "kwargs": {"block_length": T, "temperature": 1.0}},
}

NO_DENOISER = "draws from the chain itself: no denoiser to count or to swap for the generic interface"
UPSTREAM_NFE = ("reports upstream's count (one evaluation per step, also at steps that change nothing); the exact "
                "implementation queries nothing there, so the counted states can be fewer")
EXTERNAL = ("runs the user's own code on the oracle model: its draws come from torch's global RNG seeded per work "
            "item (chunk-dependent by design, docs/oracle_model.md), and it builds its own denoiser")
BATCHED_VERIFY = ("verifies its k - 1 drafted prefixes as one batch of states (an any-subset model's single pass, "
                  "counted as one call: docs/samplers/assd.md), so a batch-of-one counter cannot count it; its NFE is "
                  "tested in tests/test_assd.py")
BLOCKS_TOO_LONG = "its config's blocks of 128 (upstream's default) do not divide T = 32: variant:slowfast_blocks runs it"
#: (item, case) -> why the case cannot keep that item
EXEMPT: dict[tuple[str, str], str] = {
    ("nfe", "config:assd"): BATCHED_VERIFY,
    ("nfe", "variant:slowfast_blocks"): UPSTREAM_NFE,
    **{(item, "config:slowfast"): BLOCKS_TOO_LONG for item in ("chunks", "generic", "nfe", "log_q")},
    ("generic", "config:ar"): NO_DENOISER,
    ("nfe", "config:ar"): NO_DENOISER,
    ("steps", "config:ar"): "has no steps option: its one row has steps None",
    ("nfe", "config:dream_entropy"): UPSTREAM_NFE,
    ("nfe", "config:dream_maskgit_plus"): UPSTREAM_NFE,
    ("nfe", "config:dream_origin"): UPSTREAM_NFE,
    ("nfe", "config:dream_topk_margin"): UPSTREAM_NFE,
    ("nfe", "variant:dream_entropy_tie_highest"): UPSTREAM_NFE,
    ("nfe", "config:remdm_conf"): UPSTREAM_NFE,
    ("nfe", "config:remdm_loop"): UPSTREAM_NFE,
    ("nfe", "config:sedd"): UPSTREAM_NFE,
    ("nfe", "variant:sedd_beta3"): UPSTREAM_NFE,
    ("chunks", "export:ExternalSampler"): EXTERNAL,
    ("generic", "export:ExternalSampler"): EXTERNAL,
    ("nfe", "export:ExternalSampler"): EXTERNAL,
}
#: items for which an exemption still runs a weaker check instead of skipping
WEAKER = {"nfe"}


def _config_models() -> dict[str, dict]:
    out = {}
    for path in sorted((REPO / "configs").glob("*.yaml")):
        model = (yaml.safe_load(path.read_text()) or {}).get("model") or {}
        if str(model.get("class_path", "")).startswith("dllm_lit.samplers."):
            out[path.stem] = model
    return out


def _exported() -> list[type[Sampler]]:
    """Concrete sampler classes exported by dllm_lit.samplers."""
    out = []
    for name in samplers.__all__:
        obj = getattr(samplers, name)
        if inspect.isclass(obj) and issubclass(obj, Sampler) and not inspect.isabstract(obj):
            out.append(obj)
    return out


def _module_samplers() -> list[type[Sampler]]:
    """Concrete sampler classes defined in the modules of dllm_lit.samplers (exported or not)."""
    out = []
    for info in pkgutil.iter_modules(samplers.__path__):
        module = importlib.import_module(f"dllm_lit.samplers.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if obj.__module__ == module.__name__ and issubclass(obj, Sampler) and not inspect.isabstract(obj):
                out.append(obj)
    return out


def _build(cls: type[Sampler], options: dict, denoiser=None) -> Sampler:
    """``cls`` with ``options`` (steps replaced by :data:`STEPS` where the class takes steps) and ``denoiser``."""
    options = dict(options)
    params = inspect.signature(cls.__init__).parameters
    if "steps" in params:
        options["steps"] = list(STEPS)
    if denoiser is not None:
        options["denoiser"] = denoiser
    return cls(**options)


def _cases() -> dict[str, tuple[type[Sampler], dict]]:
    cases: dict[str, tuple[type[Sampler], dict]] = {}
    used = set()
    for stem, model in _config_models().items():
        cls = getattr(samplers, model["class_path"].rsplit(".", 1)[1])
        used.add(cls)
        options = {k: v for k, v in (model.get("init_args") or {}).items() if k != "denoiser"}
        cases[f"config:{stem}"] = (cls, options)
    for name, (cls_name, options) in VARIANTS.items():
        cases[f"variant:{name}"] = (getattr(samplers, cls_name), options)
    for cls in _exported():
        if cls not in used:
            cases[f"export:{cls.__name__}"] = (cls, EXPORT_ARGS.get(cls.__name__, {}))
            used.add(cls)
    for cls in _module_samplers():
        if cls not in used:
            cases[f"module:{cls.__name__}"] = (cls, EXPORT_ARGS.get(cls.__name__, {}))
    for name, (path, options) in EXTRA.items():
        module, _, attr = path.partition(":")
        cases[name] = (getattr(importlib.import_module(module), attr), options)
    return cases


CASES = _cases()


def _chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(5)
    zero = torch.rand(8, 8, generator=g)
    zero[zero < 0.55] = 0.0  # zero-probability transitions: unreachable neighbours, exact zeros in the rows
    zero[:, 1] += 0.2
    zero[1] += 0.2
    return {"sparse_teleport": synthetic_chain(12, 4, eps=1e-3, seed=2),
            "eps0": MarkovChain.from_kernel(zero / zero.sum(1, keepdim=True))}


CHAINS = _chains()


def _exempt(item: str, case: str) -> str | None:
    return EXEMPT.get((item, case))


def _skip_if_exempt(item: str, case: str) -> None:
    reason = _exempt(item, case)
    if reason is not None and item not in WEAKER:
        pytest.skip(f"{case} is exempt from {item}: {reason}")


def _sampler(case: str, chain: MarkovChain, denoiser=None) -> Sampler:
    cls, options = CASES[case]
    return _build(cls, options, denoiser).connect(chain)


def _run(s: Sampler, idx: list[int], steps: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    return s.generate_with_stats(torch.tensor(idx), T, steps, SEED)


def test_every_exported_sampler_and_config_is_a_case() -> None:
    """The collection itself: every config and export is there, and no exemption names a missing case or item."""
    names = set(CASES)
    assert {f"config:{s}" for s in _config_models()} <= names
    covered = {cls for cls, _ in CASES.values()}
    assert set(_exported()) <= covered and set(_module_samplers()) <= covered
    items = {"chunks", "generic", "nfe", "log_q", "steps"}
    for item, case in EXEMPT:
        assert item in items and case in names, (item, case)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_chunks(case: str, steps: int) -> None:
    """Batch, chunk and process invariance: results depend only on (seed, sequence index).  Work items are runs of
    consecutive indices (AR requires it), served to processes in any order: pieces are run out of order."""
    _skip_if_exempt("chunks", case)
    s = _sampler(case, CHAINS["sparse_teleport"])
    idx = list(range(3, 13))
    x, stats = _run(s, idx, steps)
    pieces = [_run(s, part, steps) for part in (idx[7:], idx[:3], idx[3:7])]  # out of order, uneven sizes
    x2 = torch.cat([pieces[1][0], pieces[2][0], pieces[0][0]])
    assert torch.equal(x, x2), f"{case}: samples depend on the chunking"
    for name in stats:
        got = torch.cat([pieces[1][1][name], pieces[2][1][name], pieces[0][1][name]])
        assert torch.equal(got, stats[name]) or (got.isnan() & stats[name].isnan()).all(), (case, name)
    one, _ = _run(s, [idx[4]], steps)
    assert torch.equal(one[0], x[4]), f"{case}: a sequence alone differs from the same sequence in a batch"


class GenericDenoiser(_GenericProbs):
    """The oracle through the generic interface: ``probs_at`` on the actual state, and the evidence-channel
    interface (``supports`` / ``log_posterior`` / ``posterior``: uniform noise, leave-one-out) passed through."""

    def supports(self, channel, leave_one_out: bool = False) -> bool:
        return self.oracle.supports(channel, leave_one_out)

    def log_posterior(self, z, channel=None, leave_one_out: bool = False):
        return self.oracle.log_posterior(z, channel, leave_one_out)

    def posterior(self, z, channel=None, leave_one_out: bool = False):
        return self.oracle.posterior(z, channel, leave_one_out)


@pytest.mark.parametrize("chain_name", sorted(CHAINS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_generic(case: str, chain_name: str) -> None:
    """The oracle's fast paths draw exactly what the generic Denoiser interface draws."""
    _skip_if_exempt("generic", case)
    chain = CHAINS[chain_name]
    fast = _sampler(case, chain)
    generic = _sampler(case, chain, GenericDenoiser(OracleDenoiser(chain)))
    for steps in STEPS:
        x, stats = _run(fast, list(range(8)), steps)
        xg, stats_g = _run(generic, list(range(8)), steps)
        assert torch.equal(x, xg), f"{case} on {chain_name}, {steps} steps: oracle and generic draws differ"
        assert torch.equal(stats["nfe"], stats_g["nfe"]) or stats["nfe"].isnan().all(), case


class CountingDenoiser(GenericDenoiser):
    """The oracle through the generic interface, counting the distinct consecutive states it is asked about
    (a batch of one: every call is about the one sequence)."""

    def __init__(self, oracle: OracleDenoiser) -> None:
        super().__init__(oracle)
        self.count, self.last = 0, None

    def _seen(self, z: torch.Tensor, channel=None) -> None:
        """One evaluation per distinct consecutive (state, channel): a time-conditioned channel (uniform noise at
        level alpha_t) asked about an unchanged state is a new evaluation."""
        assert z.shape[0] == 1, "the NFE contract runs one sequence at a time"
        key = None if channel is None else repr(channel)
        if self.last is None or not torch.equal(self.last[0], z) or self.last[1] != key:
            self.count, self.last = self.count + 1, (z.clone(), key)

    def forward(self, z):
        self._seen(z)
        return super().forward(z)

    def log_probs_at(self, z, b, p):
        self._seen(z)
        return self.oracle.log_probs_at(z, b, p)

    def probs_at(self, z, b, p):
        self._seen(z)
        return super().probs_at(z, b, p)

    def log_posterior(self, z, channel=None, leave_one_out: bool = False):
        self._seen(z, None if channel is None or isinstance(channel, AbsorbingMask) else channel)
        return super().log_posterior(z, channel, leave_one_out)

    def posterior(self, z, channel=None, leave_one_out: bool = False):
        self._seen(z, None if channel is None or isinstance(channel, AbsorbingMask) else channel)
        return super().posterior(z, channel, leave_one_out)


@pytest.mark.parametrize("steps", STEPS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_nfe(case: str, steps: int) -> None:
    """Reported NFE = denoiser evaluations counted by a wrapper (distinct consecutive states of the sequence)."""
    reason = _exempt("nfe", case)
    if reason in (NO_DENOISER, EXTERNAL, BATCHED_VERIFY, BLOCKS_TOO_LONG):
        pytest.skip(f"{case} is exempt from nfe: {reason}")
    chain = CHAINS["sparse_teleport"]
    for i in range(5):
        counting = CountingDenoiser(OracleDenoiser(chain))
        s = _sampler(case, chain, counting)
        _, nfe = s.generate_with_nfe(torch.tensor([i]), T, steps, SEED)
        reported = float(nfe[0])
        if reason is None:
            assert reported == counting.count, f"{case}, {steps} steps, sequence {i}: NFE {reported}, " \
                                               f"counted {counting.count} evaluations"
        else:  # upstream's count: never fewer than the evaluations made
            assert counting.count <= reported, (case, steps, i, reported, counting.count)


@pytest.mark.parametrize("case", sorted(CASES))
def test_log_q(case: str) -> None:
    """log q is recorded exactly when log_q_reason says so; every entry point gives the same samples."""
    _skip_if_exempt("log_q", case)
    s = _sampler(case, CHAINS["sparse_teleport"])
    idx = torch.arange(6)
    for steps in STEPS:
        x, stats = s.generate_with_stats(idx, T, steps, SEED)
        assert set(stats) >= {"nfe", "log_q"} and stats["log_q"].shape == (6,)
        reason = s.log_q_reason(steps)
        if reason is None:
            assert stats["log_q"].isfinite().all() and (stats["log_q"] <= 1e-12).all(), (case, stats["log_q"])
        else:
            assert isinstance(reason, str) and reason.strip() and "\n" not in reason, case
            assert stats["log_q"].isnan().all(), f"{case}: log q reported although log_q_reason says {reason!r}"
        xn, nfe = s.generate_with_nfe(idx, T, steps, SEED)
        assert torch.equal(x, xn) and torch.equal(x, s.generate(idx, T, steps, SEED)), case
        assert torch.equal(nfe, stats["nfe"]) or (nfe.isnan().all() and stats["nfe"].isnan().all()), case


BAD_STEPS: list = [0, -3, 2.5, "8", True, [], [4, 4], [4, 0]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_steps(case: str) -> None:
    """Bad step counts: a one-line ValueError naming ``steps``, at construction and at ``sample``."""
    _skip_if_exempt("steps", case)
    cls, options = CASES[case]
    for bad in BAD_STEPS:
        with pytest.raises(ValueError, match="steps") as err:
            cls(**{**options, "steps": bad})
        assert "\n" not in str(err.value), (case, bad, str(err.value))
    s = _sampler(case, CHAINS["sparse_teleport"])
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="steps") as err:
            s.sample(2, T, bad, seed=SEED)
        assert "\n" not in str(err.value), (case, bad, str(err.value))

