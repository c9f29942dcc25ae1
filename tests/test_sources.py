"""Chain sources (dllm_lit.sources): the bundled English chain, the paper artifact loader, synthetic and
chain-file sources.  The corpus-built sources and the config fragments are in test_sources_corpus.py."""
from __future__ import annotations

import torch

from dllm_lit.markov import synthetic_chain
from dllm_lit.sources import english_char_chain, load_paper_artifact


def test_english_chain() -> None:
    ch = english_char_chain()
    assert ch.vocab_size == 27 and ch.top_k == 27 and ch.eps == 0.0
    pi = ch.stationary
    assert pi.argmax().item() == 26  # space is the most frequent character
    q, u = ord("q") - 97, ord("u") - 97
    assert ch.kernel[q].argmax().item() == u


def test_paper_artifact_format(tmp_path) -> None:
    """A file in the authors' layout (see dllm_lit.sources.paper_artifact) loads to the same chain."""
    ch = synthetic_chain(30, 5, eps=1e-4, seed=4)
    art = {
        "config": {"K": 5, "eps": 1e-4}, "vocab": [f"t{i}" for i in range(30)], "itos": [f"t{i}" for i in range(30)],
        "unigram": ch.nu.float(), "nbr_idx": ch.nbr_idx, "nbr_prob": ch.nbr_prob.float(), "nu": ch.nu.float(),
        "eps": 1e-4, "pi": ch.stationary.float(), "samples": ch.sample(4, 10, seed=1), "P": ch.kernel.float(),
        "V": 30, "T": 10, "N": 4, "teleport_eps": 1e-4,
    }
    torch.save(art, tmp_path / "gt.pt")
    loaded, extras = load_paper_artifact(tmp_path / "gt.pt")
    assert torch.allclose(loaded.kernel, ch.kernel, atol=1e-7)
    assert extras["itos"][3] == "t3" and extras["samples"].shape == (4, 10)
    dense_only = {"P_prime_dense": ch.kernel.float(), "pi_stationary": ch.stationary.float()}
    torch.save(dense_only, tmp_path / "dense.pt")
    loaded2, _ = load_paper_artifact(tmp_path / "dense.pt")
    assert torch.allclose(loaded2.kernel, ch.kernel, atol=1e-6)
