"""Byte-level BPE (OWT path): cleaning, training, within-document bigram counting, decoding, and the OWT source
path through ``datasets`` on local files written here (plus the offline error for a hub name)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from dllm_lit.corpus.bpe import (
    MIN_BPE_VOCAB_SIZE,
    SPECIAL_TOKENS,
    BPEDecoder,
    clean_document,
    clean_documents,
    count_token_bigrams,
    load_tokenizer,
    save_tokenizer,
    take_until_bytes,
    train_bytelevel_bpe,
)
from dllm_lit.corpus.documents import OWT_HF_DATASET, DatasetUnavailableError, iter_documents

WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but have an "
    "they you were her she there been one all we their has would when if so no will more said its time about"
).split()


def make_documents(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    docs = []
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(1, 4)):
            words = [rng.choice(WORDS) for _ in range(rng.randint(4, 14))]
            sentences.append(" ".join(words).capitalize() + rng.choice([".", "!", "?", ","]))
        docs.append(" ".join(sentences))
    return docs


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return make_documents(400, seed=0)


@pytest.fixture(scope="module")
def tokenizer(corpus) -> Tokenizer:
    return train_bytelevel_bpe(corpus, vocab_size=300, min_frequency=2, max_bytes=None)


# ---------------------------------------------------------------- cleaning


def test_clean_document_rules():
    raw = "\r\n\n  Title\t\there \r\n\n body  text\t\r\n\n"
    # '\r' removed -> leading/trailing '\n' stripped -> tabs/space runs collapsed; inner newlines kept
    assert clean_document(raw) == " Title here \n\n body text "  # the trailing tab stays, as one space
    assert clean_document("abcdef", max_chars=4) == "abcd"
    assert clean_document("x" * 5000) == "x" * 4096  # default cut: 4096 characters
    assert clean_document("é" * 10, max_chars=3) == "ééé"  # characters, not bytes
    assert clean_document("  \n\t \r\n") == ""
    assert clean_document("abc", max_chars=None) == "abc"


@pytest.mark.parametrize("bad", [0, -1, 1.5])
def test_clean_document_rejects_bad_max_chars(bad):
    with pytest.raises(ValueError, match="max_chars"):
        clean_document("abc", max_chars=bad)


def test_clean_documents_drops_empty_and_is_lazy():
    docs = ["\n\n", "a  b", "\t", "c\r\nd"]
    assert list(clean_documents(docs)) == ["a b", "c\nd"]
    gen = clean_documents(iter(["x"] * 3))
    assert next(gen) == "x"


def test_take_until_bytes_stops_at_first_document_that_does_not_fit():
    docs = ["aaaa", "", "éé", "bbbbbbbb", "c"]  # 4, 0, 4, 8, 1 UTF-8 bytes
    assert list(take_until_bytes(docs, 8)) == ["aaaa", "éé"]
    assert list(take_until_bytes(docs, 10)) == ["aaaa", "éé"]  # "bbbbbbbb" does not fit; "c" is not taken
    assert list(take_until_bytes(docs, None)) == ["aaaa", "éé", "bbbbbbbb", "c"]
    with pytest.raises(ValueError, match="max_bytes"):
        list(take_until_bytes(docs, 0))


# ---------------------------------------------------------------- training


def test_tokenizer_configuration(tokenizer):
    vocab = tokenizer.get_vocab()
    for i, tok in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(tok) == i
    assert MIN_BPE_VOCAB_SIZE <= tokenizer.get_vocab_size() <= 300
    assert tokenizer.get_vocab_size() > MIN_BPE_VOCAB_SIZE  # some merges were learned
    for symbol in pre_tokenizers.ByteLevel.alphabet():
        assert symbol in vocab
    cfg = json.loads(tokenizer.to_str())
    assert cfg["normalizer"]["type"] == "NFKC"
    assert cfg["pre_tokenizer"]["type"] == "ByteLevel" and cfg["pre_tokenizer"]["add_prefix_space"] is False
    assert cfg["decoder"]["type"] == "ByteLevel"
    assert cfg["model"]["type"] == "BPE" and cfg["model"]["unk_token"] == "<unk>"


@pytest.mark.parametrize("text", ["Emoji 😀 and ∑ maths", "bytes \x00\x01\x7f ÿ", "日本語のテキスト", "the of and"])
def test_unseen_bytes_roundtrip_without_unk(tokenizer, corpus, text):
    assert not any("😀" in d or "日" in d for d in corpus)
    enc = tokenizer.encode(text)
    unk = tokenizer.token_to_id("<unk>")
    assert unk not in enc.ids
    assert tokenizer.decode(enc.ids) == text


def test_reference_configuration_defect_is_fixed(corpus):
    # The paper's trainer had no initial_alphabet: bytes unseen in training became <unk> and were lost.
    ref = Tokenizer(models.BPE(unk_token="<unk>"))
    ref.normalizer = normalizers.NFKC()
    ref.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ref.decoder = decoders.ByteLevel()
    ref.train_from_iterator(
        corpus, trainer=trainers.BpeTrainer(vocab_size=300, min_frequency=2, special_tokens=list(SPECIAL_TOKENS))
    )
    text = "smile 😀"
    assert ref.token_to_id("<unk>") in ref.encode(text).ids
    assert ref.decode(ref.encode(text).ids) != text
    ours = train_bytelevel_bpe(corpus, vocab_size=300, max_bytes=None)
    assert ours.decode(ours.encode(text).ids) == text


def test_nfkc_normaliser_is_applied(tokenizer):
    # NFKC folds compatibility characters (documented lossy step of the paper's tokenizer)
    assert tokenizer.decode(tokenizer.encode("ﬁne ＡＢＣ").ids) == "fine ABC"


@pytest.mark.parametrize("vocab_size", [0, 100, 259, 2.5])
def test_train_rejects_small_vocab(corpus, vocab_size):
    with pytest.raises(ValueError, match=r"vocab_size must be an int >= 260"):
        train_bytelevel_bpe(corpus, vocab_size=vocab_size)


def test_train_rejects_bad_arguments(corpus):
    with pytest.raises(ValueError, match="min_frequency"):
        train_bytelevel_bpe(corpus, vocab_size=300, min_frequency=0)
    with pytest.raises(ValueError, match="max_bytes"):
        train_bytelevel_bpe(corpus, vocab_size=300, max_bytes=-3)
    with pytest.raises(ValueError, match="empty corpus"):
        train_bytelevel_bpe([], vocab_size=300)
    with pytest.raises(ValueError, match="empty corpus"):
        train_bytelevel_bpe(["", ""], vocab_size=300)
    with pytest.raises(TypeError, match="not a single str"):
        train_bytelevel_bpe("one string", vocab_size=300)  # type: ignore[arg-type]


def test_train_byte_budget_limits_the_corpus(corpus):
    small = train_bytelevel_bpe(corpus, vocab_size=300, max_bytes=len(corpus[0].encode()))  # one document
    full = train_bytelevel_bpe(corpus, vocab_size=300, max_bytes=None)
    assert small.get_vocab_size() < full.get_vocab_size()


def test_save_and_load(tokenizer, tmp_path):
    path = save_tokenizer(tokenizer, tmp_path / "tok" / "tokenizer.json")
    assert path.is_file() and not list(path.parent.glob(".*.tmp"))
    for loaded in (load_tokenizer(path), load_tokenizer(path.parent)):
        assert loaded.get_vocab() == tokenizer.get_vocab()
        text = "Said the time 😀"
        assert loaded.encode(text).ids == tokenizer.encode(text).ids
    with pytest.raises(FileNotFoundError, match="missing.json"):
        load_tokenizer(tmp_path / "missing.json")


# ---------------------------------------------------------------- counting


def naive_token_counts(tok: Tokenizer, docs: list[str], max_tokens: int | None):
    V = tok.get_vocab_size()
    C = np.zeros((V, V), dtype=np.int64)
    u = np.zeros(V, dtype=np.int64)
    total = 0
    for doc in docs:
        ids = tok.encode(doc).ids
        if not ids:
            continue
        if max_tokens is not None:
            ids = ids[: max_tokens - total]
        for a in ids:
            u[a] += 1
        for a, b in zip(ids, ids[1:], strict=False):
            C[a, b] += 1
        total += len(ids)
        if max_tokens is not None and total >= max_tokens:
            break
    return C, u


@pytest.mark.parametrize("max_tokens", [None, 1, 777, 10**9])
@pytest.mark.parametrize("batch_size", [1, 7, 256])
def test_count_token_bigrams_matches_naive(tokenizer, corpus, max_tokens, batch_size):
    docs = corpus[:120] + [""] + corpus[120:200]  # an empty document is skipped
    C, u = count_token_bigrams(tokenizer, docs, max_tokens=max_tokens, batch_size=batch_size)
    C_ref, u_ref = naive_token_counts(tokenizer, docs, max_tokens)
    V = tokenizer.get_vocab_size()
    assert C.shape == (V, V) and u.shape == (V,) and C.dtype == torch.long and u.dtype == torch.long
    np.testing.assert_array_equal(C.numpy(), C_ref)
    np.testing.assert_array_equal(u.numpy(), u_ref)
    if max_tokens is not None and max_tokens < u_ref.sum() + 1:
        assert int(u.sum()) == max_tokens


def test_no_cross_document_transitions(tokenizer):
    docs = ["a", "b", "a", "b"]  # each document is a single byte token
    ids = [tokenizer.encode(d).ids for d in docs]
    assert all(len(i) == 1 for i in ids)
    C, u = count_token_bigrams(tokenizer, docs)
    assert int(C.sum()) == 0 and int(u.sum()) == 4
    docs = ["the of", "and to in"]
    C, u = count_token_bigrams(tokenizer, docs)
    n_tokens = sum(len(tokenizer.encode(d).ids) for d in docs)
    assert int(u.sum()) == n_tokens and int(C.sum()) == n_tokens - len(docs)
    last_of_first = tokenizer.encode(docs[0]).ids[-1]
    first_of_second = tokenizer.encode(docs[1]).ids[0]
    assert int(C[last_of_first, first_of_second]) == 0


def test_count_token_bigrams_errors(tokenizer):
    with pytest.raises(ValueError, match="max_tokens"):
        count_token_bigrams(tokenizer, ["a"], max_tokens=0)
    with pytest.raises(ValueError, match="batch_size"):
        count_token_bigrams(tokenizer, ["a"], batch_size=0)
    with pytest.raises(ValueError, match="empty corpus"):
        count_token_bigrams(tokenizer, ["", ""])
    with pytest.raises(TypeError, match="not a single str"):
        count_token_bigrams(tokenizer, "a document")  # type: ignore[arg-type]


# ---------------------------------------------------------------- decoder


def test_bpe_decoder(tokenizer, tmp_path):
    dec = BPEDecoder(tokenizer)
    assert dec.vocab_size == tokenizer.get_vocab_size()
    texts = ["The time was one", "He said 😀 so"]
    encs = [tokenizer.encode(t).ids for t in texts]
    T = min(len(e) for e in encs)
    batch = torch.tensor([e[:T] for e in encs])
    assert dec.decode_batch(batch) == [tokenizer.decode(e[:T]) for e in encs]
    assert dec.decode(torch.tensor(encs[1])) == texts[1]
    assert dec.decode(encs[0]) == texts[0]
    # specials are skipped by default, kept on request
    assert dec.decode([0, *encs[0], 3]) == texts[0]
    assert BPEDecoder(tokenizer, skip_special_tokens=False).decode([2, *encs[0]]) == "<bos>" + texts[0]
    # from a saved file
    path = save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    assert BPEDecoder.from_file(path).decode(encs[0]) == texts[0]
    assert BPEDecoder(str(path)).vocab_size == dec.vocab_size
    with pytest.raises(ValueError, match=r"\[0, "):
        dec.decode([dec.vocab_size])
    with pytest.raises(ValueError, match="2-D"):
        dec.decode_batch(torch.tensor(encs[0]))
    with pytest.raises(ValueError, match="1-D"):
        dec.decode(batch)


def test_decoder_tolerates_invalid_utf8_from_chain_samples(tokenizer):
    # a bigram chain can emit a lone UTF-8 lead byte; decoding must not raise
    lead = tokenizer.token_to_id("ð")  # byte 0xF0, first byte of a 4-byte sequence
    out = BPEDecoder(tokenizer).decode([lead, tokenizer.token_to_id("a")])
    assert out.endswith("a") and "\ufffd" in out


# ---------------------------------------------------------------- OWT source path


def test_owt_pipeline_on_local_files(tmp_path):
    docs = make_documents(150, seed=5)
    docs[3] = "\r\n" + docs[3] + "\t\t\r\n"  # needs cleaning
    jsonl = tmp_path / "owt.jsonl"
    jsonl.write_text("\n".join(json.dumps({"text": d, "id": i}) for i, d in enumerate(docs)), encoding="utf-8")
    streamed = list(iter_documents(str(jsonl), streaming=True, cache_dir=tmp_path / "c0"))
    assert streamed == docs
    cleaned = list(clean_documents(streamed))
    assert cleaned[3] == clean_document(docs[3]) and "\r" not in cleaned[3] and "\t" not in cleaned[3]
    tok = train_bytelevel_bpe(cleaned, vocab_size=300, max_bytes=200_000_000)
    again = iter_documents(str(jsonl), streaming=True, cache_dir=tmp_path / "c0")
    C, u = count_token_bigrams(tok, clean_documents(again), max_tokens=5000)
    assert int(u.sum()) == 5000 and int(C.sum()) < 5000
    assert int(u[:4].sum()) == 0  # no <pad>/<unk>/<bos>/<eos> in the counts

    # the hub OWT sample is plain text read line by line: one line = one document
    txt = tmp_path / "owt_train.txt"
    txt.write_text("first doc line\n\nsecond doc\n", encoding="utf-8")
    assert list(iter_documents(str(txt), cache_dir=tmp_path / "c")) == ["first doc line", "", "second doc"]
    assert list(iter_documents(str(txt), sample_by="document", cache_dir=tmp_path / "c2")) == [
        "first doc line\n\nsecond doc\n"
    ]
    first = iter_documents("text", data_files=str(txt), streaming=True, max_documents=1, cache_dir=tmp_path / "c3")
    assert list(first) == ["first doc line"]


def test_iter_documents_argument_errors(tmp_path):
    jsonl = tmp_path / "d.jsonl"
    jsonl.write_text(json.dumps({"body": "x"}) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"text_field='text'.*\['body'\]"):
        list(iter_documents(str(jsonl), cache_dir=tmp_path / "c"))
    assert list(iter_documents(str(jsonl), text_field="body", cache_dir=tmp_path / "c")) == ["x"]
    with pytest.raises(ValueError, match="max_documents"):
        iter_documents(str(jsonl), max_documents=0)
    with pytest.raises(ValueError, match="sample_by"):
        iter_documents(str(jsonl), sample_by="word")  # type: ignore[arg-type]
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        iter_documents(str(tmp_path / "missing.jsonl"))
    with pytest.raises(ValueError, match="needs data_files"):
        iter_documents("text")


def test_unreachable_hub_dataset_raises_helpful_error(tmp_path):
    # Real datasets code path in a fresh interpreter with the hub switched off (as on an offline machine).
    code = (
        "from dllm_lit.corpus.documents import iter_documents, DatasetUnavailableError\n"
        "try:\n"
        f"    iter_documents({OWT_HF_DATASET!r}, streaming=True)\n"
        "except DatasetUnavailableError as e:\n"
        "    assert isinstance(e, RuntimeError)\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('no error raised')\n"
    )
    env = dict(os.environ, HF_DATASETS_OFFLINE="1", HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf_home"))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    msg = res.stdout
    assert OWT_HF_DATASET in msg
    assert "HF_DATASETS_OFFLINE" in msg and "local path" in msg and "load_dataset" in msg
    assert "Traceback" not in msg
    assert issubclass(DatasetUnavailableError, RuntimeError)
