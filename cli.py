"""dllm_lit command line: ``python cli.py predict --config configs/remdm_conf.yaml`` (see README)."""
import os
import signal
import sys

from dllm_lit.orphan import watch_launcher

STARTUP_LINE = "stopped: interrupted by SIGINT during start-up, before any row was sampled\n"


def _interrupted_while_loading(signum, frame) -> None:
    """Ctrl-C while the libraries load: one line, no traceback, exit 130 at once (nothing is written yet).

    A handler rather than ``except KeyboardInterrupt``: an import that catches broad exceptions could swallow the
    KeyboardInterrupt, and the run would then go on as if no Ctrl-C had come."""
    sys.stderr.write(STARTUP_LINE)
    sys.stderr.flush()
    os._exit(128 + signal.SIGINT)


watch_launcher()  # a ddp rank launched by rank 0 ends with one line if rank 0 dies, even while the libraries load
signal.signal(signal.SIGINT, _interrupted_while_loading)
from dllm_lit.cli import console_main  # noqa: E402

signal.signal(signal.SIGINT, signal.default_int_handler)  # from here console_main turns Ctrl-C into one line

if __name__ == "__main__":
    console_main()
