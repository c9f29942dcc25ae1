"""Import cost of dllm_lit's entry points: CPU seconds of a fresh interpreter that imports one module, and the
module's cumulative time from ``python -X importtime``, median over repeats.

    python benchmarks/import_time.py [--repeats 3] [--root PATH]

``--root`` measures another checkout (its ``dllm_lit`` first on ``sys.path``), e.g. the commit before a change.
The baseline row (``import torch``) is the floor every entry point pays.
"""
from __future__ import annotations

import argparse
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: (what, statement)
ENTRY_POINTS = [
    ("torch (floor)", "import torch"),
    ("dllm_lit.denoisers", "import dllm_lit.denoisers"),
    ("dllm_lit.denoisers.oracle", "import dllm_lit.denoisers.oracle"),
    ("dllm_lit.samplers", "import dllm_lit.samplers"),
    ("dllm_lit.samplers.draws", "import dllm_lit.samplers.draws"),
    ("dllm_lit.samplers.LLaDA", "from dllm_lit.samplers import LLaDA"),
    ("dllm_lit.results.writer", "import dllm_lit.results.writer"),
    ("dllm_lit.cli", "import dllm_lit.cli"),
]


def measure(statement: str, root: Path) -> tuple[float, float, float, bool]:
    """(CPU seconds, wall seconds, -X importtime cumulative seconds of the last top-level import, lightning loaded)."""
    code = f"{statement}\nimport sys\nprint('lightning' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(root)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", code], cwd=root, env=env, capture_output=True,
                         text=True, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    top = [int(m.group(1)) for m in re.finditer(r"import time:\s+\d+ \|\s+(\d+) \| \S", out.stderr)]
    return cpu, wall, sum(top) / 1e6, out.stdout.strip().endswith("True")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--root", type=Path, default=ROOT)
    args = ap.parse_args()
    print(f"checkout {args.root}; median of {args.repeats}; CPU = user + system seconds of the child process")
    print(f"{'import':32s} {'CPU s':>7s} {'wall s':>7s} {'importtime s':>13s}  lightning")
    for what, statement in ENTRY_POINTS:
        runs = [measure(statement, args.root) for _ in range(args.repeats)]
        cpu, wall, imp = (statistics.median(r[i] for r in runs) for i in range(3))
        print(f"{what:32s} {cpu:7.2f} {wall:7.2f} {imp:13.2f}  {'yes' if runs[0][3] else 'no'}")


if __name__ == "__main__":
    main()
