"""dllm_lit command line: ``python cli.py predict --config configs/remdm_conf.yaml`` (see README)."""
from dllm_lit.cli import main

if __name__ == "__main__":
    main()
