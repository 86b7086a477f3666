#!/usr/bin/env python3
"""Instructions per iteration of the runtime benchmarks, counted by valgrind's callgrind.

Wall time on a shared 2-core VM moves by 2x between runs, and `perf stat` has no hardware counters
there; instruction counts are the same from run to run. Each benchmark runs alone under
`valgrind --tool=callgrind --instr-atstart=no`: bench/icount.hpp collects inside the timed loops
only, one profile per loop; this divides the instructions of the last, longest loop (Google
Benchmark grows its loops until the time is reached; the first calls' one-time costs stay in the
first, short ones) by its iterations. Single
threaded (OMP_NUM_THREADS=1), as the wall-time table of docs/engine.md.

    tools/icount.py                        # docs/engine.md's workloads, as a markdown table (InferenceMode
                                           # eager / each variant in parentheses)
    tools/icount.py --filter 'BM_mlp_.*'   # some benchmarks, one line each
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (workload, [(column, benchmark name)]) - docs/engine.md's rows; InferenceMode eager is the baseline
WORKLOADS = [
    ("chain of 1000 elementwise ops, [1, 8]", [
        ("eager", "BM_chain_eager/1000"), ("eager NoGrad", "BM_chain_eager_nograd/1000"),
        ("eager InferenceMode", "BM_chain_eager_inference/1000"),
        ("TorchScript", "BM_chain_torchscript_executor/1000"), ("Static Runtime", "BM_chain_static_runtime/1000"),
        ("interpreter", "BM_chain_xport/1000"), ("engine", "BM_chain_engine/1000")]),
    ("MLP 8 x (64, 64), batch 1, inference IR", [
        ("eager", "BM_mlp_eager"), ("eager NoGrad", "BM_mlp_eager_nograd"),
        ("eager InferenceMode", "BM_mlp_eager_inference"),
        ("TorchScript", "BM_mlp_torchscript_executor"), ("Static Runtime", "BM_mlp_static_runtime"),
        ("interpreter", "BM_mlp_xport/inference_ir:1"), ("engine", "BM_mlp_engine/inference_ir:1")]),
    ("Transformer encoder layer, inference IR", [
        ("eager", "BM_transformer_eager/mode:0"), ("eager NoGrad", "BM_transformer_eager/mode:1"),
        ("eager InferenceMode", "BM_transformer_eager/mode:2"),
        ("interpreter", "BM_transformer_xport"), ("engine", "BM_transformer_engine/threads:1/training_ir:0")]),
    ("LSTM, inference IR (engine: training IR too)", [
        ("eager", "BM_lstm_eager/mode:0"), ("eager NoGrad", "BM_lstm_eager/mode:1"),
        ("eager InferenceMode", "BM_lstm_eager/mode:2"),
        ("interpreter", "BM_lstm_xport"), ("engine", "BM_lstm_engine/threads:1/training_ir:0"),
        ("engine, training IR", "BM_lstm_engine/threads:1/training_ir:1"),
        ("interpreter, fuse_lstm", "BM_lstm_fused/engine:0"), ("engine, fuse_lstm", "BM_lstm_fused/engine:1")]),
    ("MoE, 3 experts, data-dependent routing", [
        ("eager", "BM_moe_eager/mode:0"), ("eager NoGrad", "BM_moe_eager/mode:1"),
        ("eager InferenceMode", "BM_moe_eager/mode:2"),
        ("interpreter", "BM_moe_xport"), ("engine", "BM_moe_engine")]),
]


def count(bench, name):
    """Instructions per timed iteration of benchmark `name` (exact match): its last, longest loop,
    of at least 10 iterations (a first loop slowed by one-time costs can end the benchmark alone:
    then it runs again, longer)."""
    for min_time in (0.5, 4, 16):
        iterations, instructions = count_once(bench, name, min_time)
        if iterations >= 10:
            break
    return instructions / iterations


def count_once(bench, name, min_time):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}", bench,
               f"--benchmark_filter=^{re.escape(name)}$", f"--benchmark_min_time={min_time}"]
        env = dict(os.environ, OMP_NUM_THREADS="1")
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if r.returncode != 0:
            sys.exit(f"icount: {name} failed under valgrind:\n{r.stderr[-2000:]}")
        best = None  # (iterations, instructions) of the loop with the most iterations
        for f in os.listdir(tmp):
            iterations = instructions = None
            with open(os.path.join(tmp, f)) as dump:
                for line in dump:
                    m = re.match(r"desc: Trigger: Client Request: xport-timed-iterations (\d+)", line)
                    if m:
                        iterations = int(m.group(1))
                    elif line.startswith("totals:"):
                        instructions = int(line.split()[1])
            if iterations and instructions is not None and (best is None or iterations > best[0]):
                best = (iterations, instructions)
        if best is None:
            sys.exit(f"icount: {name} ran no timed loop (is the name exact? bench/icount.hpp compiled in?)")
        return best


def fmt(n):
    return f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n / 1e3:.1f} k"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", default=os.path.join(ROOT, "build", "bench", "bench_interpreter"))
    ap.add_argument("--filter", help="count the benchmarks whose names match this regex, one per line")
    args = ap.parse_args()
    if args.filter:
        names = subprocess.run([args.bench, "--benchmark_list_tests"], capture_output=True, text=True).stdout.split()
        for name in [n for n in names if re.fullmatch(args.filter, n)]:
            print(f"{name}\t{count(args.bench, name):.0f}", flush=True)
        return
    columns = ["eager", "eager NoGrad", "eager InferenceMode", "TorchScript", "Static Runtime", "interpreter", "engine"]
    print("| workload | " + " | ".join(columns) + " | engine vs InferenceMode eager |")
    print("|---" * (len(columns) + 2) + "|")
    for workload, variants in WORKLOADS:
        counts = {col: count(args.bench, name) for col, name in variants}
        base = counts["eager InferenceMode"]
        cells = [f"{fmt(counts[c])} ({base / counts[c]:.2f}x)" if c in counts else "-" for c in columns]
        extra = [f"{c} {fmt(n)} ({base / n:.2f}x)" for c, n in counts.items() if c not in columns]
        ratio = f"{base / counts['engine']:.2f}x" + ("; " + "; ".join(extra) if extra else "")
        print(f"| {workload} | " + " | ".join(cells) + f" | {ratio} |", flush=True)

if __name__ == "__main__":
    main()
