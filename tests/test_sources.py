"""Chain sources (dllm_lit.sources): the bundled English chain, the paper artifact loader, synthetic and
chain-file sources.  The corpus-built sources and the config fragments are in test_sources_corpus.py."""
from __future__ import annotations

import pytest
import torch

from dllm_lit.markov import MarkovChain, synthetic_chain
from dllm_lit.sources import EnglishChars, SparsityOptions, english_char_chain, load_paper_artifact


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


def test_sparsity_options_validate_each_field() -> None:
    assert SparsityOptions() == SparsityOptions(None, None, None, 0.0)
    assert SparsityOptions(top_k=3, eps=0.5).as_dict() == {"top_k": 3, "target_mass": None, "k_percentile": None, "eps": 0.5}
    for kwargs, field in [
        ({"top_k": 0}, "top_k"), ({"top_k": 2.0}, "top_k"), ({"top_k": True}, "top_k"),
        ({"target_mass": 0.0}, "target_mass"), ({"target_mass": 1.5}, "target_mass"),
        ({"k_percentile": -1}, "k_percentile"), ({"k_percentile": 100.5}, "k_percentile"),
        ({"eps": 1.0}, "eps"), ({"eps": -0.1}, "eps"), ({"eps": float("nan")}, "eps"), ({"eps": "0"}, "eps"),
        ({"top_k": 5, "target_mass": 0.99}, "either top_k"), ({"top_k": 5, "k_percentile": 90}, "either top_k"),
    ]:
        with pytest.raises(ValueError, match=field):
            SparsityOptions(**kwargs)
    with pytest.raises(AttributeError):
        SparsityOptions().eps = 0.1  # frozen: a source's options cannot drift from its cache key


def test_sparsity_options_build_the_same_chain_as_from_counts() -> None:
    counts = torch.arange(1.0, 26.0).reshape(5, 5) ** 2
    for opts in (SparsityOptions(), SparsityOptions(top_k=2, eps=0.1), SparsityOptions(target_mass=0.8, k_percentile=50, eps=1e-3)):
        a = opts.chain_from_counts(counts, metadata={"x": 1})
        b = MarkovChain.from_counts(counts, top_k=opts.top_k, target_mass=opts.target_mass, k_percentile=opts.k_percentile,
                                    eps=opts.eps, metadata={"x": 1})
        assert a.fingerprint == b.fingerprint and a.metadata == b.metadata


def test_english_chain_options_as_a_group_or_as_keywords() -> None:
    grouped = english_char_chain(SparsityOptions(top_k=10, eps=1e-3))
    assert english_char_chain(top_k=10, eps=1e-3).fingerprint == grouped.fingerprint
    assert EnglishChars(SparsityOptions(top_k=10, eps=1e-3)).build().fingerprint == grouped.fingerprint
    assert (grouped.top_k, grouped.eps) == (10, 1e-3)
    assert EnglishChars().build().fingerprint == english_char_chain().fingerprint
    with pytest.raises(TypeError, match="not both"):
        english_char_chain(SparsityOptions(), eps=0.1)


def _registered_sources() -> list[type]:
    """Every concrete chain source ``dllm_lit.sources`` exports (the registry a new source joins)."""
    import inspect

    import dllm_lit.sources as sources
    from dllm_lit.sources import ChainSource

    exported = [getattr(sources, n) for n in sources.__all__]
    return [c for c in exported if isinstance(c, type) and issubclass(c, ChainSource) and not inspect.isabstract(c)]


def _every_source(tmp_path) -> list:
    """One instance of every registered source (its declared ``example_init_args``), then options worth a case."""
    from dllm_lit.markov import save_chain
    from dllm_lit.sources import (ChainFile, HMMSynthetic, KthOrderChars, ListTask, LocalTextChars, OpenWebTextBPE, PaperArtifact,
                                  SwitchingChains, Synthetic, Text8Chars)

    save_chain(synthetic_chain(8, 3, seed=1), tmp_path / "chain.pt")
    return [cls(**cls.example_init_args) for cls in _registered_sources()] + [
        EnglishChars(SparsityOptions(top_k=5, eps=1e-3)),
        Synthetic(vocab_size=64, top_k=8, seed=3), ChainFile(str(tmp_path / "chain.pt")),
        PaperArtifact(str(tmp_path / "gt.pt"), trust_pickle=True),
        Text8Chars(dataset="text", data_files=[str(tmp_path / "a.txt")], max_chars=None),
        LocalTextChars(str(tmp_path / "a.txt"), sparsity=SparsityOptions(target_mass=0.9)),
        OpenWebTextBPE(data_files={"train": [str(tmp_path / "a.txt")]}, sparsity=SparsityOptions(top_k=17, eps=1e-4)),
        # HMM worlds
        KthOrderChars(order=3, sparsity=SparsityOptions(top_k=4, eps=1e-3)),
        SwitchingChains(num_chains=3, rho=0.5, weights=[0.5, 0.25, 0.25]), HMMSynthetic(num_states=5, stay=0.3),
        ListTask(task="replace", items=5, length=3, prompt=[0, 2, 4, 1]),
    ]


def test_every_source_describes_itself_as_a_config_entry(tmp_path) -> None:
    """describe() is JSON: the exported class path and every __init__ option; fed back through the config parser
    it rebuilds an equal source."""
    import inspect
    import json

    from jsonargparse import ArgumentParser

    import dllm_lit.sources as sources
    from dllm_lit.sources import ChainSource

    parser = ArgumentParser(exit_on_error=False)
    parser.add_subclass_arguments(ChainSource, "source")
    described = set()
    for src in _every_source(tmp_path):
        d = src.describe()
        assert json.loads(json.dumps(d)) == d
        cls = type(src)
        assert d["class_path"] == f"dllm_lit.sources.{cls.__name__}" and getattr(sources, cls.__name__) is cls
        assert set(d["init_args"]) == set(inspect.signature(cls.__init__).parameters) - {"self"}
        again = parser.instantiate_classes(parser.parse_object({"source": d})).source
        assert type(again) is cls and again.describe() == d
        described.add(cls)
    assert described == set(_registered_sources())
    assert EnglishChars().describe()["init_args"] == {"sparsity": {"top_k": None, "target_mass": None, "k_percentile": None, "eps": 0.0}}


def test_sources_take_sparsity_as_a_dict_too() -> None:
    from dllm_lit.sources import LocalTextChars, OpenWebTextBPE, Text8Chars

    assert EnglishChars({"top_k": 4}).sparsity == SparsityOptions(top_k=4)
    assert english_char_chain({"eps": 0.25}).eps == 0.25
    assert Text8Chars(sparsity={"eps": 0.1}).sparsity == SparsityOptions(eps=0.1)
    assert LocalTextChars("x.txt", sparsity={}).sparsity == SparsityOptions()
    assert OpenWebTextBPE(sparsity={"top_k": 8}).sparsity == SparsityOptions(top_k=8)
    with pytest.raises(ValueError, match="sparsity has no option 'k'"):
        EnglishChars({"k": 4})
    with pytest.raises(ValueError, match="sparsity must be a SparsityOptions"):
        EnglishChars(0.1)  # type: ignore[arg-type]


def test_register_exports_a_source_and_refuses_a_taken_name() -> None:
    import dllm_lit.sources as sources
    from dllm_lit.sources import ChainSource, register

    class Fixed(ChainSource):
        def build(self, cache_dir=None):
            return synthetic_chain(4, 2, seed=0)

    try:
        assert register(Fixed) is Fixed and sources.Fixed is Fixed and Fixed in _registered_sources()
        with pytest.raises(ValueError, match=r"^source 'Fixed' is already registered; choose another name$"):
            register(Fixed)
    finally:
        sources.__all__.remove("Fixed")
        del sources.Fixed
    with pytest.raises(ValueError, match=r"^source 'Synthetic' is already registered; choose another name$"):
        register(type("Synthetic", (Fixed,), {}))
    with pytest.raises(ValueError, match="is not a chain source"):
        register(int)
