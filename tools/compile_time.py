#!/usr/bin/env python3
"""How long parsing a header takes (g++ -fsyntax-only, C++20), beside LibTorch's own umbrella
headers in the same run: what including xport costs a translation unit.

    python3 tools/compile_time.py [runs=3]

LibTorch comes from the pip wheel (the primary build); CXX picks the compiler. Prints the median
wall time of each header, in seconds, and one more row: the LibTorch (and nlohmann) headers that
include/xport/ includes, alone, which is the floor no change to xport's own code can go under.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH = os.path.dirname(torch.__file__)
HEADERS = ["ATen/ATen.h", "xport/xport.hpp", "xport/compiled.hpp", "torch/torch.h"]


def dependency_headers():
    """Every non-xport, non-std header include/xport/ includes (LibTorch's, nlohmann's)."""
    found = set()
    for dirpath, _, files in os.walk(os.path.join(ROOT, "include", "xport")):
        for name in files:
            if name == "cuda_graphs.hpp":  # (CUDA builds only: its CUDA headers are not in a CPU wheel)
                continue
            with open(os.path.join(dirpath, name)) as f:
                found.update(re.findall(r"^\s*#\s*include\s*<((?:ATen|c10|torch|caffe2|nlohmann)/[^>]+)>", f.read(), re.M))
    return sorted(found)


def parse_seconds(cxx, headers):
    with tempfile.TemporaryDirectory() as tmp:
        tu = os.path.join(tmp, "tu.cpp")
        with open(tu, "w") as f:
            f.write("".join(f"#include <{h}>\n" for h in headers))
        cmd = [cxx, "-std=c++20", "-fsyntax-only", "-I" + os.path.join(ROOT, "include"),
               "-isystem", os.path.join(TORCH, "include"),
               "-isystem", os.path.join(TORCH, "include", "torch", "csrc", "api", "include"), tu]
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        return time.perf_counter() - start


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cxx = os.environ.get("CXX", "g++")
    rows = [("<" + h + ">", [h]) for h in HEADERS]
    deps = dependency_headers()
    rows.insert(2, (f"xport's {len(deps)} LibTorch headers", deps))
    for label, headers in rows:
        times = [parse_seconds(cxx, headers) for _ in range(runs)]
        print(f"{label:30} {statistics.median(times):6.2f} s")


if __name__ == "__main__":
    main()
