"""Sizes refused from their estimates before any work, in one line naming the field (issue 34, item 5): config files
and steps lists before the parser, the theory's schedules and curves, synthetic worlds, the oracle's vocabulary."""
from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from dllm_lit.cli import main
from dllm_lit.engine.budget import MAX_CONFIG_BYTES, MAX_STEP_VALUES
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA, MDLMPaper
from dllm_lit.samplers.reference_scoring import chain_information
from dllm_lit.sources import HMMSynthetic, Synthetic, english_char_chain
from dllm_lit.theory import optimal_schedule, template_schedule

REPO = Path(__file__).resolve().parents[1]


def _refused(fn, match: str) -> str:
    started = time.process_time()
    with pytest.raises(ValueError, match=match) as exc:
        fn()
    assert time.process_time() - started < 1.0
    assert "\n" not in str(exc.value)
    return str(exc.value)


def _cli(tmp_path: Path, capsys, *args: str) -> list[str]:
    started = time.process_time()
    with pytest.raises(SystemExit) as exc:
        main(["predict", *args, "--trainer.default_root_dir", str(tmp_path / "run")])
    assert exc.value.code == 2 and time.process_time() - started < 5.0
    assert not (tmp_path / "run").exists()
    return capsys.readouterr().err.strip().splitlines()


def test_block_style_steps_lists_and_oversized_configs_are_refused_before_parsing(tmp_path, capsys) -> None:
    head = "model:\n  class_path: dllm_lit.samplers.MDLM\n  init_args:\n    steps:\n"
    small = tmp_path / "grid.yaml"  # 1500 values in block style: 18 KB, read and counted
    small.write_text(head + "".join(f"    - {i}\n" for i in range(1, 1501)))
    assert _cli(tmp_path, capsys, "--config", str(small)) == [
        f"error: model.init_args.steps in {small} must list at most {MAX_STEP_VALUES} step counts (each is a row of "
        "N sequences), got 1500"]
    big = tmp_path / "big.yaml"  # the audit's million values in block style: 12.9 MB, refused by its size
    with open(big, "w") as fh:
        fh.write(head)
        fh.writelines(f"    - {i}\n" for i in range(1, 10**6 + 1))
    assert _cli(tmp_path, capsys, "--config", str(big)) == [
        f"error: --config {big} must be at most {MAX_CONFIG_BYTES // 1024} KiB (a config holds settings; data belong "
        "in the files it names), got 12.9 MB"]
    inline = "{class_path: dllm_lit.samplers.MDLM, init_args: {steps: [" + ", ".join(map(str, range(1, 1102))) + "]}}"
    err = _cli(tmp_path, capsys, "--config", str(REPO / "configs/mdlm.yaml"), "--model", inline)
    assert err == [f"error: init_args.steps in the value of --model must list at most {MAX_STEP_VALUES} step counts "
                   "(each is a row of N sequences), got 1101"]


def test_a_huge_synthetic_vocabulary_is_refused_by_name_on_the_command_line(tmp_path, capsys) -> None:
    err = _cli(tmp_path, capsys, "--config", str(REPO / "configs/mdlm.yaml"),
               "--data.source", "{class_path: dllm_lit.sources.Synthetic, init_args: {vocab_size: 1000000}}")
    assert len(err) == 1 and err[0].startswith("error: vocab_size=1000000 is too large: drawing the synthetic chain")


def test_theory_sizes_are_refused_from_their_estimates() -> None:
    info = chain_information(english_char_chain())
    _refused(lambda: info.curve(10**7), r"^length=10000000 is too large: the information curve")
    _refused(lambda: template_schedule("tc", 10**9, 10**6),
             r"^length=1000000000 with rounds=1000000 is too large: the schedule template .* of CPU before anything")
    _refused(lambda: optimal_schedule(np.zeros(30001), 100), r"^length=30000 .*is too large: the optimal schedule")
    # the samplers check at the run's sizes, naming their own fields, before computing a schedule
    chain = english_char_chain()
    _refused(lambda: MDLMPaper(steps=100, schedule="optimal").connect(chain).check_run(30000, 100), r"^seq_len=30000")
    _refused(lambda: MDLMPaper(steps=10**6, schedule="tc").connect(chain).check_run(10**9, 10**6),
             r"^seq_len=1000000000 with steps=1000000 is too large")
    _refused(lambda: LLaDA(steps=64, remasking="random", schedule="optimal", block_length=20000)
             .connect(chain).check_run(40000, 64), r"^block_length=20000 is too large|^block_length=20000 with steps")


def test_worlds_and_oracles_too_large_for_memory_are_refused_by_name() -> None:
    _refused(lambda: HMMSynthetic(num_states=10**6), r"^num_states=1000000 is too large: the synthetic HMM")
    _refused(lambda: Synthetic(vocab_size=10**6), r"^vocab_size=1000000 is too large")
    V = 10**6  # a chain that is cheap to store (one successor per token) but whose oracle is V x V
    chain = MarkovChain(torch.arange(V).roll(1)[:, None], torch.ones(V, 1, dtype=torch.float64))
    from dllm_lit.denoisers import OracleDenoiser

    _refused(lambda: OracleDenoiser(chain), r"^vocab_size=1000000 is too large: the exact oracle")


def _column_dp(Z: np.ndarray, rounds: int) -> tuple[list[int], float]:
    """optimal_schedule's dynamic program written directly: F_r(j) = min_i F_{r-1}(i) + cost(i, j), cost(i, j) =
    C_j - C_i - (j - i) Z_{i+1}, minimum over i along the columns of the (L + 1)^2 table (the first one on ties)."""
    L = len(Z) - 1
    m = min(rounds, L)
    C = np.cumsum(Z)
    C[0] = 0.0
    a = np.arange(L + 1)
    cost = C[None, :] - C[:, None] - (a[None, :] - a[:, None]) * np.append(Z[1:], 0.0)[:, None]
    cost[a[:, None] >= a[None, :]] = np.inf
    F, back = np.full(L + 1, np.inf), np.zeros((m, L + 1), dtype=np.int64)
    F[0] = 0.0
    for r in range(m):
        tot = F[:, None] + cost
        back[r] = np.argmin(tot, axis=0)
        F = tot[back[r], a]
    sizes, b = [], L
    for r in range(m - 1, -1, -1):
        sizes.append(b - int(back[r, b]))
        b = int(back[r, b])
    return sizes[::-1], float(max(F[L], 0.0))


def test_the_row_layout_dynamic_program_equals_the_direct_one() -> None:
    """The DP runs its minimum along contiguous rows (5x faster at L = 4000): the same schedule and KL, ties
    included (rounded curves tie often)."""
    rng = np.random.default_rng(0)
    info = chain_information(english_char_chain())
    cases = [(info.curve(300), 7), (info.curve(300), 64)]
    for L in (5, 17, 60):
        for m in (1, 2, 3, L - 1):
            Z = np.concatenate([[0.0], np.sort(rng.random(L))])
            cases += [(Z, m), (np.round(Z, 1), m)]
    for Z, m in cases:
        assert optimal_schedule(Z, m) == _column_dp(Z, m)
