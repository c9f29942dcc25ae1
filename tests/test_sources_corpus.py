"""Corpus chain sources (dllm_lit.sources: Text8Chars, LocalTextChars, OpenWebTextBPE and their cached base) and
the data config fragments (configs/data/*.yaml).

Everything runs offline on small corpora written to tmp_path, through the real code paths: datasets'
packaged builders for local files, the tokenizers BPE trainer, the SettingsCache and the LightningCLI parser.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import counted_calls
from dllm_lit.corpus.charlevel import CharDecoder, count_char_bigrams
from dllm_lit.corpus.documents import DatasetUnavailableError, read_text_file
from dllm_lit.markov import MarkovChain
from dllm_lit.sources import CORPUS_CHAIN_FORMAT, LocalTextChars, OpenWebTextBPE, SparsityOptions, Text8Chars

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "configs" / "data"

_SENTENCES = [
    "The quick brown fox jumps over the lazy dog near the river bank",
    "A journey of a thousand miles begins with a single step on the road",
    "She sells sea shells by the sea shore every summer morning",
    "Markov chains describe how the next state depends only on the present one",
    "Diffusion language models unmask tokens in parallel over several steps",
    "The old lighthouse keeper watched the storm roll in from the west",
    "Children played in the park while their parents talked about the weather",
    "Every winter the village gathers to share bread, soup and long stories",
    "Quantum physics puzzles students with waves that behave like particles",
    "He wrote letters to his grandmother twice a month for twenty years",
    "The museum displayed paintings, sculptures and a very rare golden clock",
    "Rain fell quietly on the roof as the cat slept beside the warm fire",
    "Engineers measured the bridge carefully before the trucks were allowed across",
    "In the morning the market smelled of coffee, oranges and fresh fish",
    "Birds migrate south in autumn, following routes learned over generations",
    "A good teacher asks questions that make students think for themselves",
    "The orchestra tuned their violins while the audience found their seats",
    "Mountains covered in snow glowed pink in the light of the setting sun",
    "Library shelves held atlases, dictionaries and forgotten novels of adventure",
    "Farmers planted wheat and barley after the last frost of the spring",
    "Sailors read the stars to find their way across the dark ocean",
    "The committee reviewed every proposal and chose the simplest design",
    "Thunder rumbled over the hills and the dogs hid under the kitchen table",
    "Jazz musicians improvise melodies, listening closely to one another",
]


def _documents(n_docs: int = 40, seed: int = 0) -> list[str]:
    """Varied English documents: each starts with '#' and ends with '!' (characters used nowhere else)."""
    rng = random.Random(seed)
    docs = []
    for _ in range(n_docs):
        k = rng.randint(3, 7)
        body = ". ".join(rng.choice(_SENTENCES) for _ in range(k))
        docs.append(f"#{body}!")
    return docs


@pytest.fixture(autouse=True)
def _private_datasets_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep datasets' lock files and any Arrow cache out of the user's ~/.cache/huggingface."""
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf_datasets")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """A few KB of English prose, several paragraphs, one plain text file (no trailing newline)."""
    docs = _documents(24, seed=1)
    text = "\n\n".join(" ".join(docs[i : i + 3]) for i in range(0, len(docs), 3))
    p = tmp_path / "corpus.txt"
    p.write_text(text, encoding="utf-8")
    assert 4_000 < len(text) < 20_000
    return p


@pytest.fixture
def owt_file(tmp_path: Path) -> Path:
    """One document per line, as the hub OWT sample is read."""
    p = tmp_path / "owt.txt"
    p.write_text("\n".join(_documents(60, seed=2)) + "\n", encoding="utf-8")
    return p


def _entries(cache: Path, kind: str) -> list[Path]:
    d = cache / kind
    return sorted(q for q in d.iterdir() if not q.name.startswith(".")) if d.is_dir() else []


def _assert_row_stochastic(chain: MarkovChain) -> None:
    P = chain.kernel
    assert (P >= 0).all()
    assert torch.allclose(P.sum(1), torch.ones(chain.vocab_size, dtype=torch.float64), atol=1e-9)


@pytest.fixture
def count_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of the real character bigram counter (the expensive corpus pass)."""
    import dllm_lit.corpus.charlevel as charlevel

    return counted_calls(monkeypatch, charlevel, "count_char_bigrams")


# ---------------------------------------------------------------------------------------------- character level
def test_local_text_chars_counts_chain_and_cache(corpus: Path, tmp_path: Path, count_calls: list[int]) -> None:
    cache = tmp_path / "cache"
    src = LocalTextChars(str(corpus))
    chain = src.build(cache)
    assert src.cache_hit is False and count_calls == [1]
    C, unigram = src.bigram_counts()
    expected = count_char_bigrams(read_text_file(corpus))
    assert unigram is None and torch.equal(C, expected)
    # the paper's text8 rule: K = V = 27, eps = 0, P = row_normalise(C + 1e-8)
    assert (chain.vocab_size, chain.top_k, chain.eps) == (27, 27, 0.0)
    _assert_row_stochastic(chain)
    P = expected.double() + 1e-8
    assert torch.allclose(chain.kernel, P / P.sum(1, keepdim=True), atol=1e-12)
    assert chain.metadata["source"] == "local_text_chars" and chain.metadata["num_characters"] == int(expected.sum()) + 1
    assert isinstance(src.decoder(), CharDecoder)
    assert src.decoder().decode(torch.tensor([7, 4, 11, 11, 14])) == "hello"

    # second build (fresh object, same settings): a cache hit, the corpus is not read again
    again = LocalTextChars(str(corpus))
    chain2 = again.build(cache)
    assert again.cache_hit is True and count_calls == [1]
    assert again.cache_entry == src.cache_entry
    assert torch.equal(chain2.nbr_idx, chain.nbr_idx) and torch.equal(chain2.nbr_prob, chain.nbr_prob)
    assert torch.equal(again.bigram_counts()[0], expected)
    assert len(_entries(cache, "chain-local-text")) == 1


@pytest.mark.parametrize("damage", ["garbage", "truncate", "delete"])
def test_corrupt_cached_chain_is_rebuilt(corpus: Path, tmp_path: Path, count_calls: list[int], damage: str) -> None:
    cache = tmp_path / "cache"
    src = LocalTextChars(str(corpus), max_chars=3000)
    ref = src.build(cache)
    chain_pt = src.cache_entry / "chain.pt"
    if damage == "garbage":
        chain_pt.write_bytes(b"not a torch file at all")
    elif damage == "truncate":
        chain_pt.write_bytes(chain_pt.read_bytes()[:100])
    else:
        chain_pt.unlink()
    again = LocalTextChars(str(corpus), max_chars=3000)
    chain = again.build(cache)
    assert again.cache_hit is False and count_calls == [1, 1]
    assert torch.allclose(chain.kernel, ref.kernel)
    # the rebuilt entry is valid: a third build hits it
    third = LocalTextChars(str(corpus), max_chars=3000)
    third.build(cache)
    assert third.cache_hit is True and count_calls == [1, 1]


def test_changed_settings_or_content_make_new_entries(corpus: Path, tmp_path: Path, count_calls: list[int]) -> None:
    cache = tmp_path / "cache"
    base = LocalTextChars(str(corpus))
    base.build(cache)
    capped = LocalTextChars(str(corpus), max_chars=1000)
    chain = capped.build(cache)
    assert capped.cache_hit is False and capped.cache_entry != base.cache_entry
    assert int(capped.bigram_counts()[0].sum()) == 999
    teleport = LocalTextChars(str(corpus), sparsity=SparsityOptions(eps=0.01))
    assert teleport.build(cache).eps == 0.01 and teleport.cache_hit is False
    sparse = LocalTextChars(str(corpus), sparsity=SparsityOptions(top_k=5))
    assert sparse.build(cache).top_k == 5 and sparse.cache_hit is False
    assert len(_entries(cache, "chain-local-text")) == 4 and len(count_calls) == 4
    # the key is the file content, not the path: a copy hits, an edit rebuilds
    copy = tmp_path / "copy.txt"
    copy.write_bytes(corpus.read_bytes())
    moved = LocalTextChars(str(copy), max_chars=1000)
    moved.build(cache)
    assert moved.cache_hit is True and moved.cache_entry == capped.cache_entry
    copy.write_text("an entirely different little text about cats and dogs", encoding="utf-8")
    edited = LocalTextChars(str(copy), max_chars=1000)
    edited.build(cache)
    assert edited.cache_hit is False and len(_entries(cache, "chain-local-text")) == 5
    assert chain.vocab_size == 27
    # the library format version is part of every key
    from dllm_lit.corpus.cache import SettingsCache

    manifest = SettingsCache(cache).manifest(capped.cache_entry)
    assert manifest["settings"]["corpus_chain_format"] == CORPUS_CHAIN_FORMAT
    assert manifest["settings"]["max_chars"] == 1000 and sorted(manifest["files"]) == ["chain.pt", "counts.pt"]


def test_text8_chars_from_local_files(corpus: Path, tmp_path: Path, count_calls: list[int]) -> None:
    cache = tmp_path / "cache"
    text = read_text_file(corpus)
    # a local path given as the dataset
    src = Text8Chars(dataset=str(corpus), max_chars=2500)
    chain = src.build(cache)
    assert torch.equal(src.bigram_counts()[0], count_char_bigrams(text, max_chars=2500))
    assert (chain.vocab_size, chain.top_k, chain.eps) == (27, 27, 0.0)
    _assert_row_stochastic(chain)
    assert chain.metadata["source"] == "text8_chars" and chain.metadata["k_rule"] == "full"
    # the same file through the packaged "text" builder and data_files: same counts, its own entry
    via_files = Text8Chars(dataset="text", data_files=str(corpus), max_chars=2500)
    via_files.build(cache)
    assert torch.equal(via_files.bigram_counts()[0], src.bigram_counts()[0])
    # several files: one stream, the documents joined by a space
    second = tmp_path / "second.txt"
    second.write_text("Zebras graze quietly. Yaks yawn!", encoding="utf-8")
    multi = Text8Chars(dataset="text", data_files=[str(corpus), str(second)], max_chars=None)
    multi.build(cache)
    assert torch.equal(multi.bigram_counts()[0], count_char_bigrams([text, second.read_text()]))
    assert len(count_calls) == 3
    again = Text8Chars(dataset=str(corpus), max_chars=2500)
    again.build(cache)
    assert again.cache_hit is True and len(count_calls) == 3
    # build(None): no cache, same chain
    nocache = Text8Chars(dataset=str(corpus), max_chars=2500)
    assert torch.allclose(nocache.build(None).kernel, chain.kernel) and nocache.cache_entry is None


def test_argument_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="either top_k"):
        Text8Chars(sparsity=SparsityOptions(top_k=5, target_mass=0.99))
    with pytest.raises(ValueError, match="max_chars"):
        LocalTextChars("x.txt", max_chars=0)
    with pytest.raises(ValueError, match="eps"):
        Text8Chars(sparsity=SparsityOptions(eps=1.0))
    with pytest.raises(ValueError, match="vocab_size"):
        OpenWebTextBPE(vocab_size=100)
    with pytest.raises(FileNotFoundError, match="not found"):
        LocalTextChars(str(tmp_path / "missing.txt")).build(tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match="not found"):
        Text8Chars(dataset=str(tmp_path / "missing.txt")).build(tmp_path / "cache")
    with pytest.raises(RuntimeError, match="build"):
        OpenWebTextBPE().decoder()


# ---------------------------------------------------------------------------------------------- OWT BPE
def _k_rule(C: torch.Tensor, target_mass: float, k_percentile: float) -> int:
    """Independent re-implementation of the paper's K rule (empty rows -> unigram, + 1e-8)."""
    C = C.double().numpy().copy()
    unigram = 0.5 * (C.sum(0) + C.sum(1))
    C[C.sum(1) == 0] = unigram
    P = C + 1e-8
    P /= P.sum(1, keepdims=True)
    cum = np.cumsum(-np.sort(-P, axis=1), axis=1)
    k_star = np.array([int(np.argmax(row >= target_mass - 1e-12)) + 1 for row in cum])
    return int(math.floor(np.percentile(k_star, k_percentile, method="linear")))


def test_openwebtext_bpe_on_local_corpus(owt_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    builds: list[int] = []
    real_build = OpenWebTextBPE._build_into

    def counted(self, directory):
        builds.append(1)
        return real_build(self, directory)

    monkeypatch.setattr(OpenWebTextBPE, "_build_into", counted)
    kwargs = dict(dataset="text", data_files=str(owt_file), vocab_size=300, min_frequency=2,
                  tokenizer_max_bytes=100_000, count_max_tokens=None, max_doc_chars=4096)
    src = OpenWebTextBPE(**kwargs)
    chain = src.build(cache)
    tok = src.tokenizer
    V = tok.get_vocab_size()
    assert chain.vocab_size == V and 260 <= V <= 300
    C, unigram = src.bigram_counts()
    docs = [line for line in owt_file.read_text().splitlines() if line]
    encs = [tok.encode(d).ids for d in docs]
    assert int(unigram.sum()) == sum(map(len, encs))
    # within-document bigrams only: C.sum() = tokens - documents, and the '!' -> '#' boundary pair is absent
    assert int(C.sum()) == int(unigram.sum()) - len(docs)
    a, b = tok.token_to_id("!"), tok.token_to_id("#")
    assert all(e[-1] == a and e[0] == b for e in encs)
    assert not any((x, y) == (a, b) for e in encs for x, y in zip(e[:-1], e[1:]))
    assert int(C[a, b]) == 0 and int(unigram[a]) == len(docs) and int(unigram[b]) == len(docs)
    ref = np.zeros((V, V), dtype=np.int64)
    for e in encs:
        np.add.at(ref, (np.array(e[:-1]), np.array(e[1:])), 1)
    assert torch.equal(C, torch.from_numpy(ref))
    # K by the 99%-mass / 90th-percentile rule
    K = _k_rule(C, 0.99, 90)
    assert chain.top_k == K < V and chain.metadata["k_rule"] == "mass_percentile"
    # eps = 1e-4 teleport to the empirical token unigram
    assert chain.eps == 1e-4
    nu = unigram.double() / unigram.sum()
    assert torch.allclose(chain.nu, nu, atol=1e-15)
    P = chain.kernel
    _assert_row_stochastic(chain)
    outside = ~chain.topk_support() & (nu > 0)[None, :]
    assert outside.any()
    assert torch.allclose(P[outside], (1e-4 * nu[None, :].expand(V, V))[outside])
    assert (P[:, nu > 0] > 0).all()
    # decoder: the cached tokenizer round-trips text
    dec = src.decoder()
    assert dec.vocab_size == V
    text = "#The quick brown fox watched the storm roll in, then slept beside the fire!"
    assert dec.decode(tok.encode(text).ids) == text
    samples = chain.sample(3, 12, seed=0)
    assert len(dec.decode_batch(samples)) == 3
    assert builds == [1]

    # second build: cache hit, tokenizer loaded from the entry
    again = OpenWebTextBPE(**kwargs)
    chain2 = again.build(cache)
    assert again.cache_hit is True and builds == [1]
    assert torch.equal(chain2.nbr_idx, chain.nbr_idx)
    assert again.decoder().decode(tok.encode(text).ids) == text
    assert sorted(p.name for p in again.cache_entry.iterdir()) == ["chain.pt", "counts.pt", "manifest.json", "tokenizer.json"]
    # a damaged tokenizer file is detected and the entry rebuilt
    (again.cache_entry / "tokenizer.json").write_text("{}")
    third = OpenWebTextBPE(**kwargs)
    third.build(cache)
    assert third.cache_hit is False and builds == [1, 1]
    assert third.decoder().decode(tok.encode(text).ids) == text

    # the token cap and a fixed K are settings: new entries
    capped = OpenWebTextBPE(**{**kwargs, "count_max_tokens": 1500})
    capped.build(cache)
    assert capped.cache_hit is False and int(capped.bigram_counts()[1].sum()) == 1500
    fixed = OpenWebTextBPE(**kwargs, sparsity=SparsityOptions(top_k=17, eps=1e-4))
    assert fixed.build(cache).top_k == 17 and fixed.sparsity.target_mass is None
    assert builds == [1, 1, 1, 1]


# ---------------------------------------------------------------------------------------------- hub datasets offline
def test_hub_datasets_unavailable_offline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No network here: the hub defaults fail fast with the clear DatasetUnavailableError and leave no entry."""
    import datasets
    import huggingface_hub

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    cache = tmp_path / "cache"
    for src, name in [(Text8Chars(), "afmck/text8"), (OpenWebTextBPE(), "stanford-cs336/owt-sample")]:
        with pytest.raises(DatasetUnavailableError, match="offline") as info:
            src.build(cache)
        assert name in str(info.value)
    assert _entries(cache, "chain-text8") == [] and _entries(cache, "chain-owt-bpe") == []


# ---------------------------------------------------------------------------------------------- configs
def _sampler_config(tmp_path: Path) -> Path:
    """configs/mdlm.yaml: sampler configs hold only their model block, the data fragment selects the source."""
    cfg = yaml.safe_load((REPO / "configs" / "mdlm.yaml").read_text())
    assert set(cfg) == {"model"}
    return REPO / "configs" / "mdlm.yaml"


def _cli(base: Path, *args: str):
    from dllm_lit.cli import DllmCLI

    sys.argv = ["cli.py"]  # LightningCLI warns when args= and a foreign sys.argv (pytest's) are both present
    return DllmCLI(args=["--config", str(base), *args], run=False)


def test_config_fragments_resolve_through_the_cli(corpus: Path, owt_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dllm_lit.sources import EnglishChars, PaperArtifact, Synthetic

    monkeypatch.setattr(sys, "argv", list(sys.argv))  # restored after the test; _cli sets it
    base = _sampler_config(tmp_path)

    cache = ["--data.cache_dir", str(tmp_path / "cache")]
    cli = _cli(base, "--config", str(CONFIGS / "english.yaml"), *cache)
    dm = cli.datamodule
    assert isinstance(dm.source, EnglishChars) and dm.num_sequences == 512 and dm.seq_len == 1024  # base kept
    dm.setup()
    assert dm.chain.vocab_size == 27

    cli = _cli(base, "--config", str(CONFIGS / "synthetic.yaml"), "--data.source.init_args.vocab_size", "64",
               "--data.source.init_args.top_k", "8", "--data.num_sequences", "16", *cache)
    dm = cli.datamodule
    assert isinstance(dm.source, Synthetic) and dm.num_sequences == 16
    assert (dm.source.vocab_size, dm.source.top_k, dm.source.eps) == (64, 8, 1e-4)
    dm.setup()
    assert (dm.chain.vocab_size, dm.chain.top_k) == (64, 8)

    cli = _cli(base, "--config", str(CONFIGS / "local_text.yaml"), "--data.source.init_args.path", str(corpus), *cache)
    dm = cli.datamodule
    assert isinstance(dm.source, LocalTextChars) and dm.source.path == str(corpus)
    dm.setup()
    assert torch.equal(dm.source.bigram_counts()[0], count_char_bigrams(read_text_file(corpus)))
    assert dm.decoder().decode(dm.reference_samples(2, 20)[0]).__len__() == 20

    cli = _cli(base, "--config", str(CONFIGS / "text8.yaml"), "--data.source.init_args.dataset", str(corpus), *cache)
    src = cli.datamodule.source
    assert isinstance(src, Text8Chars) and src.max_chars == 5_000_000 and src.sparsity.eps == 0.0 and src.sparsity.top_k is None
    cli.datamodule.setup()
    assert cli.datamodule.chain.top_k == 27

    # OWT after an English base: the fragment's sparsity (eps/target_mass/k_percentile) wins (nothing inherited)
    cli = _cli(base, "--config", str(CONFIGS / "openwebtext.yaml"), "--data.source.init_args.dataset", "text",
               "--data.source.init_args.data_files", str(owt_file), "--data.source.init_args.vocab_size", "280", *cache)
    src = cli.datamodule.source
    assert isinstance(src, OpenWebTextBPE)
    sp = src.sparsity
    assert (sp.eps, sp.target_mass, sp.k_percentile, sp.top_k, src.count_max_tokens) == (1e-4, 0.99, 90, None, 2_000_000)
    cli.datamodule.setup()
    assert cli.datamodule.chain.eps == 1e-4 and cli.datamodule.decoder().vocab_size == cli.datamodule.chain.vocab_size

    # paper artifact: the path must be given; a missing file fails with a clear message
    with pytest.raises(SystemExit):
        _cli(base, "--config", str(CONFIGS / "paper_artifact.yaml"))
    cli = _cli(base, "--config", str(CONFIGS / "paper_artifact.yaml"), "--data.source.init_args.path", str(tmp_path / "gt.pt"))
    assert isinstance(cli.datamodule.source, PaperArtifact)
    with pytest.raises(FileNotFoundError, match="paper artifact not found"):
        cli.datamodule.setup()


def _resolve_class(path: str) -> type:
    import importlib

    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.parametrize("name", ["english", "synthetic", "text8", "openwebtext", "local_text", "paper_artifact"])
def test_fragments_spell_out_every_source_option(name: str) -> None:
    """jsonargparse keeps an earlier source's same-named init_args when a later --config switches the source
    class, so each fragment lists every option of its source (the user-supplied path excepted)."""
    cfg = yaml.safe_load((CONFIGS / f"{name}.yaml").read_text())
    assert set(cfg) == {"data"} and cfg["data"]["class_path"] == "dllm_lit.data.MarkovDataModule"
    source = cfg["data"]["init_args"]["source"]
    cls = _resolve_class(source["class_path"])
    params = set(inspect.signature(cls.__init__).parameters) - {"self"}
    given = set(source.get("init_args") or {})
    assert given == params - {"path"}, f"{name}.yaml: missing {sorted(params - given - {'path'})}"
    for key, value in (source.get("init_args") or {}).items():
        default = inspect.signature(cls.__init__).parameters[key].default
        if dataclasses.is_dataclass(default):  # a nested option group (sparsity): every field spelled out too
            assert set(value) == {f.name for f in dataclasses.fields(default)}, f"{name}.yaml: {key} lists {sorted(value)}"
            default = dataclasses.asdict(default)
        assert value == default, f"{name}.yaml: {key}={value!r} differs from the class default {default!r}"


def test_sparsity_is_one_nested_group_in_configs_and_on_the_command_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    """``sparsity`` is set as one group in YAML (partially: the other fields keep their defaults) and field by
    field on the command line; a bad value ends with one line naming the field."""
    from dllm_lit.cli import main
    from dllm_lit.sources import EnglishChars

    monkeypatch.setattr(sys, "argv", list(sys.argv))
    base = _sampler_config(tmp_path)
    fragment = tmp_path / "english_eps.yaml"
    fragment.write_text(yaml.safe_dump({"data": {"init_args": {"source": {
        "class_path": "dllm_lit.sources.EnglishChars", "init_args": {"sparsity": {"eps": 0.0, "top_k": 9}}}}}}))
    src = _cli(base, "--config", str(fragment)).datamodule.source
    assert isinstance(src, EnglishChars) and src.sparsity == SparsityOptions(top_k=9, eps=0.0)
    src = _cli(base, "--config", str(fragment), "--data.source.init_args.sparsity.eps", "1e-4").datamodule.source
    assert src.sparsity == SparsityOptions(top_k=9, eps=1e-4)
    assert src.build().eps == 1e-4 and src.build().top_k == 9
    src = _cli(base, "--config", str(CONFIGS / "openwebtext.yaml"), "--data.source.init_args.sparsity.eps", "0.001").datamodule.source
    assert src.sparsity == SparsityOptions(target_mass=0.99, k_percentile=90, eps=1e-3)
    for extra, message in [
        (["--data.source.init_args.sparsity.eps", "1.5"], "eps (teleport weight) must be a number in [0, 1), got 1.5"),
        (["--data.source.init_args.sparsity.target_mass", "0.9"], "give either top_k (fixed K) or target_mass/k_percentile"),
    ]:
        with pytest.raises(SystemExit) as info:
            main(["predict", "--config", str(base), "--config", str(fragment), *extra,
                  "--trainer.default_root_dir", str(tmp_path / "bad")])
        assert info.value.code == 2
        err = capsys.readouterr().err
        assert f"error: {message}" in err and "Traceback" not in err, err
