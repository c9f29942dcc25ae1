"""DDP correctness of the metrics: 2 CPU processes (gloo) vs. one process on all the data.

Each metric is described by a :class:`MetricCase` (a picklable factory + its update batches + how
the batches are split between the ranks). One spawned job runs *all* cases (process start-up and
the import of torch/transformers are paid once), then every case is checked by its own
parametrised test: the value computed on each rank after torchmetrics' synchronisation must equal
the single-process value on all batches.

To add a metric (e.g. ``dllm_lit.metrics.transition.TransitionMetrics``), write module-level
``make_metric(ctx)`` / ``make_batches(ctx)`` functions and append a ``MetricCase`` to ``CASES``.
``compute()`` may return a tensor, a float or a (nested) dict/tuple of them.
"""

from __future__ import annotations

import os
import socket
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torchmetrics import Metric

from dllm_lit.metrics.bootstrap import SequenceBootstrapper
from dllm_lit.metrics.duplication_rate import DuplicationRate
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.mauve import MauveScore
from dllm_lit.metrics.ngram_diversity import NgramDiversity
from dllm_lit.metrics.transition import TransitionMetrics
from tiny_models import build_tiny_gpt2, make_texts

WORLD_SIZE = 2
Batch = tuple[Any, ...]  # positional arguments of one ``metric.update`` call (a trailing dict: keyword arguments)


@dataclass(frozen=True)
class MetricCase:
    """One metric under test.

    Attributes:
        name: test id.
        make_metric: ``ctx -> Metric`` (module-level function; ``ctx`` holds e.g. ``model_dir``).
        make_batches: ``ctx -> list of update-argument tuples`` (deterministic).
        rank0_batches: how many leading batches rank 0 gets (the rest go to rank 1); contiguous
            blocks keep the gathered item order equal to the single-process order.
        extra: optional ``metric -> value`` evaluated after ``compute`` on every rank (e.g. a
            bootstrap CI, which needs the gathered per-item states).
        rtol, atol: tolerance of the comparison (exact for integer-count metrics).
    """

    name: str
    make_metric: Callable[[dict[str, Any]], Metric]
    make_batches: Callable[[dict[str, Any]], list[Batch]]
    rank0_batches: int
    extra: Callable[[Metric], Any] | None = None
    rtol: float = 0.0
    atol: float = 0.0
    marks: tuple[Any, ...] = field(default_factory=tuple)


# ----------------------------------------------------------------------------- data
def _token_batches(ctx: dict[str, Any]) -> list[Batch]:
    g = torch.Generator().manual_seed(0)
    b0 = torch.randint(0, 3, (13, 6), generator=g)  # 3**6 sequences: few duplicates within the batch
    b1 = torch.randint(0, 3, (7, 6), generator=g)
    b1[:4] = b0[:4]  # duplicates that straddle the two ranks
    b2 = torch.cat([b0[5:7], torch.randint(0, 3, (3, 6), generator=g)])
    return [(b0,), (b1,), (b2,)]


def _text_batches(ctx: dict[str, Any]) -> list[Batch]:
    texts = make_texts(20, seed=1)
    return [(texts[:8],), (texts[8:11],), (texts[11:],)]


def _ngram2(ctx: dict[str, Any]) -> Metric:
    return NgramDiversity(n=2, per_sequence=True)


def _ngram3(ctx: dict[str, Any]) -> Metric:
    return NgramDiversity(n=3)


def _dup(ctx: dict[str, Any]) -> Metric:
    return DuplicationRate()


def _genppl(ctx: dict[str, Any]) -> Metric:
    return GenerativePerplexity(ctx["model_dir"], batch_size=3, max_length=48)


def _mauve(ctx: dict[str, Any]) -> Metric:
    return MauveScore(make_texts(20, seed=2), featurizer=ctx["model_dir"], max_text_length=48, num_buckets=4, batch_size=4)


def _transition_dense(ctx: dict[str, Any]) -> Metric:
    from dllm_lit.markov import MarkovChain

    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return TransitionMetrics(MarkovChain.from_kernel(P))


def _transition_sparse(ctx: dict[str, Any]) -> Metric:
    """The code-list state used for large vocabularies (forced here with dense_max_vocab=1)."""
    from dllm_lit.markov import MarkovChain

    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return TransitionMetrics(MarkovChain.from_kernel(P), dense_max_vocab=1)


def _transition_per_sequence(ctx: dict[str, Any]) -> Metric:
    """Per-sequence transition codes (gathered over ranks) for the basic-bootstrap intervals."""
    from dllm_lit.markov import MarkovChain

    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    return TransitionMetrics(MarkovChain.from_kernel(P), per_sequence=True)


def _indexed_token_batches(ctx: dict[str, Any]) -> list[Batch]:
    """The token batches with global sequence indices that do not follow the rank order."""
    batches = _token_batches(ctx)
    sizes = [b[0].shape[0] for b in batches]
    perm = torch.randperm(sum(sizes), generator=torch.Generator().manual_seed(1))
    return [(b[0], {"index": idx}) for b, idx in zip(batches, perm.split(sizes))]


def _sequence_kl(ctx: dict[str, Any]) -> Metric:
    """SequenceKL paired with itself (kl_excess = 0, the rest nontrivial), with its per-key intervals."""
    from dllm_lit.markov import MarkovChain
    from dllm_lit.metrics.sequence_kl import SequenceKL

    P = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]], dtype=torch.float64)
    metric = SequenceKL(MarkovChain.from_kernel(P))
    metric.pair_with(metric)
    return SequenceBootstrapper(metric, num_resamples=40, seed=2)


def _stats_batches(ctx: dict[str, Any]) -> list[Batch]:
    """Indexed token batches with a per-sequence log q (as a sampler reports it)."""
    out = []
    for x, kw in _indexed_token_batches(ctx):
        log_q = -(kw["index"].double() + 1.0) / 3.0
        out.append((x, {"index": kw["index"], "log_q": log_q}, kw))
    return out


def _bootstrapped_ngram2(ctx: dict[str, Any]) -> Metric:
    return SequenceBootstrapper(NgramDiversity(n=2, per_sequence=True), num_resamples=50, seed=3)


def _bootstrap(metric: Metric) -> tuple[float, float]:
    return metric.bootstrap_ci(num_resamples=200, seed=0)  # type: ignore[operator]


def _interval(metric: Metric) -> Any:
    return metric.interval()  # type: ignore[operator]


CASES: list[MetricCase] = [
    MetricCase("ngram2_per_sequence", _ngram2, _token_batches, rank0_batches=1, extra=_bootstrap),
    MetricCase("ngram2_rank1_empty", _ngram2, _token_batches, rank0_batches=3, extra=_bootstrap),
    MetricCase("ngram3", _ngram3, _token_batches, rank0_batches=2),
    MetricCase("duplication_straddling", _dup, _token_batches, rank0_batches=1),
    MetricCase("duplication_rank1_empty", _dup, _token_batches, rank0_batches=3),
    MetricCase("transition_dense", _transition_dense, _token_batches, rank0_batches=1, rtol=1e-12),
    MetricCase("transition_sparse_rank1_empty", _transition_sparse, _token_batches, rank0_batches=3, rtol=1e-12),
    MetricCase("transition_sparse", _transition_sparse, _token_batches, rank0_batches=2, rtol=1e-12),
    MetricCase("transition_per_sequence", _transition_per_sequence, _token_batches, rank0_batches=1,
               extra=_bootstrap, rtol=1e-12),
    MetricCase("transition_per_sequence_rank1_empty", _transition_per_sequence, _token_batches, rank0_batches=3,
               extra=_bootstrap, rtol=1e-12),
    MetricCase("bootstrapper_index_order", _bootstrapped_ngram2, _indexed_token_batches, rank0_batches=1,
               extra=_interval),
    MetricCase("sequence_kl", _sequence_kl, _stats_batches, rank0_batches=1, extra=_interval),
    MetricCase("sequence_kl_rank1_empty", _sequence_kl, _stats_batches, rank0_batches=3, extra=_interval),
    MetricCase("genppl", _genppl, _text_batches, rank0_batches=1, extra=_bootstrap, rtol=1e-6),
    MetricCase("mauve", _mauve, _text_batches, rank0_batches=2, atol=1e-5),
    MetricCase("mauve_rank1_empty", _mauve, _text_batches, rank0_batches=3, atol=1e-5),
]
CASES_BY_NAME = {c.name: c for c in CASES}


# ----------------------------------------------------------------------------- running
def _run_case(case: MetricCase, ctx: dict[str, Any], rank: int | None) -> dict[str, Any]:
    """Update on this rank's batches (all batches when ``rank is None``) and compute."""
    metric = case.make_metric(ctx)
    batches = case.make_batches(ctx)
    if rank is not None:
        batches = batches[: case.rank0_batches] if rank == 0 else batches[case.rank0_batches :]
    for batch in batches:
        if batch and isinstance(batch[-1], dict):
            metric.update(*batch[:-1], **batch[-1])
        else:
            metric.update(*batch)
    value = metric.compute()
    extra = case.extra(metric) if case.extra is not None else None
    return {"value": value, "extra": extra}


def _worker(rank: int, port: int, ctx: dict[str, Any], names: list[str], out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD_SIZE)
    try:
        results = {name: _run_case(CASES_BY_NAME[name], ctx, rank) for name in names}
        torch.save(results, os.path.join(out_dir, f"rank{rank}.pt"))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("ddp")
    ctx = {"model_dir": str(build_tiny_gpt2(root / "tiny-gpt2", n_positions=64))}
    names = [c.name for c in CASES]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny ops; avoid thread-pool stalls on a shared CPU (workers do the same)
    try:
        single = {name: _run_case(CASES_BY_NAME[name], ctx, rank=None) for name in names}
    finally:
        torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory(dir=root) as out_dir:
        # fork: the workers inherit the imported modules (a spawned worker re-imports torch and lightning, ~5 CPU s)
        mp.start_processes(_worker, args=(_free_port(), ctx, names, out_dir), nprocs=WORLD_SIZE, join=True,
                           start_method="fork")
        per_rank = [torch.load(os.path.join(out_dir, f"rank{r}.pt"), weights_only=False) for r in range(WORLD_SIZE)]
    return single, per_rank


def _assert_close(got: Any, expected: Any, rtol: float, atol: float, where: str) -> None:
    if isinstance(expected, Mapping):
        assert isinstance(got, Mapping) and set(got) == set(expected), where
        for key in expected:
            _assert_close(got[key], expected[key], rtol, atol, f"{where}.{key}")
    elif isinstance(expected, Sequence) and not isinstance(expected, str):
        assert isinstance(got, Sequence) and len(got) == len(expected), where
        for i, (g, e) in enumerate(zip(got, expected)):
            _assert_close(g, e, rtol, atol, f"{where}[{i}]")
    elif expected is None:
        assert got is None, where
    else:
        torch.testing.assert_close(
            torch.as_tensor(got).double(), torch.as_tensor(expected).double(), rtol=rtol, atol=atol, msg=where
        )


@pytest.mark.parametrize("case", [pytest.param(c, id=c.name, marks=c.marks) for c in CASES])
def test_ddp_equals_single_process(case: MetricCase, ddp_results: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    single, per_rank = ddp_results
    expected = single[case.name]
    for rank, results in enumerate(per_rank):
        _assert_close(results[case.name]["value"], expected["value"], case.rtol, case.atol, f"{case.name}@rank{rank}")
        _assert_close(results[case.name]["extra"], expected["extra"], case.rtol, case.atol, f"{case.name}.extra@rank{rank}")


def test_cases_are_nontrivial(ddp_results: tuple[dict[str, Any], list[dict[str, Any]]]) -> None:
    """Guard against a vacuous comparison: duplicates really straddle the ranks, and values differ
    from what each rank would compute on its own data."""
    single, _ = ddp_results
    assert float(single["duplication_straddling"]["value"]) > 0.2
    local = _run_case(CASES_BY_NAME["duplication_straddling"], {}, rank=0)["value"]
    assert float(local) < float(single["duplication_straddling"]["value"])
