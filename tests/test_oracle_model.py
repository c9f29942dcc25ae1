"""OracleForMaskedLM: exact posteriors against brute force on tiny chains, masks, positions, shift, ties, I/O."""
from __future__ import annotations

import itertools

import pytest
import torch

from dllm_lit.hf import OracleForMaskedLM
from dllm_lit.markov import MarkovChain

pytestmark = pytest.mark.usefixtures("single_thread")

#: P(0, 0) = 0.6 and P(2, 2) = 0.25 > 0: cross-row ties (module docstring of dllm_lit.hf.ties); 1 -> 1 impossible
KERNEL = [[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]]
V, M = 3, 3
TOL = 1e-6  # float32 posterior vs float64 brute force


@pytest.fixture(scope="module")
def chain() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(KERNEL, dtype=torch.float64))


def brute_posterior(chain: MarkovChain, length: int, evidence: dict[int, int], target: int) -> torch.Tensor:
    """p(x_target | x_j = evidence[j]) over every sequence of ``length`` tokens (float64 [V])."""
    seqs = torch.tensor(list(itertools.product(range(chain.vocab_size), repeat=length)))
    w = chain.log_prob(seqs).exp()
    for j, v in evidence.items():
        w = w * (seqs[:, j] == v)
    out = torch.zeros(chain.vocab_size, dtype=torch.float64).index_add_(0, seqs[:, target], w)
    return out / out.sum()


def probs(model: OracleForMaskedLM, ids, **kw) -> torch.Tensor:
    return torch.softmax(model(torch.as_tensor(ids), **kw).logits.double(), -1)


def random_states(n: int, L: int, seed: int, p_mask: float = 0.5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, V, (n, L), generator=g)
    return torch.where(torch.rand(n, L, generator=g) < p_mask, M, x)


@pytest.mark.parametrize("revealed", ["self", "leave_one_out"])
@pytest.mark.parametrize("exact_ties", [True, False])
def test_rows_equal_brute_force(chain, revealed, exact_ties) -> None:
    model = OracleForMaskedLM.from_chain(chain, revealed=revealed, exact_ties=exact_ties)
    z = random_states(40, 5, seed=1)
    p = probs(model, z)
    assert p.shape == (40, 5, V + 3)
    assert torch.all(p[..., V:] == 0)
    for b, i in itertools.product(range(40), range(5)):
        row = z[b].tolist()
        if row[i] != M and revealed == "self":
            want = torch.nn.functional.one_hot(torch.tensor(row[i]), V).double()
        else:
            ev = {j: v for j, v in enumerate(row) if v != M and j != i}
            if ev and brute_posterior(chain, 5, ev, i).isnan().any():
                continue  # impossible evidence (leave-one-out of an impossible sequence): no brute-force reference
            want = brute_posterior(chain, 5, ev, i)
        torch.testing.assert_close(p[b, i, :V], want, atol=TOL, rtol=0)


def test_padding_is_not_part_of_the_sequence(chain) -> None:
    model = OracleForMaskedLM.from_chain(chain)
    z = torch.tensor([[0, M, M, 2]])
    padded = torch.tensor([[4, 5, 0, M, M, 2], [0, M, M, 2, 4, 4]])  # pad ids, and other ids, at padding
    mask = torch.tensor([[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    out = model(padded, attention_mask=mask).logits
    ref = model(z).logits[0]
    assert torch.equal(out[0, 2:], ref) and torch.equal(out[1, :4], ref)
    pad_rows = torch.cat([out[0, :2], out[1, 4:]])
    assert torch.all(pad_rows.argmax(-1) == model.config.pad_token_id) and torch.all(pad_rows.softmax(-1).max(-1).values == 1)


def test_position_ids_with_gaps_are_unobserved_positions(chain) -> None:
    model = OracleForMaskedLM.from_chain(chain)
    ids = torch.tensor([[1, M, 0, M]])
    pos = torch.tensor([[0, 2, 3, 6]])
    p = probs(model, ids, position_ids=pos)
    for i, target in enumerate([0, 2, 3, 6]):
        if ids[0, i] == M:
            torch.testing.assert_close(p[0, i, :V], brute_posterior(chain, 7, {0: 1, 3: 0}, target), atol=TOL, rtol=0)
    with pytest.raises(ValueError, match="position_ids must increase strictly"):
        model(ids, position_ids=torch.tensor([[0, 2, 2, 3]]))


def block_causal(L: int, block: int) -> torch.Tensor:
    i = torch.arange(L)
    return (i[None, :] // block) <= (i[:, None] // block)  # [query, key]: keys of this and earlier blocks


@pytest.mark.parametrize("kind", ["bool", "int", "additive_inf", "additive_min"])
def test_four_d_mask_conditions_on_visible_keys_only(chain, kind) -> None:
    model = OracleForMaskedLM.from_chain(chain)
    L = 6
    allowed = block_causal(L, 2)
    g = torch.Generator().manual_seed(3)
    allowed = allowed & (torch.rand(L, L, generator=g) < 0.8) | torch.eye(L, dtype=torch.bool)
    z = random_states(8, L, seed=2, p_mask=0.4)
    four = allowed[None, None].expand(8, 1, L, L)
    if kind == "int":
        four = four.long()
    elif kind.startswith("additive"):
        low = float("-inf") if kind == "additive_inf" else torch.finfo(torch.float32).min
        four = torch.zeros(8, 1, L, L).masked_fill(~four, low)
    p = probs(model, z, attention_mask=four)
    for b, i in itertools.product(range(8), range(L)):
        row = z[b].tolist()
        if row[i] != M:
            continue
        ev = {j: v for j, v in enumerate(row) if v != M and allowed[i, j]}
        torch.testing.assert_close(p[b, i, :V], brute_posterior(chain, L, ev, i), atol=TOL, rtol=0)


def test_four_d_masks_without_an_exact_meaning_are_refused(chain) -> None:
    model = OracleForMaskedLM.from_chain(chain)
    z = random_states(2, 4, seed=0)
    heads = torch.ones(2, 2, 4, 4, dtype=torch.bool)
    heads[:, 1, 0, 3] = False
    with pytest.raises(ValueError, match="differs between heads"):
        model(z, attention_mask=heads)
    with pytest.raises(ValueError, match="soft attention bias"):
        model(z, attention_mask=torch.full((2, 1, 4, 4), -0.5))
    with pytest.raises(ValueError, match="must be None, 2-D"):
        model(z, attention_mask=torch.ones(2, 4, 4))
    with pytest.raises(ValueError, match="neither a chain token"):
        model(torch.tensor([[0, 5, M]]))


def test_logit_shift_predicts_the_next_position(chain) -> None:
    plain = OracleForMaskedLM.from_chain(chain)
    shifted = OracleForMaskedLM.from_chain(chain, logit_shift=1)
    z = random_states(6, 5, seed=4)
    longer = torch.cat([z, torch.full((6, 1), M)], 1)
    assert torch.equal(shifted(z).logits, plain(longer).logits[:, 1:])
    # a block mask: row i conditions on what query i may attend to
    allowed = block_causal(5, 2)
    out = probs(shifted, z, attention_mask=allowed[None, None].expand(6, 1, 5, 5))
    for b, i in itertools.product(range(6), range(4)):
        row = z[b].tolist()
        if row[i + 1] != M:
            continue
        ev = {j: v for j, v in enumerate(row) if v != M and allowed[i, j]}
        torch.testing.assert_close(out[b, i, :V], brute_posterior(chain, 5, ev, i + 1), atol=TOL, rtol=0)


def test_equal_probabilities_get_equal_logits(chain) -> None:
    """With x_1 = a revealed: p(x_0 = a | z) = pi(a) P(a, a) / pi(a) and p(x_2 = a | z) = P(a, a), two different
    rows (a = 0: 0.6, a = 2: 0.25); with exact_ties their logits are bit-equal."""
    model = OracleForMaskedLM.from_chain(chain)
    for a in (0, 2):
        logits = model(torch.tensor([[M, a, M, M]])).logits
        assert logits[0, 0, a] == logits[0, 2, a]
        assert abs(float(logits[0, 2, a].exp()) - KERNEL[a][a]) < 1e-7


def test_tie_jitter_is_seeded_and_small(chain) -> None:
    z = torch.tensor([[M, 0, M, M]] * 3)
    exact = probs(OracleForMaskedLM.from_chain(chain), z)
    a = OracleForMaskedLM.from_chain(chain, tie_jitter=1e-4, tie_jitter_seed=7)
    b = OracleForMaskedLM.from_chain(chain, tie_jitter=1e-4, tie_jitter_seed=7)
    pa, pb = probs(a, z), probs(b, z)
    assert torch.equal(pa, pb)
    assert pa[0, 0, 0] != pa[0, 2, 0]  # the tie is gone
    torch.testing.assert_close(pa, exact, atol=1e-3, rtol=0)
    assert torch.equal(pa[:, 1], exact[:, 1])  # a revealed token keeps its point mass


def test_float64_logits(chain) -> None:
    model = OracleForMaskedLM.from_chain(chain, logits_dtype="float64")
    out = model(torch.tensor([[M, 1, M]])).logits
    assert out.dtype == torch.float64
    torch.testing.assert_close(out.softmax(-1)[0, 0, :V], brute_posterior(chain, 3, {1: 1}, 0), atol=1e-12, rtol=0)


def test_save_and_load_without_custom_code(chain, tmp_path) -> None:
    from transformers import AutoModelForMaskedLM

    model = OracleForMaskedLM.from_chain(chain, revealed="leave_one_out", logit_shift=1)
    model.save_pretrained(tmp_path)
    back = AutoModelForMaskedLM.from_pretrained(tmp_path)
    assert isinstance(back, OracleForMaskedLM)
    assert back.chain.fingerprint == chain.fingerprint and back.config.revealed == "leave_one_out"
    z = random_states(4, 6, seed=5)
    assert torch.equal(back(z).logits, model(z).logits)


def test_bad_options_name_the_field(chain) -> None:
    with pytest.raises(ValueError, match="revealed must be one of"):
        OracleForMaskedLM.from_chain(chain, revealed="both")
    with pytest.raises(ValueError, match="logit_shift must be one of"):
        OracleForMaskedLM.from_chain(chain, logit_shift=2)
    with pytest.raises(ValueError, match="mask_token_id of an oracle model"):
        OracleForMaskedLM.from_chain(chain, mask_token_id=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_gives_the_cpu_rows(chain) -> None:
    z = random_states(16, 12, seed=9)
    for options in ({}, {"exact_ties": False}, {"revealed": "leave_one_out", "logit_shift": 1}):
        cpu = OracleForMaskedLM.from_chain(chain, **options)
        gpu = OracleForMaskedLM.from_chain(chain, **options).to("cuda")
        torch.testing.assert_close(gpu(z.cuda()).logits.cpu(), cpu(z).logits, atol=1e-6, rtol=0)


def test_small_integer_ids_give_the_int64_rows(chain) -> None:
    """Issue 34 item 9: int8 / uint8 ids (the project's own compact sample dtype) raised a RuntimeError."""
    model = OracleForMaskedLM.from_chain(chain)
    ids = torch.tensor([[0, M, 1, M], [M, 2, M, M]])
    want = model(ids).logits
    for dtype in (torch.int8, torch.uint8, torch.int16, torch.int32):
        assert torch.equal(model(ids.to(dtype)).logits, want)


@pytest.mark.parametrize("case, message", [
    ("bool_ids", "input_ids must be an integer tensor"),
    ("mask_two", r"attention_mask \(2-D\) may only hold 0"),
    ("mask_nan", r"attention_mask \(2-D\) may only hold 0"),
    ("mask_string", "attention_mask must be a tensor, None or the string 'full'"),
    ("float_positions", "position_ids must hold integers"),
])
def test_bad_inputs_are_refused_in_one_line(chain, case, message) -> None:
    """Issue 34 item 9: each was accepted (or raised AttributeError) on the base commit."""
    model = OracleForMaskedLM.from_chain(chain)
    ids = torch.tensor([[0, M, 1, M]])
    kw = {"bool_ids": {"input_ids": ids.bool()},
          "mask_two": {"input_ids": ids, "attention_mask": torch.tensor([[1, 2, 1, 1]])},
          "mask_nan": {"input_ids": ids, "attention_mask": torch.tensor([[1.0, float("nan"), 1.0, 1.0]])},
          "mask_string": {"input_ids": ids, "attention_mask": "causal"},
          "float_positions": {"input_ids": ids, "position_ids": torch.tensor([[0.0, 1.5, 2.0, 3.0]])}}[case]
    with pytest.raises(ValueError, match=message) as err:
        model(**kw)
    assert "\n" not in str(err.value)
