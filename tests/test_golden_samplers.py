"""The ranked samplers' draws are those of the reference commit (issue 35: a sampler ported to a rule keeps its samples,
NFE and log q): every case of ``tests/golden/make_goldens.py`` against ``tests/golden/samplers.json`` (written there
once, before the port).  Default: every case on both chains at 16 steps; slow: 4, 16 and 64 steps."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).with_name("golden")))
import make_goldens as golden  # noqa: E402

pytestmark = pytest.mark.usefixtures("single_thread")
WANT = json.loads(golden.OUT.read_text())


@pytest.fixture(scope="module")
def chains() -> dict:
    return golden.chains()


def _check(case, chains, steps: int) -> None:
    for chain_name, chain in chains.items():
        key = f"{case[0]}/{chain_name}/{steps}"
        assert golden.run(case, chain, steps) == WANT[key], key


@pytest.mark.parametrize("case", golden.CASES, ids=[c[0] for c in golden.CASES])
def test_golden_draws_at_16_steps(case, chains) -> None:
    _check(case, chains, 16)


@pytest.mark.slow
@pytest.mark.parametrize("case", golden.CASES, ids=[c[0] for c in golden.CASES])
def test_golden_draws_every_step_count(case, chains) -> None:
    for steps in golden.STEPS:
        _check(case, chains, steps)


def test_goldens_cover_every_case() -> None:
    assert set(WANT) == {f"{c[0]}/{n}/{s}" for c in golden.CASES for n in ("english", "synthetic") for s in golden.STEPS}
    assert torch.tensor([golden.N, golden.T, golden.SEED]).tolist() == [48, 64, 7]
