"""DiffusionGemma-style entropy-bounded renoising (uniform-state, exact leave-one-out oracle): its output law and
NFE law equal the exact ones of its rule (dynamic programming over canvases, accepted counts and argmax histories,
dllm_lit/exact/diffusion_gemma.py), NFE accounting, chunking, power, bad settings."""
from __future__ import annotations

import pytest
import torch

from conftest import CountingDenoiser, chi_square_pvalue, sequence_counts
from dllm_lit.denoisers import UniformNoise
from dllm_lit.exact.diffusion_gemma import diffusion_gemma_law
from dllm_lit.samplers.diffusion_gemma import DiffusionGemma, accepted_mask, renoise_temperature

pytestmark = pytest.mark.usefixtures("single_thread")
V, T, N = 3, 4, 20000
ALPHA = 0.01  # goodness-of-fit level: a correct sampler fails one comparison with probability 1 %

#: (options, steps): upstream defaults; diffusers' loop without its stop (confidence_threshold=None: the last canvas); random ties; early stops that spread
#: the NFE over 2..4 calls, with and without the stability condition
CASES = [
    ({}, 3),
    ({"entropy_bound": 1.0, "entropy_threshold": 0.0, "output": "canvas", "tie_rule": "highest"}, 3),
    ({"entropy_bound": 1.5, "entropy_threshold": 0.3, "t_max": 0.6, "t_min": 0.2, "output": "canvas",
      "tie_rule": "random"}, 4),
    ({"entropy_bound": 1.5, "entropy_threshold": 0.7, "stability_threshold": 0, "t_max": 0.6, "t_min": 0.2}, 4),
    ({"entropy_bound": 1.5, "entropy_threshold": 0.8, "t_max": 0.6, "t_min": 0.2, "output": "canvas"}, 4),
]


@pytest.mark.parametrize("options, steps", CASES)
def test_law_and_nfe_match_dynamic_programming(chain, den, options, steps) -> None:
    law, nfe_law = diffusion_gemma_law(chain, T, steps, **options)
    x, nfe = DiffusionGemma(den, **options).connect(chain).generate_with_nfe(torch.arange(N), T, steps, steps)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA
    assert chi_square_pvalue(torch.bincount(nfe.long() - 1, minlength=steps), nfe_law) > ALPHA


def test_exact_samples_are_rejected(chain) -> None:
    """Power: exact chain samples fail against the law of diffusers' loop without its stop at 3 calls."""
    law, _ = diffusion_gemma_law(chain, T, 3, **CASES[1][0])
    assert chi_square_pvalue(sequence_counts(chain.sample(N, T, seed=5), V), law) < ALPHA


def test_early_stop_spreads_the_nfe(chain) -> None:
    """The stop rule is exercised: with CASES[3] the exact NFE law puts mass on 2, 3 and 4 calls."""
    _, nfe_law = diffusion_gemma_law(chain, T, 4, **CASES[3][0])
    assert (nfe_law[1:] > 0.01).all() and abs(float(nfe_law.sum()) - 1) < 1e-12


def test_acceptance_rule() -> None:
    """Entropies ascending, the j-th accepted iff its predecessors sum to <= bound; at least one; ties by rule."""
    H = torch.tensor([[0.5, 0.1, 0.3, 2.0], [1.0, 1.0, 1.0, 1.0], [0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    got = accepted_mask(H, 0.45, "lowest", None)
    assert got.tolist() == [[True, True, True, False], [True, False, False, False], [True] * 4]
    assert accepted_mask(H, 0.45, "highest", None)[1].tolist() == [False, False, False, True]
    keys = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.9, 0.2, 0.5, 0.7], [0.1, 0.2, 0.3, 0.4]], dtype=torch.float64)
    assert accepted_mask(H, 0.45, "random", keys)[1].tolist() == [False, True, False, False]
    assert renoise_temperature(0, 48, 0.8, 0.4) == 0.8 and abs(renoise_temperature(47, 48, 0.8, 0.4) - (0.4 + 0.4 / 48)) < 1e-15


def test_nfe_counts_calls_per_sequence(chain, den, monkeypatch) -> None:
    """Each sequence, run alone, reports exactly the oracle calls it took (early stops included)."""
    calls: list = []
    inner = den.transient_posterior  # the samplers' one entry (uniform_state.leave_one_out_chunks)

    def counting(z, channel):
        assert isinstance(channel, UniformNoise)
        calls.append(channel.alpha)
        return inner(z, channel)

    monkeypatch.setattr(den, "transient_posterior", counting)
    s = DiffusionGemma(den, **CASES[3][0]).connect(chain)
    seen = set()
    for i in range(30):
        calls.clear()
        _, nfe = s.generate_with_nfe(torch.tensor([i]), T, 4, 0)
        assert len(calls) == int(nfe[0]) and calls[0] == 0.0
        seen.add(int(nfe[0]))
    assert len(seen) > 1
    _, stats = s.generate_with_stats(torch.arange(30), T, 4, 0)
    assert stats["nfe"].max() <= 4 and stats["log_q"].isnan().all()


def test_chunking_invariance(chain, den) -> None:
    s = DiffusionGemma(den, **CASES[2][0]).connect(chain)
    x = s.sample(40, 9, 5, seed=3)
    assert torch.equal(s.sample(15, 9, 5, seed=3, start_index=25), x[25:])


@pytest.mark.parametrize("kwargs, field", [({"entropy_bound": -0.1}, "entropy_bound"), ({"t_max": 0.0}, "t_max"),
                                           ({"t_min": -1.0}, "t_min"), ({"entropy_threshold": -1e-3}, "entropy_threshold"),
                                           ({"stability_threshold": -1}, "stability_threshold"),
                                           ({"output": "sample"}, "output"), ({"tie_rule": "first"}, "tie_rule")])
def test_bad_settings_rejected(kwargs, field) -> None:
    with pytest.raises(ValueError, match=field):
        DiffusionGemma(**kwargs)


def test_denoiser_without_uniform_channel_refused(chain, den) -> None:
    with pytest.raises(ValueError, match="UniformNoise channel leave-one-out"):
        DiffusionGemma(CountingDenoiser(den)).connect(chain)


def test_law_in_an_hmm_world() -> None:
    """Through HMMOracleDenoiser (uniform channel, leave-one-out forward-backward) the law is the DP's."""
    from dllm_lit.markov import HMMWorld

    A = torch.tensor([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.4, 0.1, 0.5]], dtype=torch.float64)
    B = torch.tensor([[0.9, 0.1, 0.0], [0.1, 0.2, 0.7], [0.3, 0.6, 0.1]], dtype=torch.float64)
    world = HMMWorld(emission=B, transition=A)
    opts = CASES[4][0]
    law, _ = diffusion_gemma_law(world, T, 3, **opts)
    x = DiffusionGemma(**opts).connect(world).sample(N, T, 3, seed=41)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA



def _diffusers_loop(chain, n: int, steps: int, options: dict, seed: int) -> torch.Tensor:
    """diffusers 0.42's DiffusionGemma loop, one canvas of T tokens: its own ``EntropyBoundScheduler.step`` on the
    oracle's leave-one-out logits (UniformNoise at the previous call's accepted count / T, the evidence channel
    this project gives the time-free model), then the pipeline's adaptive stop and commit: a sequence stops when its
    argmax canvas repeats the last ``stability_threshold`` ones and the mean entropy of the tempered logits is
    below ``confidence_threshold``; a stopped sequence's canvas is its argmax canvas; the last canvas is returned.
    The leave-one-out laws are rounded to 12 decimals so that mathematically equal entropies (every position at the
    first call) are equal numbers and torch.sort keeps them in position order (the "lowest" tie rule); unrounded,
    float noise of the forward-backward orders them (upstream leaves ties open; the docs' departures)."""
    EntropyBoundScheduler = pytest.importorskip("diffusers").EntropyBoundScheduler
    from dllm_lit.denoisers import hmm_posterior
    from dllm_lit.markov import HMMWorld

    world = HMMWorld.from_chain(chain)
    sched = EntropyBoundScheduler(entropy_bound=options["entropy_bound"], t_max=options["t_max"], t_min=options["t_min"])
    sched.set_timesteps(steps)
    g = torch.Generator().manual_seed(seed)
    canvas = torch.randint(0, V, (n, T), generator=g)
    accepted = torch.zeros(n, dtype=torch.long)
    finished = torch.zeros(n, dtype=torch.bool)
    argmax_canvas = canvas
    history = torch.full((options["stability_threshold"], n, T), -1, dtype=torch.long)
    for k in range(steps):
        logits = torch.empty(n, T, V, dtype=torch.float64)
        for m in torch.unique(accepted).tolist():
            rows = (accepted == m).nonzero().flatten()
            q = hmm_posterior(world, canvas[rows], UniformNoise(m / T), leave_one_out=True)
            logits[rows] = torch.round(q, decimals=12).log()  # equal laws equal in every bit: ties, not float noise
        out = sched.step(model_output=logits, timestep=k, sample=canvas, generator=g)
        canvas, accepted = out.prev_sample, out.accepted_index.sum(1)
        nxt = torch.where(finished[:, None], argmax_canvas, out.pred_logits.argmax(-1))
        stable = (history == nxt[None]).all(-1).all(0)
        history = torch.cat([history[1:], nxt[None]])
        entropy = torch.distributions.Categorical(logits=out.pred_logits.float()).entropy().mean(-1)
        finished |= stable & (entropy < options["entropy_threshold"])
        argmax_canvas = nxt
        canvas = torch.where(finished[:, None], argmax_canvas, canvas)
        if bool(finished.all()):
            break
    return canvas


def test_canvas_output_is_the_diffusers_loop(chain, den) -> None:
    """``output="canvas"``: diffusers 0.42 stops early by default (``confidence_threshold`` 0.005) and returns the
    argmax canvas of a stopped sequence, the last (renoised) canvas of one that ran every call.  Upstream's own
    scheduler in the pipeline's loop, the sampler and the exact law agree on a tiny chain where about half the
    sequences stop (the former "last canvas of every sequence" law is rejected)."""
    options = {"entropy_bound": 1.5, "entropy_threshold": 1.0, "stability_threshold": 1, "t_max": 0.6, "t_min": 0.2,
               "output": "canvas"}
    law, _ = diffusion_gemma_law(chain, T, 2, **options)
    upstream = _diffusers_loop(chain, 8000, 2, options, seed=0)
    assert chi_square_pvalue(sequence_counts(upstream, V), law) > ALPHA
    x, _ = DiffusionGemma(den, **options).connect(chain).generate_with_nfe(torch.arange(N), T, 2, 2)
    assert chi_square_pvalue(sequence_counts(x, V), law) > ALPHA
    # the former law, the last canvas of every sequence (= never stopping: TV 0.051 from this one), is rejected
    last_only, _ = diffusion_gemma_law(chain, T, 2, **{**options, "entropy_threshold": 0.0})
    assert chi_square_pvalue(sequence_counts(upstream, V), last_only) < ALPHA
