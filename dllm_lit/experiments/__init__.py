"""Experiments as a researcher runs them: grid points, the local sweep runner and the report.

``python cli.py sweep sweeps/<name>.yaml`` runs a sweep file's grid without a W&B server
(:mod:`~dllm_lit.experiments.sweep`); ``python cli.py report RUN_DIRS... --out DIR`` aggregates
finished runs into tables and figures (:mod:`~dllm_lit.experiments.report`); ``python cli.py decompose
--config configs/decompose.yaml`` splits a learned denoiser's error from its sampler's
(:mod:`~dllm_lit.experiments.decompose`); one grid point is
:mod:`~dllm_lit.experiments.point` (what ``sweeps/run_point.py`` and W&B agents run).
"""
from __future__ import annotations

from collections.abc import Callable


def _sweep(argv: list[str]) -> int:
    from dllm_lit.experiments.sweep import main

    return main(argv)


def _report(argv: list[str]) -> int:
    from dllm_lit.experiments.report import main

    return main(argv)


def _conform(argv: list[str]) -> int:
    from dllm_lit.experiments.conform_cli import main

    return main(argv)


def _decompose(argv: list[str]) -> int:
    from dllm_lit.cli.precheck import refused

    if refused("decompose", argv):  # a missing or unsafe config file, a bad size: before the libraries load
        return 2
    from dllm_lit.experiments.decompose import main

    main(argv)
    return 0


#: subcommands of ``cli.py`` that are not Lightning's: name -> main(argv) -> exit status
COMMANDS: dict[str, Callable[[list[str]], int]] = {"sweep": _sweep, "report": _report, "conform": _conform,
                                                   "decompose": _decompose}

__all__ = ["COMMANDS"]
