"""dllm_lit command line: ``python cli.py predict --config configs/remdm_conf.yaml`` (see README)."""
import sys

try:
    from dllm_lit.cli import console_main
except KeyboardInterrupt:  # Ctrl-C while the libraries load: one line, no traceback
    sys.stderr.write("stopped: interrupted by SIGINT during start-up, before any row was sampled\n")
    raise SystemExit(130) from None

if __name__ == "__main__":
    console_main()
