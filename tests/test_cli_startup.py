"""A refusal costs no start-up: what the command line and the config files alone show is refused before
torch, Lightning, transformers or the samplers load (dllm_lit.cli.precheck), in one line; ``--help`` lists every verb."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "transformers", "dllm_lit.samplers.base", "dllm_lit.cli.lightning_cli")

#: runs cli.py as ``python cli.py ...`` would, once per argument list, and reports the exit status, stderr and
#: which heavy modules were loaded at the point of refusal
PROBE = """
import contextlib, io, json, runpy, sys
out = []
for argv in json.loads(sys.argv[1]):
    sys.argv = ["cli.py", *argv]
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            runpy.run_path("cli.py", run_name="__main__")
            code = 0
        except SystemExit as exc:
            code = exc.code
    out.append([code, err.getvalue(), sorted(m for m in HEAVY if m in sys.modules)])
print(json.dumps(out))
"""


def test_bad_command_lines_are_refused_before_the_libraries_load(tmp_path) -> None:
    unsafe = tmp_path / "unsafe.yaml"
    unsafe.write_text("model: !!python/object/apply:os.system ['touch marker']\n")
    foreign = tmp_path / "foreign.yaml"
    foreign.write_text("model: {class_path: dllm_lit.samplers.MDLM}\nsteps: [4]\n")
    cases = [
        (["predict", "--config", "configs/mdlm.yaml", "--steps", "4"], "unknown option --steps for predict (did you mean --model.steps?)"),
        (["predict", "--config", "configs/no_such.yaml"], "--config: no such file 'configs/no_such.yaml'"),
        (["predict", "--config", "configs/mdlm.yaml", "--data.seq_len", "0"], "data.seq_len must be an integer >= 2, got 0"),
        (["predict", "--config", "configs/mdlm.yaml", "--data.num_sequences=-3"], "data.num_sequences must be a positive integer"),
        (["predict", "--config", "configs/mdlm.yaml", "--seed_everything", "-1"], "seed_everything must be an integer in"),
        (["predict", "--config", str(unsafe)], "is not plain YAML (line 1: could not determine a constructor"),
        (["predict", "--config", str(foreign)], "unknown key 'steps' for predict"),
        (["fit", "--config", "configs/train_denoiser.yaml", "--data.batch_size", "0"], "data.batch_size must be a positive"),
        (["decompose", "--config", "configs/no_such.yaml"], "--config: no such file"),
        (["sweep", "sweeps/no_such.yaml"], "sweep file not found"),
        (["conform", "--sampler", "configs/mdlm.yaml", "--law", "mdlm", "--alpha", "2"], "--alpha must lie in (0, 1)"),
        (["report", "runs/no_such", "--out", str(tmp_path / "report")], "run folder not found: runs/no_such"),
        (["predcit", "--config", "configs/mdlm.yaml"], "unknown verb 'predcit'; one of predict, fit, sweep"),
    ]
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    proc = subprocess.run([sys.executable, "-c", code, json.dumps([c for c, _ in cases])], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-2000:]
    for (argv, message), (status, err, heavy) in zip(cases, json.loads(proc.stdout.splitlines()[-1])):
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], (argv, err)
        assert heavy == [], (argv, heavy)  # refused before any heavy library was imported
    assert not (ROOT / "marker").exists()


def test_help_lists_every_verb() -> None:
    from dllm_lit.cli import USAGE
    from dllm_lit.cli.precheck import GROUPS
    from dllm_lit.experiments import COMMANDS

    verbs = USAGE.split("verbs:")[1].splitlines()
    listed = {line.split()[0] for line in verbs if line.startswith("  ") and not line.startswith("   ")}
    assert listed == {*GROUPS, *COMMANDS} and "conform" in listed
