"""Command-line entry point: a LightningCLI over samplers, denoiser training and the Markov data module.

    python cli.py predict --config configs/mdlm.yaml [--model.steps 64] [--data.num_sequences 128]
                          [--data.seq_len 256] [--seed_everything 7] [--plan.reference false]
    python cli.py fit --config configs/train_denoiser.yaml      # train a learned denoiser

Two subcommands: ``predict`` runs a sampler (``model`` is a :class:`~dllm_lit.samplers.base.Sampler`),
``fit`` trains a denoiser (``model`` is a :class:`~dllm_lit.training.DenoiserTraining`); before each,
the run is wired by :mod:`dllm_lit.engine`.
    python cli.py sweep sweeps/paper_grid.yaml [--set num_sequences=64]   # a sweep's grid, locally
    python cli.py report outputs/sweeps/paper_grid --out reports/paper_grid  # tables and figures

The sampler class is chosen by ``model.class_path`` in the YAML; the chain by ``data.source``
(default: the bundled English character chain, N = 512, T = 1024, seed 123).  Before predict,
:func:`dllm_lit.engine.connect` wires the run; every run writes ``metrics.json`` and
``metrics.csv`` into ``results.output_dir`` (default ``trainer.default_root_dir``, itself
``outputs/<config name>`` unless set).
"""
from __future__ import annotations

import os
import signal
import sys

from dllm_lit.experiments import COMMANDS
# the LightningCLI of predict / fit, and names this module has always offered
from dllm_lit.lightning_cli import (DEFAULT_SEED, SWITCHABLE, USER_ERRORS, DllmCLI, DllmParser, RunStopped,  # noqa: F401
                                    check_environment, check_steps_arguments, exit_on_user_error,
                                    reset_switched_classes, run)

__all__ = ["DllmCLI", "main", "console_main", "RunStopped", "DEFAULT_SEED"]


#: ``cli.py --help``: every verb, one line each (``cli.py <verb> --help`` gives its options)
USAGE = """usage: python cli.py VERB [options]     (python cli.py VERB --help lists a verb's options)

verbs:
  predict    sample with a sampler against the exact oracle and write metrics, samples and figures
             python cli.py predict --config configs/remdm_conf.yaml
  fit        train a learned denoiser on exact chain samples
             python cli.py fit --config configs/train_denoiser.yaml
  sweep      run a sweep file's grid locally (points resume, finished ones are skipped)
             python cli.py sweep sweeps/paper_grid.yaml [--dry-run] [--set num_sequences=64]
  report     tables (Markdown, LaTeX) and figures from finished runs
             python cli.py report outputs/sweeps/paper_grid --out reports/paper_grid
  decompose  split a learned denoiser's error from its sampler's error
             python cli.py decompose --config configs/decompose.yaml
  conform    does a sampler (yours too) follow a rule's exact law? chi-square goodness of fit on a tiny chain
             python cli.py conform --help     (its examples, and every named law with its options)

Every sampler has a config in configs/; docs/README.md describes samplers, metrics and the oracle."""


def main(args=None) -> DllmCLI:
    """Run the CLI; bad settings end with ``error: <message naming the field>`` and exit status 2.

    Set ``DLLM_LIT_TRACEBACK=1`` to see the full traceback instead.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    if argv and argv[0] in COMMANDS:  # sweep / report / decompose: dllm_lit.experiments
        code = COMMANDS[argv[0]](argv[1:])
        if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):  # a stopped sweep: no slow teardown (below)
            _exit_now(code)
        raise SystemExit(code)
    return run(args)


def console_main() -> None:
    """The command-line entry point (``python cli.py``): :func:`main`, plus

    * Ctrl-C before the run's own signal handling starts (parsing, wiring) ends with one line, no traceback;
    * after an interrupted run the process exits at once: the interpreter's teardown of a large heap took
      14-18 s after an interrupted LLaDA run, so atexit handlers run, the streams are flushed and the process
      ends with ``os._exit`` (committed files are already on disk, written atomically).
    """
    try:
        main()
    except KeyboardInterrupt:
        print("stopped: interrupted by SIGINT during start-up, before any row was sampled", file=sys.stderr)
        _exit_now(128 + signal.SIGINT)
    except RunStopped as exc:
        _exit_now(int(exc.code))


def _exit_now(code: int) -> None:
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

if __name__ == "__main__":
    console_main()
