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
* ``steps``: bad step counts are refused with a one-line ValueError naming ``steps`` (a sampler without steps: a
  TypeError naming it);
* bad options (collected): every option given a wrong value of its type is refused at construction with a one-line
  ValueError naming it, a choice's message lists the allowed values, and ``sample`` without a denoiser says how to
  give one; sampler-specific wrong values and impossible runs are the tables :data:`BAD_OPTIONS` and
  :data:`BAD_RUNS`.

Chunking is checked at :data:`CHUNK_STEPS` (and :data:`CHUNK_STEPS_EXTRA`), and :data:`LOG_Q_REASON` pins which
cases must record log q.  Tolerances: samples and NFE are compared exactly (integers); log q sums are compared with
``torch.equal`` across chunkings (the same float64 operations on the same rows) and bounded by 1e-12 above 0.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import re
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
#: chunking also at an uneven count (32 / 12 tokens per step is not whole; every block count here divides 12), and
#: at counts only some cases accept (steps = 1, steps > T)
CHUNK_STEPS = (*STEPS, 12)
CHUNK_STEPS_EXTRA: dict[str, tuple[int, ...]] = {"config:maskgit": (1, 40)}
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
    # options the per-sampler tests used to check chunking on by hand (block lengths scaled to divide T)
    "ar_beta": ("AR", {"beta": 2.5}),
    "bd3_plain": ("BlockMDLM", {"block_size": 8}),
    "bd3_first_hitting": ("BlockMDLM", {"block_size": 8, "nucleus_p": 0.9, "first_hitting": True}),
    "bd3_stepwise_mdlm_grid": ("BlockMDLM", {"block_size": 8, "decoding": "stepwise", "grid": "mdlm"}),
    "bd3_stepwise_first_hitting": ("BlockMDLM", {"block_size": 8, "decoding": "stepwise", "first_hitting": True}),
    "dream_entropy_alg_temp": ("Dream", {"alg": "entropy", "temperature": 1.0, "alg_temp": 0.3}),
    "eb_gamma1": ("EBSampler", {"gamma": 1.0, "temperature": 1.0}),
    "fast_dllm_blocks": ("FastDLLM", {"threshold": 0.5, "block_length": 8, "temperature": 1.0}),
    "fast_dllm_factor_blocks": ("FastDLLM", {"threshold": None, "factor": 2.0, "block_length": 8, "temperature": 1.0}),
    "fhs_blocks": ("FHS", {"block_length": 8}),
    "klass_sampled_blocks": ("KLASS", {"conf_threshold": 0.35, "history": 1, "temperature": 1.0, "block_length": 8}),
    "llada_random_blocks": ("LLaDA", {"remasking": "random", "temperature": 0.7, "block_length": 8}),
    "llada_random_pi_head": ("LLaDA", {"remasking": "random", "temperature": 0.7, "prompt_mode": "pi_head"}),
    "llada_prompt_pi_tail": ("LLaDA", {"temperature": 1.0, "prompt_mode": "pi_tail"}),
    "llada_tie_random_blocks": ("LLaDA", {"temperature": 1.0, "tie_rule": "random", "block_length": 8}),
    "pc_blocks": ("PCSampler", {"temperature": 1.0, "block_length": 8}),
    "remdm_cap": ("ReMDM", {"variant": "cap", "eta": 0.05}),
    "remdm_rescale": ("ReMDM", {"variant": "rescale", "eta": 0.05}),
    "sedd_euler_greedy": ("SEDD", {"predictor": "euler", "token_temperature": 0.0}),
    "sedd_token_temperature": ("SEDD", {"token_temperature": 0.5}),
    "sedd_uniform_euler": ("SEDDUniform", {"predictor": "euler"}),
    "wino_blocks": ("WINO", {"block_length": 8, "wide_in_threshold": 0.4}),
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
    ("generic", "variant:ar_beta"): NO_DENOISER,
    ("nfe", "variant:ar_beta"): NO_DENOISER,
    ("steps", "variant:ar_beta"): "has no steps option: its one row has steps None",
    ("nfe", "config:dream_entropy"): UPSTREAM_NFE,
    ("nfe", "config:dream_maskgit_plus"): UPSTREAM_NFE,
    ("nfe", "config:dream_origin"): UPSTREAM_NFE,
    ("nfe", "config:dream_topk_margin"): UPSTREAM_NFE,
    ("nfe", "variant:dream_entropy_tie_highest"): UPSTREAM_NFE,
    ("nfe", "config:remdm_conf"): UPSTREAM_NFE,
    ("nfe", "config:remdm_loop"): UPSTREAM_NFE,
    ("nfe", "config:sedd"): UPSTREAM_NFE,
    ("nfe", "variant:sedd_beta3"): UPSTREAM_NFE,
    **{("nfe", f"variant:{v}"): UPSTREAM_NFE for v in ("dream_entropy_alg_temp", "remdm_cap", "remdm_rescale",
                                                       "sedd_euler_greedy", "sedd_token_temperature")},
    ("chunks", "export:ExternalSampler"): EXTERNAL,
    ("generic", "export:ExternalSampler"): EXTERNAL,
    ("nfe", "export:ExternalSampler"): EXTERNAL,
}
#: what ``log_q_reason`` must say for some cases: None (the order ignores the tokens, so log q is recorded and
#: seq_kl_upper reported) or a word its one-line reason names
LOG_Q_REASON: dict[str, str | None] = {
    **dict.fromkeys(("config:mdlm", "variant:mdlm_stepwise", "config:mdlm_paper", "config:fhs", "config:bd3",
                     "variant:bd3_stepwise_first_hitting", "variant:sedd_token_temperature",
                     "variant:llada_random_pi_head", "variant:ar_beta")),
    "config:llada": "low_confidence",
    "variant:sedd_beta3": "beta",
}
#: items for which an exemption still runs a weaker check instead of skipping
WEAKER = {"nfe", "steps"}


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


#: the sequences the items draw on the first chain
IDX = list(range(3, 13))


@functools.lru_cache(maxsize=None)
def _batch(case: str, steps: int) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``case``'s draws of :data:`IDX` on the sparse teleport chain, run once and shared by the items that compare
    against them (chunks, generic, log_q): a run depends only on (case, steps, seed, indices)."""
    return _run(_sampler(case, CHAINS["sparse_teleport"]), IDX, steps)


def test_every_exported_sampler_and_config_is_a_case() -> None:
    """The collection itself: every config and export is there, and no exemption names a missing case or item."""
    names = set(CASES)
    assert {f"config:{s}" for s in _config_models()} <= names
    covered = {cls for cls, _ in CASES.values()}
    assert set(_exported()) <= covered and set(_module_samplers()) <= covered
    assert set(CHUNK_STEPS_EXTRA) <= names and set(LOG_Q_REASON) <= names
    items = {"chunks", "generic", "nfe", "log_q", "steps"}
    for item, case in EXEMPT:
        assert item in items and case in names, (item, case)


@pytest.mark.parametrize("case, steps",
                         [pytest.param(c, n, marks=[pytest.mark.slow] if n == T else [])  # one token per step: slow
                          for c in sorted(CASES) for n in CHUNK_STEPS + CHUNK_STEPS_EXTRA.get(c, ())])
def test_chunks(case: str, steps: int) -> None:
    """Batch, chunk and process invariance: results depend only on (seed, sequence index).  Work items are runs of
    consecutive indices (AR requires it), served to processes in any order: pieces are run out of order."""
    _skip_if_exempt("chunks", case)
    s = _sampler(case, CHAINS["sparse_teleport"])
    x, stats = _batch(case, steps)
    pieces = [_run(s, part, steps) for part in (IDX[6:], IDX[:1], IDX[1:6])]  # out of order, uneven, one alone
    assert torch.equal(pieces[1][0][0], x[0]), f"{case}: a sequence alone differs from the same sequence in a batch"
    x2 = torch.cat([pieces[1][0], pieces[2][0], pieces[0][0]])
    assert torch.equal(x, x2), f"{case}: samples depend on the chunking"
    for name in stats:
        got = torch.cat([pieces[1][1][name], pieces[2][1][name], pieces[0][1][name]])
        assert torch.equal(got, stats[name]) or (got.isnan() & stats[name].isnan()).all(), (case, name)


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
        x, stats = _batch(case, steps) if chain_name == "sparse_teleport" else _run(fast, IDX, steps)
        xg, stats_g = _run(generic, IDX, steps)
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
    for i in range(2):
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
    idx = torch.tensor(IDX)
    for steps in STEPS:
        x, stats = _batch(case, steps)  # generate_with_stats
        assert set(stats) >= {"nfe", "log_q"} and stats["log_q"].shape == (len(IDX),)
        reason = s.log_q_reason(steps)
        if case in LOG_Q_REASON:
            word = LOG_Q_REASON[case]
            assert reason is None if word is None else word in (reason or ""), (case, steps, reason)
        if reason is None:
            assert stats["log_q"].isfinite().all() and (stats["log_q"] <= 1e-12).all(), (case, stats["log_q"])
        else:
            assert isinstance(reason, str) and reason.strip() and "\n" not in reason, case
            assert stats["log_q"].isnan().all(), f"{case}: log q reported although log_q_reason says {reason!r}"
        xn, nfe = s.generate_with_nfe(idx, T, steps, SEED)
        assert torch.equal(x, xn) and torch.equal(x, s.generate(idx, T, steps, SEED)), case
        assert torch.equal(nfe, stats["nfe"]) or (nfe.isnan().all() and stats["nfe"].isnan().all()), case


BAD_STEPS: list = [0, -3, 2.5, "8", True, [], [4, 4], [4, 0], [8, -1]]


@pytest.mark.parametrize("case", sorted(CASES))
def test_steps(case: str) -> None:
    """Bad step counts: a one-line ValueError naming ``steps``, at construction and at ``sample``.  A case exempt
    from it has no steps option at all: giving one is a TypeError naming it."""
    cls, options = CASES[case]
    if _exempt("steps", case) is not None:
        assert "steps" not in inspect.signature(cls.__init__).parameters, case
        with pytest.raises(TypeError, match="steps"):
            cls(**{**options, "steps": 0})
        return
    for bad in BAD_STEPS:
        with pytest.raises(ValueError, match="steps") as err:
            cls(**{**options, "steps": bad})
        assert "\n" not in str(err.value), (case, bad, str(err.value))
    s = _sampler(case, CHAINS["sparse_teleport"])
    for bad in (0, -1, 1.5):
        with pytest.raises(ValueError, match="steps") as err:
            s.sample(2, T, bad, seed=SEED)
        assert "\n" not in str(err.value), (case, bad, str(err.value))



# ---------------------------------------------------------------------------------------------- bad options
#: one wrong value per option type; every option of every case is given its type's (steps: test_steps)
BAD_BY_TYPE: dict[type, object] = {bool: "yes", int: 2.5, float: float("nan"), str: "no_such_value",
                                   type(None): float("nan"), dict: ["not", "a", "mapping"]}
#: (class, option) -> why a wrong value of its type is not refused with a one-line ValueError naming it
OPTION_EXEMPT: dict[tuple[str, str], str] = {
    ("ExternalSampler", "steps_kwarg"): "names a keyword of the user's own function: any non-empty name is allowed",
}
#: (class, option) whose allowed values are free text or patterns that the bad-value message cannot list
FREE_TEXT = {("ExternalSampler", "generate")}


def _shown(value: str, message: str) -> bool:
    """The allowed value ``value`` is listed in ``message``, literally or as its pattern (``max-capped-<eta>``)."""
    return value in message or re.sub(r"[0-9.]+$", "<", value) in message


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_options(case: str) -> None:
    """Every option given a wrong value of its type (a bool "yes", an int 2.5, a float or unset option NaN, a choice
    "no_such_value", a mapping a list) is refused at construction with a one-line ValueError naming the option; a
    choice's message lists the allowed values (at least the case's own).  Without a denoiser or chain, ``sample``
    says so in one line and how to give one."""
    cls, options = CASES[case]
    for name, param in inspect.signature(cls.__init__).parameters.items():
        if name in ("self", "denoiser", "chain", "steps") or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        value = options.get(name, param.default)
        if type(value) not in BAD_BY_TYPE or (cls.__name__, name) in OPTION_EXEMPT:
            continue
        with pytest.raises(ValueError, match=name) as err:
            cls(**{**options, name: BAD_BY_TYPE[type(value)]})
        message = str(err.value)
        assert "\n" not in message, (case, name, message)
        if isinstance(value, str) and (cls.__name__, name) not in FREE_TEXT:
            assert _shown(value, message), f"{case}: {name}'s message does not list the allowed values: {message!r}"
    with pytest.raises(ValueError, match=r"no denoiser.*connect\(chain\)") as err:
        cls(**options).sample(2, 4, 2)
    assert "\n" not in str(err.value), case


#: sampler-specific bad values (ranges, combinations) moved from the per-sampler tests: (class, options, regex the
#: one-line ValueError at construction must match)
BAD_OPTIONS: list[tuple[str, dict, str]] = [
    ("AR", {"beta": 0.0}, "beta"), ("AR", {"beta": -2.0}, "beta"),
    ("BlockMDLM", {"block_size": 0}, "block_size"), ("BlockMDLM", {"block_size": 2.5}, "block_size"),
    ("BlockMDLM", {"nucleus_p": 0.0}, "nucleus_p"), ("BlockMDLM", {"nucleus_p": 1.5}, "nucleus_p"),
    ("BlockMDLM", {"first_hitting": "yes"}, "first_hitting"), ("BlockMDLM", {"grid": "cosine"}, "grid"),
    ("BlockMDLM", {"step_budget": "all"}, "step_budget"), ("BlockMDLM", {"decoding": "fast"}, "decoding"),
    ("Dream", {"alg": "confidence"}, "alg"), ("Dream", {"alg_temp": -0.1}, "alg_temp"),
    ("Dream", {"temperature": -1}, "temperature"), ("Dream", {"top_p": 0.0}, "top_p"),
    ("Dream", {"top_p": 1.2}, "top_p"), ("Dream", {"top_k": 0}, "top_k"), ("Dream", {"eps": 0.0}, "eps"),
    ("Dream", {"eps": 1.0}, "eps"), ("Dream", {"tie_rule": "left"}, "tie_rule"),
    ("Duo", {"noise": "linear"}, "noise"), ("Duo", {"noise_removal": "argmax"}, "noise_removal"),
    ("Duo", {"t_min": 0.0}, "t_min"), ("Duo", {"noise_eps": 1.0}, "noise_eps"),
    ("DUS", {"base": 1}, "base"), ("DUS", {"skip_exp": 0}, "skip_exp"), ("DUS", {"temperature": -1.0}, "temperature"),
    ("EBSampler", {"gamma": -0.1}, "gamma"), ("EBSampler", {"gamma": float("inf")}, "gamma"),
    ("EBSampler", {"temperature": -1}, "temperature"), ("EBSampler", {"tie_rule": "x"}, "tie_rule"),
    ("ExternalSampler", {"generate": "no_such_module:fn"}, "generate: cannot import 'no_such_module:fn'"),
    ("ExternalSampler", {}, "exactly one of generate"),
    ("ExternalSampler", {"generate": "examples.llada_generate:generate", "prompt_length": -1}, "prompt_length must be"),
    ("FastDLLM", {"threshold": 0.0}, "threshold"), ("FastDLLM", {"threshold": 1.5}, "threshold"),
    ("FastDLLM", {"threshold": None, "factor": 0.0}, "factor"),
    ("FastDLLM", {"threshold": None, "factor": -1}, "factor"),
    ("FastDLLM", {"threshold": None}, "threshold"), ("FastDLLM", {"factor": 1.0}, "factor"),
    ("FastDLLM", {"block_length": 0}, "block_length"), ("FastDLLM", {"temperature": -1}, "temperature"),
    ("FastDLLM", {"tie_rule": "first"}, "tie_rule"),
    ("FHS", {"block_length": 0}, "block_length"),
    ("GIDD", {"p_uniform": 1.0}, "p_uniform"), ("GIDD", {"gamma": 3.0}, "gamma"), ("GIDD", {"t_eps": 0.0}, "t_eps"),
    ("GIDD", {"min_p": -0.1}, "min_p"),
    ("KLASS", {"conf_threshold": 0.0}, "conf_threshold"), ("KLASS", {"conf_threshold": 1.5}, "conf_threshold"),
    ("KLASS", {"kl_threshold": -0.1}, "kl_threshold"), ("KLASS", {"history": 0}, "history"),
    ("KLASS", {"block_length": 0}, "block_length"), ("KLASS", {"temperature": -1.0}, "temperature"),
    ("LLaDA", {"remasking": "confidence"}, "remasking"), ("LLaDA", {"temperature": -0.1}, "temperature"),
    ("LLaDA", {"prompt_mode": "head"}, "prompt_mode"), ("LLaDA", {"block_length": 0}, "block_length"),
    ("LLaDA", {"prompt": [-1]}, "prompt"), ("LLaDA", {"prompt": [1], "prompt_mode": "pi"}, "prompt"),
    ("LLaDA", {"tie_rule": "left"}, "tie_rule"),
    ("LLaDA21", {"editing_threshold": 0.0}, "editing_threshold"), ("LLaDA21", {"threshold": 1.2}, "threshold"),
    ("LLaDA21", {"max_post_steps": -1}, "max_post_steps"),
    ("MaskGIT", {"choice_temperature": -1.0}, "choice_temperature"), ("MaskGIT", {"schedule": "uniform"}, "schedule"),
    ("MaskGIT", {"temperature": -0.5}, "temperature"),
    ("MDLM", {"decoding": "fast"}, "decoding"),
    ("P2", {"eta": -1.0}, "eta"), ("P2", {"gumbel_scale": -0.5}, "gumbel_scale"),
    ("P2", {"temperature": -1.0}, "temperature"),
    ("PCSampler", {"lambd": -0.1}, "lambd"), ("PCSampler", {"alpha": 0.0}, "alpha"),
    ("PCSampler", {"block_length": 0}, "block_length"), ("PCSampler", {"temperature": -1}, "temperature"),
    ("PCSampler", {"tie_rule": "x"}, "tie_rule"),
    ("Psi", {"high_mode": "constant-2"}, "high_mode"), ("Psi", {"low_mode": "remdm"}, "low_mode"),
    ("Psi", {"high_frac": 0.7, "middle_frac": 0.6}, "middle_frac"), ("Psi", {"noise_removal": "x"}, "noise_removal"),
    ("ReMDM", {"top_p": 0.0}, "top_p"), ("ReMDM", {"top_p": 1.2}, "top_p"), ("ReMDM", {"top_p": -0.5}, "top_p"),
    ("ReMDM", {"variant": "loop", "t_on": 0.3, "t_off": 0.3}, "t_off"),
    ("ReMDM", {"variant": "loop", "t_on": 0.2, "t_off": 0.5}, "t_off"),
    ("ReMDM", {"variant": "loop", "alpha_on": 0.0}, "alpha_on"),
    ("ReMDM", {"variant": "loop", "alpha_on": 1.0}, "alpha_on"),
    ("ReMDM", {"variant": "cap", "eta": -0.1}, "eta"), ("ReMDM", {"variant": "rescale", "eta": 1.5}, "eta"),
    ("ReMDM", {"variant": "loop", "eta": -1e-3}, "eta"), ("ReMDM", {"variant": "conf", "eta_cap": -0.2}, "eta_cap"),
    ("ReMDM", {"variant": "conf", "eta": 0.1}, "eta"), ("ReMDM", {"variant": "cap", "eta_cap": 0.1}, "eta_cap"),
    ("ReMDM", {"variant": "bogus"}, "variant"), ("ReMDM", {"schedule": "cosine"}, "schedule"),
    ("ReMDM", {"t_min": 0.0}, "t_min"),
    ("SEDD", {"beta": 0.0}, "beta"), ("SEDD", {"beta": -1.0}, "beta"),
    ("SEDD", {"token_temperature": -0.5}, "token_temperature"), ("SEDD", {"predictor": "tweedie"}, "predictor"),
    ("SEDD", {"t_min": 1.0}, "t_min"), ("SEDD", {"noise_eps": 0.0}, "noise_eps"),
    ("SEDDUniform", {"predictor": "tweedie"}, "predictor"), ("SEDDUniform", {"noise": "cosine"}, "noise"),
    ("SEDDUniform", {"sigma_min": 0.0}, "sigma_min"), ("SEDDUniform", {"sigma_max": 1e-5}, "sigma_max"),
    ("SEDDUniform", {"denoise": "yes"}, "denoise"), ("SEDDUniform", {"t_min": 1.0}, "t_min"),
    ("SlowFast", {"cycle_threshold": 1.5}, "cycle_threshold"), ("SlowFast", {"high_threshold": -0.1}, "high_threshold"),
    ("SlowFast", {"k_exploration_steps": 0}, "k_exploration_steps"),
    ("WINO", {"wide_in_threshold": 1.5}, "wide_in_threshold"),
    ("WINO", {"narrow_out_threshold": -0.1}, "narrow_out_threshold"),
    ("WINO", {"max_steps_per_block": 0}, "max_steps_per_block"),
]
#: runs a sampler cannot make (block lengths, step counts per block), refused at ``sample`` before drawing: (class,
#: options, seq_len, steps, regex the one-line ValueError must match)
BAD_RUNS: list[tuple[str, dict, int, int, str]] = [
    ("BlockMDLM", {"block_size": 4}, 10, 4, "block_size"),
    ("BlockMDLM", {"block_size": 4, "step_budget": "total"}, 16, 6, "steps"),
    ("BlockMDLM", {"block_size": 4, "first_hitting": True}, 16, 3, "steps"),
    ("FastDLLM", {"block_length": 3}, 8, 8, "block_length"),
    ("FHS", {"block_length": 4}, 10, 3, "block_length"),
    ("KLASS", {"block_length": 7}, 30, 6, "block_length"), ("KLASS", {"block_length": 10}, 30, 4, "steps"),
    ("LLaDA", {"block_length": 3}, 8, 2, "block_length"), ("LLaDA", {"block_length": 4}, 12, 4, "steps"),
    ("LLaDA21", {"block_length": 2}, 8, 3, "steps"),
    ("PCSampler", {"block_length": 3}, 8, 2, "block_length"), ("PCSampler", {"block_length": 4}, 12, 4, "steps"),
    ("SlowFast", {"block_length": 3}, 8, 1, "block_length"),
    ("WINO", {"block_length": 3}, 8, 1, "block_length"),
]


def _sampler_class(name: str) -> type[Sampler]:
    return getattr(samplers, name)


@pytest.mark.parametrize("name, options, field", BAD_OPTIONS,
                         ids=[f"{n}-{f.split()[0].rstrip(':')}-{i}" for i, (n, _, f) in enumerate(BAD_OPTIONS)])
def test_bad_option_values(name: str, options: dict, field: str) -> None:
    """Sampler-specific wrong values: a one-line ValueError naming the option, at construction."""
    with pytest.raises(ValueError, match=field) as err:
        _sampler_class(name)(**options)
    assert "\n" not in str(err.value), (name, options, str(err.value))


@pytest.mark.parametrize("name, options, seq_len, steps, field", BAD_RUNS,
                         ids=[f"{r[0]}-{r[4]}-{i}" for i, r in enumerate(BAD_RUNS)])
def test_bad_runs(name: str, options: dict, seq_len: int, steps: int, field: str) -> None:
    """A run the options cannot make: a one-line ValueError naming the option or ``steps``, before any draw."""
    s = _sampler_class(name)(**options).connect(CHAINS["sparse_teleport"])
    with pytest.raises(ValueError, match=field) as err:
        s.sample(2, seq_len, steps, seed=0)
    assert "\n" not in str(err.value), (name, options, str(err.value))


def test_bad_option_tables_name_known_classes() -> None:
    """Every class the tables name is exported and covered by a case, every exempted option exists."""
    covered = {cls.__name__ for cls, _ in CASES.values()}
    assert {n for n, _, _ in BAD_OPTIONS} | {r[0] for r in BAD_RUNS} <= covered
    for name, option in set(OPTION_EXEMPT) | FREE_TEXT:
        assert option in inspect.signature(_sampler_class(name).__init__).parameters, (name, option)
