#!/usr/bin/env python3
"""The include graph of include/xport/ runs one way: down the layers below.

    python3 tools/check_includes.py [include_dir]   (exit 1 and one line per bad arrow)

A header may include headers of its own layer (without a cycle) and of the layers under it,
never one above. The umbrella, xport/xport.hpp, sits above everything. Layers, bottom up:
"""
import pathlib
import re
import sys

LAYERS = [
    ("base", "config.hpp version.hpp error.hpp fwd.hpp detail/"),  # utilities, no IR
    ("ir", "ir/"),              # types, graphs, signatures, programs
    ("ops", "ops/"),            # what xport knows about ATen operators
    ("program", "program/"),    # building, checking and printing programs
    ("trace", "trace/"),        # capture: export_program
    ("lower", "lower/"),        # functionalize, run_decompositions
    ("passes", "passes/"),      # passes and pipelines
    ("run", "run/"),            # guards, the interpreter, callable
    ("serde", "serde/"),        # .pt2 archives
    ("umbrella", "xport.hpp engine.hpp train.hpp quantized.hpp package.hpp torchscript.hpp unflatten.hpp cuda_graphs.hpp compiled.hpp"),
]
__doc__ += "".join(f"    {i}. {name:9} {paths}\n" for i, (name, paths) in enumerate(LAYERS))

# All that <xport/compiled.hpp> may reach (the compiled mode: a TU that includes it must not
# parse the header-only library; tools/compile_time.py measures it).
LIGHT = {"config.hpp", "version.hpp", "error.hpp", "fwd.hpp", "run/engine_options.hpp"}

INCLUDE = re.compile(r'^\s*#\s*include\s*<xport/([^>]+)>', re.M)


def layer_of(rel):
    for i, (_, paths) in enumerate(LAYERS):
        for p in paths.split():
            if rel == p or (p.endswith("/") and rel.startswith(p)):
                return i
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent / "include")
    root = root / "xport"
    graph, bad = {}, []
    for h in sorted(root.rglob("*.hpp")):
        rel = h.relative_to(root).as_posix()
        if layer_of(rel) is None:
            bad.append(f"{rel}: in no layer (add its folder to LAYERS in tools/check_includes.py)")
            continue
        graph[rel] = sorted(set(INCLUDE.findall(h.read_text())))
    for rel, deps in graph.items():
        for d in deps:
            if d not in graph:
                bad.append(f"{rel}: includes <xport/{d}>, which is not a header of the library")
            elif layer_of(d) > layer_of(rel):
                bad.append(f"{rel} ({LAYERS[layer_of(rel)][0]}) includes <xport/{d}> "
                           f"({LAYERS[layer_of(d)][0]}): an arrow back up")
    # cycles inside a layer
    state = {}

    def visit(n, stack):
        state[n] = 1
        for d in graph.get(n, []):
            if state.get(d) == 1:
                bad.append("include cycle: " + " -> ".join(stack[stack.index(d):] + [n, d]) if d in stack
                           else f"include cycle through {n} -> {d}")
            elif d in graph and not state.get(d):
                visit(d, stack + [n])
        state[n] = 2

    for n in graph:
        if not state.get(n):
            visit(n, [])
    # the compiled mode's header stays light: what it reaches of xport, transitively, is this
    reach, todo = set(), ["compiled.hpp"] if "compiled.hpp" in graph else []
    while todo:
        for d in graph.get(todo.pop(), []):
            if d not in reach:
                reach.add(d)
                todo.append(d)
    for d in sorted(reach - LIGHT):
        bad.append(f"compiled.hpp reaches <xport/{d}>: the compiled mode's header must parse only {sorted(LIGHT)}")
    for b in bad:
        print(b)
    arrows = sum(len(v) for v in graph.values())
    print(f"{len(graph)} headers, {arrows} include arrows, {len(bad)} problems", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
