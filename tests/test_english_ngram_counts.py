"""The bundled order-2 / order-3 English counts: consistent with the bundled bigram table (same text), and
reproduced exactly by their build script when the Debian bible packages are installed."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dllm_lit.corpus.char_ngrams import count_char_ngrams, load_english_ngram_counts
from dllm_lit.corpus.charlevel import load_english_counts

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("order", [2, 3])
def test_marginalising_the_oldest_symbol_gives_the_lower_order_counts(order) -> None:
    """sum_a C_k[(a, rest), c] counts the k-grams (rest, c) after the first position: the order-(k - 1) counts
    minus the stream's first k-gram (one entry of 1)."""
    high = load_english_ngram_counts(order)
    low = load_english_counts() if order == 2 else load_english_ngram_counts(order - 1)
    marg = high.reshape(27, 27 ** (order - 1), 27).sum(0)
    diff = low - marg
    assert int(diff.sum()) == 1 and int(diff.min()) == 0 and int(diff.max()) == 1


def test_counting_any_text() -> None:
    C = count_char_ngrams("abc abd", 2)
    assert C.shape == (27 ** 2, 27) and int(C.sum()) == 5
    assert int(C[0 * 27 + 1, 2]) == 1 and int(C[0 * 27 + 1, 3]) == 1  # "ab" -> c, "ab" -> d


@pytest.mark.skipif(shutil.which("bible") is None, reason="needs the Debian packages bible-kjv and bible-kjv-text")
def test_build_script_reproduces_the_bundled_files() -> None:
    out = subprocess.run([sys.executable, str(REPO / "scripts" / "build_english_ngram_counts.py"), "--check"],
                         capture_output=True, text=True, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.count("reproduced exactly") == 2
