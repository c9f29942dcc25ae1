"""Learned denoisers: tiny masked LMs built here, saved, and loaded through the paths a user takes."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from dllm_lit.cli import main
from dllm_lit.denoisers import (CheckpointDenoiser, DenoiserLoadError, DenoiserMismatchError, HFDenoiser,
                                OracleDenoiser, chain_fingerprint)
from dllm_lit.markov import synthetic_chain
from dllm_lit.sources import english_char_chain
from dllm_lit.samplers import MDLM, LLaDA, ReMDM

REPO = Path(__file__).resolve().parents[1]


def _bert(path: Path, vocab: int = 28, seed: int = 0, fingerprint: str | None = None) -> str:
    from transformers import BertConfig, BertForMaskedLM

    torch.manual_seed(seed)
    cfg = BertConfig(vocab_size=vocab, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                     max_position_embeddings=64, pad_token_id=None)
    if fingerprint is not None:
        cfg.dllm_lit_chain_fingerprint = fingerprint
    BertForMaskedLM(cfg).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> str:
    return _bert(tmp_path_factory.mktemp("ckpt") / "tiny-mlm")


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run of ``cli.py fit`` at a tiny size (a Lightning .ckpt and an HF export)."""
    out = tmp_path_factory.mktemp("fit")
    main(["fit", "--config", str(REPO / "configs/train_denoiser.yaml"), "--trainer.max_steps", "4",
          "--trainer.val_check_interval", "2", "--trainer.max_time", "null", "--data.seq_len", "16",
          "--data.batch_size", "4", "--data.val_sequences", "8", "--model.hidden_size", "16",
          "--model.num_layers", "1", "--model.intermediate_size", "32", "--trainer.enable_progress_bar", "false",
          "--trainer.enable_model_summary", "false", "--trainer.default_root_dir", str(out)])
    return out


def test_subs_parameterisation(checkpoint: str) -> None:
    den = HFDenoiser(checkpoint, vocab_size=27)
    z = torch.tensor([[3, 27, 27, 5, 27], [27, 27, 1, 27, 26]])
    lp = den(z)
    assert lp.shape == (2, 5, 27)
    probs = lp.exp()
    assert torch.allclose(probs.sum(-1), torch.ones(2, 5), atol=1e-5)
    assert probs[0, 0, 3] == 1 and probs[1, 4, 26] == 1  # carry-over at unmasked positions
    b, p = torch.tensor([1, 0]), torch.tensor([3, 2])
    assert torch.allclose(den.probs_at(z, b, p), probs[b, p], atol=1e-6)


def test_state_cache_one_forward_per_changed_row(checkpoint: str) -> None:
    den = HFDenoiser(checkpoint, vocab_size=27)
    z = torch.full((3, 6), 27)
    fresh = HFDenoiser(checkpoint, vocab_size=27)
    den.probs_at(z, torch.tensor([0, 2]), torch.tensor([1, 1]))
    assert (den.forward_calls, den.rows_evaluated) == (1, 2)
    den.probs_at(z, torch.tensor([0, 2, 2]), torch.tensor([3, 4, 0]))  # same state: no forward
    assert den.forward_calls == 1
    z[2, 3] = 4
    got = den.probs_at(z, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 0]))  # row 1 new, row 2 changed
    assert (den.forward_calls, den.rows_evaluated) == (2, 4)
    assert torch.allclose(got, fresh.probs_at(z, torch.tensor([0, 1, 2]), torch.tensor([0, 0, 0])), atol=1e-6)


def test_samplers_do_at_most_one_forward_per_step(checkpoint: str) -> None:
    chain = english_char_chain()
    for sampler in (MDLM(HFDenoiser(checkpoint), steps=16), LLaDA(HFDenoiser(checkpoint), steps=16, block_length=8),
                    ReMDM(HFDenoiser(checkpoint), steps=16)):
        sampler.connect(chain)
        x = sampler.sample(4, 8, seed=1)
        assert x.shape == (4, 8) and x.max() < 27
        assert sampler.denoiser.forward_calls <= 16 + 1  # one per step plus the final fill


def test_learned_denoiser_moves_with_the_sampler(checkpoint: str) -> None:
    sampler = MDLM(HFDenoiser(checkpoint))
    names = {n for n, _ in sampler.named_parameters()}
    assert names and all(n.startswith("denoiser.model.") for n in names)  # a submodule: .to(device) moves it
    sampler.to(torch.float64)
    assert next(sampler.denoiser.model.parameters()).dtype == torch.float64


def test_sampler_runs_with_learned_denoiser_and_differs_from_oracle(checkpoint: str) -> None:
    chain = english_char_chain()
    learned = MDLM(HFDenoiser(checkpoint, vocab_size=27))
    learned.connect(chain)
    x = learned.sample(6, 20, steps=4, seed=1)
    assert x.shape == (6, 20) and x.min() >= 0 and x.max() < 27
    oracle = MDLM(OracleDenoiser(chain)).sample(6, 20, steps=4, seed=1)
    assert not torch.equal(x, oracle)  # same randomness, different denoiser


def test_errors(checkpoint: str, tmp_path) -> None:
    with pytest.raises(DenoiserMismatchError, match="predicts 28 tokens but the chain has 40"):
        HFDenoiser(checkpoint, vocab_size=40)
    with pytest.raises(DenoiserLoadError, match="cannot load the denoiser checkpoint .*no such directory"):
        HFDenoiser(str(tmp_path / "missing"), vocab_size=27)
    s = MDLM(HFDenoiser(checkpoint, vocab_size=27))
    with pytest.raises(ValueError, match="vocabulary"):
        s.connect(synthetic_chain(30, 3, eps=0.1))
    small = _bert(tmp_path / "v27", vocab=27)  # predicts 27 tokens but has no id for MASK = 27
    with pytest.raises(DenoiserMismatchError, match="reads 27 input ids but its mask id is 27"):
        MDLM(HFDenoiser(small)).connect(english_char_chain())


def test_not_a_masked_lm(tmp_path) -> None:
    from tiny_models import build_tiny_gpt2

    with pytest.raises(DenoiserLoadError, match="not a masked language model"):
        HFDenoiser(str(build_tiny_gpt2(tmp_path / "gpt2")))


def test_fingerprint_mismatch(tmp_path) -> None:
    chain = english_char_chain()
    other = _bert(tmp_path / "other", fingerprint="0" * 64)
    with pytest.raises(DenoiserMismatchError, match="trained on another chain"):
        MDLM(HFDenoiser(other)).connect(chain)
    with pytest.warns(UserWarning, match="trained on another chain"):
        MDLM(HFDenoiser(other, allow_other_chain=True)).connect(chain)
    same = _bert(tmp_path / "same", fingerprint=chain_fingerprint(chain))
    MDLM(HFDenoiser(same)).connect(chain)


def test_fit_writes_checkpoint_and_export(trained: Path) -> None:
    chain = english_char_chain()
    ckpt = CheckpointDenoiser(str(trained / "checkpoints" / "last.ckpt"))
    hf = HFDenoiser(str(trained / "hf_denoiser"))
    for den in (ckpt, hf):
        assert den.trained_on == chain_fingerprint(chain)
        den.bind(chain)
    z = torch.full((2, 16), 27)
    z[0, 3] = 5
    assert torch.allclose(ckpt(z), hf(z), atol=1e-5)  # the two exports hold the same model
    x = MDLM(ckpt, steps=8).connect(chain).sample(2, 16, seed=0)
    assert x.shape == (2, 16)
    with pytest.raises(DenoiserMismatchError, match="predicts 28 tokens but the chain has 30"):
        MDLM(CheckpointDenoiser(str(trained / "checkpoints" / "last.ckpt"))).connect(synthetic_chain(30, 3, eps=0.1))


def test_checkpoint_errors(tmp_path, trained: Path) -> None:
    with pytest.raises(DenoiserLoadError, match="no such file"):
        CheckpointDenoiser(str(tmp_path / "missing.ckpt"))
    bad = tmp_path / "bad.ckpt"
    torch.save({"state_dict": {}}, bad)
    with pytest.raises(DenoiserLoadError, match="not a checkpoint of dllm_lit.training.DenoiserTraining"):
        CheckpointDenoiser(str(bad))
    other = synthetic_chain(27, 3, eps=0.1, seed=5)
    with pytest.raises(DenoiserMismatchError, match="trained on another chain"):
        MDLM(CheckpointDenoiser(str(trained / "checkpoints" / "last.ckpt"))).connect(other)


def _predict(args: list[str], tmp_path: Path) -> None:
    main(["predict", *args, "--data.num_sequences", "4", "--data.seq_len", "16", "--model.steps", "4",
          "--trainer.enable_progress_bar", "false", "--trainer.default_root_dir", str(tmp_path)])


def test_cli_readme_yaml_and_flag_form(checkpoint: str, trained: Path, tmp_path) -> None:
    cfg = tmp_path / "learned.yaml"
    cfg.write_text("model: {class_path: dllm_lit.samplers.MDLM, init_args: {denoiser: {class_path: "
                   f"dllm_lit.denoisers.HFDenoiser, init_args: {{model_name_or_path: {checkpoint}}}}}}}}}\n")
    _predict(["--config", str(cfg)], tmp_path / "yaml")
    assert (tmp_path / "yaml" / "metrics.json").exists()
    _predict(["--config", str(REPO / "configs/mdlm.yaml"), "--model.denoiser", "dllm_lit.denoisers.HFDenoiser",
              "--model.denoiser.init_args.model_name_or_path", checkpoint], tmp_path / "flags")
    assert (tmp_path / "flags" / "metrics.json").exists()
    _predict(["--config", str(REPO / "configs/llada.yaml"), "--model.denoiser", "dllm_lit.denoisers.CheckpointDenoiser",
              "--model.denoiser.init_args.path", str(trained / "checkpoints" / "last.ckpt"),
              "--model.block_length", "16"], tmp_path / "ckpt")
    assert (tmp_path / "ckpt" / "metrics.json").exists()


@pytest.mark.parametrize("args, message", [
    (["--model.denoiser", "dllm_lit.denoisers.HFDenoiser", "--model.denoiser.init_args.model_name_or_path", "/no/such"],
     "cannot load the denoiser checkpoint '/no/such': no such directory"),
    (["--model.denoiser", "dllm_lit.denoisers.CheckpointDenoiser", "--model.denoiser.init_args.path", "/no/x.ckpt"],
     "cannot load the denoiser checkpoint '/no/x.ckpt': no such file"),
])
def test_cli_bad_path_one_line(args: list[str], message: str, tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["predict", "--config", str(REPO / "configs/mdlm.yaml"), *args, "--trainer.default_root_dir", str(tmp_path)])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == f"error: {message}"


def test_cli_fit_refuses_a_sampler(tmp_path, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["fit", "--config", str(REPO / "configs/mdlm.yaml"), "--trainer.default_root_dir", str(tmp_path)])
    assert exc.value.code == 2
    assert "fit trains a denoiser" in capsys.readouterr().err


def test_cli_offers_fit_and_predict_only(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    listed = capsys.readouterr().out  # dllm_lit's verbs (tests/test_discoverability.py checks each)
    assert "fit" in listed and "predict" in listed and "validate" not in listed and " test " not in listed


@pytest.mark.slow
def test_cli_bad_path_subprocess(tmp_path) -> None:
    """The user's exact command line, in a fresh process."""
    proc = subprocess.run([sys.executable, "cli.py", "predict", "--config", "configs/mdlm.yaml", "--model.denoiser",
                           "dllm_lit.denoisers.HFDenoiser", "--model.denoiser.init_args.model_name_or_path", "/no/such",
                           "--trainer.default_root_dir", str(tmp_path)], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == ("error: cannot load the denoiser checkpoint '/no/such': "
                                                    "no such directory")


def test_decompose_writes_table_and_figure(trained: Path, tmp_path) -> None:
    from dllm_lit.experiments.decompose import main as decompose_main

    out = tmp_path / "dec"
    table = decompose_main(["--config", str(REPO / "configs/decompose.yaml"),
                            "--sampler.init_args.denoiser.init_args.path", str(trained / "checkpoints" / "last.ckpt"),
                            "--sampler.init_args.steps", "[2, 4]", "--data.num_sequences", "6", "--data.seq_len", "16",
                            "--denoiser_sequences", "12", "--bootstrap_resamples", "20", "--output_dir", str(out)])
    for name in ("decomposition.json", "decomposition.csv", "decomposition.md", "decomposition.png"):
        assert (out / name).exists()
    assert len(table["denoiser_error"]["bins"]) == 10 and table["denoiser_error"]["overall"]["kl"] > 0
    for row in table["steps"]:
        assert row["diff_kl"] == pytest.approx(row["total_kl"] - row["sampler_kl"])
        assert row["diff_kl_ci"][0] <= row["diff_kl_ci"][1]


def test_decompose_with_caches_splits_sampler_model_and_cache(trained: Path, tmp_path) -> None:
    from dllm_lit.experiments.decompose import main as decompose_main

    out = tmp_path / "cache"
    table = decompose_main(["--config", str(REPO / "configs/cache_study.yaml"),
                            "--sampler.init_args.denoiser.init_args.path", str(trained / "checkpoints" / "last.ckpt"),
                            "--sampler.init_args.steps", "[4]", "--sampler.init_args.block_length", "8",
                            "--data.num_sequences", "8", "--data.seq_len", "16", "--denoiser_sequences", "8",
                            "--bootstrap_resamples", "20", "--law_permutations", "19", "--output_dir", str(out),
                            "--caches", "[{cache: dual}, {cache: delayed, refresh_interval: 2}]"])
    assert (out / "cache_front.png").exists() and "Cache study" in (out / "decomposition.md").read_text()
    (row,) = table["cache_study"]
    assert set(row["runs"]) == {"oracle", "learned", "dual", "delayed/r2"}
    assert row["runs"]["learned"]["call_error"]["kl"] > 0 and row["runs"]["oracle"]["cpu_per_seq"] > 0
    for parts in row["parts"].values():
        for metric in ("kl", "nll_gap"):
            assert parts[f"{metric}_adds_up"]
            total = parts[f"{metric}_sampler"] + parts[f"{metric}_model"] + parts[f"{metric}_cache"]
            assert parts[f"{metric}_total"] == pytest.approx(total, abs=1e-12)
        assert 0 < parts["law_test"]["p_value"] <= 1 and parts["speedup_cpu"] > 0


@pytest.mark.parametrize("config, caches, message", [
    ("decompose.yaml", "[{cache: dual}]", "cache='dual' needs a sampler that announces its blocks"),
    ("cache_study.yaml", "[{cache: dual, refresh_interval: 0}]", "refresh_interval must be"),
    ("cache_study.yaml", "[{cache: warp}]", "cache must be one of"),
])
def test_decompose_refuses_bad_caches_in_one_line(trained: Path, tmp_path, capsys, config: str, caches: str,
                                                  message: str) -> None:
    from dllm_lit.experiments.decompose import main as decompose_main

    with pytest.raises(SystemExit):
        decompose_main(["--config", str(REPO / "configs" / config), "--sampler.init_args.denoiser.init_args.path",
                        str(trained / "checkpoints" / "last.ckpt"), "--data.seq_len", "16", "--data.num_sequences",
                        "4", "--output_dir", str(tmp_path / "no"), "--caches", caches])
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and err[-1].startswith("error: ") and not (tmp_path / "no").exists()


def test_readme_learned_denoiser_snippet_runs_as_written(checkpoint: str, tmp_path) -> None:
    """The YAML block of README's learned-denoiser section, exactly as printed (only the path is this test's model)."""
    import re

    text = (REPO / "README.md").read_text()
    blocks = [b for b in re.findall(r"```yaml\n(.*?)```", text, re.S) if "HFDenoiser" in b]
    assert len(blocks) == 1
    snippet = textwrap.dedent(blocks[0])
    assert "outputs/denoiser/hf_denoiser" in snippet
    cfg = tmp_path / "readme.yaml"
    cfg.write_text(snippet.replace("outputs/denoiser/hf_denoiser", checkpoint))
    _predict(["--config", str(cfg)], tmp_path / "readme")
    assert (tmp_path / "readme" / "metrics.json").exists()


@pytest.mark.slow
def test_fit_with_two_ddp_processes(tmp_path) -> None:
    """fit runs unchanged with DDP (two CPU processes): checkpoints and the HF export are written."""
    cmd = [sys.executable, "cli.py", "fit", "--config", "configs/train_denoiser.yaml", "--trainer.max_steps", "4",
           "--trainer.val_check_interval", "2", "--data.seq_len", "16", "--data.batch_size", "4",
           "--data.val_sequences", "8", "--trainer.devices", "2", "--trainer.strategy", "ddp",
           "--trainer.accelerator", "cpu", "--trainer.default_root_dir", str(tmp_path),
           "--trainer.enable_progress_bar", "false"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (tmp_path / "checkpoints" / "last.ckpt").exists() and (tmp_path / "hf_denoiser" / "config.json").exists()


def test_learned_row_label_names_the_checkpoint(trained: Path) -> None:
    """A learned denoiser's row is never labelled like the oracle's: its label (printed at the end of a run) names
    the checkpoint file (issue 40)."""
    from dllm_lit.util.console import summary
    from dllm_lit.engine.plan import row_label

    sampler = MDLM(CheckpointDenoiser(str(trained / "checkpoints" / "last.ckpt")), steps=8)
    assert row_label(sampler) == "mdlm[denoiser=last.ckpt]" and row_label(MDLM(steps=8)) == "mdlm"
    assert summary([{"sampler": "mdlm", "label": row_label(sampler), "steps": 8}]).splitlines()[1].startswith(
        "mdlm[denoiser=last.ckpt]")
