"""torch.export is the judge of xport's archives (ctest `oracle_python_reads`).

    python3 check_xport_archives.py <oracle dir>

For every archive <oracle>/cpp/<name>.pt2 that tests/test_interop.cpp wrote (listed in
cpp/index.json), with its <name>.io.pt (layout in test_interop.cpp), and every archive of
<oracle>/xport_saved/ (the programs torch wrote, loaded and saved again by xport; steps 1 to 4):
  1. torch.export.load reads it;
  2. every state tensor and constant equals, bit for bit, the tensor xport saved next to it;
  3. ep.module()(*args, **kwargs) gives xport's outputs (and the same buffer and input
     mutations), also at the other sizes of a dynamic program;
  4. ep.run_decompositions() runs and gives them too;
  5. torch.export.save writes it again to <oracle>/resaved/<name>.pt2 (with the io file),
     which xport then loads (`oracle_xport_reloads`).
Exits non-zero with one line per failure, naming the archive and the check.
"""
import contextlib
import copy
import warnings
import json
import os
import shutil
import sys
import traceback

import torch
import torch.utils._pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pytree_types  # noqa: E402  (the suite's dataclasses and other node types, registered)
import xport_ops  # noqa: E402,F401  (the suite's custom operators: xport's archives of GatedBlock call them)
import torch.ao.quantization.fx._decomposed  # noqa: E402,F401  (quantized_decomposed: xport's archives of the quantized fixtures)
import transformers.modeling_outputs  # noqa: E402,F401  (quantized_resnet returns a ModelOutput: its type registers itself)

# what test_interop.cpp writes: a shorter index means archives went missing
MIN_ARCHIVES = {"cpp": 74, "xport_saved": 81}


# dtypes LibTorch's pickler writes as torch.load(weights_only=True) refuses them (io files leave them out)
V3_DTYPES = {torch.uint16, torch.uint32, torch.uint64, torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2,
             torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu}

# dtypes torch.equal has no kernel for: compared by their bytes
BYTES_ONLY = {torch.complex32, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz,
              torch.float8_e8m0fnu}


def same(a, b, exact):
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a == b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype in BYTES_ONLY:
        return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))
    if exact or not a.is_floating_point():
        return torch.equal(a, b)
    # within rounding of the dtype (a float16 decomposition may differ from its kernel in the last bit)
    eps = max(1e-5, 2 * torch.finfo(a.dtype).eps)
    return torch.allclose(a, b, rtol=eps, atol=max(1e-6, eps / 10), equal_nan=True)


def run(ep, args, kwargs, seed):
    """ep.module() on copies of the inputs: (flat outputs, module, flat inputs after the call)."""
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    module = ep.module()
    torch.manual_seed(seed)
    # with autograd on, as xport runs (some kernels differ under no_grad); but torch's unlifted
    # module writes a PARAMETER_MUTATION back with copy_ into the parameter, which autograd
    # refuses on a leaf that requires grad (torch 2.13's own run_decompositions() of
    # nn.Embedding(max_norm=...) fails so): such a program runs under no_grad, as eager's update.
    # So does one with a torch.scan: torch runs it, autograd on, as a partitioned forward graph
    # that rounds differently in the last bit from the graph xport wrote (and ran).
    mutates_parameters = any(s.kind == torch.export.graph_signature.OutputKind.PARAMETER_MUTATION
                             for s in ep.graph_signature.output_specs)
    scans = any(n.target is torch.ops.higher_order.scan for n in ep.graph.nodes)
    with torch.no_grad() if mutates_parameters or scans else contextlib.nullcontext():
        out = module(*args, **kwargs)
    return pytree.tree_leaves(out), module, [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]


def check_outputs(what, got, want, exact, failures):
    if len(got) != len(want):
        failures.append(f"{what}: {len(got)} outputs, xport's program returned {len(want)}")
        return 0
    n_exact = 0
    for i, (g, w) in enumerate(zip(got, want)):
        if not same(g, w, False):
            diff = (g.float() - w.float()).abs().max().item() if g.shape == w.shape else None
            failures.append(f"{what}: output {i} differs ({tuple(g.shape)} {g.dtype} vs {tuple(w.shape)} {w.dtype}, "
                            f"max abs diff {diff})")
        n_exact += same(g, w, True)
    return n_exact


def check_archive(oracle, folder, name, failures):
    src = os.path.join(oracle, folder, name + ".pt2")
    io = torch.load(os.path.join(oracle, folder, name + ".io.pt"), weights_only=True)
    args, kwargs, seed = tuple(io["args"]), dict(io["kwargs"]), io["seed"]
    if name in pytree_types.RETYPE:  # the io file holds a plain call (what C++ reads and writes)
        args, kwargs = pytree_types.RETYPE[name](args, kwargs)
    ep = torch.export.load(src)
    stats = {"exact": 0, "outputs": 0}
    name = f"{folder}/{name}"  # in the messages

    # 2. weights, bit for bit
    saved = dict(io["state"])
    loaded = {**ep.state_dict, **{k: v for k, v in ep.constants.items() if isinstance(v, torch.Tensor)}}
    # (dtypes the io files cannot carry are left out of them: the program's outputs show those)
    loaded = {k: v for k, v in loaded.items() if v.dtype not in V3_DTYPES}
    if set(saved) != set(loaded):
        failures.append(f"{name}: state {sorted(loaded)} but xport saved {sorted(saved)}")
    for k in saved.keys() & loaded.keys():
        if not same(loaded[k].detach(), saved[k], True):
            failures.append(f"{name}: state tensor '{k}' differs from the one xport saved")
        if isinstance(loaded[k], torch.nn.Parameter) != (k in ep.graph_signature.parameters):
            failures.append(f"{name}: '{k}' is{'' if isinstance(loaded[k], torch.nn.Parameter) else ' not'} an "
                            "nn.Parameter, against the signature")

    # 3. the unlifted module runs as xport's program did
    got, module, inputs_after = run(ep, args, kwargs, seed)
    # the same graph through the same kernels (one thread, the same seed): bit-equal
    stats["exact"] += check_outputs(f"{name}: ep.module()", got, list(io["outputs"]), True, failures)
    stats["outputs"] += len(got)
    buffers = dict(module.named_buffers())
    for k, want in io["after"]["state"].items():
        if k not in buffers:
            failures.append(f"{name}: ep.module() has no buffer '{k}'")
        elif not same(buffers[k], want, True):
            failures.append(f"{name}: buffer '{k}' after the call differs from xport's")
    want_inputs = list(io["after"]["inputs"])
    if len(inputs_after) != len(want_inputs) or not all(same(a, b, True) for a, b in zip(inputs_after, want_inputs)):
        failures.append(f"{name}: the inputs after the call differ from xport's (input mutation)")
    for k, extra in enumerate(io["extra"]):
        ep_k = torch.export.load(src)  # from the saved state
        got_k, _, _ = run(ep_k, tuple(extra["args"]), dict(extra["kwargs"]), seed)
        check_outputs(f"{name}: ep.module(), extra call {k}", got_k, list(extra["outputs"]), True, failures)

    # 4. the functional core-ATen IR of it, by torch: other kernels, equal within rounding
    decomposed = torch.export.load(src).run_decompositions()
    got_d, _, _ = run(decomposed, args, kwargs, seed)
    check_outputs(f"{name}: run_decompositions().module()", got_d, list(io["outputs"]), False, failures)

    # 5. written again by torch
    if folder != "cpp":
        return stats
    out_dir = os.path.join(oracle, "resaved")
    base = os.path.basename(src)[:-len(".pt2")]
    torch.export.save(torch.export.load(src), os.path.join(out_dir, base + ".pt2"))
    shutil.copyfile(os.path.join(oracle, "cpp", base + ".io.pt"), os.path.join(out_dir, base + ".io.pt"))
    return stats


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    warnings.filterwarnings("ignore", category=FutureWarning)  # torch-internal deprecations
    torch.set_num_threads(1)  # as xport's side ran: one summation order
    oracle = sys.argv[1]
    os.makedirs(os.path.join(oracle, "resaved"), exist_ok=True)
    failures, checked, exact, outputs = [], 0, 0, 0
    for folder, least in MIN_ARCHIVES.items():
        with open(os.path.join(oracle, folder, "index.json")) as f:
            index = json.load(f)
        for entry in index:
            name = entry["name"]
            before = len(failures)
            try:
                stats = check_archive(oracle, folder, name, failures)
                exact += stats["exact"]
                outputs += stats["outputs"]
            except Exception as e:  # one archive's failure is reported, the others still run
                failures.append(f"{folder}/{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                traceback.print_exc()
            checked += 1
            print(f"{'ok  ' if len(failures) == before else 'FAIL'} {folder}/{name}", flush=True)
        if len(index) < least:
            failures.append(f"{folder}/index.json lists {len(index)} archives, expected at least {least}")
    print(f"\n{checked} xport archives checked by torch {torch.__version__}: loaded, weights equal, "
          f"ep.module() bit-equal to xport ({exact} of {outputs} outputs), run_decompositions() equal, re-saved")
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
