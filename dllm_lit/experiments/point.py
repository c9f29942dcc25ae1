"""One point of an experiment grid: ``cli.py predict`` for one (sampler config, options, steps, seed).

W&B agents call ``sweeps/run_point.py`` (which is this module) with ``--key=value`` arguments, one
per parameter of the sweep (``sweeps/*.yaml``); the local runner (``cli.py sweep``) calls it the
same way.  Known keys: ``config``, ``data_config``, ``steps``, ``seed``, ``reference``,
``num_sequences``, ``seq_len``, ``chunk_size``, ``devices``, ``project``, ``group``,
``output_root``, ``no_wandb``; any ``--model.*``, ``--data.*``, ``--results.*`` or
``--trainer.*`` key is passed on to the CLI unchanged (e.g. ``--model.top_p=1.0``,
``--results.genppl_model=gpt2-large``).

The point's name says everything that varies: ``<config>[-<data>][-<option><value>...]-steps<k>-seed<s>``,
e.g. ``remdm_conf-top_p1-steps64-seed123``; results go to ``<output_root>/<name>`` and, unless
``--no_wandb``, to W&B (run name = the point's name, run config = the point's parameters plus
the run metadata the results writer logs).  A point that finished writes ``point.json`` (its
parameters) beside ``metrics.json``, so the local runner can skip it.

    WANDB_MODE=offline python sweeps/run_point.py --config configs/mdlm.yaml --steps 64
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from dllm_lit.util.atomic import atomic_write_text

__all__ = ["build_args", "option_value", "parse", "point_name", "point_params", "run", "main", "PASSTHROUGH"]

#: CLI groups whose options a point passes on unchanged
PASSTHROUGH = ("model.", "data.", "results.", "trainer.")


def _fmt(value: Any) -> str:
    text = str(value)
    try:
        text = f"{float(text):g}"
    except ValueError:
        pass
    return "".join(c if c.isalnum() or c in "._" else "-" for c in text).strip("-")


def point_name(ns: argparse.Namespace) -> str:
    """``<config>[-<data>][-<option><value>...][-steps<k>]-seed<s>`` (options: the pass-through model/data/results ones)."""
    parts = [Path(ns.config).stem]
    if ns.data_config:
        parts.append(Path(ns.data_config).stem)
    for key, value in ns.extra:
        if key.startswith(("trainer.",)) or key in ("data.num_sequences", "data.seq_len", "data.chunk_size"):
            continue
        parts.append(f"{key.rsplit('.', 1)[-1]}{_fmt(value)}")
    if ns.steps is not None:
        parts.append(f"steps{ns.steps}")
    parts.append(f"seed{ns.seed}")
    return "-".join(parts)


def option_value(text: str) -> Any:
    """A passed-on option's value as data: a JSON number, boolean, null, list or object (``1.0``, ``10``, ``1e-4``,
    ``true``, ``[8, 16]``), a number such as ``.5``, or else the text itself; NaN and infinities stay text."""
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    try:
        return json.loads(text, parse_constant=refuse)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def point_params(ns: argparse.Namespace) -> dict[str, Any]:
    """The point's parameters as data (its W&B run config and ``point.json``): passed-on options typed by
    :func:`option_value`, so W&B stores ``model.temperature`` as a number."""
    out = {k: getattr(ns, k) for k in ("config", "data_config", "steps", "seed", "reference", "num_sequences",
                                       "seq_len", "chunk_size")}
    # trainer options do not change results
    out.update({k: option_value(v) for k, v in ns.extra if not k.startswith("trainer.")})
    return out


def build_args(ns: argparse.Namespace) -> list[str]:
    """The ``cli.py predict`` argument list: configs first, then overrides."""
    name = point_name(ns)
    out_dir = Path(ns.output_root) / name
    args = ["predict", "--config", ns.config]
    if ns.data_config:
        args += ["--config", ns.data_config]
    if ns.steps is not None:
        args += ["--model.steps", f"[{ns.steps}]"]
    args += ["--plan.reference", str(ns.reference).lower(), "--seed_everything", str(ns.seed),
             "--trainer.default_root_dir", str(out_dir)]
    for key in ("num_sequences", "seq_len", "chunk_size"):
        if getattr(ns, key) is not None:
            args += [f"--data.{key}", str(getattr(ns, key))]
    for key, value in ns.extra:
        args += [f"--{key}", str(value)]
    if ns.devices:
        args += ["--trainer.devices", ns.devices]
        if ns.devices not in ("1", "cpu"):
            args += ["--trainer.strategy", "ddp"]
    if not ns.no_wandb:
        init: dict[str, Any] = {"project": ns.project, "name": name, "save_dir": str(out_dir),
                                "config": {"point": point_params(ns)}}
        if ns.group:
            init["group"] = ns.group
        args += ["--trainer.logger", json.dumps({"class_path": "lightning.pytorch.loggers.WandbLogger",
                                                 "init_args": init})]
    return args


def _bool(text: str) -> bool:
    return str(text).lower() in ("1", "true", "yes")


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", required=True, help="sampler config, e.g. configs/remdm_conf.yaml")
    ap.add_argument("--data_config", default=None, help="optional data config, e.g. configs/data/synthetic.yaml")
    ap.add_argument("--steps", type=int, default=None, help="one step count (samplers without steps, e.g. AR: omit)")
    ap.add_argument("--seed", type=int, default=123)
    ap.add_argument("--reference", type=_bool, default=False,
                    help="also write the reference row of exact chain samples (the AR baseline)")
    ap.add_argument("--num_sequences", type=int, default=None)
    ap.add_argument("--seq_len", type=int, default=None)
    ap.add_argument("--chunk_size", type=int, default=None)
    ap.add_argument("--devices", default=None, help="Lightning devices, e.g. 'auto' or '4' (DDP when > 1)")
    ap.add_argument("--project", default="dllm_lit")
    ap.add_argument("--group", default=None, help="W&B group (the sweep's name)")
    ap.add_argument("--output_root", default="outputs/sweeps")
    ap.add_argument("--no_wandb", nargs="?", const=True, default=False, type=_bool,
                    help="run without the W&B logger")
    ns, rest = ap.parse_known_args(argv)
    extra: list[tuple[str, str]] = []
    i = 0
    while i < len(rest):
        item = rest[i]
        if not item.startswith("--"):
            ap.error(f"unexpected argument {item!r}")
        key, eq, value = item[2:].partition("=")
        if not key.startswith(PASSTHROUGH):
            ap.error(f"unknown option --{key} (a point passes on only --model.*, --data.*, --results.*, --trainer.*)")
        if not eq:
            if i + 1 >= len(rest):
                ap.error(f"--{key} needs a value")
            value, i = rest[i + 1], i + 1
        extra.append((key, value))
        i += 1
    ns.extra = extra
    if ns.steps is not None and ns.steps < 1:
        ap.error(f"--steps must be >= 1, got {ns.steps}")
    return ns


def run(ns: argparse.Namespace) -> None:
    """Run the point; on success write ``point.json`` beside its results."""
    import sys

    from dllm_lit.cli.lightning_cli import run as run_cli  # the predict CLI (never the verb dispatcher: no cycle)

    argv, sys.argv = sys.argv, sys.argv[:1]  # the CLI gets its arguments from build_args only
    try:
        run_cli(build_args(ns))
    finally:
        sys.argv = argv
    out_dir = Path(ns.output_root) / point_name(ns)
    atomic_write_text(out_dir / "point.json", json.dumps(point_params(ns), indent=2, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> None:
    run(parse(argv))


if __name__ == "__main__":
    main()
