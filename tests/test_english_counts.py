"""The bundled English chain counts (King James Bible, Debian bible-kjv-text) and their build script."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import sys
from importlib import resources
from pathlib import Path

import pytest
import torch

from dllm_lit.corpus import charlevel
from dllm_lit.corpus.charlevel import (
    CHAR_BIGRAM_FORMAT,
    TEXT8_ALPHABET,
    english_counts_metadata,
    load_char_bigram_counts,
    load_english_counts,
)

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "build_english_counts.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("build_english_counts", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["build_english_counts"] = mod
    spec.loader.exec_module(mod)
    yield mod
    sys.modules.pop("build_english_counts", None)


@pytest.fixture(scope="module")
def counts() -> torch.Tensor:
    return load_english_counts()


def test_resource_is_packaged_and_small():
    res = resources.files("dllm_lit").joinpath("resources", "english_char_bigrams.json")
    assert res.is_file()
    assert len(res.read_bytes()) < 8 * 1024  # "a few KB"
    md = resources.files("dllm_lit").joinpath("resources", "ENGLISH_CHAR_BIGRAMS.md")
    assert md.is_file() and "bible-kjv-text" in md.read_text(encoding="utf-8")


def test_shape_dtype_and_total(counts):
    meta = english_counts_metadata()
    assert counts.shape == (27, 27) and counts.dtype == torch.long
    assert bool((counts >= 0).all())
    assert int(counts.sum()) == meta["num_characters"] - 1
    assert meta["num_characters"] > 3_000_000  # the whole Bible, ~4.0M normalised characters
    assert meta["format"] == CHAR_BIGRAM_FORMAT and meta["alphabet"] == TEXT8_ALPHABET
    assert meta["debian_package"] == "bible-kjv-text 4.38"
    assert re.fullmatch(r"[0-9a-f]{64}", meta["sha256_of_normalised_text"])
    assert "counts" not in meta


def test_every_state_has_outgoing_and_incoming_transitions(counts):
    assert bool((counts.sum(dim=1) > 0).all()), "a row of the English chain is empty"
    assert bool((counts.sum(dim=0) > 0).all())


def test_english_letter_statistics(counts):
    unigram = counts.sum(dim=1)
    top2 = {TEXT8_ALPHABET[i] for i in unigram.argsort(descending=True)[:2].tolist()}
    assert top2 == {" ", "e"}
    q, u = TEXT8_ALPHABET.index("q"), TEXT8_ALPHABET.index("u")
    assert int(counts[q].argmax()) == u
    assert counts[q, u] / counts[q].sum() > 0.95
    sp = TEXT8_ALPHABET.index(" ")
    assert int(counts[sp, sp]) == 0  # space runs were collapsed
    # 'th' is the most frequent letter pair in English prose
    letters = counts[:26, :26]
    i, j = divmod(int(letters.argmax()), 26)
    assert TEXT8_ALPHABET[i] + TEXT8_ALPHABET[j] == "th"


def test_damaged_bundled_file_is_reported(tmp_path, monkeypatch):
    # Point the loader at a damaged copy of the resource (the package itself is not touched).
    pkg = tmp_path / "fakepkg"
    (pkg / "resources").mkdir(parents=True)
    good = resources.files("dllm_lit").joinpath("resources", "english_char_bigrams.json").read_text("utf-8")
    (pkg / "resources" / "english_char_bigrams.json").write_text(good[: len(good) // 2], encoding="utf-8")
    monkeypatch.setattr(charlevel, "_english_resource", lambda: pkg / "resources" / "english_char_bigrams.json")
    with pytest.raises(ValueError, match="english_char_bigrams.json is damaged"):
        load_english_counts()
    payload = json.loads(good)
    payload["counts"][0][0] += 5  # no longer sums to num_characters - 1
    (pkg / "resources" / "english_char_bigrams.json").write_text(json.dumps(payload), encoding="utf-8")
    with pytest.raises(ValueError, match="num_characters"):
        load_english_counts()
    (pkg / "resources" / "english_char_bigrams.json").unlink()
    with pytest.raises(FileNotFoundError, match="package-data"):
        load_english_counts()


# ---------------------------------------------------------------- build script

BIBLE_SNIPPET = """
Genesis 1

  1 In the beginning God created the heaven and the earth.
  2 And the earth was without form, and void; and darkness was upon the face of
the deep.

1 Samuel 3

  10 And the LORD came, and stood, and called as at other times, Samuel,
Samuel.

Song of Solomon 2

  1 I am the rose of Sharon, and the lily of the valleys.
"""


def test_extract_verse_text(script):
    text, n_headings = script.extract_verse_text(BIBLE_SNIPPET)
    assert n_headings == 3
    assert text.splitlines() == [
        "In the beginning God created the heaven and the earth.",
        "And the earth was without form, and void; and darkness was upon the face of",
        "the deep.",
        "And the LORD came, and stood, and called as at other times, Samuel,",
        "Samuel.",
        "I am the rose of Sharon, and the lily of the valleys.",
    ]


def test_payload_and_serialisation_roundtrip(script, tmp_path):
    payload = script.build_payload(BIBLE_SNIPPET, "4.38")
    assert payload["num_chapters"] == 3 and payload["debian_package"] == "bible-kjv-text 4.38"
    normalised = charlevel.normalize_text8(script.extract_verse_text(BIBLE_SNIPPET)[0]).strip()
    assert normalised.startswith("in the beginning god created") and "samuel samuel i am" in normalised
    assert payload["num_characters"] == len(normalised)
    out = tmp_path / "c.json"
    assert script.main(["--input", str(_write(tmp_path / "kjv.txt", BIBLE_SNIPPET)), "--output", str(out)]) == 0
    loaded = load_char_bigram_counts(out)
    assert torch.equal(loaded, torch.tensor(payload["counts"]))
    assert script.main(["--input", str(tmp_path / "kjv.txt"), "--output", str(out), "--check"]) == 0


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="ascii")
    return path


@pytest.mark.skipif(shutil.which("bible") is None, reason="Debian package bible-kjv not installed")
def test_bundled_counts_are_reproduced_from_debian_package(script, counts):
    payload = script.build_payload(script.run_bible(), script.debian_package_version())
    meta = english_counts_metadata()
    assert payload["num_chapters"] == script.EXPECTED_CHAPTERS
    assert payload["sha256_of_normalised_text"] == meta["sha256_of_normalised_text"]
    assert payload["num_characters"] == meta["num_characters"]
    assert torch.equal(torch.tensor(payload["counts"]), counts)
