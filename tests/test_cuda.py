"""CUDA runs agree with CPU runs: uniforms, oracle posteriors, every shipped sampler config, a learned
denoiser and the CLI.  Skipped where torch sees no CUDA device (CI); run them on a GPU machine with
``pytest tests/test_cuda.py``.

Tolerances: the counter-based uniforms are integer arithmetic and must be bit-identical; oracle rows are
elementwise products divided by a fixed-order sum (dllm_lit.util.reductions), so they must be bit-identical too;
samples of every config must then agree sequence for sequence (what remains device-dependent is float64 rounding
of about 1e-16 in cumulative sums, which changes a draw about once in 10^13; see docs/exactness.md).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

import dllm_lit.samplers as samplers
from dllm_lit import rng
from dllm_lit.denoisers import HFDenoiser, OracleDenoiser
from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import english_char_chain

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

REPO = Path(__file__).resolve().parents[1]
CUDA = torch.device("cuda")
#: sampler configs: every shipped one (a model block whose class is a dllm_lit sampler)
CONFIGS = sorted(p.stem for p in (REPO / "configs").glob("*.yaml")
                 if str((yaml.safe_load(p.read_text()) or {}).get("model", {}).get("class_path", ""))
                 .startswith("dllm_lit.samplers."))
#: variants the configs do not cover
VARIANTS = {
    "llada_greedy_blocks": ("LLaDA", {"temperature": 0.0, "block_length": 16}),  # 4 blocks of T = 64
    "llada_prompt_pi": ("LLaDA", {"temperature": 0.0, "prompt_mode": "pi"}),
    "llada_random": ("LLaDA", {"remasking": "random", "temperature": 1.0}),
    "sedd_beta3": ("SEDD", {"beta": 3.0}),
}


def _from_config(name: str) -> samplers.Sampler:
    model = yaml.safe_load((REPO / "configs" / f"{name}.yaml").read_text())["model"]
    cls = getattr(samplers, model["class_path"].rsplit(".", 1)[1])
    return cls(**(model.get("init_args") or {}))


def _chains() -> dict[str, MarkovChain]:
    g = torch.Generator().manual_seed(5)
    zero = torch.rand(8, 8, generator=g)
    zero[zero < 0.55] = 0.0  # eps = 0: unreachable transitions
    zero[:, 1] += 0.2
    zero[1] += 0.2
    return {"english": english_char_chain(), "sparse_teleport": synthetic_chain(300, 12, eps=1e-3, seed=2),
            "eps0": MarkovChain.from_kernel(zero / zero.sum(1, keepdim=True))}


@pytest.fixture(scope="module")
def chains() -> dict[str, MarkovChain]:
    return _chains()


def test_uniforms_bit_identical_on_cpu_and_cuda() -> None:
    idx = torch.arange(0, 300)
    for stream in (rng.Stream.TOKEN, rng.Stream.ORDER, rng.Stream.REMASK):
        keys_cpu = rng.sequence_keys(7, idx, stream)
        keys_gpu = rng.sequence_keys(7, idx.to(CUDA), stream)
        assert torch.equal(keys_cpu, keys_gpu.cpu())
        pos = torch.arange(64)
        u_cpu = rng.uniform(keys_cpu[:, None], 3, pos[None], slot=1)
        u_gpu = rng.uniform(keys_gpu[:, None], 3, pos.to(CUDA)[None], slot=1)
        assert u_gpu.device.type == "cuda" and torch.equal(u_cpu, u_gpu.cpu())


@pytest.mark.parametrize("name", ["english", "sparse_teleport", "eps0"])
def test_oracle_rows_and_bound_agree_on_cuda(chains, name) -> None:
    chain = chains[name]
    cpu = OracleDenoiser(chain)
    gpu = OracleDenoiser(chain).to(CUDA)
    V, D = chain.vocab_size, cpu.depth
    g = torch.Generator().manual_seed(1)
    n = 2000
    args = (torch.randint(V, (n,), generator=g), torch.randint(0, D + 4, (n,), generator=g),
            torch.randint(V, (n,), generator=g), torch.randint(0, D + 4, (n,), generator=g))
    rows_cpu = cpu.probs_given_neighbours(*args)
    rows_gpu = gpu.probs_given_neighbours(*(a.to(CUDA) for a in args))
    assert rows_gpu.device.type == "cuda"
    assert torch.equal(rows_gpu.cpu(), rows_cpu)
    bound = gpu.max_prob_bound(*(a.to(CUDA) for a in args))
    assert bound is not None and bound.device.type == "cuda"
    assert (bound >= rows_gpu.amax(1).double()).all()


def _compare(s_cpu: samplers.Sampler, s_gpu: samplers.Sampler, chain: MarkovChain, steps: int,
             n: int = 32, T: int = 64) -> int:
    s_cpu.connect(chain)
    s_gpu.to(CUDA).connect(chain)
    x_cpu = s_cpu.sample(n, T, steps, seed=11)
    x_gpu = s_gpu.sample(n, T, steps, seed=11)
    assert x_gpu.device.type == "cuda" and x_gpu.shape == x_cpu.shape
    return int((x_gpu.cpu() != x_cpu).any(1).sum())


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("chain_name", ["english", "sparse_teleport"])
def test_every_config_samples_the_same_on_cuda(chains, config, chain_name) -> None:
    for steps in (4, 64):
        differ = _compare(_from_config(config), _from_config(config), chains[chain_name], steps)
        assert differ == 0, f"{config} on {chain_name}, {steps} steps: {differ} of 32 sequences differ"


def test_paper_configs_sample_the_same_on_cuda_on_an_owt_sized_chain(tmp_path) -> None:
    chain = synthetic_chain(4096, 206, eps=1e-4, seed=0)  # the shape of the paper's OpenWebText chain
    oracle = OracleDenoiser(chain, cache_dir=tmp_path)  # built once (the slow part), then loaded from the cache
    on_gpu = OracleDenoiser(chain, cache_dir=tmp_path).to(CUDA)
    for config in ("llada", "remdm_conf", "remdm_loop", "sedd", "mdlm_paper", "mdlm"):
        s_cpu, s_gpu = _from_config(config), _from_config(config)
        s_cpu.denoiser, s_gpu.denoiser = oracle, on_gpu
        differ = _compare(s_cpu, s_gpu, chain, 32, n=8, T=256)
        assert differ == 0, f"{config} on the OWT-sized chain: {differ} of 8 sequences differ"


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variants_sample_the_same_on_cuda(chains, variant) -> None:
    cls, kwargs = VARIANTS[variant]
    make = lambda: getattr(samplers, cls)(steps=32, **kwargs)  # noqa: E731
    for name in ("english", "eps0"):
        differ = _compare(make(), make(), chains[name], 32)
        assert differ == 0, f"{variant} on {name}: {differ} of 32 sequences differ"


def test_learned_denoiser_runs_on_cuda(tmp_path) -> None:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=28, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, pad_token_id=None)
    BertForMaskedLM(cfg).save_pretrained(tmp_path / "mlm")
    chain = english_char_chain()
    for cls in (samplers.MDLM, samplers.LLaDA, samplers.ReMDM):
        s = cls(HFDenoiser(str(tmp_path / "mlm"), vocab_size=27), steps=8).to(CUDA)
        s.connect(chain)
        assert next(s.denoiser.model.parameters()).device.type == "cuda"
        x = s.sample(4, 16, seed=1)
        assert x.device.type == "cuda" and x.shape == (4, 16) and int(x.max()) < 27


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.device == b.device and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def test_cli_predict_on_gpu_matches_cpu(tmp_path) -> None:
    from dllm_lit.cli import main

    results = {}
    for acc in ("cpu", "gpu"):
        out = tmp_path / acc
        main(["predict", "--config", str(REPO / "configs" / "llada.yaml"), "--data.num_sequences", "16",
              "--data.seq_len", "32", "--model.steps", "[4, 32]", "--trainer.accelerator", acc,
              "--trainer.enable_progress_bar", "false", "--results.bootstrap_resamples", "0",
              "--results.figures", "false", "--results.output_dir", str(out),
              "--trainer.default_root_dir", str(out)])
        results[acc] = (json.loads(next(out.rglob("metrics.json")).read_text())["rows"],
                        torch.load(next(out.rglob("samples.pt")), weights_only=False))
    assert results["cpu"][0] == results["gpu"][0]  # every metric of every row
    assert _same(results["cpu"][1], results["gpu"][1])  # every sample
