"""Exact predictions for random-order unmasking on a first-order Markov chain (pure maths, no Lightning).

* :mod:`~dllm_lit.theory.information`: the pair information g(d) = I(X_0; X_d), the information curve
  Z_j of a random revealed set, total correlation and dual total correlation of the chain's law.
* :mod:`~dllm_lit.theory.schedules`: the expected KL(chain || sampler | order) of a schedule of round
  sizes (fixed, or drawn by independent per-position coins as MDLM does), and the DP-optimal schedule.
* :mod:`~dllm_lit.theory.bounds`: TC / DTC / full-conditional bounds on that KL and the ``tc`` / ``dtc``
  schedule templates minimising them.
* :mod:`~dllm_lit.theory.monte_carlo`: exact-sample Monte Carlo estimates of Z and of a schedule's expected KL
  (with a t interval) where no closed form is implemented (HMM worlds).
* :mod:`~dllm_lit.theory.hmm_information`: Z of any HMM world exactly by enumeration (tiny worlds), and the
  Rao-Blackwellised conditionals those estimates can use instead (same samples and orders, lower variance).

Formulas, sources and what is exact: ``docs/theory.md``.
"""
from dllm_lit.theory.bounds import blocks_bounds, curve_totals, schedule_bounds, template_schedule
from dllm_lit.theory.information import (ChainInformation, dual_total_correlation, information_curve,
                                         pair_information, total_correlation)
from dllm_lit.theory.schedules import (binomial_rounds_kl, blocks_kl, optimal_schedule, round_sizes_kl, schedule_kl_curve,
                                       uniform_rounds)

__all__ = ["ChainInformation", "pair_information", "information_curve", "total_correlation",
           "dual_total_correlation", "round_sizes_kl", "binomial_rounds_kl", "optimal_schedule",
           "uniform_rounds", "schedule_kl_curve", "blocks_kl", "schedule_bounds", "blocks_bounds", "curve_totals",
           "template_schedule"]
