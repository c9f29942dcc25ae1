"""Tests of GenerativePerplexity and MauveScore on a tiny, randomly initialised GPT-2 built here.

Everything runs for real and offline: the model and the byte-level BPE tokenizer are created from a
config and saved with ``save_pretrained`` to a temporary directory, then loaded by the metrics
through the same code path as ``gpt2-large``.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dllm_lit.metrics.distributed import EmptyMetricError
from tiny_models import build_tiny_gpt2, make_texts
from dllm_lit.metrics.genppl import GenerativePerplexity
from dllm_lit.metrics.lm_loading import ModelNotAvailableError, load_causal_lm
from dllm_lit.metrics.mauve import MauveScore

@pytest.fixture(scope="module", autouse=True)
def _single_thread():
    """The tiny model's ops are far below any useful parallel grain; extra intra-op threads only
    add synchronisation stalls on a shared, oversubscribed CPU. Restored afterwards."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def tiny_gpt2(tmp_path_factory: pytest.TempPathFactory) -> str:
    # "gpt2" in the directory name lets mauve's own featurizer (which checks the name) load it too
    return str(build_tiny_gpt2(tmp_path_factory.mktemp("models") / "tiny-gpt2"))


def manual_nll(model_dir: str, texts: list[str], max_length: int) -> tuple[list[float], list[int]]:
    """Unbatched, unpadded reference: per-text sum of -log p(y_t | y_<t), t >= 2."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    sums, counts = [], []
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"][:max_length]
        if len(ids) < 2:
            sums.append(0.0)
            counts.append(0)
            continue
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].double()
        logp = torch.log_softmax(logits, dim=-1)
        sums.append(-logp[torch.arange(len(ids) - 1), torch.tensor(ids[1:])].sum().item())
        counts.append(len(ids) - 1)
    return sums, counts


# ----------------------------------------------------------------------------- GenerativePerplexity
def test_genppl_equals_manual_nll(tiny_gpt2: str) -> None:
    texts = make_texts(23, seed=1, max_words=60) + ["", "the", "zebra quagga!"]
    max_length = 64
    sums, counts = manual_nll(tiny_gpt2, texts, max_length)
    assert max(counts) == max_length - 1  # truncation is exercised
    assert 0 in counts  # texts with < 2 tokens are exercised
    metric = GenerativePerplexity(tiny_gpt2, batch_size=4, max_length=max_length)
    metric.update(texts[:10])
    metric.update(texts[10:])
    value = metric.compute()
    expected = math.exp(sum(sums) / sum(counts))
    assert value.dtype == torch.float64
    assert value.item() == pytest.approx(expected, rel=1e-5)
    assert torch.cat(metric.text_tokens).tolist() == counts
    np.testing.assert_allclose(torch.cat(metric.text_nll).numpy(), sums, rtol=1e-5, atol=1e-5)
    # a random model over ~300 tokens has perplexity near the vocabulary size
    assert 100 < value.item() < 1000
    lo, hi = metric.bootstrap_ci(num_resamples=300, seed=0)
    assert lo < value.item() < hi


def test_genppl_batch_size_does_not_change_value(tiny_gpt2: str) -> None:
    texts = make_texts(12, seed=2)
    values = []
    for batch_size in (1, 5, 12):
        m = GenerativePerplexity(tiny_gpt2, batch_size=batch_size, max_length=64)
        m.update(texts)
        values.append(m.compute().item())
    assert values == pytest.approx([values[0]] * 3, rel=1e-6)


def test_model_is_loaded_once_and_shared(tiny_gpt2: str) -> None:
    a = GenerativePerplexity(tiny_gpt2, max_length=64)
    b = MauveScore(["x"], featurizer=tiny_gpt2, max_text_length=64)
    model_a, tok_a = a._load()
    model_b, _ = b._load()
    assert model_a is model_b
    assert not model_a.training
    assert all(not p.requires_grad for p in model_a.parameters())
    assert load_causal_lm(tiny_gpt2, "cpu", None)[1] is tok_a
    # the metric holds no reference to the model (clone/pickle never copies it)
    assert not any(isinstance(v, torch.nn.Module) for v in vars(a).values())
    assert list(a.children()) == []


def test_genppl_empty_and_bad_input(tiny_gpt2: str) -> None:
    m = GenerativePerplexity(tiny_gpt2, max_length=64)
    m.update(["", "a"])  # nothing scorable
    with pytest.raises(EmptyMetricError, match="no scorable token"):
        m.compute()
    with pytest.raises(ValueError, match="list of strings"):
        m.update("the text itself")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="empty"):
        m.update([])
    with pytest.raises(ValueError, match=r"`texts\[1\]` must be a str"):
        m.update(["ok", 3])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="`batch_size` must be a positive integer"):
        GenerativePerplexity(tiny_gpt2, batch_size=0)
    with pytest.raises(ValueError, match="`dtype` must be one of"):
        GenerativePerplexity(tiny_gpt2, dtype="int8")
    with pytest.raises(ValueError, match="`max_length` must be an integer >= 2"):
        GenerativePerplexity(tiny_gpt2, max_length=1)
    too_long = GenerativePerplexity(tiny_gpt2, max_length=1024)
    with pytest.raises(ValueError, match="exceeds the 128 positions"):
        too_long.update(["the cat"])


@pytest.mark.parametrize("kind", ["missing_path", "empty_dir"])
def test_missing_model_gives_clear_error(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "no-such-model"
    if kind == "empty_dir":
        path.mkdir()
    m = GenerativePerplexity(str(path), max_length=64)
    with pytest.raises(ModelNotAvailableError) as info:
        m.update(["some text"])
    msg = str(info.value)
    assert str(path) in msg
    assert "HF_HUB_OFFLINE=1" in msg and "local directory" in msg
    assert isinstance(info.value, OSError)
    with pytest.raises(ModelNotAvailableError, match="no-such-model"):
        MauveScore(["ref"], featurizer=str(path)).update(["x"])


# ----------------------------------------------------------------------------- MAUVE
def test_featurize_matches_mauve_own_featurizer(tiny_gpt2: str) -> None:
    from mauve.compute_mauve import get_features_from_input

    texts = make_texts(9, seed=3, max_words=60)
    ours = MauveScore(featurizer=tiny_gpt2, max_text_length=64, batch_size=4).featurize(texts)
    theirs = get_features_from_input(None, None, texts, tiny_gpt2, 64, -1, name="p", batch_size=1)
    assert ours.shape == theirs.shape == (9, 32)
    np.testing.assert_allclose(ours.numpy(), theirs, rtol=1e-4, atol=1e-5)


def test_mauve_of_a_set_against_itself_is_one(tiny_gpt2: str) -> None:
    texts = make_texts(40, seed=4)
    m = MauveScore(texts, featurizer=tiny_gpt2, max_text_length=64, num_buckets=4, batch_size=16)
    m.update(texts[:25])
    m.update(texts[25:])
    value = m.compute().item()
    assert 0.0 < value <= 1.0
    assert value == pytest.approx(1.0, abs=1e-3)
    assert m.last_result.num_buckets == 4


def test_mauve_separates_different_distributions_and_matches_mauve_package(tiny_gpt2: str) -> None:
    import mauve

    ref = make_texts(40, seed=5)
    other = ["".join(random.Random(i).choice("xyzqj!?#") for _ in range(30)) for i in range(40)]
    m_same = MauveScore(ref, featurizer=tiny_gpt2, max_text_length=64, num_buckets=4)
    m_same.update(make_texts(40, seed=6))
    m_diff = MauveScore(ref, featurizer=tiny_gpt2, max_text_length=64, num_buckets=4)
    m_diff.update(other)
    same, diff = m_same.compute().item(), m_diff.compute().item()
    assert 0.0 < diff < same <= 1.0
    assert diff < 0.5
    # the mauve package featurising the texts itself gives the same score
    pkg = mauve.compute_mauve(p_text=ref, q_text=other, featurize_model_name=tiny_gpt2, max_text_length=64, num_buckets=4)
    assert diff == pytest.approx(pkg.mauve, abs=1e-6)


def _counting(metric: MauveScore) -> list[int]:
    """Wrap the real featurizer to record the number of texts of each call."""
    calls: list[int] = []
    original = metric.featurize

    def featurize(texts):  # noqa: ANN001, ANN202
        calls.append(len(texts))
        return original(texts)

    metric.featurize = featurize  # type: ignore[method-assign]
    return calls


def test_reference_feature_cache_hit_and_corruption(tiny_gpt2: str, tmp_path: Path) -> None:
    ref, gen = make_texts(30, seed=7), make_texts(20, seed=8)
    kwargs = {"featurizer": tiny_gpt2, "max_text_length": 64, "num_buckets": 3, "cache_dir": tmp_path / "cache"}

    first = MauveScore(ref, **kwargs)
    calls = _counting(first)
    first.update(gen)
    value = first.compute().item()
    assert calls == [20, 30]  # generated batch, then the reference set once
    first.compute()
    assert calls == [20, 30]  # cached value
    # one entry of the project's checksummed SettingsCache, no temporary directory left behind
    files = list((tmp_path / "cache").glob("mauve_reference/*/features.pt"))
    assert len(files) == 1 and not list((tmp_path / "cache").glob("mauve_reference/.tmp-*"))

    second = MauveScore(ref, **kwargs)
    calls = _counting(second)
    second.update(gen)
    assert second.compute().item() == pytest.approx(value, abs=1e-12)
    assert calls == [20]  # reference features came from disk

    # corrupt file: garbage bytes
    files[0].write_bytes(b"not a torch file")
    third = MauveScore(ref, **kwargs)
    calls = _counting(third)
    third.update(gen)
    with pytest.warns(UserWarning, match="corrupt"):
        assert third.compute().item() == pytest.approx(value, abs=1e-6)
    assert calls == [20, 30]

    # silent corruption inside the stored tensor is caught by the checksum
    payload = torch.load(files[0], weights_only=True)
    payload["features"][0, 0] += 1.0
    torch.save(payload, files[0])
    fourth = MauveScore(ref, **kwargs)
    calls = _counting(fourth)
    fourth.update(gen)
    with pytest.warns(UserWarning, match="corrupt"):
        fourth.compute()
    assert calls == [20, 30]
    fifth = MauveScore(ref, **kwargs)  # the recomputed file is valid again
    calls = _counting(fifth)
    fifth.update(gen)
    fifth.compute()
    assert calls == [20]

    # different reference texts or max length -> different key
    MauveScore(ref[:-1], **kwargs).reference_features()
    MauveScore(ref, **(kwargs | {"max_text_length": 32})).reference_features()
    assert len(list((tmp_path / "cache").glob("mauve_reference/*/features.pt"))) == 3


def test_mauve_bad_input(tiny_gpt2: str) -> None:
    with pytest.raises(ValueError, match="`num_buckets` must be an integer >= 2 or 'auto'"):
        MauveScore(["a"], featurizer=tiny_gpt2, num_buckets=1)
    with pytest.raises(ValueError, match="`reference_texts` must be a list of strings"):
        MauveScore("a reference", featurizer=tiny_gpt2)  # type: ignore[arg-type]
    m = MauveScore(featurizer=tiny_gpt2, max_text_length=64, num_buckets=4)
    with pytest.warns(UserWarning), pytest.raises(EmptyMetricError):
        m.compute()
    m.update(make_texts(5, seed=9))
    with pytest.raises(ValueError, match="no reference texts"):
        m.compute()
    m.set_reference_texts(make_texts(5, seed=10))
    m_big = MauveScore(make_texts(5, seed=10), featurizer=tiny_gpt2, max_text_length=64, num_buckets=25)
    m_big.update(make_texts(5, seed=9))
    with pytest.raises(ValueError, match="exceeds the 10 texts"):
        m_big.compute()
    auto = MauveScore(make_texts(30, seed=10), featurizer=tiny_gpt2, max_text_length=64, num_buckets="auto")
    auto.update(make_texts(30, seed=11))
    assert 0.0 < auto.compute().item() <= 1.0
    assert auto.last_result.num_buckets == 3


def test_mauve_over_seeds_repeats_the_quantisation(tiny_gpt2: str) -> None:
    """MauveOverSeeds: ``mauve`` is MauveScore's value at seed 25; mean and std are over seeds 25, 26, 27,
    each equal to a MauveScore with that seed (the features are computed once)."""
    from dllm_lit.metrics.mauve_seeds import MauveOverSeeds

    ref, gen = make_texts(30, seed=5), make_texts(30, seed=9)
    multi = MauveOverSeeds(ref, featurizer=tiny_gpt2, max_text_length=64, num_buckets=4, num_seeds=3)
    multi.update(gen)
    got = multi.compute()
    singles = []
    for k in range(3):
        m = MauveScore(ref, featurizer=tiny_gpt2, max_text_length=64, num_buckets=4, seed=25 + k)
        m.update(gen)
        singles.append(m.compute().item())
    assert got["mauve"] == singles[0] and multi.seed_values == singles
    assert got["mauve_seed_mean"] == pytest.approx(float(np.mean(singles)), abs=1e-15)
    assert got["mauve_seed_std"] == pytest.approx(float(np.std(singles, ddof=1)), abs=1e-12)
    with pytest.raises(ValueError, match="num_seeds"):
        MauveOverSeeds(ref, featurizer=tiny_gpt2, num_seeds=0)
