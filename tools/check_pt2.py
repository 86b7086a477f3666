#!/usr/bin/python3
"""Check a .pt2 archive (torch.export's PT2 archive format) written by xport's C++ side.

Usage: /usr/bin/python3 tools/check_pt2.py ARCHIVE.pt2 [--expect-state STATE.pt] [--model NAME]

Runs with Debian's python3-torch (torch 1.13, which has no torch.export), so it works from the raw
records. Exits 0 printing `ok: <archive>: N nodes, M weights (K records), C constants` on stdout when
everything checks; otherwise prints one `error: <record>: <JSON path>: <problem>` line per problem on
stderr and exits 1. (Dtypes newer than this torch, e.g. uint16 and float8, are rebuilt as same-width
integers, with a `warning:`.)

What it checks:
  * the zip: every entry under one root folder, records stored uncompressed, and LibTorch's own
    reader (torch._C.PyTorchFileReader) opens it and reads the JSON records;
  * archive_format == "pt2", archive_version == "0";
  * models/<model>.json against torch/_export/serde/schema.py, SCHEMA_VERSION (8, 17), transcribed
    below: required fields, no unknown fields, JSON types, one-key unions, integer enums;
  * the graph: schema_version.major == 8, values used only after they are defined, a
    tensor_values (sym_*_values) entry for every value, node targets `torch.ops.<ns>.<op>.<overload>`,
    input/output specs matching the graph's inputs/outputs in order, parameter/buffer/constant
    targets present in the weights/constants configs, and the module call graph's pytree specs;
  * data/weights/<model>_weights_config.json and data/constants/<model>_constants_config.json:
    each payload's record exists and holds enough bytes for its dtype/sizes/strides/offset, and the
    tensor rebuilds; with --expect-state (a torch::jit::pickle_save'd Dict[str, Tensor]) each
    rebuilt tensor equals the saved one and the key sets agree;
  * data/sample_inputs/<model>.pt, when present, loads as a tuple (args, kwargs).
"""
import argparse
import io
import json
import re
import sys
import zipfile

import torch

SCHEMA_VERSION = (8, 17)

# The schema: `enum Name MEMBER=value ...`, `struct Name field:type ...`, `union Name member:type ...`
# (an indented line continues the one above). Types: int, float, bool, str, list[T], dict[str,T],
# opt[T] (may be null), and the names below; a trailing `=` marks a field with a default (may be omitted).
SCHEMA_TEXT = """
enum ScalarType UNKNOWN=0 BYTE=1 CHAR=2 SHORT=3 INT=4 LONG=5 HALF=6 FLOAT=7 DOUBLE=8 COMPLEXHALF=9
    COMPLEXFLOAT=10 COMPLEXDOUBLE=11 BOOL=12 BFLOAT16=13 UINT16=28 FLOAT8E4M3FN=29 FLOAT8E5M2=30
    FLOAT8E4M3FNUZ=31 FLOAT8E5M2FNUZ=32
enum Layout Unknown=0 SparseCoo=1 SparseCsr=2 SparseCsc=3 SparseBsr=4 SparseBsc=5 _mkldnn=6 Strided=7
enum MemoryFormat Unknown=0 ContiguousFormat=1 ChannelsLast=2 ChannelsLast3d=3 PreserveFormat=4
enum ArgumentKind UNKNOWN=0 POSITIONAL=1 KEYWORD=2
struct Device type:str index:opt[int]=
union SymExprHint as_int:int as_bool:bool as_float:float
struct SymExpr expr_str:str hint:opt[SymExprHint]=
union SymInt as_expr:SymExpr as_int:int
union SymFloat as_expr:SymExpr as_float:float
union SymBool as_expr:SymExpr as_bool:bool
struct TensorMeta dtype:ScalarType sizes:list[SymInt] requires_grad:bool device:Device strides:list[SymInt]
    storage_offset:SymInt layout:Layout
union SymIntArgument as_name:str as_int:int
union SymFloatArgument as_name:str as_float:float
union SymBoolArgument as_name:str as_bool:bool
struct TensorArgument name:str
struct TokenArgument name:str
union OptionalTensorArgument as_tensor:TensorArgument as_none:bool
struct GraphArgument name:str graph:Graph
struct CustomObjArgument name:str class_fqn:str
struct ComplexValue real:float imag:float
union Argument as_none:bool as_tensor:TensorArgument as_tensors:list[TensorArgument] as_int:int
    as_ints:list[int] as_float:float as_floats:list[float] as_string:str as_strings:list[str]
    as_sym_int:SymIntArgument as_sym_ints:list[SymIntArgument] as_scalar_type:ScalarType
    as_memory_format:MemoryFormat as_layout:Layout as_device:Device as_bool:bool as_bools:list[bool]
    as_sym_bool:SymBoolArgument as_sym_bools:list[SymBoolArgument] as_graph:GraphArgument
    as_optional_tensors:list[OptionalTensorArgument] as_custom_obj:CustomObjArgument as_operator:str
    as_sym_float:SymFloatArgument as_sym_floats:list[SymFloatArgument]
    as_optional_tensor:OptionalTensorArgument as_complex:ComplexValue
    as_nested_tensors:list[list[TensorArgument]] as_int_lists:list[list[int]]
    as_string_to_argument:dict[str,Argument]
struct NamedArgument name:str arg:Argument kind:opt[ArgumentKind]=
struct Node target:str inputs:list[NamedArgument] outputs:list[Argument] metadata:dict[str,str]
    is_hop_single_tensor_return:opt[bool]= name:opt[str]=
struct Graph inputs:list[Argument] outputs:list[Argument] nodes:list[Node] tensor_values:dict[str,TensorMeta]
    sym_int_values:dict[str,SymInt] sym_bool_values:dict[str,SymBool] is_single_tensor_return:bool=
    custom_obj_values:dict[str,CustomObjArgument]= sym_float_values:dict[str,SymFloat]=
struct UserInputSpec arg:Argument
union ConstantValue as_none:bool as_int:int as_float:float as_string:str as_bool:bool
struct InputToConstantInputSpec name:str value:ConstantValue
struct InputToParameterSpec arg:TensorArgument parameter_name:str
struct InputToBufferSpec arg:TensorArgument buffer_name:str persistent:bool
struct InputToTensorConstantSpec arg:TensorArgument tensor_constant_name:str
struct InputToCustomObjSpec arg:CustomObjArgument custom_obj_name:str
struct InputTokenSpec arg:TokenArgument
union InputSpec user_input:UserInputSpec parameter:InputToParameterSpec buffer:InputToBufferSpec
    tensor_constant:InputToTensorConstantSpec custom_obj:InputToCustomObjSpec token:InputTokenSpec
    constant_input:InputToConstantInputSpec
struct UserOutputSpec arg:Argument
struct LossOutputSpec arg:TensorArgument
struct BufferMutationSpec arg:TensorArgument buffer_name:str
struct ParameterMutationSpec arg:TensorArgument parameter_name:str
struct GradientToParameterSpec arg:TensorArgument parameter_name:str
struct GradientToUserInputSpec arg:TensorArgument user_input_name:str
struct UserInputMutationSpec arg:TensorArgument user_input_name:str
struct OutputTokenSpec arg:TokenArgument
union OutputSpec user_output:UserOutputSpec loss_output:LossOutputSpec buffer_mutation:BufferMutationSpec
    gradient_to_parameter:GradientToParameterSpec gradient_to_user_input:GradientToUserInputSpec
    user_input_mutation:UserInputMutationSpec token:OutputTokenSpec parameter_mutation:ParameterMutationSpec
struct GraphSignature input_specs:list[InputSpec] output_specs:list[OutputSpec]
struct RangeConstraint min_val:opt[int] max_val:opt[int]
struct ModuleCallSignature inputs:list[Argument] outputs:list[Argument] in_spec:str out_spec:str
    forward_arg_names:opt[list[str]]=
struct ModuleCallEntry fqn:str signature:opt[ModuleCallSignature]=
struct NamedTupleDef field_names:list[str]
struct GraphModule graph:Graph signature:GraphSignature module_call_graph:list[ModuleCallEntry]
    metadata:dict[str,str]= treespec_namedtuple_fields:dict[str,NamedTupleDef]=
struct SchemaVersion major:int minor:int
struct ExportedProgram graph_module:GraphModule opset_version:dict[str,int]
    range_constraints:dict[str,RangeConstraint] schema_version:SchemaVersion verifiers:list[str]=
    torch_version:str= guards_code:list[str]=
struct PayloadMeta path_name:str is_param:bool use_pickle:bool tensor_meta:opt[TensorMeta]
struct PayloadConfig config:dict[str,PayloadMeta]
"""

ENUMS, STRUCTS, UNIONS = {}, {}, {}  # {name: {values}}, {name: {field: (type, has_default)}}, {name: {member: type}}
for _line in SCHEMA_TEXT.strip().replace("\n   ", " ").splitlines():
    _kind, _name, *_items = _line.split()
    if _kind == "enum":
        ENUMS[_name] = {int(i.split("=")[1]) for i in _items}
    elif _kind == "struct":
        STRUCTS[_name] = {f: (t.rstrip("="), t.endswith("=")) for f, t in (i.split(":") for i in _items)}
    else:
        UNIONS[_name] = dict(i.split(":") for i in _items)
_NAMES = {"int", "float", "bool", "str", *ENUMS, *STRUCTS, *UNIONS}
for _t in [t for f in STRUCTS.values() for t, _ in f.values()] + [t for u in UNIONS.values() for t in u.values()]:
    assert re.sub(r"^(opt\[|list\[|dict\[str,)+|\]+$", "", _t) in _NAMES, f"schema table: unknown type {_t}"

# ScalarType -> (torch dtype name, item size)
DTYPES = {1: ("uint8", 1), 2: ("int8", 1), 3: ("int16", 2), 4: ("int32", 4), 5: ("int64", 8), 6: ("float16", 2),
          7: ("float32", 4), 8: ("float64", 8), 9: ("complex32", 4), 10: ("complex64", 8), 11: ("complex128", 16),
          12: ("bool", 1), 13: ("bfloat16", 2), 28: ("uint16", 2), 29: ("float8_e4m3fn", 1), 30: ("float8_e5m2", 1),
          31: ("float8_e4m3fnuz", 1), 32: ("float8_e5m2fnuz", 1)}
STRIDED = 7
TARGET = re.compile(r"^torch\.ops\.[A-Za-z_]\w*\.[A-Za-z_]\w*\.[A-Za-z_]\w*$")


def first_line(e):
    return str(e).splitlines()[0] if str(e) else type(e).__name__


def join(path, key):
    return f"{path}.{key}" if path else key


def validate(v, t, path, errs):
    """Checks JSON value `v` against schema type `t`; appends `path: problem` strings to errs."""
    def bad(what):
        errs.append(f"{path or '<root>'}: expected {what}, got {json.dumps(v)[:60]}")
    if t.startswith("opt["):
        if v is not None:
            validate(v, t[4:-1], path, errs)
    elif t.startswith("list["):
        if not isinstance(v, list):
            return bad(t)
        for i, e in enumerate(v):
            validate(e, t[5:-1], f"{path}[{i}]", errs)
    elif t.startswith("dict[str,"):
        if not isinstance(v, dict):
            return bad(t)
        for k, e in v.items():
            validate(e, t[9:-1], f"{path}[{json.dumps(k)}]", errs)
    elif t == "int":
        if not isinstance(v, int) or isinstance(v, bool):
            bad("int")
    elif t == "float":
        if not (isinstance(v, (int, float)) and not isinstance(v, bool)) and v not in ("Infinity", "-Infinity", "NaN"):
            bad("float")
    elif t in ("bool", "str"):
        if not isinstance(v, bool if t == "bool" else str):
            bad(t)
    elif t in ENUMS:
        if not isinstance(v, int) or isinstance(v, bool) or v not in ENUMS[t]:
            bad(f"{t} (an int in {sorted(ENUMS[t])})")
    elif t in UNIONS:
        if not isinstance(v, dict) or len(v) != 1:
            return bad(f"{t} (an object with exactly one key)")
        (k, e), = v.items()
        if k not in UNIONS[t]:
            errs.append(f"{path}: '{k}' is not a member of {t}")
        else:
            validate(e, UNIONS[t][k], join(path, k), errs)
    elif t in STRUCTS:
        if not isinstance(v, dict):
            return bad(t)
        for f, (ft, has_default) in STRUCTS[t].items():
            if f in v:
                validate(v[f], ft, join(path, f), errs)
            elif not has_default:
                errs.append(f"{join(path, f)}: missing required field of {t}")
        for f in v:
            if f not in STRUCTS[t]:
                errs.append(f"{join(path, f)}: unknown field of {t}")
    else:
        raise AssertionError(f"schema type {t}")


def value_refs(arg):
    """(kind, name) of every value an Argument refers to; kind names its *_values table."""
    (k, v), = arg.items()
    if k == "as_tensor" or k == "as_custom_obj":
        yield ("tensor" if k == "as_tensor" else "custom_obj"), v["name"]
    elif k in ("as_tensors", "as_nested_tensors"):
        for t in (v if k == "as_tensors" else [t for ts in v for t in ts]):
            yield "tensor", t["name"]
    elif k in ("as_optional_tensor", "as_optional_tensors"):
        for o in ([v] if k == "as_optional_tensor" else v):
            if "as_tensor" in o:
                yield "tensor", o["as_tensor"]["name"]
    elif k.startswith("as_sym_"):
        kind = "sym_" + k[7:].rstrip("s")
        for s in (v if isinstance(v, list) else [v]):
            if "as_name" in s:
                yield kind, s["as_name"]
    elif k == "as_string_to_argument":
        for a in v.values():
            yield from value_refs(a)


def first_name(arg):
    return next((n for _, n in value_refs(arg)), None)


def check_treespec(text, path, errs):
    def node(n, p):
        if not isinstance(n, dict) or set(n) != {"type", "context", "children_spec"}:
            return errs.append(f"{p}: expected {{type, context, children_spec}}")
        for f in ("type", "context"):
            if n[f] is not None and not isinstance(n[f], str):
                errs.append(f"{p}.{f}: expected string or null")
        if not isinstance(n["children_spec"], list):
            return errs.append(f"{p}.children_spec: expected a list")
        for i, c in enumerate(n["children_spec"]):
            node(c, f"{p}.children_spec[{i}]")
    try:
        doc = json.loads(text)
    except ValueError as e:
        return errs.append(f"{path}: not JSON ({e})")
    if not (isinstance(doc, list) and len(doc) == 2 and doc[0] == 1):
        return errs.append(f"{path}: expected [1, treespec]")
    node(doc[1], f"{path}[1]")


SYM_OPS = {"_operator.add", "_operator.sub", "_operator.mul", "_operator.floordiv", "_operator.mod"}
SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
FUNCTIONS = {"FloorDiv", "Mod", "Min", "Max", "CeilDiv"}


def check_symbols(ep, tensor_values, errs):
    """Every symbol a symbolic size uses has a range constraint, and the ranges are sane; the
    expression evaluates (with sympy, when Debian's python3-sympy is there) to its hint."""
    ranges = ep["range_constraints"]
    for name, r in ranges.items():
        if not SYMBOL.fullmatch(name):
            errs.append(f"range_constraints: key '{name}' is not a symbol")
        lo, hi = r.get("min_val"), r.get("max_val")
        if lo is not None and hi is not None and lo > hi:
            errs.append(f"range_constraints.{name}: min_val {lo} > max_val {hi}")
    try:
        import sympy
    except ImportError:
        sympy = None
    for vname, tm in tensor_values.items():
        for field in ("sizes", "strides"):
            for i, s in enumerate(tm[field]):
                if "as_expr" not in s:
                    continue
                text = s["as_expr"]["expr_str"]
                where = f"graph.tensor_values.{vname}.{field}[{i}]"
                for sym in SYMBOL.findall(text):
                    if sym not in FUNCTIONS and sym not in ranges:
                        errs.append(f"{where}: '{text}' uses {sym}, which has no range constraint")
                if sympy is not None:
                    try:
                        e = sympy.sympify(text.replace("//", "/"), locals={"Mod": sympy.Mod, "Min": sympy.Min, "Max": sympy.Max})
                        if not e.free_symbols and (s["as_expr"].get("hint") or {}).get("as_int") is None:
                            errs.append(f"{where}: '{text}' is constant")
                    except (sympy.SympifyError, TypeError, SyntaxError) as exc:
                        errs.append(f"{where}: '{text}' does not parse as a sympy expression ({exc})")


def check_program(ep, configs, errs):
    """Consistency beyond the schema (ep has passed validation)."""
    if ep["schema_version"]["major"] != SCHEMA_VERSION[0]:
        errs.append(f"schema_version: major {ep['schema_version']['major']}, expected {SCHEMA_VERSION[0]}")
    gm = ep["graph_module"]
    g = gm["graph"]
    tables = {k: g.get(k + "_values", {}) for k in ("tensor", "sym_int", "sym_bool", "sym_float", "custom_obj")}
    defined = set()
    check_symbols(ep, tables["tensor"], errs)

    def define(arg, path):
        for kind, name in value_refs(arg):
            if name in defined:
                errs.append(f"{path}: value '{name}' is defined twice")
            defined.add(name)
            if name not in tables[kind]:
                errs.append(f"{path}: value '{name}' has no graph.{kind}_values entry")

    def use(arg, path):
        for _, name in value_refs(arg):
            if name not in defined:
                errs.append(f"{path}: uses value '{name}', which is not defined before this point")

    gp = "graph_module.graph"
    for i, a in enumerate(g["inputs"]):
        define(a, f"{gp}.inputs[{i}]")
    for i, n in enumerate(g["nodes"]):
        p = f"{gp}.nodes[{i}]"
        if not TARGET.match(n["target"]) and n["target"] not in SYM_OPS:
            errs.append(f"{p}.target: '{n['target']}' is not torch.ops.<namespace>.<op>.<overload>")
        if n["target"] in SYM_OPS or n["target"] == "torch.ops.aten.sym_size.int":
            outs = n["outputs"]
            if len(outs) != 1 or "as_sym_int" not in outs[0]:
                errs.append(f"{p}.outputs: {n['target']} returns one SymInt")
        for j, na in enumerate(n["inputs"]):
            use(na["arg"], f"{p}.inputs[{j}].arg")
        for j, o in enumerate(n["outputs"]):
            define(o, f"{p}.outputs[{j}]")
    for i, a in enumerate(g["outputs"]):
        use(a, f"{gp}.outputs[{i}]")

    sig = gm["signature"]
    sp = "graph_module.signature"
    graph_inputs = [first_name(a) for a in g["inputs"]]
    if len(sig["input_specs"]) != len(graph_inputs):
        errs.append(f"{sp}.input_specs: {len(sig['input_specs'])} specs for {len(graph_inputs)} graph inputs")
    for i, spec in enumerate(sig["input_specs"]):
        (kind, s), = spec.items()
        p = f"{sp}.input_specs[{i}].{kind}"
        # a constant input's placeholder is a literal without a name; user inputs may be literals too
        name = None if kind == "constant_input" else first_name(s["arg"]) if kind == "user_input" else s["arg"]["name"]
        if name is not None and name not in graph_inputs:
            errs.append(f"{p}: names '{name}', which is not a graph input")
        elif name is not None and i < len(graph_inputs) and graph_inputs[i] != name:
            errs.append(f"{p}: names '{name}' but graph input {i} is '{graph_inputs[i]}'")
        target = s.get({"parameter": "parameter_name", "buffer": "buffer_name",
                        "tensor_constant": "tensor_constant_name"}.get(kind, ""))
        if target is None:
            continue
        where = "weights" if kind == "parameter" or (kind == "buffer" and s["persistent"]) else "constants"
        meta = configs[where].get(target)
        if meta is None:
            errs.append(f"{p}: {kind} '{target}' has no entry in the {where} config")
            continue
        if where == "weights" and meta["is_param"] != (kind == "parameter"):
            errs.append(f"{p}: {kind} '{target}' has is_param={str(meta['is_param']).lower()} in the weights config")
        tm, gm_meta = meta.get("tensor_meta"), tables["tensor"].get(s["arg"]["name"])
        if tm and gm_meta and (tm["dtype"], tm["sizes"]) != (gm_meta["dtype"], gm_meta["sizes"]):
            errs.append(f"{p}: '{target}' has dtype/sizes {tm['dtype']}/{json.dumps(tm['sizes'])} in the {where} "
                        f"config but {gm_meta['dtype']}/{json.dumps(gm_meta['sizes'])} in graph.tensor_values")
    graph_outputs = [first_name(a) for a in g["outputs"]]
    if len(sig["output_specs"]) != len(graph_outputs):
        errs.append(f"{sp}.output_specs: {len(sig['output_specs'])} specs for {len(graph_outputs)} graph outputs")
    for i, spec in enumerate(sig["output_specs"]):
        (kind, s), = spec.items()
        name = first_name(s["arg"]) if kind == "user_output" else s["arg"]["name"]
        if name is not None and i < len(graph_outputs) and graph_outputs[i] != name:
            errs.append(f"{sp}.output_specs[{i}].{kind}: names '{name}' but graph output {i} is '{graph_outputs[i]}'")
    calls = gm["module_call_graph"]
    if calls and calls[0].get("signature"):
        for f in ("in_spec", "out_spec"):
            check_treespec(calls[0]["signature"][f], f"graph_module.module_call_graph[0].signature.{f}", errs)


def sym_int(s):
    """The int a SymInt stands for (its hint for an expression), or None."""
    if "as_int" in s:
        return s["as_int"]
    hint = s["as_expr"].get("hint") or {}
    return hint.get("as_int")


def rebuild(meta, data, where, errs):
    """The tensor a PayloadMeta describes over record bytes `data`, or None (problems go to errs)."""
    tm = meta["tensor_meta"]
    if tm is None:
        return errs.append(f"{where}.tensor_meta: null, but the payload is not pickled")
    if tm["dtype"] not in DTYPES:
        return errs.append(f"{where}.tensor_meta.dtype: {tm['dtype']} names no tensor dtype")
    if tm["layout"] != STRIDED:
        return errs.append(f"{where}.tensor_meta.layout: {tm['layout']}, only Strided (7) payloads are raw bytes")
    sizes, strides = [sym_int(s) for s in tm["sizes"]], [sym_int(s) for s in tm["strides"]]
    offset = sym_int(tm["storage_offset"])
    if None in sizes or None in strides or offset is None:
        return errs.append(f"{where}.tensor_meta: sizes, strides and storage_offset need int values (or int hints)")
    if len(sizes) != len(strides) or min(sizes + strides + [offset]) < 0:
        return errs.append(f"{where}.tensor_meta: sizes {sizes}, strides {strides}, offset {offset} do not fit")
    name, item = DTYPES[tm["dtype"]]
    need = 0 if 0 in sizes else (offset + sum((n - 1) * s for n, s in zip(sizes, strides)) + 1) * item
    if len(data) < need:
        return errs.append(f"{where}: {name}{sizes} (strides {strides}, offset {offset}) needs {need} bytes, "
                           f"record holds {len(data)}")
    dtype = getattr(torch, name, None)
    if dtype is None:  # newer than this torch: check the bytes through a same-width stand-in
        print(f"warning: {where}: torch {torch.__version__} has no {name}; rebuilt as a same-width integer", file=sys.stderr)
        dtype = {1: torch.uint8, 2: torch.int16}[item]
    usable = len(data) - len(data) % item
    flat = torch.frombuffer(bytearray(data[:usable]), dtype=dtype) if usable else torch.empty(0, dtype=dtype)
    return torch.as_strided(flat, sizes, strides, offset)


def same_values(a, b):
    """Equal values (same dtype and shape given); NaNs compare by their bits."""
    if torch.equal(a, b):
        return True
    try:
        return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))
    except RuntimeError:
        return False


class Archive:
    """The zip's records (root folder stripped), read through LibTorch's reader where it opens."""

    def __init__(self, path, errs):
        self.errs, self.zip = errs, zipfile.ZipFile(path)
        infos = self.zip.infolist()
        roots = {i.filename.split("/", 1)[0] for i in infos}
        if len(roots) != 1 or any("/" not in i.filename for i in infos):
            raise ValueError(f"zip entries must all sit under one root folder, found {sorted(roots)[:5]}")
        self.records = {i.filename.split("/", 1)[1]: i for i in infos}
        if len(self.records) != len(infos):
            errs.append("the zip holds duplicate entries")
        errs.extend(f"{n}: compressed (zip method {i.compress_type}); records must be stored"
                    for n, i in self.records.items() if i.compress_type != zipfile.ZIP_STORED)
        try:
            self.reader = torch._C.PyTorchFileReader(path)
            unlisted = set(self.records) - set(self.reader.get_all_records())
            if unlisted:
                errs.append(f"LibTorch's reader does not list {sorted(unlisted)[:5]}")
        except RuntimeError as e:
            self.reader = errs.append(f"LibTorch's PyTorchFileReader rejects the archive: {first_line(e)}")

    def read(self, name, via_libtorch=False):
        """The record's bytes; None (after reporting why) when it cannot be read."""
        if name not in self.records:
            return self.errs.append(f"{name}: missing")
        try:
            if via_libtorch and self.reader is not None:
                return bytes(self.reader.get_record(name))
            return self.zip.read(self.records[name])
        except (RuntimeError, OSError, zipfile.BadZipFile) as e:
            self.errs.append(f"{name}: cannot read ({first_line(e)})")

    def json(self, name):
        data = self.read(name, via_libtorch=True)
        try:
            return None if data is None else json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            self.errs.append(f"{name}: not JSON ({e})")


def read_config(ar, where, model, errs):
    """{fqn: PayloadMeta} of the entries that pass the schema."""
    name = f"data/{where}/{model}_{where}_config.json"
    doc = ar.json(name) if name in ar.records else {"config": {}}
    if doc is None:
        return {}
    if not (isinstance(doc, dict) and set(doc) == {"config"} and isinstance(doc["config"], dict)):
        errs.append(f'{name}: expected {{"config": {{fqn: PayloadMeta}}}}')
        return {}
    config = {}
    for fqn, meta in doc["config"].items():
        merrs = []
        validate(meta, "PayloadMeta", f"config[{json.dumps(fqn)}]", merrs)
        errs.extend(f"{name}: {e}" for e in merrs)
        if not merrs:
            config[fqn] = meta
    return config


def check_state(path, configs, rebuilt, errs):
    try:  # torch 1.13's torch.load reads torch::jit::pickle_save's zip (data.pkl + data/<n>) as is
        state = torch.load(path, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unpickling failure is a finding
        return errs.append(f"{path}: cannot load ({first_line(e)})")
    if not isinstance(state, dict):
        return errs.append(f"{path}: expected a Dict[str, Tensor], got {type(state).__name__}")
    for fqn in [f for c in configs.values() for f in c]:
        want, got = state.get(fqn), rebuilt.get(fqn)
        if fqn not in state:
            errs.append(f"{path}: has no '{fqn}'")
        elif not isinstance(want, torch.Tensor):
            errs.append(f"{path}: '{fqn}' is a {type(want).__name__}, not a tensor")
        elif got is not None and (got.dtype, got.shape) != (want.dtype, want.shape):
            errs.append(f"'{fqn}': the archive holds {got.dtype}{list(got.shape)}, {path} "
                        f"{want.dtype}{list(want.shape)}")
        elif got is not None and not same_values(got, want):
            errs.append(f"'{fqn}': the archive's values differ from {path}'s")
    errs.extend(f"{path}: '{k}' is in no payload config" for k in state if not any(k in c for c in configs.values()))


def check_archive(ar, args, errs):
    for name, want in (("archive_format", b"pt2"), ("archive_version", b"0")):
        got = ar.read(name, via_libtorch=True)
        if got is not None and got.strip() != want:
            errs.append(f"{name}: expected {want.decode()!r}, got {got[:20]!r}")
    configs = {where: read_config(ar, where, args.model, errs) for where in ("weights", "constants")}
    model = f"models/{args.model}.json"
    if model not in ar.records:
        names = sorted(n[7:-5] for n in ar.records if n.startswith("models/") and n.endswith(".json"))
        return errs.append(f"{model}: missing (models here: {', '.join(names) or 'none'}; see --model)")
    ep = ar.json(model)
    if ep is not None:
        merrs = []
        validate(ep, "ExportedProgram", "", merrs)
        if not merrs:
            check_program(ep, configs, merrs)
        errs.extend(f"{model}: {e}" for e in merrs)

    rebuilt, records = {}, {}
    for where, config in configs.items():
        records[where] = {meta["path_name"] for meta in config.values()}
        for fqn, meta in config.items():
            rec, path = f"data/{where}/{meta['path_name']}", f"data/{where}/{args.model}_{where}_config.json: {fqn}"
            data = None if meta["use_pickle"] else ar.read(rec)
            try:
                t = None if data is None else rebuild(meta, data, path, errs)
            except (RuntimeError, ValueError, TypeError, OverflowError) as e:
                t = errs.append(f"{path}: cannot rebuild the tensor ({e})")
            if t is not None:
                rebuilt[fqn] = t
    if args.expect_state:
        check_state(args.expect_state, configs, rebuilt, errs)

    sample = f"data/sample_inputs/{args.model}.pt"
    data = ar.read(sample) if sample in ar.records else None
    if data is not None:
        try:
            s = torch.load(io.BytesIO(data), map_location="cpu")
            if not (isinstance(s, tuple) and len(s) == 2 and isinstance(s[0], tuple) and isinstance(s[1], dict)):
                errs.append(f"{sample}: expected a tuple (args, kwargs), got {type(s).__name__}")
        except Exception as e:  # noqa: BLE001 - any unpickling failure is a finding
            errs.append(f"{sample}: cannot load ({first_line(e)})")
    if not errs:
        nodes = len(ep["graph_module"]["graph"]["nodes"])
        print(f"ok: {args.archive}: {nodes} nodes, {len(configs['weights'])} weights "
              f"({len(records['weights'])} records), {len(configs['constants'])} constants")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("archive")
    ap.add_argument("--expect-state", metavar="STATE.pt", help="a torch::jit::pickle_save'd Dict[str, Tensor]")
    ap.add_argument("--model", default="model", help="the model's name in the archive (default: model)")
    args = ap.parse_args(argv)
    errs = []
    try:
        ar = Archive(args.archive, errs)
    except (OSError, ValueError, zipfile.BadZipFile) as e:
        ar = errs.append(f"{args.archive}: {e}")
    if ar is not None:
        check_archive(ar, args, errs)
    for e in errs:
        print(f"error: {e}", file=sys.stderr)
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
