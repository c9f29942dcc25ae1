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
from typing import Any

from dllm_lit.cli.precheck import GROUPS, refused
from dllm_lit.experiments import COMMANDS
from dllm_lit.results.signal_guard import RunStopped

__all__ = ["DllmCLI", "main", "console_main", "RunStopped", "DEFAULT_SEED", "trap_startup_signals"]

#: names of :mod:`dllm_lit.cli.lightning_cli` this module has always offered, loaded on first use: importing this
#: module (``cli.py``) loads no heavy library, so a bad command line is refused in a fraction of a second
_LIGHTNING_NAMES = ("DEFAULT_SEED", "SWITCHABLE", "USER_ERRORS", "DllmCLI", "DllmParser", "check_environment",
                    "check_steps_arguments", "exit_on_user_error", "reset_switched_classes", "run")
#: the line a signal during start-up prints (nothing is written before the run's rows start)
STARTUP_LINE = "stopped: interrupted by {name} during start-up, before any row was sampled"


def __getattr__(name: str) -> Any:
    if name in _LIGHTNING_NAMES:
        from dllm_lit.cli import lightning_cli

        return getattr(lightning_cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _stopped_while_loading(signum: int, frame: Any) -> None:
    """SIGINT / SIGTERM while the libraries load or the run is wired: one line, exit 128 + signal at once.

    A handler that exits rather than an exception: an import or a parser that catches broad exceptions could
    swallow one, and the run would then go on as if no signal had come."""
    sys.stderr.write(STARTUP_LINE.format(name=signal.Signals(signum).name) + "\n")
    sys.stderr.flush()
    os._exit(128 + signum)


def trap_startup_signals() -> None:
    """From the first line of ``cli.py``: SIGINT and SIGTERM end the start-up with one line (the run's own
    handlers, :mod:`dllm_lit.results.signal_guard`, take over while rows are sampled)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _stopped_while_loading)


def _libraries_loaded() -> None:
    """After the heavy imports, Ctrl-C raises KeyboardInterrupt again (:func:`console_main` makes it one line)."""
    if signal.getsignal(signal.SIGINT) is _stopped_while_loading:
        signal.signal(signal.SIGINT, signal.default_int_handler)


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
    """Run the CLI; bad settings end with ``error: <message naming the field>`` and exit status 2 (what the
    command line alone shows, :mod:`dllm_lit.cli.precheck`, before the libraries load).

    Set ``DLLM_LIT_TRACEBACK=1`` to see the full traceback instead.
    """
    argv = sys.argv[1:] if args is None else list(args)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        raise SystemExit(0 if argv else 2)
    if argv[0] in COMMANDS:  # sweep / report / conform / decompose: dllm_lit.experiments
        code = COMMANDS[argv[0]](argv[1:])
        if code in (128 + signal.SIGINT, 128 + signal.SIGTERM):  # a stopped sweep: no slow teardown (below)
            _exit_now(code)
        raise SystemExit(code)
    if argv[0] not in GROUPS:
        print(f"error: unknown verb {argv[0]!r}; one of {', '.join([*GROUPS, *COMMANDS])} (python cli.py --help)",
              file=sys.stderr)
        raise SystemExit(2)
    if refused(argv[0], argv[1:]):  # the command line and the config files alone, before the libraries load
        raise SystemExit(2)
    from dllm_lit.cli.lightning_cli import run

    _libraries_loaded()
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
        print(STARTUP_LINE.format(name="SIGINT"), file=sys.stderr)
        _exit_now(128 + signal.SIGINT)
    except RunStopped as exc:
        _exit_now(int(exc.code))
    finally:  # the run is over: a signal now ends the process the ordinary way
        for sig in (signal.SIGINT, signal.SIGTERM):
            if signal.getsignal(sig) is _stopped_while_loading:
                signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else signal.SIG_DFL)


def _exit_now(code: int) -> None:
    import atexit

    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)

if __name__ == "__main__":
    console_main()
