"""Coverage of the SMC sandwich for LLaDA low-confidence (``sandwich_method: smc`` over
:class:`~dllm_lit.samplers.llada_path_law.LLaDAPathLaw`) on a V = 3 chain with the exact truth of the dynamic
program of ``dllm_lit/exact/`` (slow): the sandwich's one-sided lower confidence bound is at or below the truth and
its upper one at or above it in >= 95% of the seeds, and so are the certified bracket's ends, with the metric's
proposal (the mixture of the step-optimal law and the ranking scan, resampling; llada_path_law).  Were every
proposed path of probability 0 a sequence's lower estimate would be -inf (a valid, empty lower bound); the lower
interval is then refused (no claim, counted as not wrong) and the share of refusals is printed."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from dllm_lit.denoisers import OracleDenoiser
from dllm_lit.exact import llada_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers import LLaDA
from test_llada_path_law import KERNEL3
from test_sequence_kl_coverage import _intervals

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from seq_kl_audit import dp_truth  # noqa: E402

pytestmark = pytest.mark.slow
SEEDS = 200

CASES = {"v3_t5_s3_lowest": (5, 3, "lowest"), "v3_t6_s3_highest": (6, 3, "highest")}  # name: (T, steps, tie rule)


@pytest.mark.parametrize("case", list(CASES))
def test_llada_smc_sandwich_bounds_cover(case: str) -> None:
    T, steps, tie_rule = CASES[case]
    chain = MarkovChain.from_kernel(torch.tensor(KERNEL3, dtype=torch.float64))
    sampler = LLaDA(OracleDenoiser(chain, dtype=torch.float64), temperature=1.0, tie_rule=tie_rule)
    sampler.connect(chain)
    sampler.sandwich_paths, sampler.sandwich_method = 8, "smc"
    truth = dp_truth(chain, llada_law(chain, T, steps, temperature=1.0, tie_rule=tie_rule), T)
    ok, refused = torch.zeros(4), 0
    for seed in range(SEEDS):
        values, iv = _intervals(chain, sampler, 64, T, steps, seed)
        lo, hi = iv["seq_kl_iw_lower"], iv["seq_kl_iw_upper"]
        refused += lo is None
        ok += torch.tensor([lo is None or lo[0] <= truth, hi is not None and hi[1] >= truth,
                            values["seq_kl_bracket_lo"] is None or values["seq_kl_bracket_lo"] <= truth,
                            values["seq_kl_bracket_hi"] is not None and values["seq_kl_bracket_hi"] >= truth]).float()
    lo_ok, hi_ok, br_lo, br_hi = (float(v) / SEEDS for v in ok)
    print(f"{case}: truth {truth:.5f}; smc lower <= truth {lo_ok:.3f} (refused {refused / SEEDS:.3f}), upper >= "
          f"truth {hi_ok:.3f}, bracket {br_lo:.3f} / {br_hi:.3f}")
    assert min(lo_ok, hi_ok, br_lo, br_hi) >= 0.95
