"""Shared fixtures and exact-law helpers for the test-suite."""
from __future__ import annotations

import itertools
import os

# One intra-op thread for the whole session (and the processes tests start), unless OMP_NUM_THREADS says otherwise:
# the tests' tensors are tiny, and on a busy 2-core machine the thread pool's spinning cost 4x the CPU time
# (tests/test_dream.py: 36 -> 8.6 CPU s).  Results never depend on it; the tests that check that set threads
# themselves (test_cli_errors, test_oracle_cache).
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

from dllm_lit.denoisers import Denoiser, OracleDenoiser
from dllm_lit.markov import MarkovChain


def counted_calls(monkeypatch: pytest.MonkeyPatch, owner, name: str) -> list[int]:
    """Wrap ``owner.name`` so that each call appends 1 to the returned list and then runs the real function."""
    calls: list[int] = []
    real = getattr(owner, name)

    def wrapped(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapped)
    return calls


def chi_square_pvalue(observed: torch.Tensor, expected_probs: torch.Tensor, min_expected: float = 5.0) -> float:
    """Pearson chi-square goodness-of-fit p-value; outcomes with expected count < min_expected are pooled.

    The survival function of chi2(k) is Q(k/2, x/2), torch.special.gammaincc.
    """
    n = observed.sum().double()
    exp = expected_probs.double() * n
    obs = observed.double()
    if (obs[exp == 0] > 0).any():
        return 0.0  # an outcome of probability zero was observed
    small = exp < min_expected
    o = torch.cat([obs[~small], obs[small].sum()[None]]) if small.any() else obs[~small]
    e = torch.cat([exp[~small], exp[small].sum()[None]]) if small.any() else exp[~small]
    keep = e > 0
    o, e = o[keep], e[keep]
    stat = ((o - e) ** 2 / e).sum()
    df = max(int(o.numel()) - 1, 1)
    return float(torch.special.gammaincc(torch.tensor(df / 2.0, dtype=torch.float64), stat / 2.0))


def sequence_counts(samples: torch.Tensor, V: int) -> torch.Tensor:
    """Histogram of sequences over the V^T outcomes (lexicographic index)."""
    T = samples.shape[1]
    code = (samples * (V ** torch.arange(T - 1, -1, -1))).sum(1)
    return torch.bincount(code, minlength=V**T)


def all_sequences(V: int, T: int) -> torch.Tensor:
    return torch.tensor(list(itertools.product(range(V), repeat=T)), dtype=torch.long)


#: V = 3 kernel with one impossible transition (1 -> 1): parallel decoding can produce it, which
#: gives the sampler law tests power
TINY_KERNEL = [[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]]


@pytest.fixture(scope="module")
def single_thread():
    """Tiny tensors gain nothing from intra-op threads, and on a busy 2-core box they thrash.

    Use with ``pytestmark = pytest.mark.usefixtures("single_thread")``.
    """
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def tiny_chain() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))


@pytest.fixture(scope="module")
def chain() -> MarkovChain:
    """The tiny chain, shared by the sampler law tests of a module."""
    return MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))


@pytest.fixture(scope="module")
def den(chain: MarkovChain) -> OracleDenoiser:
    """Exact oracle of the tiny chain."""
    return OracleDenoiser(chain)


class GenericDenoiser(Denoiser):
    """The oracle seen only through the generic Denoiser interface (no neighbour fast path): it is
    queried with ``probs_at`` on the actual state, the reference for the ordered-decoding fast path."""

    def __init__(self, oracle: OracleDenoiser) -> None:
        super().__init__()
        self.oracle, self.vocab_size = oracle, oracle.vocab_size

    def forward(self, z):
        return self.oracle(z)

    def probs_at(self, z, b, p):
        return self.oracle.probs_at(z, b, p)


class CountingDenoiser(GenericDenoiser):
    """The oracle seen only through the generic ``probs_at`` interface, counting per sequence the
    calls a sequence takes part in (its denoiser evaluations as a batch of one)."""

    def __init__(self, oracle: OracleDenoiser) -> None:
        super().__init__(oracle)
        self.calls: list[torch.Tensor] = []

    def probs_at(self, z, b, p):
        self.calls.append(torch.unique(b))
        return self.oracle.probs_at(z, b, p)

    def per_sequence(self, B: int) -> torch.Tensor:
        n = torch.zeros(B, dtype=torch.float64)
        for b in self.calls:
            n[b] += 1
        return n


# ---- CPU time per test: `python -m pytest -q --cpu-durations 30` lists the 30 costliest tests by CPU seconds
# (this process's user + system time plus that of the child processes a test waited for), and the total.
# Wall-clock `--durations` means little on a shared machine; this is the figure README states for the suite.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--cpu-durations", type=int, default=None, metavar="N",
                     help="list the N tests that cost the most CPU seconds (0: all), and the suite's total")


def _cpu_seconds() -> float:
    import resource

    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


_CPU_COST: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("--cpu-durations") is None:
        yield
        return
    start = _cpu_seconds()
    yield
    _CPU_COST[item.nodeid] = _cpu_seconds() - start


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    n = config.getoption("--cpu-durations")
    if n is None or not _CPU_COST:
        return
    ranked = sorted(_CPU_COST.items(), key=lambda kv: -kv[1])
    terminalreporter.section("CPU seconds per test (own + waited-for children)")
    for nodeid, sec in ranked[: n or None]:
        terminalreporter.write_line(f"{sec:8.2f}  {nodeid}")
    terminalreporter.write_line(f"{sum(_CPU_COST.values()):8.1f}  in {len(_CPU_COST)} tests; "
                                f"{_cpu_seconds():.1f} CPU s for the whole process (collection and imports included)")
