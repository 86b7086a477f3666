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
  6. torch's unflatten nests xport's re-save as it nests torch's own archive, to the same outputs,
     and preserved submodule calls are torch's (module_call_graph), swappable for eager layers;
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
import zipfile

import torch
import torch.utils._pytree as pytree

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preserved  # noqa: E402  (the stack whose layers' calls torch preserves: an eager layer to swap in)
import pytree_types  # noqa: E402  (the suite's dataclasses and other node types, registered)
import xport_ops  # noqa: E402,F401  (the suite's custom operators: xport's archives of GatedBlock call them)
import torch.ao.quantization.fx._decomposed  # noqa: E402,F401  (quantized_decomposed: xport's archives of the quantized fixtures)
import transformers.modeling_outputs  # noqa: E402,F401  (quantized_resnet returns a ModelOutput: its type registers itself)

# what test_interop.cpp writes: a shorter index means archives went missing
MIN_ARCHIVES = {"cpp": 76, "xport_saved": 84}
# re-saved archives whose unflatten() step 6 compares (those torch's own archive unflattens)
MIN_UNFLATTENED = 110


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


def module_call_graph_json(path):
    with zipfile.ZipFile(path) as z:
        record = next(n for n in z.namelist() if n.endswith("/models/model.json"))
        return json.loads(z.read(record))["graph_module"]["module_call_graph"]


def normalized(call_graph):
    """A module_call_graph with its pytree specs parsed (their JSON text's spacing and key order
    are the writer's)."""
    out = copy.deepcopy(call_graph)
    for entry in out:
        for key in ("in_spec", "out_spec"):
            if entry["signature"] is not None:
                entry["signature"][key] = json.loads(entry["signature"][key])
    return out


def check_unflatten(oracle, folder, name, src, args, kwargs, io, failures):
    """torch's unflatten nests xport's re-save of a torch archive as it nests torch's own (the
    nn_module_stack frames and call counts), and runs it to the same outputs. Returns whether it
    compared (main requires most archives to be compared)."""
    if folder != "xport_saved":
        return False
    try:
        torch.export.unflatten(torch.export.load(os.path.join(oracle, "py", os.path.basename(src))))
    except Exception:  # noqa: BLE001  (torch's own archive does not unflatten: nothing to compare)
        return False
    unflat = torch.export.unflatten(torch.export.load(src))
    torch.manual_seed(io["seed"])
    with torch.no_grad():
        got = [t.detach() for t in pytree.tree_leaves(unflat(*copy.deepcopy(args), **copy.deepcopy(kwargs)))
               if isinstance(t, torch.Tensor)]
    want = [t for t in io["outputs"] if t is not None]
    check_outputs(f"{name}: unflatten()", got, want, False, failures)
    return True


def check_preserved(oracle, folder, name, src, args, kwargs, io, failures):
    """For a program with preserved submodule calls (torch's, saved again by xport, or xport's
    export of preserved.Stack's C++ twin): the module_call_graph is torch's, entry for entry (the
    ones torch wrote); torch's unflatten of xport's archive gives xport's outputs; with a preserved
    layer swapped for an eager one (torch calls it through the kept signature), it still does."""
    call_graph = module_call_graph_json(src)
    kept = [e["fqn"] for e in call_graph[1:] if e["signature"] is not None]
    if not kept:
        return
    if folder == "xport_saved":
        with open(os.path.join(oracle, "py", "index.json")) as f:
            entry = next(e for e in json.load(f) if e["name"] == name.split("/", 1)[1])
        if normalized(call_graph) != normalized(entry["module_call_graph"]):
            failures.append(f"{name}: module_call_graph differs from the one torch wrote")
    elif kept != list(preserved.PRESERVED):
        failures.append(f"{name}: preserved calls {kept}, expected {list(preserved.PRESERVED)}")
    ep = torch.export.load(src)
    unflat = torch.export.unflatten(ep)
    torch.manual_seed(io["seed"])
    got = [t.detach() for t in pytree.tree_leaves(unflat(*copy.deepcopy(args), **copy.deepcopy(kwargs)))]
    check_outputs(f"{name}: unflatten()", got, list(io["outputs"]), True, failures)
    for fqn in preserved.PRESERVED:
        unflat = torch.export.unflatten(torch.export.load(src))
        unflat.set_submodule(fqn, preserved.eager_layer(ep.state_dict, fqn))
        got = [t.detach() for t in pytree.tree_leaves(unflat(*copy.deepcopy(args), **copy.deepcopy(kwargs)))]
        check_outputs(f"{name}: unflatten() with '{fqn}' swapped for an eager layer", got, list(io["outputs"]), False,
                      failures)


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

    # 6. the module tree: torch's unflatten of xport's archive; preserved submodule calls (torch's
    # own archive's module_call_graph, kept by xport)
    stats["unflattened"] = int(check_unflatten(oracle, folder, name, src, args, kwargs, io, failures))
    check_preserved(oracle, folder, name, src, args, kwargs, io, failures)

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
    failures, checked, exact, outputs, unflattened = [], 0, 0, 0, 0
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
                unflattened += stats.get("unflattened", 0)
            except Exception as e:  # one archive's failure is reported, the others still run
                failures.append(f"{folder}/{name}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                traceback.print_exc()
            checked += 1
            print(f"{'ok  ' if len(failures) == before else 'FAIL'} {folder}/{name}", flush=True)
        if len(index) < least:
            failures.append(f"{folder}/index.json lists {len(index)} archives, expected at least {least}")
    if unflattened < MIN_UNFLATTENED:
        failures.append(f"unflatten() compared on {unflattened} re-saved archives, expected at least {MIN_UNFLATTENED}")
    print(f"\n{checked} xport archives checked by torch {torch.__version__}: loaded, weights equal, "
          f"ep.module() bit-equal to xport ({exact} of {outputs} outputs), run_decompositions() equal, re-saved; "
          f"{unflattened} re-saves unflattened as torch's own")
    if failures:
        print(f"\n{len(failures)} failure(s):")
        for f in failures:
            print("  " + f)
        sys.exit(1)


if __name__ == "__main__":
    main()
