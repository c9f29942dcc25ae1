#!/usr/bin/env python3
"""Regenerate ``dllm_lit/resources/english_char_order{2,3}.json``: order-2 and order-3 character counts of the
same normalised King James Bible stream as the bundled bigram table (``scripts/build_english_counts.py``: same
text, same heading and verse-number removal, same normalisation)::

    apt-get install -y bible-kjv bible-kjv-text
    python scripts/build_english_ngram_counts.py            # rewrite both files
    python scripts/build_english_ngram_counts.py --check    # verify they are reproduced exactly
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from build_english_counts import (BIBLE_RANGE, DEBIAN_PACKAGE, REPO_ROOT, debian_package_version,  # noqa: E402
                                  extract_verse_text, run_bible)

from dllm_lit.corpus import normalize_text8  # noqa: E402
from dllm_lit.corpus.char_ngrams import count_char_ngrams, ngram_counts_payload  # noqa: E402


def dumps(payload: dict) -> str:
    meta = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in payload.items() if k != "counts"]
    rows = ",".join(json.dumps(r, separators=(",", ":")) for r in payload["counts"])
    return "{\n" + "\n".join(meta) + '\n  "counts": [' + rows + "]\n}\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", type=Path, default=None, help="saved `bible 'gen1:1-rev22:21'` output")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    raw = args.input.read_text(encoding="ascii") if args.input else run_bible()
    text, _ = extract_verse_text(raw)
    normalised = normalize_text8(text).strip(" ")
    ok = True
    for k in (2, 3):
        out = REPO_ROOT / "dllm_lit" / "resources" / f"english_char_order{k}.json"
        payload = ngram_counts_payload(
            count_char_ngrams(normalised, k), k, num_characters=len(normalised),
            source=f"King James Version of the Bible (public domain), `bible '{BIBLE_RANGE}'`, prepared as "
                   "english_char_bigrams.json; one stream",
            debian_package=f"{DEBIAN_PACKAGE} {debian_package_version() or 'unknown'}",
            sha256_of_normalised_text=hashlib.sha256(normalised.encode("ascii")).hexdigest(),
            generator="scripts/build_english_ngram_counts.py")
        if args.check:
            same = json.loads(out.read_text(encoding="utf-8"))["counts"] == payload["counts"]
            print(f"{out}: {'reproduced exactly' if same else 'DIFFERS from a fresh build'}")
            ok &= same
        else:
            out.write_text(dumps(payload), encoding="utf-8")
            print(f"wrote {out} ({out.stat().st_size} bytes, {len(payload['counts'])} nonzero counts)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
