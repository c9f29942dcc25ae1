"""dllm_lit command line: ``python cli.py predict --config configs/remdm_conf.yaml`` (see README)."""
import sys

from dllm_lit.orphan import watch_launcher

watch_launcher()  # a ddp rank launched by rank 0 ends with one line if rank 0 dies, even while the libraries load
try:
    from dllm_lit.cli import console_main
except KeyboardInterrupt:  # Ctrl-C while the libraries load: one line, no traceback
    sys.stderr.write("stopped: interrupted by SIGINT during start-up, before any row was sampled\n")
    raise SystemExit(130) from None

if __name__ == "__main__":
    console_main()
