"""The exact laws the sampler tests compare with: they live in the package (:mod:`dllm_lit.exact`), so that
``python cli.py conform`` and users' own tests use the same references."""
from dllm_lit.exact import *  # noqa: F401,F403
from dllm_lit.exact import __all__  # noqa: F401
