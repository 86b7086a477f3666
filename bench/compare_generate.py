"""Text generation per token, xport against Python, in one run: a tiny llama (the LLM corpus's
config: 2 layers, hidden 32, vocabulary 64) wrapped by transformers' static-cache export path
(TorchExportableModuleForDecoderOnlyLM), at cache lengths 64 and 4096, in the training IR and
after run_decompositions(); one decode call (input_ids [1, 1], cache_position [1]) timed with
xport's interpreter and engine (bench_generate) and with Python's ep.module() and the unexported
model, one thread.

Usage: python3 bench/compare_generate.py BUILD_DIR [--dir DIR] [--repetitions N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import warnings

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))
warnings.filterwarnings("ignore")

import corpus_llm  # noqa: E402

CACHES = (64, 4096)


def export(out):
    """The archives bench_generate reads, and the eager wrapped models, by name."""
    os.makedirs(out, exist_ok=True)
    make = corpus_llm.architectures()["llama"]
    eager = {}
    for cache in CACHES:
        corpus_llm.MAX_CACHE = cache
        module = corpus_llm.wrapped(make, torch.float32)
        eager[f"llama_{cache}"] = module.model  # (the outer wrapper's forward drops cache_position)
        for suffix in ("", "_aten"):
            path = os.path.join(out, f"llama_{cache}{suffix}.pt2")
            if not os.path.exists(path):
                ep = module.export(input_ids=torch.tensor([[3]]), cache_position=torch.tensor([0]))
                torch.export.save(ep.run_decompositions() if suffix else ep, path)
    return eager


def per_call_us(fn, cache, calls=400):
    with torch.no_grad():
        for pos in range(5, 25):
            fn(pos)
        times = []
        for k in range(calls):
            pos = 5 + k % (cache - 5)
            t = time.perf_counter()
            fn(pos)
            times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--dir", default="/tmp/xport_bench_generate")
    ap.add_argument("--repetitions", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    eager = export(a.dir)
    env = dict(os.environ, OMP_NUM_THREADS="1", XPORT_BENCH_LLM_DIR=a.dir)
    r = subprocess.run([os.path.join(a.build, "bench", "bench_generate"), "--benchmark_format=json",
                        f"--benchmark_repetitions={a.repetitions}", "--benchmark_report_aggregates_only=true"],
                       env=env, capture_output=True, text=True, check=True)
    xport = {b["run_name"].split("/", 1)[1]: b["real_time"] for b in json.loads(r.stdout)["benchmarks"]
             if b.get("aggregate_name") == "median"}
    print(f"per token, microseconds (median; one thread; torch {torch.__version__})")
    print(f"{'archive':<18}{'interpreter':>12}{'engine':>10}{'ep.module()':>13}{'eager':>10}"
          f"{'engine vs ep.module()':>24}")
    for cache in CACHES:
        for suffix in ("", "_aten"):
            name = f"llama_{cache}{suffix}"
            m = torch.export.load(os.path.join(a.dir, name + ".pt2")).module()
            ep_us = per_call_us(lambda p: m(input_ids=torch.tensor([[3]]), cache_position=torch.tensor([p])), cache)
            model = eager[f"llama_{cache}"]
            eager_us = per_call_us(lambda p: model(input_ids=torch.tensor([[3]]), cache_position=torch.tensor([p])), cache)
            interp, engine = xport[f"{name}_interpreter"], xport[f"{name}_engine"]
            print(f"{name:<18}{interp:>12.1f}{engine:>10.1f}{ep_us:>13.1f}{eager_us:>10.1f}{ep_us / engine:>23.2f}x")


if __name__ == "__main__":
    main()
