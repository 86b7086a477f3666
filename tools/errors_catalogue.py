#!/usr/bin/env python3
"""Generates docs/errors.md, the catalogue of xport's stable error ids, from the headers.

Every exception xport throws carries a stable id (`e.id()`, e.g. "xport.guard.shape") and a
message that says what was wrong, where, and how to fix it. This finds every place in include/
that throws one (an exception type or a throwing helper called with a literal id, and
`verify_fail(rule, ...)`, whose id is "xport.verify.<rule>"), renders the message expression as
its text with `…` for the parts computed at run time, and writes the ids by area.

    python3 tools/errors_catalogue.py           # writes docs/errors.md
    python3 tools/errors_catalogue.py --check   # fails, naming the command, when it is stale
"""
import argparse
import collections
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "errors.md"
ID = re.compile(r'"(xport\.[a-z0-9_]+\.[a-z0-9_.]+)"')
# callees whose first argument is an error id: the exception types and the throwing helpers
THROWERS = re.compile(r"^(\w*error|graph_break|constraint_violation|missing_fake_kernel|fail)$")
HOPS = "cond, while_loop, map, scan"


def skip_literal(text, i):
    """The index after the string or character literal starting at text[i]."""
    q = text[i]
    j = i + 1
    while j < len(text) and text[j] != q:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def call_arguments(text, open_paren):
    """The top-level arguments of the call whose `(` is at `open_paren`, as raw text."""
    args, depth, start, i = [], 0, open_paren + 1, open_paren + 1
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i = skip_literal(text, i)
            continue
        if text.startswith("//", i):
            i = text.find("\n", i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(text[start:i])
                return args
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i])
            start = i + 1
        i += 1
    return args


def pieces(expr):
    """`expr` split at its top-level `+`."""
    out, depth, start, i = [], 0, 0, 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'":
            i = skip_literal(expr, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "+" and depth == 0 and expr[i + 1:i + 2] != "+" and expr[i - 1:i] != "+":
            out.append(expr[start:i])
            start = i + 1
        i += 1
    out.append(expr[start:])
    return [p.strip() for p in out]


LITERAL = re.compile(r'^(\s*"(?:[^"\\]|\\.)*"\s*)+$')


def literal_text(piece):
    """The text of a (possibly concatenated) string literal, or None."""
    if not LITERAL.match(piece):
        return None
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', piece)
    text = "".join(parts)
    return text.replace('\\"', '"').replace("\\n", " ").replace("\\\\", "\\")


def message_of(expr):
    """The message expression as text, `…` where it is computed."""
    out = []
    for p in pieces(expr):
        t = literal_text(p)
        if t is None:
            if not out or out[-1] != "…":
                out.append("…")
        else:
            out.append(t)
    text = "".join(out).strip()
    return re.sub(r"\s+", " ", text) or "…"


def rule_of(expr):
    """A verify_fail rule expression as the id's last part (`<hop>_outputs` for a computed hop)."""
    out = []
    for p in pieces(expr):
        t = literal_text(p)
        out.append(t if t is not None else "<hop>")
    return "".join(out)


def callee_before(text, open_paren):
    j = open_paren - 1
    while j >= 0 and text[j] in " \t\n":
        j -= 1
    k = j
    while k >= 0 and (text[k].isalnum() or text[k] == "_"):
        k -= 1
    return text[k + 1:j + 1]


def enclosing_paren(text, pos):
    """The `(` of the call whose argument list holds `pos`, or -1."""
    depth, i = 0, pos - 1
    while i >= 0:
        c = text[i]
        if c == ")":
            depth += 1
        elif c == "(":
            if depth == 0:
                return i
            depth -= 1
        elif c in ";{}" and depth == 0:
            return -1
        i -= 1
    return -1


def sites():
    """(id, thrower, message, file:line) of every throw site in include/."""
    for path in sorted((ROOT / "include").rglob("*.hpp")):
        text = path.read_text()
        rel = path.relative_to(ROOT).as_posix()
        line = lambda pos: text.count("\n", 0, pos) + 1
        for m in ID.finditer(text):
            paren = enclosing_paren(text, m.start())
            if paren < 0 or text[paren + 1:m.start()].strip():
                continue  # not a call's first argument (a metadata key, a comparison)
            callee = callee_before(text, paren)
            if not THROWERS.match(callee):
                continue
            args = call_arguments(text, paren)
            message = message_of(args[1]) if len(args) > 1 else "…"
            yield m.group(1), callee, message, f"{rel}:{line(m.start())}"
        for m in re.finditer(r"\bverify_fail\(", text):
            args = call_arguments(text, m.end() - 1)
            if len(args) < 2 or "const std::string&" in args[0]:
                continue  # the helper's own definition
            rule = rule_of(args[0])
            yield "xport.verify." + rule, "verify_error", message_of(args[1]), f"{rel}:{line(m.start())}"


def render():
    by_id = collections.OrderedDict()
    for id_, thrower, message, where in sorted(sites()):
        e = by_id.setdefault(id_, {"throwers": [], "messages": [], "where": []})
        if thrower not in e["throwers"]:
            e["throwers"].append(thrower)
        if message not in e["messages"]:
            e["messages"].append(message)
        e["where"].append(where)
    areas = collections.OrderedDict()
    for id_ in by_id:
        areas.setdefault(id_.split(".")[1], []).append(id_)
    out = [
        "# Error catalogue",
        "",
        "<!-- GENERATED by tools/errors_catalogue.py from include/: do not edit; run",
        "     `python3 tools/errors_catalogue.py` (ctest `errors_catalogue_in_sync` checks it). -->",
        "",
        "Every exception xport throws is an `xport::error` (or a subclass: `graph_error`, `export_error`,",
        "`guard_error`, `load_error`, `run_error`, `verify_error`, ...) with a stable id, `e.id()`,",
        "and a message that says what was wrong, where (argument path, node, op, file offset) and how",
        "to fix it. Catch by type, branch on the id; the message's wording may improve between",
        "versions, the id does not change.",
        "",
        "```cpp",
        "try {",
        "  auto out = xport::run(ep, {x});  // ep: an exported_program, x: a tensor",
        "} catch (const xport::guard_error& e) {",
        "  if (e.id() == \"xport.guard.shape\") { /* a size the program does not accept */ }",
        "}",
        "```",
        "",
        f"Below: the {len(by_id)} ids by area, the type thrown, the message (`…` marks what is",
        "computed: names, sizes, paths; the fix is in the message) and where it is thrown.",
        f"`<hop>` in a verifier id is one of the control-flow operators ({HOPS}).",
        "",
        "Areas: " + ", ".join(f"[{a}](#{a})" for a in areas) + ".",
    ]
    for area, ids in areas.items():
        out += ["", f"## {area}", "", "| id | thrown as | message | where |", "|---|---|---|---|"]
        for id_ in ids:
            e = by_id[id_]
            msgs = "<br>".join(m.replace("|", "\\|") for m in e["messages"])
            where = ", ".join(f"`{w}`" for w in e["where"][:3]) + (f" (+{len(e['where']) - 3})" if len(e["where"]) > 3 else "")
            out.append(f"| `{id_}` | `{'`, `'.join(e['throwers'])}` | {msgs} | {where} |")
    return "\n".join(out) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true")
    a = ap.parse_args()
    text = render()
    if a.check:
        if not OUTPUT.exists() or OUTPUT.read_text() != text:
            print("docs/errors.md is stale: run `python3 tools/errors_catalogue.py`")
            return 1
        print(f"docs/errors.md is up to date ({text.count('| `xport.')} ids)")
        return 0
    OUTPUT.parent.mkdir(exist_ok=True)
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(ROOT)} ({text.count('| `xport.')} ids)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
