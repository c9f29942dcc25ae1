"""Run a W&B sweep file's grid locally, without a W&B server: ``python cli.py sweep sweeps/<name>.yaml``.

A sweep file (``sweeps/*.yaml``) is a W&B grid sweep whose ``program`` is ``sweeps/run_point.py``;
its ``parameters`` (each ``{values: [...]}`` or ``{value: x}``) span the grid.  This runner expands
the grid in file order (the last parameter varies fastest) and runs every point as its own process
(``python -m dllm_lit.experiments.point --key=value ...``, exactly what a W&B agent runs), one after
another or ``--jobs`` at a time (default: one per CUDA device, each child seeing one device; one
on a CPU machine).  A point whose folder already holds a complete run for the same parameters
(``point.json`` and a complete ``metrics.json``) is skipped; an unfinished point resumes row by row.

SIGINT / SIGTERM stop the running points (each commits its finished rows and stops; a point still running
:data:`~dllm_lit.util.workers.GRACE_SECONDS` later is killed with its process group, losing no committed row) and the
runner exits with 128 + the signal number; rerunning the command finishes the rest.  A point whose runner dies
(SIGKILL included) is ended by the kernel (:func:`~dllm_lit.util.workers.die_with_parent`).

    python cli.py sweep sweeps/paper_grid.yaml                         # the whole grid
    python cli.py sweep sweeps/paper_grid.yaml --set num_sequences=64 --set seq_len=128 --set steps=8,64
    python cli.py sweep sweeps/paper_grid.yaml --dry-run              # list the points
    python cli.py sweep sweeps/paper_grid.yaml --wandb                # log every point (WANDB_MODE=offline works)
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from dllm_lit.cli.config_files import read_yaml, yaml_problem
from dllm_lit.util.workers import GRACE_SECONDS, die_with_parent, end_processes

__all__ = ["load_sweep", "grid_points", "point_argv", "main"]


def load_sweep(path: str | Path) -> dict[str, Any]:
    """The sweep file as data; checks that it is a grid over parameters."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"sweep file not found: {path}")
    spec = read_yaml(path, "sweep file") or {}
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a sweep file is a mapping with method and parameters")
    if spec.get("method", "grid") != "grid":
        raise ValueError(f"{path}: the local runner runs grid sweeps only (method: {spec.get('method')!r})")
    params = spec.get("parameters")
    if not isinstance(params, dict) or not params:
        raise ValueError(f"{path}: no parameters")
    for key, p in params.items():
        if not isinstance(p, dict) or not ("values" in p or "value" in p):
            raise ValueError(f"{path}: parameter {key!r} needs 'values: [...]' or 'value: x'")
    return spec


def _parse_override(text: str) -> tuple[str, list[Any]]:
    key, eq, value = text.partition("=")
    if not eq or not key:
        raise ValueError(f"--set takes key=value or key=v1,v2 (e.g. num_sequences=64), got {text!r}")
    try:
        values = [yaml.safe_load(v) for v in value.split(",")] if not value.startswith("[") else yaml.safe_load(value)
    except yaml.YAMLError as exc:
        raise ValueError(f"--set {key}: not plain YAML ({yaml_problem(exc)})") from None
    return key, values


def grid_points(spec: dict[str, Any], overrides: list[str] = ()) -> list[dict[str, Any]]:
    """Every point of the grid (dicts in parameter order); ``overrides`` (``key=v1,v2``) replace or add parameters."""
    params: dict[str, list[Any]] = {k: (list(p["values"]) if "values" in p else [p["value"]])
                                    for k, p in spec["parameters"].items()}
    for text in overrides:
        key, values = _parse_override(text)
        params[key] = values
    keys = list(params)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(params[k] for k in keys))]


def point_argv(point: dict[str, Any]) -> list[str]:
    """``--key=value`` arguments, as a W&B agent passes them (None values are left out)."""
    return [f"--{k}={v}" for k, v in point.items() if v is not None]


def _sampler_class(pns: argparse.Namespace) -> tuple[str, str | None]:
    """Where a point's ``model`` class comes from and its class path (its config files, then its options)."""
    where, path = "", None
    for field in ("config", "data_config"):
        file = getattr(pns, field)
        data = read_yaml(file, f"--{field}") if file else None
        model = data.get("model") if isinstance(data, dict) else None
        if isinstance(model, (str, dict)):
            where, path = f"{file}: model.class_path", model if isinstance(model, str) else model.get("class_path", path)
    for key, value in pns.extra:
        if key in ("model", "model.class_path") and not str(value).lstrip().startswith("{"):
            where, path = f"--{key}", value
    return where, path


def check_points(points: list[argparse.Namespace]) -> None:
    """Every point's files exist and are plain YAML, and its ``model`` is a sampler class (:mod:`dllm_lit.cli.config_classes`):
    a bad point is refused in one line before any point runs."""
    from dllm_lit.cli.config_classes import documented_class

    checked: set[str] = set()
    for pns in points:
        where, path = _sampler_class(pns)
        if path is not None and path not in checked:
            documented_class(path, "sampler", where)
            checked.add(path)


def _finished(out_dir: Path, params: dict[str, Any]) -> bool:
    try:
        saved = json.loads((out_dir / "point.json").read_text())
        meta = json.loads((out_dir / "metrics.json").read_text()).get("meta", {})
    except (OSError, ValueError, AttributeError):
        return False
    if isinstance(saved, dict):  # a point.json written before options were typed holds them as text
        from dllm_lit.experiments.point import option_value

        saved = {k: option_value(v) if isinstance(v, str) and "." in k else v for k, v in saved.items()}
    return saved == params and bool(meta.get("complete"))


def _devices(jobs: int | None) -> list[str | None]:
    if jobs is not None:
        return [None] * jobs
    try:
        import torch

        n = torch.cuda.device_count()
    except Exception:
        n = 0
    return [str(i) for i in range(n)] if n > 1 else [None]


def _point_start() -> None:
    """In the point's process before it runs Python: end it when the runner ends (SIGTERM, so it commits)."""
    die_with_parent(signum=signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="cli.py sweep", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", help="a sweep file, e.g. sweeps/paper_grid.yaml")
    ap.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=V1[,V2...]",
                    help="replace a parameter's values (or add one), e.g. --set num_sequences=64 --set steps=8,64")
    ap.add_argument("--output_root", default=None, help="where point folders go (default: the file's output_root)")
    ap.add_argument("--jobs", type=int, default=None, help="points run at once (default: one per CUDA device, else 1)")
    ap.add_argument("--wandb", action="store_true", help="log every point to W&B (WANDB_MODE=offline needs no account)")
    ap.add_argument("--force", action="store_true", help="run finished points again (rows still resume)")
    ap.add_argument("--dry-run", action="store_true", help="print the points and exit")
    ap.add_argument("--quiet", action="store_true", help="no progress output (point logs still go to <point>/run.log)")
    ns = ap.parse_args(argv)
    if ns.jobs is not None and ns.jobs < 1:
        ap.error(f"--jobs must be >= 1, got {ns.jobs}")
    try:
        spec = load_sweep(ns.sweep)
        points = grid_points(spec, ns.overrides)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from dllm_lit.experiments.point import parse, point_name, point_params

    name = Path(ns.sweep).stem
    jobs, parsed = [], []
    for p in points:
        p = dict(p)
        if ns.output_root is not None:
            p["output_root"] = ns.output_root
        p.setdefault("output_root", str(Path("outputs") / "sweeps" / name))
        if not ns.wandb:
            p["no_wandb"] = True
        else:
            p.setdefault("group", name)
        try:
            pns = parse(point_argv(p))
        except SystemExit:
            print(f"error: bad point {p}", file=sys.stderr)
            return 2
        parsed.append(pns)
        out_dir = Path(pns.output_root) / point_name(pns)
        jobs.append((point_name(pns), out_dir, point_params(pns), point_argv(p)))
    names = [j[0] for j in jobs]
    if not ns.dry_run:
        try:
            check_points(parsed)
        except (ValueError, FileNotFoundError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        print(f"error: points with the same folder name {dupes}: a swept parameter does not reach the name",
              file=sys.stderr)
        return 2
    if ns.dry_run:
        for pname, out_dir, _, argv_ in jobs:
            print(f"{out_dir}: {' '.join(argv_)}")
        return 0
    todo = [j for j in jobs if ns.force or not _finished(j[1], j[2])]
    say = (lambda *a: None) if ns.quiet else (lambda *a: print(*a, file=sys.stderr, flush=True))
    say(f"{name}: {len(jobs)} points, {len(jobs) - len(todo)} already finished")
    slots = _devices(ns.jobs)
    inherit = len(slots) == 1 and not ns.quiet
    running: dict[subprocess.Popen, tuple[str, Any]] = {}
    free = list(slots)
    stop: dict[str, Any] = {"signum": None, "at": 0.0}
    failed: list[str] = []

    def on_signal(signum, frame):
        if stop["signum"] is None:
            stop["signum"], stop["at"] = signum, time.monotonic()
        for proc in running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    started = time.time()
    try:
        queue = list(todo)
        done = 0
        while (queue or running) and True:
            while queue and free and stop["signum"] is None:
                pname, out_dir, _, argv_ = queue.pop(0)
                slot = free.pop(0)
                env = dict(os.environ)
                if slot is not None:
                    env["CUDA_VISIBLE_DEVICES"] = slot
                out_dir.mkdir(parents=True, exist_ok=True)
                cmd = [sys.executable, "-m", "dllm_lit.experiments.point", *argv_]
                if not inherit:
                    cmd.append("--trainer.enable_progress_bar=false")
                log = None if inherit else open(out_dir / "run.log", "ab")
                say(f"[{done + len(running) + 1}/{len(todo)}] {pname}")
                proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                                        start_new_session=True, preexec_fn=_point_start)
                running[proc] = (pname, slot, log)
            if not running:
                break
            if stop["signum"] is not None and time.monotonic() - stop["at"] > GRACE_SECONDS:
                end_processes([p.pid for p in running], grace=0.0, groups=True)  # each point leads its group
            time.sleep(0.2)
            for proc in [p for p in running if p.poll() is not None]:
                pname, slot, log = running.pop(proc)
                if log is not None:
                    log.close()
                free.append(slot)
                done += 1
                if proc.returncode != 0 and stop["signum"] is None:
                    failed.append(pname)
                    say(f"  {pname} failed (exit {proc.returncode})" + ("" if inherit else "; see its run.log"))
        if stop["signum"] is not None:
            say(f"{name}: stopped by {signal.Signals(stop['signum']).name}; rerun the same command to finish")
            return 128 + int(stop["signum"])
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
    say(f"{name}: {len(todo) - len(failed)} of {len(todo)} points ran in {time.time() - started:.0f}s"
        + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
