#!/usr/bin/env python3
"""Generates single_include/xport/xport.hpp (and the opt-in engine.hpp) from include/xport/.

Project headers (#include <xport/...>) are inlined in include order, each once, and leave a
`// #include <xport/...>` marker behind; LibTorch and standard includes are kept as they are.
An opt-in entry (xport/engine.hpp) becomes a second file that includes the single header and
inlines only what the umbrella does not hold.
`--check` regenerates in memory and fails, naming the command to run, when a file is stale.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
ENTRY = "xport/xport.hpp"
OPT_IN = ["xport/engine.hpp", "xport/quantized.hpp", "xport/package.hpp", "xport/train.hpp", "xport/torchscript.hpp", "xport/unflatten.hpp"]  # entries outside the umbrella: each includes it and adds its own headers
OUTPUT_DIR = ROOT / "single_include"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](xport/[^>"]+)[>"]')

BANNER = """\
// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
"""


def inline(rel, seen, out, entries=None):
    """Appends `rel` with its xport includes inlined (each once); an include of an opt-in entry
    generated before (`entries`: its path -> the headers it holds) stays an include of that
    single-header file, so a program that includes both gets each definition once."""
    if rel in seen:
        return
    seen.add(rel)
    path = INCLUDE / rel
    if not path.is_file():
        sys.exit(f"amalgamate: {rel} is included but {path} does not exist")
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() == "#pragma once":
            continue
        m = INCLUDE_RE.match(line)
        if m and entries and m.group(1) in entries:
            out.append(f"#include <{m.group(1)}>")
            seen |= entries[m.group(1)]
        elif m:
            out.append(f"// #include <{m.group(1)}>")
            inline(m.group(1), seen, out, entries)
        else:
            out.append(line)


def generate():
    """{path under single_include/: text} for the umbrella and each opt-in entry."""
    seen = set()
    out = [BANNER.rstrip("\n"), "#pragma once", ""]
    inline(ENTRY, seen, out)
    files = {ENTRY: "\n".join(out) + "\n"}
    entries = {}  # opt-in entry -> the headers its file holds (an entry may include one listed before it)
    for entry in OPT_IN:
        extra = [BANNER.rstrip("\n"), "#pragma once", "", f"#include <{ENTRY}>"]
        held = set(seen) | {ENTRY}
        inline(entry, held, extra, entries)
        entries[entry] = held
        files[entry] = "\n".join(extra) + "\n"
    return files


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a generated file is stale")
    args = parser.parse_args()
    stale = False
    for rel, text in generate().items():
        path = OUTPUT_DIR / rel
        if args.check:
            current = path.read_text(encoding="utf-8") if path.exists() else ""
            if current != text:
                print(f"{path.relative_to(ROOT)} is out of date with include/xport/.", file=sys.stderr)
                stale = True
            else:
                print(f"{path.relative_to(ROOT)} is up to date")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("Regenerate with:\n    python3 tools/amalgamate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
