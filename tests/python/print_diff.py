"""xport prints what torch.export 2.13 prints (ctest oracle_print_diff).

Usage: python3 print_diff.py ORACLE_DIR docs/export.md

0. The seed program, source lines included: tests/golden/seed_torch_export.txt (xport's print
   of it) equals torch's print of the same Python code at the same path.
1. Every model case: xport's prints (ORACLE_DIR/print/<case>.<ir>.txt, written by
   tests/test_twins.cpp) equal torch.export's of the Python twin (twins.py), in the training IR
   and after run_decompositions(). The twins' stack traces are dropped, so torch prints the
   "# No stacktrace found" line xport prints for non-strict programs; nothing else is normalised.
2. Every ExportDB case: each "ExportedProgram:" block of examples/exportdb/<case>.expected (xport's
   golden output, checked by its own ctest) equals torch.export's of the twin in
   exportdb_twins.py; for strict cases the source-line comments (and the blank lines between
   their groups) are left out on both sides.
3. docs/export.md's table "Where xport's print differs from torch.export's" lists exactly the
   (case, program) pairs that differ, and its table "C++ frontend and Python torch.nn" exactly the
   modules of cpp_nn.py; each of those is checked to call other ops than its torch.nn namesake.
Exit status 1 with a report on any difference.
"""
import difflib
import os
import re
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
warnings.filterwarnings("ignore")

import cpp_nn  # noqa: E402
import exportdb_twins  # noqa: E402
import twins  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def text(ep):
    """print(ep) without stack traces (what torch prints for nodes that have none)."""
    for m in ep.graph_module.modules():  # the branches of a torch.cond too
        if isinstance(m, torch.fx.GraphModule):
            for n in m.graph.nodes:
                n.meta.pop("stack_trace", None)
    return str(ep)


def without_source_lines(s):
    out = []
    for line in s.splitlines(True):
        stripped = line.strip()
        if stripped.startswith("# File:") or stripped == "# No stacktrace found for following nodes":
            continue
        if not stripped and out and out[-1].strip() and not out[-1].lstrip().startswith(("return", "#")):
            continue  # a blank line between source groups
        out.append(line)
    return "".join(out)


def blocks(golden):
    """The ExportedProgram blocks of a golden file."""
    out, cur = [], None
    for line in golden.splitlines(True):
        if line.startswith("ExportedProgram:"):
            cur = [line]
            out.append(cur)
        elif cur is not None:
            cur.append(line)
            if line.startswith("Range constraints:"):
                cur = None
    return ["".join(b) for b in out]


def model_prints(oracle):
    """(name, xport's text, torch's text or an exception) for every model case and IR."""
    for name, make in sorted(twins.CASES.items()):
        module, args, kwargs, dynamic = make()
        ep = torch.export.export(module, args, kwargs, dynamic_shapes=dynamic)
        theirs = {"training": text(ep), "inference": text(ep.run_decompositions())}
        for ir in ("training", "inference"):
            path = os.path.join(oracle, "print", f"{name}.{ir}.txt")
            if not os.path.exists(path):
                raise SystemExit(f"print_diff: xport wrote no {path} (tests/test_twins.cpp has no case '{name}')")
            with open(path) as f:
                yield name, ir, f.read(), theirs[ir]


def exportdb_prints():
    for name, make in sorted(exportdb_twins.CASES.items()):
        with open(os.path.join(REPO, "examples", "exportdb", f"{name}.expected")) as f:
            ours = blocks(f.read())
        try:
            theirs = [text(ep) for ep in make()]
        except Exception as e:  # torch refuses the program: a difference, named by its error
            theirs = [f"torch.export fails: {type(e).__name__}: {str(e).splitlines()[0]}"] * len(ours)
        if len(ours) != len(theirs):
            raise SystemExit(f"print_diff: examples/exportdb/{name}.expected prints {len(ours)} programs, "
                             f"the twin makes {len(theirs)}")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            if name in exportdb_twins.STRICT:
                a, b = without_source_lines(a), without_source_lines(b)
            yield f"exportdb/{name}", str(i), a, b


SEED_SOURCE = """import torch


class Seed(torch.nn.Module):
    def forward(self, x, y):
        a = torch.sin(x)
        b = torch.cos(y)
        return a + b
"""


def seed_prints():
    """The seed program (torch's docs example), with its source lines: tests/golden/
    seed_torch_export.txt is xport's print of it, file and lines included, so torch must print
    the same text for the same code at the same path (/tmp/ipykernel_263/2550508656.py)."""
    import importlib.util
    path = "/tmp/ipykernel_263/2550508656.py"
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(SEED_SOURCE)
    spec = importlib.util.spec_from_file_location("seed_program", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ep = torch.export.export(mod.Seed(), (torch.randn(10, 10), torch.randn(10, 10)))
    with open(os.path.join(REPO, "tests", "golden", "seed_torch_export.txt")) as f:
        yield "seed", "training", f.read(), str(ep)


def doc_table(path, doc, title):
    """Rows (lists of cells, backticks stripped) of the markdown table under the heading `title`."""
    lines = doc.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.startswith("#") and l.lstrip("#").strip() == title)
    except StopIteration:
        raise SystemExit(f"print_diff: {path} has no section '{title}'")
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("#"):
            break
        if line.startswith("|") and not re.match(r"^\|[\s\-|:]+\|$", line):
            rows.append([c.strip().replace("`", "") for c in line.strip().strip("|").split("|")])
    return rows[1:]  # without the header


def calls(module, args):
    """The calls a module makes, as torch.export records them: targets and arguments, graph
    values by position rather than by name."""
    ep = torch.export.export(module, args)
    index = {n: i for i, n in enumerate(ep.graph.nodes)}
    def arg(a):
        if isinstance(a, torch.fx.Node):
            return f"%{index[a]}"
        if isinstance(a, (list, tuple)):
            return [arg(x) for x in a]
        return repr(a)
    return [(str(n.target), [arg(a) for a in n.args], {k: arg(v) for k, v in n.kwargs.items()})
            for n in ep.graph.nodes if n.op == "call_function"]


def check_frontend_table(path, doc, failures):
    rows = doc_table(path, doc, "C++ frontend and Python torch.nn")
    listed = {r[0]: r for r in rows}
    if set(listed) != set(cpp_nn.DIFFERENCES):
        failures.append("docs/export.md's table 'C++ frontend and Python torch.nn' lists " + str(sorted(listed)) +
                        ", tests/python/cpp_nn.py models " + str(sorted(cpp_nn.DIFFERENCES)))
    for name, (mirror, python, args) in cpp_nn.PROBES.items():
        if calls(mirror(), args) == calls(python(), args):
            failures.append(f"cpp_nn.{name} calls the same ops as its torch.nn namesake: drop it from cpp_nn.py "
                            "and the table in docs/export.md")
    for name in set(cpp_nn.DIFFERENCES) - set(cpp_nn.PROBES):
        failures.append(f"cpp_nn.{name} has no probe in cpp_nn.PROBES")


def main():
    oracle, doc_path = sys.argv[1], sys.argv[2]
    with open(doc_path) as f:
        doc = f.read()
    documented = {(r[0], r[1]): r for r in doc_table(doc_path, doc, "Where xport's print differs from torch.export's")}
    failures, differing, checked = [], set(), 0
    for case, program, ours, theirs in list(seed_prints()) + list(model_prints(oracle)) + list(exportdb_prints()):
        checked += 1
        if ours == theirs:
            continue
        differing.add((case, program))
        if (case, program) not in documented:
            diff = "".join(difflib.unified_diff(theirs.splitlines(True), ours.splitlines(True),
                                                "torch.export 2.13", "xport", n=1))
            failures.append(f"{case} ({program}): xport's print differs from torch's and docs/export.md does not "
                            f"say why:\n{diff}")
    for key in sorted(set(documented) - differing):
        failures.append(f"docs/export.md lists {key} as differing, but xport now prints what torch prints: remove the row")
    check_frontend_table(doc_path, doc, failures)
    if checked < 40:
        failures.append(f"only {checked} programs compared; expected every model (both IRs) and ExportDB case")
    if failures:
        print("\n\n".join(failures))
        print(f"\nprint_diff: {len(failures)} problem(s) in {checked} programs")
        return 1
    print(f"print_diff: {checked} programs compared with torch.export {torch.__version__}: "
          f"{checked - len(differing)} identical, {len(differing)} documented differences")
    return 0


if __name__ == "__main__":
    sys.exit(main())
