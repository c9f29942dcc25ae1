"""``python -m dllm_lit.cli VERB ...``: the verbs of ``python cli.py VERB ...``."""
from dllm_lit.cli.dispatch import console_main

console_main()
