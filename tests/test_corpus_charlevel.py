"""Character-level corpus (text8 conventions): normalisation, encoding, decoding, bigram counting, count files,
and the text8 source path through ``datasets`` on local files written here."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from dllm_lit.corpus import charlevel
from dllm_lit.corpus.charlevel import (
    TEXT8_ALPHABET,
    TEXT8_SPACE_ID,
    TEXT8_VOCAB_SIZE,
    CharDecoder,
    char_bigram_counts_payload,
    count_char_bigrams,
    decode_chars,
    encode_chars,
    load_char_bigram_counts,
    normalize_text8,
)
from dllm_lit.corpus.documents import iter_documents, read_text_file


def naive_normalize(text: str) -> str:
    out: list[str] = []
    for ch in text:
        c = ch.lower() if "A" <= ch <= "Z" else ch
        c = c if "a" <= c <= "z" else " "
        if c == " " and out and out[-1] == " ":
            continue
        out.append(c)
    return "".join(out)


def naive_counts(stream: str) -> np.ndarray:
    C = np.zeros((27, 27), dtype=np.int64)
    for a, b in zip(stream, stream[1:], strict=False):
        C[TEXT8_ALPHABET.index(a), TEXT8_ALPHABET.index(b)] += 1
    return C


def random_raw_text(n: int, seed: int) -> str:
    rng = random.Random(seed)
    pool = "abcdefghijklmnopqrstuvwxyz" * 3 + "ABCXYZ" + "     " + ",.;:!?'-\n\t0123456789" + "éßü😀İ"
    return "".join(rng.choice(pool) for _ in range(n))


# ---------------------------------------------------------------- alphabet and normalisation


def test_alphabet_constants():
    assert TEXT8_ALPHABET == "abcdefghijklmnopqrstuvwxyz "
    assert TEXT8_VOCAB_SIZE == 27 and TEXT8_ALPHABET[TEXT8_SPACE_ID] == " " and TEXT8_SPACE_ID == 26


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Hello, World!", "hello world "),
        ("route 66 is OLD", "route is old"),  # digits dropped, not spelled out
        ("tab\tand\nnewline\r\n", "tab and newline "),
        ("café über naïve", "caf ber na ve"),  # non-ASCII letters are not letters of the alphabet
        ("  leading and trailing  ", " leading and trailing "),
        ("emoji😀here", "emoji here"),
        ("", ""),
        ("!!!", " "),
    ],
)
def test_normalize_text8_examples(raw, expected):
    assert normalize_text8(raw) == expected


def test_normalize_matches_naive_rule_and_is_idempotent():
    raw = random_raw_text(5000, seed=1)
    norm = normalize_text8(raw)
    assert norm == naive_normalize(raw)
    assert normalize_text8(norm) == norm
    assert set(norm) <= set(TEXT8_ALPHABET)
    assert "  " not in norm


def test_text8_is_a_fixed_point():
    text8_like = " anarchism originated as a term of abuse first used against early working class radicals"
    assert normalize_text8(text8_like) == text8_like


def test_normalize_rejects_non_str():
    with pytest.raises(TypeError, match="text must be a str"):
        normalize_text8(b"bytes")  # type: ignore[arg-type]


# ---------------------------------------------------------------- encode / decode


def test_encode_decode_roundtrip():
    text = "the quick brown fox jumps over the lazy dog"
    ids = encode_chars(text)
    assert ids.dtype == torch.long and ids.shape == (len(text),)
    assert ids[:3].tolist() == [19, 7, 4] and ids[3].item() == TEXT8_SPACE_ID
    assert decode_chars(ids) == text
    assert decode_chars(ids.tolist()) == text
    assert encode_chars("").numel() == 0 and decode_chars(torch.empty(0, dtype=torch.long)) == ""


def test_encode_strict_names_offending_character():
    with pytest.raises(ValueError, match=r"'X'.*position 6"):
        encode_chars("hello X")
    with pytest.raises(ValueError, match="'3'"):
        encode_chars("abc3")
    # strict=False normalises first
    assert decode_chars(encode_chars("Hello, X3!", strict=False)) == "hello x "


def test_encode_keeps_space_runs_in_strict_mode():
    # double spaces are valid state sequences (a model can produce them); they are not rejected
    assert encode_chars("a  b").tolist() == [0, 26, 26, 1]


def test_decode_validates_ids_and_mask_symbol():
    with pytest.raises(ValueError, match=r"\[0, 27\)"):
        decode_chars([0, 27])
    with pytest.raises(ValueError, match=r"\[0, 27\)"):
        decode_chars(torch.tensor([-1]))
    with pytest.raises(ValueError, match="1-D"):
        decode_chars(torch.zeros(2, 2, dtype=torch.long))
    with pytest.raises(ValueError, match="integer"):
        decode_chars(np.array([0.5]))
    assert decode_chars([0, 27, 1], mask_symbol="_") == "a_b"


def test_char_decoder_batch():
    dec = CharDecoder()
    assert dec.vocab_size == 27
    texts = ["hello world", "abcdefghijk"]
    batch = torch.stack([encode_chars(t) for t in texts])
    assert batch.shape == (2, 11)
    assert dec.decode_batch(batch) == texts
    assert dec.decode(batch[1]) == texts[1]
    with pytest.raises(ValueError, match="2-D"):
        dec.decode_batch(batch[0])
    masked = batch.clone()
    masked[0, :5] = 27
    assert CharDecoder(mask_symbol="?").decode_batch(masked)[0] == "????? world"


# ---------------------------------------------------------------- bigram counting


def test_counts_match_naive_python_loop():
    raw = random_raw_text(20_000, seed=2)
    C = count_char_bigrams(raw)
    assert C.dtype == torch.long and C.shape == (27, 27)
    np.testing.assert_array_equal(C.numpy(), naive_counts(naive_normalize(raw)))
    assert int(C.sum()) == len(naive_normalize(raw)) - 1
    assert int(C[TEXT8_SPACE_ID, TEXT8_SPACE_ID]) == 0  # runs of spaces collapsed


def test_counts_max_chars_uses_prefix_of_normalised_stream():
    raw = random_raw_text(10_000, seed=3)
    norm = naive_normalize(raw)
    for m in (2, 17, 5000, len(norm), len(norm) + 100):
        C = count_char_bigrams(raw, max_chars=m)
        np.testing.assert_array_equal(C.numpy(), naive_counts(norm[:m]))


def test_counts_iterable_joins_chunks_with_single_space():
    chunks = ["ab", " cd ", "ef.", "", "GH"]
    joined = naive_normalize(" ".join(chunks))
    assert joined == "ab cd ef gh"
    C = count_char_bigrams(chunks)
    np.testing.assert_array_equal(C.numpy(), naive_counts(joined))
    # a generator works too, and max_chars cuts across chunk boundaries
    C2 = count_char_bigrams((c for c in chunks), max_chars=5)
    np.testing.assert_array_equal(C2.numpy(), naive_counts(joined[:5]))


def test_counts_slicing_of_long_strings_is_invisible(monkeypatch):
    raw = random_raw_text(3000, seed=4)
    expected = count_char_bigrams(raw)
    monkeypatch.setattr(charlevel, "_SLICE_CHARS", 7)  # force many slice boundaries, inside space runs too
    np.testing.assert_array_equal(count_char_bigrams(raw).numpy(), expected.numpy())
    assert normalize_text8(raw) == naive_normalize(raw)


@pytest.mark.parametrize("bad", [0, -5, 2.5, True])
def test_counts_reject_bad_max_chars(bad):
    with pytest.raises(ValueError, match="max_chars"):
        count_char_bigrams("hello world", max_chars=bad)


def test_counts_reject_empty_corpus():
    with pytest.raises(ValueError, match="empty corpus"):
        count_char_bigrams("")
    with pytest.raises(ValueError, match="empty corpus"):
        count_char_bigrams([])
    with pytest.raises(ValueError, match="at least 2"):
        count_char_bigrams("a")
    with pytest.raises(TypeError, match="iterable of str"):
        count_char_bigrams(["ok", 3])  # type: ignore[list-item]


def test_counts_are_fast_on_paper_budget():
    import time

    raw = "the cat sat on the mat " * 250_000  # 5.75M chars
    t0 = time.perf_counter()
    C = count_char_bigrams(raw, max_chars=5_000_000)
    elapsed = time.perf_counter() - t0
    assert int(C.sum()) == 4_999_999
    assert elapsed < 5.0, f"count_char_bigrams took {elapsed:.2f}s for 5M characters"


# ---------------------------------------------------------------- count files


def write_payload(path: Path, payload) -> Path:
    path.write_text(json.dumps(payload), encoding="utf-8")
    return path


def test_count_file_roundtrip(tmp_path):
    C = count_char_bigrams("the quick brown fox jumps over the lazy dog")
    payload = char_bigram_counts_payload(C, num_characters=int(C.sum()) + 1, source="test")
    loaded = load_char_bigram_counts(write_payload(tmp_path / "c.json", payload))
    assert torch.equal(loaded, C)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda p: p.update(format="other/9"), "format"),
        (lambda p: p.update(alphabet="abc"), "alphabet"),
        (lambda p: p["counts"].pop(), "27 x 27"),
        (lambda p: p["counts"][3].__setitem__(4, -1), "non-negative"),
        (lambda p: p["counts"][3].__setitem__(4, 1.5), "non-negative integers"),
        (lambda p: p.update(num_characters=p["num_characters"] + 7), "num_characters"),
    ],
)
def test_damaged_count_file_is_rejected(tmp_path, mutate, match):
    C = count_char_bigrams("abc def ghi jkl")
    payload = char_bigram_counts_payload(C, num_characters=int(C.sum()) + 1)
    mutate(payload)
    path = write_payload(tmp_path / "bad.json", payload)
    with pytest.raises(ValueError, match=match) as info:
        load_char_bigram_counts(path)
    assert str(path) in str(info.value) and "damaged" in str(info.value)


def test_truncated_count_file_is_rejected(tmp_path):
    path = tmp_path / "trunc.json"
    C = count_char_bigrams("abc def")
    path.write_text(json.dumps(char_bigram_counts_payload(C))[:100], encoding="utf-8")
    with pytest.raises(ValueError, match="not valid UTF-8 JSON"):
        load_char_bigram_counts(path)


# ---------------------------------------------------------------- text8 source path (local files, real datasets code)


def test_text8_local_file_through_datasets(tmp_path):
    text8 = " anarchism originated as a term of abuse first used against early working class radicals" * 50
    path = tmp_path / "text8"  # the real file has no suffix
    path.write_text(text8, encoding="utf-8")
    assert read_text_file(path) == text8
    docs = list(iter_documents(str(path), cache_dir=tmp_path / "hf_cache"))
    assert docs == [text8]  # one line = one document
    C = count_char_bigrams(docs, max_chars=1000)
    np.testing.assert_array_equal(C.numpy(), naive_counts(text8[:1000]))


def test_text8_parquet_like_hub_layout(tmp_path):
    # afmck/text8 layout: a parquet file per split with one row and a 'text' column
    import pyarrow as pa
    import pyarrow.parquet as pq

    for split, body in (("train", " alpha beta gamma" * 20), ("validation", " delta epsilon" * 20)):
        pq.write_table(pa.table({"text": [body]}), tmp_path / f"{split}.parquet")
    files = {"train": str(tmp_path / "train.parquet"), "validation": str(tmp_path / "validation.parquet")}
    train = list(iter_documents("parquet", split="train", data_files=files, cache_dir=tmp_path / "c"))
    val = list(iter_documents("parquet", split="validation", data_files=files, streaming=True, cache_dir=tmp_path / "c"))
    assert train == [" alpha beta gamma" * 20] and val == [" delta epsilon" * 20]


def test_read_text_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        read_text_file(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="regular file"):
        read_text_file(tmp_path)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes(b"caf\xe9")
    with pytest.raises(UnicodeDecodeError):
        read_text_file(bad)
    assert read_text_file(bad, errors="replace") == "caf\ufffd"


def test_package_reexports_resolve():
    import dllm_lit.corpus as corpus

    for name in corpus.__all__:
        assert getattr(corpus, name) is not None, name
    assert corpus.count_char_bigrams is count_char_bigrams
    with pytest.raises(AttributeError):
        corpus.does_not_exist  # noqa: B018
