"""dllm_lit command line: ``python cli.py predict --config configs/remdm_conf.yaml`` (``python cli.py --help``)."""
from dllm_lit.util.orphan import watch_launcher

watch_launcher()  # a ddp rank launched by rank 0 ends with one line if rank 0 dies, even while the libraries load
from dllm_lit.cli import console_main, trap_startup_signals  # noqa: E402 - a light module: the heavy ones load later

trap_startup_signals()  # SIGINT / SIGTERM while the libraries load: one line, no traceback

if __name__ == "__main__":
    console_main()
