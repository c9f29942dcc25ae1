"""Small utilities below everything else, one job each; nothing here imports another part of dllm_lit.

``atomic`` (files written whole or not at all), ``hashing`` (stable digests of tensors and settings),
``code_identity`` (the source a sampler's rows depend on), ``indices`` (index helpers shared by the fast paths),
``reductions`` (fixed-order sums), ``safe_load`` (``torch.load`` with ``weights_only``), ``lazy_exports``
(names a package loads on first use), ``console`` (what the command line prints), ``user_code`` (calling a user's
code), ``workers`` / ``orphan`` (processes that end with their parent), ``registration`` (the clash check every registry's
``register()`` shares).  The argument checks (:mod:`dllm_lit.checks`)
and the counter-based randomness (:mod:`dllm_lit.rng`) stay at the top of the package: every module and every
recipe imports them.
"""
