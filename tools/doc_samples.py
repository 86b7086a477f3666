#!/usr/bin/env python3
"""Every ```cpp sample in README.md and docs/*.md, compiled (ctest doc_samples).

Usage:
    tools/doc_samples.py --out FILE.cpp [FILES...]   # write one C++ file holding every sample
    tools/doc_samples.py --list [FILES...]           # which samples there are, and where
    tools/doc_samples.py --self-test                 # the splitter on known blocks

The ctest compiles the written file with -fsyntax-only against include/ and LibTorch, so a
sample that stops compiling (a renamed function, a changed signature) fails CI, and the compiler
names the Markdown file and line (#line directives).

How a sample becomes C++:
  - tests/doc_samples_prelude.hpp comes first: xport, LibTorch, and the names samples use without
    defining them (x, y, model, ep, ...), declared extern.
  - A sample's `#include` lines go to the top of the file.
  - Each sample is its own namespace, doc_sample_<n>. Its declarations at column 0 (`#include`,
    `struct`, `class`, `template`, `using X =`, `XPORT_...(`, `TORCH_LIBRARY(`,
    `TORCH_LIBRARY_IMPL(`, `TORCH_MODULE(`, `namespace a = ...`, `constexpr`, `inline`), each up
    to where its braces close, stay at namespace scope; the other lines are the body of a
    function, so statements read as they would in a user's code.
  - `XPORT_DATACLASS(T, ...)` specializes a template of xport's, which only the global namespace
    may do: it goes after the sample's namespace, with T named as doc_sample_<n>::T.
  - A sample that is not meant to compile (output, pseudo-code, another language) uses another
    fence (```text, ```sh, ```python); a C++ sample that shows a compile error is ```cpp-fail,
    and is not compiled.
  - A line that shows only `...` or `// ...` is a comment in C++ too: write elisions as
    comments (`// ...`), never as bare `...` inside an expression.
"""
import argparse
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
DECL = re.compile(r"^(#include|#define|struct\s|class\s|template\s*<|using\s+\w+\s*=|XPORT_[A-Z_]+\(|"
                  r"TORCH_(LIBRARY|LIBRARY_IMPL|LIBRARY_FRAGMENT|MODULE)\(|namespace\s+\w+\s*=|constexpr\s|inline\s|enum\s)")
GLOBAL = re.compile(r"^XPORT_DATACLASS\(\s*(\w+)")  # specializes xport::dataclass_traits: global scope only


def samples(path):
    """(first line number, lines) of each ```cpp block in `path`."""
    out, lines, lang, start, indent = [], None, None, 0, ""
    for no, line in enumerate(path.read_text().splitlines(), 1):
        m = FENCE.match(line)
        if lines is None:
            if m and m.group(2):
                lang, start, indent, lines = m.group(2), no + 1, m.group(1), []
            elif m:
                lang, start, indent, lines = "", no + 1, m.group(1), []
            continue
        if m and not m.group(2):
            if lang == "cpp":
                out.append((start, lines))
            lines = None
            continue
        lines.append(line[len(indent):] if line.startswith(indent) else line)
    if lines is not None:
        raise SystemExit(f"{path}:{start - 1}: a ``` block is not closed")
    return out


def depth_change(line):
    code = re.sub(r'"(\\.|[^"\\])*"|\'(\\.|[^\'\\])*\'', '""', line.split("//")[0])
    return code.count("{") - code.count("}") + code.count("(") - code.count(")")


def split(lines):
    """Each line's scope, 'ns', 'global' or 'fn': declarations at column 0 (to where their brackets
    close and they end) are namespace-scope ('global' for XPORT_DATACLASS), the rest is the
    function body."""
    scope, i = [], 0
    while i < len(lines):
        if DECL.match(lines[i]):
            depth, j = 0, i
            while True:
                depth += depth_change(lines[j])
                code = lines[j].split("//")[0].rstrip()
                ends = code.endswith(";") or code.endswith("}") or lines[j].startswith("#")
                if depth <= 0 and ends:
                    break
                if j + 1 == len(lines):
                    break
                j += 1
            scope += ["global" if GLOBAL.match(lines[i]) else "ns"] * (j - i + 1)
            i = j + 1
        else:
            scope.append("fn")
            i += 1
    return scope


def to_cpp(files):
    """One C++ file holding every sample of `files`, and the number of samples."""
    return to_cpp_samples((f.relative_to(ROOT), start, lines) for f in files for start, lines in samples(f))


def lines_of_scope(rel, start, lines, scope, want, rewrite=lambda line: line):
    """The lines of scope `want`, each run of them after a #line naming its Markdown line."""
    out, last = [], None
    for k, line in enumerate(lines):
        if scope[k] != want:
            continue
        if last is None or k != last + 1:
            out.append(f'#line {start + k} "{rel}"')
        out.append(rewrite(line))
        last = k
    return out


def to_cpp_samples(items):
    """The C++ file for (markdown path, first line, lines) samples, and their number."""
    includes, parts = ['#include "doc_samples_prelude.hpp"'], []
    n = 0
    for rel, start, lines in items:
        n += 1
        scope = split(lines)
        for k, line in enumerate(lines):  # a sample's includes: at the top of the file
            if line.startswith("#include"):
                scope[k] = "top"
        includes += lines_of_scope(rel, start, lines, scope, "top")
        parts.append(f"namespace doc_sample_{n} {{  // {rel}:{start}")
        parts += lines_of_scope(rel, start, lines, scope, "ns")
        if "fn" in scope:
            parts.append(f"[[maybe_unused]] void sample_{n}() {{")
            parts += lines_of_scope(rel, start, lines, scope, "fn")
            parts.append("}")
        parts.append(f"}}  // namespace doc_sample_{n}")
        # XPORT_DATACLASS: at global scope, the type qualified
        qualify = lambda line, n=n: GLOBAL.sub(lambda m: f"XPORT_DATACLASS(doc_sample_{n}::{m.group(1)}", line, count=1)
        parts += lines_of_scope(rel, start, lines, scope, "global", qualify)
        parts.append("")
    return "\n".join(includes + [""] + parts) + "\n", n


def self_test():
    block = ["struct a {", "  int f() { return 1; }", "};", "a v;", "int k = v.f();",
             "XPORT_DATACLASS(lm_output, \"m.L\",", "                logits);", "for (int i = 0; i < 2; ++i) {", "}"]
    got = split(block)
    want = ["ns", "ns", "ns", "fn", "fn", "global", "global", "fn", "fn"]
    assert got == want, got
    assert split(["template <class T>", "T twice(T t) { return t + t; }", "auto z = twice(1);"]) == ["ns", "ns", "fn"]
    assert split(["namespace ps = xport::passes;", "auto r = 1;"]) == ["ns", "fn"]
    assert split(["TORCH_LIBRARY(mylib, m) { m.def(\"f(Tensor x) -> Tensor\"); }", "auto r = 1;"]) == ["ns", "fn"]
    text, _ = to_cpp_samples([("t.md", 1, ["struct s { int a; };", "XPORT_DATACLASS(s, \"m.S\", a);"])])
    assert "XPORT_DATACLASS(doc_sample_1::s," in text.split("}  // namespace doc_sample_1")[1], text
    print("doc_samples: self-test passed")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("files", nargs="*", type=pathlib.Path)
    ap.add_argument("--out", type=pathlib.Path)
    ap.add_argument("--list", action="store_true")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    files = [f.resolve() for f in a.files] or [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    if a.list:
        for f in files:
            for start, lines in samples(f):
                print(f"{f.relative_to(ROOT)}:{start}: {len(lines)} lines")
        return
    if not a.out:
        ap.error("--out FILE, --list or --self-test")
    text, n = to_cpp(files)
    if n == 0:
        raise SystemExit("doc_samples: no ```cpp sample found")
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if not a.out.exists() or a.out.read_text() != text:
        a.out.write_text(text)
    print(f"doc_samples: {n} samples from {len(files)} files -> {a.out}")


if __name__ == "__main__":
    sys.exit(main())
