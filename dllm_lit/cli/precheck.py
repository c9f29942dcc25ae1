"""What the command line can refuse before the heavy libraries load (Lightning, transformers, the samplers).

Loading them takes 10-40 s on a busy machine; a typo should not.  :func:`precheck` reads only the argument
list and the ``--config`` files (PyYAML, plain data only) and refuses, in one line naming the field:

* an option outside the verb's groups (``--steps`` for ``--model.steps``);
* a ``--config`` file that is missing, unreadable, not plain YAML (a ``!!python`` tag) or not a mapping of
  the verb's groups;
* a bad size: ``data.num_sequences``, ``data.seq_len``, ``data.chunk_size``, ``data.batch_size``,
  ``data.val_sequences`` not a positive integer (``seq_len`` >= 2), ``seed_everything`` outside
  [0, 2^32), a steps list longer than :data:`~dllm_lit.engine.budget.MAX_STEP_VALUES`.

Everything else (each class's options) is checked by the full parser once the libraries are loaded.
"""
from __future__ import annotations

import os
import sys
from typing import Any

import yaml

from dllm_lit import checks
from dllm_lit.cli.messages import one_line
from dllm_lit.cli.config_files import read_yaml
from dllm_lit.engine.budget import check_config_arguments

__all__ = ["precheck", "refused", "check_config_files", "check_seed", "check_steps_arguments", "GROUPS"]

#: the option groups of the Lightning verbs (``--<group>`` or ``--<group>.<option>``)
GROUPS: dict[str, tuple[str, ...]] = {
    "predict": ("config", "print_config", "seed_everything", "trainer", "model", "data", "results", "plan",
                "return_predictions", "weights_only"),
    "fit": ("config", "print_config", "seed_everything", "trainer", "model", "data", "results", "plan",
            "ckpt_path", "weights_only"),
}
#: the data module's sizes: name -> smallest value
SIZES = {"num_sequences": 1, "seq_len": 2, "chunk_size": 1, "batch_size": 1, "val_sequences": 1}
#: options that print help or the config and take no value, or an optional one
_HELP = ("-h", "--help", "--print_config")


def _options(args: list[str]) -> list[tuple[str, str | None]]:
    """``[(key, value)]`` of ``--key value`` / ``--key=value`` (value None for an option without one)."""
    out, i = [], 0
    while i < len(args):
        arg = "--config" if str(args[i]) == "-c" else str(args[i])  # LightningCLI's short form of --config
        if not arg.startswith("--"):
            raise ValueError(f"unexpected argument {arg!r} (options are --group.option value)")
        key, eq, value = arg[2:].partition("=")
        if not eq:  # the next argument is the value, unless it is an option itself (a flag: the parser decides)
            value = str(args[i + 1]) if i + 1 < len(args) and not str(args[i + 1]).startswith("--") else None
            i += value is not None
        out.append((key, value))
        i += 1
    return out


def _yaml_value(text: str) -> Any:
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text  # the full parser names the problem


def _check_size(field: str, value: Any) -> None:
    name = field.rsplit(".", 1)[-1]
    if value is None:
        return
    if isinstance(value, float) or isinstance(value, str):
        raise ValueError(f"{field} must be an integer, got {value}")
    checks.integer(field, value, minimum=SIZES[name])


def check_seed(value: Any) -> None:
    """``seed_everything``: true / false / null or an integer in [0, 2^32)."""
    if isinstance(value, bool) or value is None:
        return
    if not (isinstance(value, int) and 0 <= value < 2**32):
        raise ValueError(f"seed_everything must be an integer in [0, 4294967295] or true/false, got {value!r}")


def check_config_files(verb: str, files: list[str]) -> list[dict[str, Any]]:
    """Each ``--config`` file read as plain YAML: a mapping whose keys are the verb's groups."""
    out = []
    for path in files:
        data = read_yaml(path, "--config")
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ValueError(f"--config {path}: a config file is a mapping of {', '.join(GROUPS.get(verb, ()))}")
        if verb in GROUPS:
            unknown = [k for k in data if k not in GROUPS[verb]]
            if unknown:
                raise ValueError(f"--config {path}: unknown key {unknown[0]!r} for {verb}; "
                                 f"allowed: {', '.join(g for g in GROUPS[verb] if g != 'config')}")
        out.append(data)
    return out


def _data_sizes(config: dict[str, Any]) -> dict[str, Any]:
    data = config.get("data")
    if not isinstance(data, dict):
        return {}
    init = data.get("init_args") if isinstance(data.get("init_args"), dict) else data
    return {k: init[k] for k in SIZES if k in init}


def precheck(verb: str, args: list[str]) -> None:
    """Refuse what can be refused from ``args`` and the config files alone (module docstring); one ValueError."""
    args = [str(a) for a in args]
    if any(a in _HELP or a.startswith("--print_config") for a in args):
        return  # help and print_config: the full parser answers
    options = _options(args)
    check_steps_arguments(args)  # first: reading a million-entry list as YAML alone takes minutes
    files = [v for k, v in options if k == "config" and v is not None]
    configs = check_config_files(verb, files)
    for config in configs:
        for key, value in _data_sizes(config).items():
            _check_size(f"data.{key}", value)
        check_seed(config.get("seed_everything"))
    groups = GROUPS.get(verb)
    for key, value in options:
        group = key.split(".", 1)[0]
        if groups is not None and group not in groups:
            hint = f" (did you mean --model.{key}?)" if "." not in key and key in ("steps", "denoiser") else ""
            raise ValueError(f"unknown option --{key} for {verb}{hint}; options are --<group>.<option> with group one "
                             f"of {', '.join(g for g in groups if g not in ('config', 'print_config'))}, or --config")
        if value is None:
            continue
        name = key.rsplit(".", 1)[-1]
        if name in SIZES and key in (f"data.{name}", f"data.init_args.{name}"):
            _check_size(f"data.{name}", _yaml_value(value))
        elif key == "seed_everything":
            check_seed(_yaml_value(value))


def check_steps_arguments(args) -> None:
    """Sizes the parser must not see (:func:`~dllm_lit.engine.budget.check_config_arguments`): a value or config
    file over 256 KiB, or a steps list longer than :data:`~dllm_lit.engine.budget.MAX_STEP_VALUES`, on the command
    line or in a config file (flow or block YAML), is refused before parsing (parsing a million-entry list alone
    took minutes and most of a GB)."""
    if isinstance(args, (list, tuple)):
        check_config_arguments([str(a) for a in args])


def refused(verb: str, args: list[str]) -> bool:
    """:func:`precheck`; True after printing ``error: <one line>`` when it refuses (the caller exits with 2)."""
    try:
        precheck(verb, args)
    except (ValueError, OSError) as exc:
        if os.environ.get("DLLM_LIT_TRACEBACK"):
            raise
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return True
    return False
