"""Why upstream SEDD-uniform's first geometric step is lost in float32, and the project's float64 step is exact.

    python benchmarks/sedd_uniform_float32.py [--seq-len 2] [--num-sequences 100000] [--steps 1 2 3 4 6 7 16]

Upstream (louaaron/Score-Entropy-Discrete-Diffusion: ``noise_lib.GeometricNoise``, ``graph_lib.Uniform``
``staggered_score`` / ``transp_transition``, ``sampling.AnalyticPredictor`` / ``Denoiser`` / ``get_pc_sampler``,
``catsample.sample_categorical``) keeps the noise levels, the time grid and the scores in float32.  The analytic step
weights token y at position i by

    stag_y trans_y,   stag = (e - 1) / (V e) sum(s) + s / e,   e = exp(-dsigma),

and at sigma(1) = sigma_max = 20 every exact score s_y = 1 + O(e^-20) rounds to 1, while e - 1 rounds to -1 once
dsigma > 25 ln 2 = 17.33 (steps <= 6 at the defaults): stag is the difference of two numbers near 1 / e ~ 5e8 whose
float32 spacing is 32, so it comes out -32 or 0 for every token, not the exact
(alpha_s q_y + (1 - alpha_s) / V) / p_t(z_i).
Upstream's Gumbel argmax then draws a nearly uniform token (all weights negative) or token 0 (all weights zero).

This script re-implements that float32 arithmetic (the same operations in the same order, drawn with torch's global
generator as upstream does) with exact log-scores from the chain's leave-one-out law, and prints per step count:
dsigma and e - 1 of the first step in float32, the first step's weights at one state in float32 (upstream) and in
float64 (the project's ``staggered_step``), and the position-0 marginal P(x_0 = 0) of upstream's float32 sampler
(Monte Carlo), of the project's ``SEDDUniform`` (Monte Carlo) and of the exact law (``sedd_uniform_law``), with
their standard errors.  World: the tests' tiny chain (V = 3, kernel TINY_KERNEL below).
"""
from __future__ import annotations

import argparse
import math

import torch

from dllm_lit.denoisers import OracleDenoiser, UniformNoise
from dllm_lit.exact.uniform_state import sedd_uniform_law
from dllm_lit.markov import MarkovChain
from dllm_lit.samplers.sedd_uniform import SEDDUniform, staggered_step, uniform_scores

#: the tests' tiny chain (tests/conftest.py)
TINY_KERNEL = [[0.6, 0.3, 0.1], [0.2, 0.0, 0.8], [0.5, 0.25, 0.25]]
SIGMA_MIN, SIGMA_MAX, EPS = 1e-4, 20.0, 1e-5  # upstream config.yaml's noise levels, get_pc_sampler's eps


def tiny_chain() -> MarkovChain:
    return MarkovChain.from_kernel(torch.tensor(TINY_KERNEL, dtype=torch.float64))


def float32_sigma(t: torch.Tensor) -> torch.Tensor:
    """Upstream's geometric total noise in float32: sigma_min^(1 - t) sigma_max^t."""
    lo, hi = torch.tensor([SIGMA_MIN, SIGMA_MAX], dtype=torch.float32)
    return lo ** (1 - t) * hi ** t


def float32_log_scores(den: OracleDenoiser, z: torch.Tensor, sigma: float) -> torch.Tensor:
    """The exact log concrete scores log p_t(z_i <- y) / p_t(z), rounded to float32 (a network's output dtype)."""
    alpha = math.exp(-sigma)
    q = den.posterior(z, UniformNoise(alpha), leave_one_out=True).to(torch.float64)
    m = alpha * q + (1 - alpha) / q.shape[-1]
    return (m / m.gather(-1, z.unsqueeze(-1))).log().to(torch.float32)


def float32_terms(den: OracleDenoiser, z: torch.Tensor, sigma_t: torch.Tensor,
                  dsigma: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Upstream's staggered score and transposed transition (stag, trans), all in float32 [B, T, V]."""
    V = den.vocab_size
    s = float32_log_scores(den, z, float(sigma_t)).exp()
    e = (-dsigma).exp()
    stag = ((e - 1) / (V * e)) * s.sum(-1, keepdim=True) + s / e
    trans = torch.ones_like(s) * (1 - (-dsigma).exp()) / V
    trans = trans.scatter(-1, z.unsqueeze(-1), 0.0)
    trans = trans.scatter(-1, z.unsqueeze(-1), 1 - trans.sum(-1, keepdim=True))
    return stag, trans


def float32_weights(den: OracleDenoiser, z: torch.Tensor, sigma_t: torch.Tensor,
                    dsigma: torch.Tensor) -> torch.Tensor:
    """Upstream's analytic step weights stag(s, dsigma) o transp_transition(z, dsigma) in float32 [B, T, V]."""
    stag, trans = float32_terms(den, z, sigma_t, dsigma)
    return stag * trans


def gumbel_argmax(w: torch.Tensor) -> torch.Tensor:
    """Upstream's categorical draw: argmax of w / (1e-10 - log(u + 1e-10)); any sign of w is accepted."""
    return (w / (1e-10 - (torch.rand_like(w) + 1e-10).log())).argmax(-1)


def float32_first_step(den: OracleDenoiser, z: torch.Tensor,
                       steps: int) -> tuple[float, float, torch.Tensor, torch.Tensor]:
    """(dsigma, e - 1, stag, trans) of upstream's first analytic step (t = 1 -> 1 - (1 - eps) / steps) in float32."""
    t = torch.linspace(1, EPS, steps + 1)[0] * torch.ones(1, 1)
    dsigma = (float32_sigma(t) - float32_sigma(t - (1 - EPS) / steps)).reshape(())
    return (float(dsigma), float((-dsigma).exp() - 1),
            *float32_terms(den, z, float32_sigma(t).reshape(()), dsigma))


def float64_first_step(den: OracleDenoiser, z: torch.Tensor, steps: int) -> torch.Tensor:
    """The project's first analytic step weights (float64 ``staggered_step``) at the same state."""
    s = SEDDUniform(den)
    t0, t1 = 1.0, float(torch.linspace(1.0, EPS, steps + 1, dtype=torch.float64)[1])
    alpha = math.exp(-s.sigma(t0))
    q = den.posterior(z, UniformNoise(alpha), leave_one_out=True).to(torch.float64)
    return staggered_step(uniform_scores(q, z, alpha), z, s.sigma(t0) - s.sigma(t1))


def float32_sample(den: OracleDenoiser, n: int, seq_len: int, steps: int, seed: int) -> torch.Tensor:
    """Upstream's pc_sampler (analytic predictor, final denoiser) in its float32 arithmetic, exact log-scores."""
    torch.manual_seed(seed)
    x = torch.randint(0, den.vocab_size, (n, seq_len))
    ts = torch.linspace(1, EPS, steps + 1)
    for i in range(steps):
        t = ts[i] * torch.ones(n, 1)
        cur, nxt = float32_sigma(t)[0], float32_sigma(t - (1 - EPS) / steps)[0]
        x = gumbel_argmax(float32_weights(den, x, cur.reshape(()), (cur - nxt).reshape(())))
    sig = float32_sigma(ts[-1] * torch.ones(n, 1))[0].reshape(())
    return gumbel_argmax(float32_weights(den, x, sig, sig))


def marginal(x: torch.Tensor) -> tuple[float, float]:
    """P(x_0 = 0) and its standard error."""
    p = float((x[:, 0] == 0).double().mean())
    return p, math.sqrt(p * (1 - p) / x.shape[0])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seq-len", type=int, default=2)
    ap.add_argument("--num-sequences", type=int, default=100000)
    ap.add_argument("--steps", nargs="*", type=int, default=[1, 2, 3, 4, 6, 7, 16])
    args = ap.parse_args()
    chain = tiny_chain()
    den = OracleDenoiser(chain)
    z = torch.tensor([[0, 1]])
    print(f"tiny chain V = 3, T = {args.seq_len}, N = {args.num_sequences}; first-step weights at z = (0, 1), "
          "position 0 (token 0, 1, 2)")
    print(f"float32 scores at sigma = {SIGMA_MAX}: {float32_log_scores(den, z, SIGMA_MAX).exp()[0, 0].tolist()}")
    for steps in args.steps:
        dsigma, em1, stag, trans = float32_first_step(den, z, steps)
        w32, w64 = stag * trans, float64_first_step(den, z, steps)
        up = marginal(float32_sample(den, args.num_sequences, args.seq_len, steps, seed=0))
        ours = marginal(SEDDUniform(den).sample(args.num_sequences, args.seq_len, steps, seed=0))
        # the law over V^T, lexicographic (position 0 most significant): its first block is x_0 = 0
        exact = float(sedd_uniform_law(chain, args.seq_len, steps).reshape(3, -1)[0].sum())
        print(f"steps {steps}: dsigma {dsigma:.4f}, float32 e-1 = {em1!r}; float32 stag "
              f"{stag[0, 0].tolist()}")
        print(f"   first-step weights float32 {[round(v, 6) for v in w32[0, 0].tolist()]}, float64 "
              f"{[f'{v:.4g}' for v in w64[0, 0].tolist()]}")
        print(f"   P(x_0 = 0): upstream float32 {up[0]:.4f} +- {up[1]:.4f}, project {ours[0]:.4f} +- {ours[1]:.4f}, "
              f"exact {exact:.4f}")


if __name__ == "__main__":
    main()
