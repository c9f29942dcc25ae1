"""The command line, top floor of the package (``python cli.py VERB``, ``python -m dllm_lit.cli VERB``).

=================  ==============================================================================================
``dispatch``       the verbs: :func:`main`, :func:`console_main`, ``USAGE``; light (a bad command line is refused
                   before any heavy library loads)
``precheck``       what the command line and the config files alone can refuse
``messages``       one-line messages for user errors
``config_files``   reading a user's YAML (plain data only)
``config_classes`` the one allow-list of classes a config may instantiate
``lightning_cli``  the LightningCLI of ``predict`` and ``fit``
``wiring``         :func:`connect` / :func:`predict`: the one place where a run's pieces meet
=================  ==============================================================================================

The names below load on first use: the experiments import ``lightning_cli`` (the predict parser), and importing
a module of this package must not import the dispatcher, which imports the experiments.
"""
from __future__ import annotations

from dllm_lit.util.lazy_exports import lazy_exports

_EXPORTS = {name: "dispatch" for name in ("main", "console_main", "trap_startup_signals", "USAGE", "RunStopped")}
_EXPORTS.update({name: "lightning_cli" for name in ("DllmCLI", "DllmParser", "DEFAULT_SEED")})
_EXPORTS.update({name: "wiring" for name in ("connect", "connect_training", "predict")})

__all__ = list(_EXPORTS)

__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
