"""CPU seconds of the editing samplers (WINO, LLaDA 2.1, P2, SlowFast) against LLaDA, one config after the other.

    python benchmarks/editing.py [--num-sequences 64] [--seq-len 1024] [--steps 8 64 1024] [--configs p2 llada]

Each config's shipped options (``configs/<name>.yaml``) on the bundled English chain with the exact oracle, one
thread, seed 7: ``generate_with_nfe`` per step count, timed by ``time.process_time``.  Prints CPU seconds per step
count, the total, the ratio to LLaDA's total and a sha256 of the samples (for comparing two commits' draws).
"""
from __future__ import annotations

import argparse
import hashlib
import time
from pathlib import Path

import torch
import yaml

from dllm_lit import samplers
from dllm_lit.sources import english_char_chain

CONFIGS = ("llada", "llada21", "p2", "wino", "slowfast")
ROOT = Path(__file__).resolve().parents[1]


def build(name: str):
    """The config's sampler class and init args (steps dropped: the benchmark's own)."""
    model = yaml.safe_load((ROOT / "configs" / f"{name}.yaml").read_text())["model"]
    options = {k: v for k, v in (model.get("init_args") or {}).items() if k != "steps"}
    return getattr(samplers, model["class_path"].rsplit(".", 1)[1]), options


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--num-sequences", type=int, default=64)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--steps", type=int, nargs="+", default=[8, 64, 1024])
    ap.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=CONFIGS)
    a = ap.parse_args()
    torch.set_num_threads(1)
    chain, idx, totals = english_char_chain(), torch.arange(a.num_sequences), {}
    for name in a.configs:
        cls, options = build(name)
        digest, per = hashlib.sha256(), []
        for steps in a.steps:
            s = cls(**options).connect(chain)
            s.check_run(a.seq_len, steps)
            t0 = time.process_time()
            x, _ = s.generate_with_nfe(idx, a.seq_len, steps, 7)
            per.append(time.process_time() - t0)
            digest.update(x.to(torch.int64).contiguous().numpy().tobytes())
        totals[name] = sum(per)
        ratio = f"  {totals[name] / totals['llada']:.2f}x llada" if "llada" in totals else ""
        print(f"{name:9s} " + " ".join(f"{s}:{t:7.2f}" for s, t in zip(a.steps, per)) +
              f"  total {totals[name]:7.2f} s{ratio}  samples {digest.hexdigest()[:12]}", flush=True)


if __name__ == "__main__":
    main()
