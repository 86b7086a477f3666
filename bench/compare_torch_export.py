"""xport against torch.export 2.13 in Python, in one run: the C++ benchmark binary
(bench_torch_export) and the Python peers on the same workloads, as ratios of medians.

Usage: python3 bench/compare_torch_export.py BUILD_DIR [--repetitions N]

Workloads (same sizes on both sides; the Python models are the twins of tests/python):
  export        ResNet-18 [1, 3, 224, 224]; Transformer encoder layer (512, 8 heads, ff 2048) [128, 1, 512]
  load + run    the archive torch.export.save wrote from the twin: xport::load + xport::run once,
                against torch.export.load + ep.module()(x) once
  run           the inference IR: xport::run against ep.module()(x) of torch's run_decompositions()
                and against eager LibTorch (C++) and eager PyTorch
nativert is not a peer: the torch 2.13 wheel ships no usable nativert (see docs/versions.md).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
warnings.filterwarnings("ignore")

import cpp_nn  # noqa: E402
import twins  # noqa: E402


class BigEncoder(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = cpp_nn.TransformerEncoderLayer(512, 8, 2048, 0.1, torch.nn.functional.gelu)

    def forward(self, x):
        return self.layer(x)


def models():
    torch.manual_seed(0)
    resnet = twins.ResNet18().eval()
    torch.manual_seed(0)
    encoder = BigEncoder().eval()
    return {"resnet18": (resnet, torch.randn(1, 3, 224, 224)), "encoder": (encoder, torch.randn(128, 1, 512))}


def median_time(fn, repetitions, min_time=1.0):
    fn()  # warm up
    times = []
    for _ in range(repetitions):
        start, n = time.perf_counter(), 0
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time / repetitions or n >= 1000:
                break
        times.append(elapsed / n)
    return statistics.median(times)


def python_side(archive_dir, repetitions):
    out = {}
    for name, (m, x) in models().items():
        ep = torch.export.export(m, (x,))
        path = os.path.join(archive_dir, f"{name}.pt2")
        torch.export.save(ep, path)
        out[f"export_{name}"] = median_time(lambda: torch.export.export(m, (x,)), repetitions, 5.0)

        def load_first_run():
            loaded = torch.export.load(path)
            with torch.no_grad():
                loaded.module()(x)
        out[f"load_first_run_{name}"] = median_time(load_first_run, repetitions, 5.0)
        inference = ep.run_decompositions().module()
        with torch.no_grad():
            out[f"run_{name}_torch_export"] = median_time(lambda: inference(x), repetitions)
            out[f"run_{name}_pytorch_eager"] = median_time(lambda: m(x), repetitions)
    return out


def cpp_side(build, archive_dir, repetitions):
    binary = os.path.join(build, "bench", "bench_torch_export")
    env = dict(os.environ, XPORT_BENCH_PT2_DIR=archive_dir, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    res = subprocess.run([binary, "--benchmark_format=json", f"--benchmark_repetitions={repetitions}",
                          "--benchmark_report_aggregates_only=true"], env=env, check=True, capture_output=True, text=True)
    out = {}
    for b in json.loads(res.stdout)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            unit = {"ms": 1e-3, "us": 1e-6, "ns": 1e-9, "s": 1.0}[b["time_unit"]]
            out[b["run_name"].removeprefix("BM_")] = b["real_time"] * unit
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--repetitions", type=int, default=5)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    with tempfile.TemporaryDirectory() as d:
        py = python_side(d, a.repetitions)
        cpp = cpp_side(a.build, d, a.repetitions)
    rows = []
    for name in ("resnet18", "encoder"):
        rows.append((f"export {name}", cpp[f"export_{name}_xport"], py[f"export_{name}"], "torch.export.export"))
        rows.append((f"load + first run {name}", cpp[f"load_first_run_{name}_xport"], py[f"load_first_run_{name}"],
                     "torch.export.load + ep.module()"))
        rows.append((f"run {name}", cpp[f"run_{name}_xport"], py[f"run_{name}_torch_export"], "ep.module() (inference IR)"))
        rows.append((f"run {name}", cpp[f"run_{name}_xport"], cpp[f"run_{name}_eager"], "eager LibTorch (C++)"))
        rows.append((f"run {name}", cpp[f"run_{name}_xport"], py[f"run_{name}_pytorch_eager"], "eager PyTorch"))
    print(f"torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')}, medians of {a.repetitions}")
    print(f"{'workload':28s} {'xport':>10s} {'peer':>10s} {'peer/xport':>10s}  peer")
    for what, ours, theirs, peer in rows:
        print(f"{what:28s} {ours * 1e3:9.2f}ms {theirs * 1e3:9.2f}ms {theirs / ours:10.2f}  {peer}")


if __name__ == "__main__":
    main()
