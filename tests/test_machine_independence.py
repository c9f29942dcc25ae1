"""A chain and its stationary law are the same bits on every CPU (issue 19, item 9).

torch picks its kernels by the CPU's vector width (``ATEN_CPU_CAPABILITY``: scalar, AVX2, AVX-512);
vectorised ``pow`` and reductions round differently on each, which gave a synthetic chain a different
fingerprint per machine and moved ``unigram_l1`` by a few ulps.  The chain's numbers are now built from
elementwise operations, the C library's ``pow``, ``math.fsum`` and fixed-order sums; this test forces
the other kernel families in subprocesses and compares the bytes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = """
import hashlib, json, torch
from dllm_lit.markov import synthetic_chain
from dllm_lit.sources import english_char_chain
h = lambda t: hashlib.sha256(t.contiguous().numpy().tobytes()).hexdigest()
out = {}
for name, chain in (("english", english_char_chain()), ("synthetic", synthetic_chain(300, 12, eps=0.05, seed=3))):
    out[name] = [chain.fingerprint, h(chain.stationary)]
print(json.dumps(out))
"""


def _probe(capability: str | None, cache: Path) -> dict:
    env = {**os.environ, "DLLM_LIT_CACHE": str(cache), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("ATEN_CPU_CAPABILITY", None)
    if capability is not None:
        env["ATEN_CPU_CAPABILITY"] = capability
    done = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def native(tmp_path_factory) -> dict:
    return _probe(None, tmp_path_factory.mktemp("native"))


@pytest.mark.parametrize("capability", ["default", "avx2"])
def test_chain_and_stationary_law_do_not_depend_on_cpu_kernels(capability: str, native: dict, tmp_path) -> None:
    # a cache of its own: a chain cached by the other process must not make the comparison trivial
    assert _probe(capability, tmp_path) == native
