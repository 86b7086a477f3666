#!/usr/bin/env python3
"""Generates single_include/xport/xport.hpp from include/xport/.

Project headers (#include <xport/...>) are inlined in include order, each once, and leave a
`// #include <xport/...>` marker behind; LibTorch and standard includes are kept as they are.
`--check` regenerates in memory and fails, naming the command to run, when the file is stale.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = ROOT / "include"
ENTRY = "xport/xport.hpp"
OUTPUT = ROOT / "single_include" / "xport" / "xport.hpp"
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*[<"](xport/[^>"]+)[>"]')

BANNER = """\
// xport: torch.export for C++, single-header edition.
//
// GENERATED FILE, DO NOT EDIT. It is made from include/xport/ by tools/amalgamate.py:
//     python3 tools/amalgamate.py
// Edit the headers under include/xport/ and regenerate.
"""


def inline(rel, seen, out):
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
        if m:
            out.append(f"// #include <{m.group(1)}>")
            inline(m.group(1), seen, out)
        else:
            out.append(line)


def generate():
    out = [BANNER.rstrip("\n"), "#pragma once", ""]
    inline(ENTRY, set(), out)
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the generated file is stale")
    args = parser.parse_args()
    text = generate()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(f"{OUTPUT.relative_to(ROOT)} is out of date with include/xport/.\n"
                  f"Regenerate it with:\n    python3 tools/amalgamate.py", file=sys.stderr)
            return 1
        print(f"{OUTPUT.relative_to(ROOT)} is up to date")
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
