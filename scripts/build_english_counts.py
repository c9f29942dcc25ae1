#!/usr/bin/env python3
"""Regenerate ``dllm_lit/resources/english_char_bigrams.json``: the bundled offline English chain.

Source: the King James Bible (Authorized Version; public domain, its copyright expired -- see
``/usr/share/doc/bible-kjv-text/copyright``) from the Debian packages ``bible-kjv`` (the ``bible`` program)
and ``bible-kjv-text`` (the text)::

    apt-get install -y bible-kjv bible-kjv-text
    python scripts/build_english_counts.py            # rewrite the bundled JSON
    python scripts/build_english_counts.py --check    # verify the bundled JSON is reproduced exactly

Procedure (deterministic):
  1. ``bible 'gen1:1-rev22:21'`` prints the whole text: each chapter starts with a heading line such as
     ``Genesis 1`` or ``1 Samuel 3`` after a blank line; each verse starts with ``  <n> `` and wraps onto
     unindented continuation lines.
  2. Blank lines and chapter headings are dropped and the leading verse numbers removed; the remaining lines
     are joined with newlines into one stream (book and chapter boundaries are crossed, as text8 crosses
     article boundaries).
  3. The stream is normalised with :func:`dllm_lit.corpus.charlevel.normalize_text8` (ASCII letters
     lower-cased, every other character a space, runs of spaces collapsed) and stripped of the leading and
     trailing space.
  4. 27 x 27 bigram counts over that single stream: :func:`count_char_bigrams`.

``--input FILE`` reads a saved ``bible`` dump instead of running the program.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from dllm_lit.corpus.charlevel import (  # noqa: E402
    char_bigram_counts_payload,
    count_char_bigrams,
    normalize_text8,
)

DEFAULT_OUTPUT = REPO_ROOT / "dllm_lit" / "resources" / "english_char_bigrams.json"
BIBLE_RANGE = "gen1:1-rev22:21"
DEBIAN_PACKAGE = "bible-kjv-text"
EXPECTED_CHAPTERS = 1189  # chapters in the Protestant canon of the KJV

_HEADING_RE = re.compile(r"^(?:[1-3] )?[A-Z][A-Za-z ]*[A-Za-z] \d+$")
_VERSE_RE = re.compile(r"^\s+\d+ ")


def run_bible(bible_range: str = BIBLE_RANGE) -> str:
    """Run the Debian ``bible`` program and return its output for ``bible_range``."""
    exe = shutil.which("bible")
    if exe is None:
        raise RuntimeError(
            "the `bible` program was not found; install it with `apt-get install -y bible-kjv bible-kjv-text` "
            "or pass --input FILE with a saved `bible 'gen1:1-rev22:21'` dump"
        )
    out = subprocess.run([exe, bible_range], check=True, capture_output=True)
    return out.stdout.decode("ascii")


def debian_package_version(package: str = DEBIAN_PACKAGE) -> str | None:
    """Installed Debian version of ``package`` (``dpkg-query``), or None when unavailable."""
    exe = shutil.which("dpkg-query")
    if exe is None:
        return None
    res = subprocess.run([exe, "-W", "-f=${Version}", package], capture_output=True, text=True)
    if res.returncode != 0:
        return None
    return res.stdout.strip() or None


def extract_verse_text(raw: str) -> tuple[str, int]:
    """Drop blank lines, chapter headings and verse numbers from ``bible`` output.

    Returns ``(text, n_headings)``: the verse text with lines joined by newlines, and the number of chapter
    headings removed (1189 for the whole Bible). A heading is a non-indented line that follows a blank line
    and looks like ``[1-3 ]Book Name <chapter>``.
    """
    kept: list[str] = []
    n_headings = 0
    prev_blank = True
    for line in raw.splitlines():
        if not line.strip():
            prev_blank = True
            continue
        if prev_blank and _HEADING_RE.match(line):
            n_headings += 1
            prev_blank = False
            continue
        prev_blank = False
        kept.append(_VERSE_RE.sub("", line, count=1))
    return "\n".join(kept), n_headings


def build_payload(raw: str, package_version: str | None) -> dict[str, Any]:
    """Normalise the ``bible`` output and return the JSON payload of the count file."""
    text, n_headings = extract_verse_text(raw)
    normalised = normalize_text8(text).strip(" ")
    if any(ch.isdigit() for ch in text):
        raise RuntimeError("digits left in the verse text: the heading/verse-number stripping failed")
    counts = count_char_bigrams(normalised)
    return char_bigram_counts_payload(
        counts,
        num_characters=len(normalised),
        num_chapters=n_headings,
        source=(
            "King James Version of the Bible (public domain), whole text from `bible "
            f"'{BIBLE_RANGE}'`; chapter headings and verse numbers removed, normalised with "
            "dllm_lit.corpus.normalize_text8, leading/trailing space stripped; one stream"
        ),
        debian_package=f"{DEBIAN_PACKAGE} {package_version or 'unknown'}",
        sha256_of_normalised_text=hashlib.sha256(normalised.encode("ascii")).hexdigest(),
        generator="scripts/build_english_counts.py",
    )


def dumps_payload(payload: dict[str, Any]) -> str:
    """Serialise compactly: metadata one key per line, the count table one row per line."""
    lines = ["{"]
    meta = [(k, v) for k, v in payload.items() if k != "counts"]
    for k, v in meta:
        lines.append(f"  {json.dumps(k)}: {json.dumps(v)},")
    rows = payload["counts"]
    lines.append('  "counts": [')
    for i, row in enumerate(rows):
        sep = "," if i < len(rows) - 1 else ""
        lines.append("    " + json.dumps(row, separators=(",", ":")) + sep)
    lines.append("  ]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--input", type=Path, default=None, help="saved `bible 'gen1:1-rev22:21'` output")
    ap.add_argument("--output", type=Path, default=DEFAULT_OUTPUT)
    ap.add_argument("--check", action="store_true", help="compare with --output instead of writing it")
    args = ap.parse_args(argv)

    raw = args.input.read_text(encoding="ascii") if args.input else run_bible()
    payload = build_payload(raw, debian_package_version())
    if payload["num_chapters"] != EXPECTED_CHAPTERS:
        found = payload["num_chapters"]
        print(f"warning: found {found} chapter headings, expected {EXPECTED_CHAPTERS}", file=sys.stderr)
    text = dumps_payload(payload)
    if args.check:
        current = json.loads(args.output.read_text(encoding="utf-8"))
        same = current["counts"] == payload["counts"] and (
            current["sha256_of_normalised_text"] == payload["sha256_of_normalised_text"]
        )
        print(f"{args.output}: {'reproduced exactly' if same else 'DIFFERS from a fresh build'}")
        return 0 if same else 1
    args.output.parent.mkdir(parents=True, exist_ok=True)
    tmp = args.output.with_suffix(args.output.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(args.output)
    print(
        f"wrote {args.output} ({len(text)} bytes): {payload['num_characters']} characters, "
        f"{payload['num_chapters']} chapters, sha256 {payload['sha256_of_normalised_text'][:16]}..."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
