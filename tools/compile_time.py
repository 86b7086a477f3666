#!/usr/bin/env python3
"""How long parsing a header takes (g++ -fsyntax-only, C++20), beside LibTorch's own umbrella
headers in the same run: what including xport costs a translation unit.

    python3 tools/compile_time.py [runs=3]

LibTorch comes from the pip wheel (the primary build); CXX picks the compiler. Prints the median
wall time of each header, in seconds.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TORCH = os.path.dirname(torch.__file__)
HEADERS = ["ATen/ATen.h", "xport/xport.hpp", "torch/torch.h"]


def parse_seconds(cxx, header):
    with tempfile.TemporaryDirectory() as tmp:
        tu = os.path.join(tmp, "tu.cpp")
        with open(tu, "w") as f:
            f.write(f"#include <{header}>\n")
        cmd = [cxx, "-std=c++20", "-fsyntax-only", "-I" + os.path.join(ROOT, "include"),
               "-isystem", os.path.join(TORCH, "include"),
               "-isystem", os.path.join(TORCH, "include", "torch", "csrc", "api", "include"), tu]
        start = time.perf_counter()
        subprocess.run(cmd, check=True)
        return time.perf_counter() - start


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cxx = os.environ.get("CXX", "g++")
    for header in HEADERS:
        times = [parse_seconds(cxx, header) for _ in range(runs)]
        print(f"{'<' + header + '>':20} {statistics.median(times):6.2f} s")


if __name__ == "__main__":
    main()
