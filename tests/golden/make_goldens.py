"""Write ``tests/golden/samplers.json``: the samples (sha256 of the int64 tensor), NFE and log q of the shipped
ranked and editing samplers' configs and variants at N = 48, T = 64 (SlowFast's config: T = 128, its block),
steps 4 / 16 / 64, seed 7, on the bundled English chain and the synthetic chain the rule tests use, with the exact
oracle.  Run once on the commit whose draws are the
reference; ``tests/test_golden_samplers.py`` compares every later commit against the file (issue 35: porting a
sampler to a rule keeps its draws).

    python tests/golden/make_goldens.py            # every case
    python tests/golden/make_goldens.py wino p2    # only these cases, merged into the file
"""
from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path

import torch

N, T, STEPS, SEED = 48, 64, (4, 16, 64), 7
OUT = Path(__file__).with_name("samplers.json")

#: (case name, exported class, init args): the configs' options, then variants covering the other code paths
CASES: list[tuple[str, str, dict]] = [
    ("llada", "LLaDA", dict(remasking="low_confidence", temperature=1.0)),
    ("llada_greedy", "LLaDA", dict(temperature=0.0)),
    ("llada_b16_highest", "LLaDA", dict(temperature=0.5, block_length=16, tie_rule="highest")),
    ("llada_tie_random", "LLaDA", dict(temperature=1.0, tie_rule="random", block_length=32)),
    ("llada_prompt", "LLaDA", dict(temperature=1.0, prompt=[1, 2, 0, 3], block_length=30)),
    ("llada_prompt_pi_head", "LLaDA", dict(temperature=1.0, prompt_mode="pi_head")),
    ("llada_random", "LLaDA", dict(remasking="random", temperature=1.0)),
    ("llada_random_tc_b32", "LLaDA", dict(remasking="random", temperature=0.7, block_length=32, schedule="tc")),
    ("llada_random_prompt_pi", "LLaDA", dict(remasking="random", temperature=1.0, prompt_mode="pi")),
    ("pc_sampler", "PCSampler", dict(lambd=0.25, alpha=10.0, block_length=None, temperature=1.0, tie_rule="lowest")),
    ("pc_sampler_b16_greedy", "PCSampler", dict(lambd=0.5, alpha=2.0, block_length=16, temperature=0.0)),
    ("pc_sampler_tie_random", "PCSampler", dict(temperature=0.5, tie_rule="random")),
    ("dream_origin", "Dream", dict(alg="origin", temperature=1.0)),
    ("dream_maskgit_plus", "Dream", dict(alg="maskgit_plus", temperature=1.0)),
    ("dream_topk_margin", "Dream", dict(alg="topk_margin", temperature=1.0)),
    ("dream_entropy", "Dream", dict(alg="entropy", temperature=1.0)),
    ("dream_entropy_greedy_random", "Dream", dict(alg="entropy", temperature=0.0, tie_rule="random")),
    ("dream_margin_top_p", "Dream", dict(alg="topk_margin", temperature=0.8, top_p=0.9, top_k=5)),
    ("dream_maskgit_plus_algtemp", "Dream", dict(alg="maskgit_plus", temperature=1.0, alg_temp=0.5)),
    ("dream_entropy_highest", "Dream", dict(alg="entropy", temperature=1.0, tie_rule="highest")),
    ("fast_dllm", "FastDLLM", dict(threshold=0.9, block_length=32, temperature=1.0)),
    ("fast_dllm_factor", "FastDLLM", dict(threshold=None, factor=1.0, block_length=32, temperature=1.0)),
    ("eb_sampler", "EBSampler", dict(gamma=0.01, temperature=1.0)),
    ("klass", "KLASS", dict(conf_threshold=0.9, kl_threshold=0.01, history=2, temperature=0.0)),
    ("klass_tau1", "KLASS", dict(temperature=1.0, block_length=32)),
    ("maskgit", "MaskGIT", dict(choice_temperature=4.5, schedule="cosine", temperature=1.0)),
    ("wino", "WINO", dict(block_length=32, wide_in_threshold=0.6, narrow_out_threshold=0.9, temperature=1.0)),
    ("wino_greedy_cap", "WINO", dict(temperature=0.0, max_steps_per_block=3)),
    ("wino_b16_tight", "WINO", dict(block_length=16, wide_in_threshold=0.3, narrow_out_threshold=0.99)),
    ("llada21", "LLaDA21", dict(threshold=0.7, editing_threshold=0.5, max_post_steps=16, temperature=1.0)),
    ("llada21_noedit_b16", "LLaDA21", dict(editing_threshold=None, block_length=16, temperature=1.0)),
    ("llada21_greedy_b32", "LLaDA21", dict(temperature=0.0, block_length=32, editing_threshold=0.3, max_post_steps=2)),
    ("p2", "P2", dict(temperature=1.0, eta=1.0, gumbel_scale=1.0)),
    ("p2_greedy_eta0", "P2", dict(temperature=0.0, eta=0.0, gumbel_scale=0.0)),
    ("p2_eta_scale", "P2", dict(temperature=0.8, eta=0.5, gumbel_scale=2.0)),
    ("slowfast", "SlowFast", dict(block_length=128, k_exploration_steps=6, cycle_threshold=0.3, stability_window=2,
                                  stability_std=1.0, high_threshold=0.9, temperature=1.0)),
    ("slowfast_greedy_w3", "SlowFast", dict(temperature=0.0, block_length=32, k_exploration_steps=2,
                                            stability_window=3, high_threshold=0.5)),
    ("maskgit_linear_c0", "MaskGIT", dict(choice_temperature=0.0, schedule="linear", temperature=1.0)),
    ("maskgit_greedy", "MaskGIT", dict(choice_temperature=2.0, temperature=0.0)),
    ("maskgit_tau05_linear", "MaskGIT", dict(choice_temperature=1.0, schedule="linear", temperature=0.5)),
    ("bd3", "BlockMDLM", dict(block_size=16, nucleus_p=0.9, first_hitting=False, grid="bd3", step_budget="per_block")),
    ("bd3_fh_b4", "BlockMDLM", dict(block_size=4, first_hitting=True)),
    ("bd3_mdlm_total", "BlockMDLM", dict(block_size=16, grid="mdlm", step_budget="total", nucleus_p=0.95)),
    ("bd3_stepwise_b32", "BlockMDLM", dict(block_size=32, nucleus_p=0.9, decoding="stepwise")),
    ("bd3_stepwise_mdlm_b8", "BlockMDLM", dict(block_size=8, grid="mdlm", decoding="stepwise")),
    ("bd3_stepwise_fh_b4", "BlockMDLM", dict(block_size=4, first_hitting=True, decoding="stepwise")),
]
#: cases run at another sequence length than T (SlowFast's config: blocks of 128)
SEQ_LEN = {"slowfast": 128}


def chains() -> dict:
    from dllm_lit.markov import synthetic_chain
    from dllm_lit.sources import english_char_chain

    return {"english": english_char_chain(), "synthetic": synthetic_chain(12, 4, eps=1e-3, seed=2)}


def run(case: tuple[str, str, dict], chain, steps: int) -> dict:
    """The golden record of one case on one chain at one step count."""
    from dllm_lit import samplers

    _, cls, options = case
    sampler = getattr(samplers, cls)(**options).connect(chain)
    sampler.check_options()
    seq_len = SEQ_LEN.get(case[0], T)
    sampler.check_run(seq_len, steps)
    idx = torch.arange(N)
    sampler.denoiser.decode_start(N)
    x, stats = sampler.generate_with_stats(idx, seq_len, steps, SEED)
    return record(sampler.name, x, stats)


def record(name: str, x: torch.Tensor, stats: dict) -> dict:
    """The sha256 of the samples, the NFE (one number when every sequence took the same) and log q (None: NaN)."""
    log_q, nfe = stats["log_q"].tolist(), stats["nfe"].tolist()
    return {"name": name, "samples": hashlib.sha256(x.to(torch.int64).contiguous().numpy().tobytes()).hexdigest(),
            "nfe": nfe[0] if len(set(nfe)) == 1 else nfe, "log_q": None if any(math.isnan(v) for v in log_q) else log_q}


def main(names: list[str]) -> None:
    """Every case, or only the cases ``names`` (their records replace or join those already in the file)."""
    torch.set_num_threads(1)
    out = json.loads(OUT.read_text()) if names else {}
    for chain_name, chain in chains().items():
        for case in (c for c in CASES if not names or c[0] in names):
            for steps in STEPS:
                out[f"{case[0]}/{chain_name}/{steps}"] = run(case, chain, steps)
    OUT.write_text(json.dumps(out, sort_keys=True, separators=(",", ":")).replace("},", "},\n") + "\n")
    print(f"wrote {len(out)} records to {OUT}", file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
