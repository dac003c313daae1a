"""ONNX file -> graph IR.

Reads the protobuf, its large weights left in their files and mapped (frontend/mapped.py;
external data only from inside the model's own folder), inlines local
functions, rewrites the nodes of frontend/rewrite.py's operators into ai.onnx ones and replaces
those of operators ONNX defines as functions (frontend/schema_functions.py), binds user shapes
and constants, and builds the Graph with nodes in dependency order. Shape inference and
folding happen afterwards (passes.infer).
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Mapping

import numpy as np
import onnx
from onnx import AttributeProto, numpy_helper

from ..errors import ModelError, ShapeError, UnsupportedError
from ..ir import dtypes
from ..ir.dims import Dim, Symbol, shape_symbols
from ..ir.graph import Graph, Node, Subgraph, Value, subgraph_reads
from .narrow import NARROW, narrow_edges, untyped_narrow_outputs, widen_array, widen_nodes
from . import mapped
from .operators import check_supported
from .rewrite import expand_rewrites
from .schema_functions import expand_schema_functions
from .validate import tensor_bytes, validate_model


def load_onnx(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse an ONNX file and its external data, refusing anything outside its folder."""
    p = Path(path)
    if not p.exists():
        raise ModelError(f"no such file: {p}", "check the path to the .onnx model")
    if p.is_dir():
        raise ModelError(f"{p} is a directory, not an ONNX file")
    try:
        model = mapped.open_model(p)
    except Exception as e:  # protobuf raises DecodeError, or RuntimeWarning-ish errors
        raise ModelError(f"{p} is not an ONNX model (protobuf parse failed: {e})",
                         "is the file truncated, or another format?") from None
    if not model.HasField("graph") or model.ir_version <= 0 or not model.opset_import:
        raise ModelError(f"{p} is not an ONNX model (no graph, IR version or opset)",
                         "is the file truncated, or another format?")
    _load_external_data(model, p.parent.resolve())
    if model.functions:
        try:
            from onnx import inliner
            model = inliner.inline_local_functions(model)
        except Exception as e:
            raise ModelError(f"cannot inline the model's local functions: {e}") from None
    return model


def _tensors_with_external_data(graph: onnx.GraphProto):
    """(tensor, whether it is an initializer) of the graph and its subgraphs."""
    for t in graph.initializer:
        yield t, True
    for n in graph.node:
        for a in n.attribute:
            if a.type == AttributeProto.TENSOR:
                yield a.t, False
            elif a.type == AttributeProto.GRAPH:
                yield from _tensors_with_external_data(a.g)
            elif a.type == AttributeProto.GRAPHS:
                for sub in a.graphs:
                    yield from _tensors_with_external_data(sub)


def _external_int(t: onnx.TensorProto, info: dict, key: str) -> int | None:
    raw = info.get(key)
    if raw in (None, ""):
        return None
    try:
        v = int(raw)
    except ValueError:
        raise ModelError(f"tensor {t.name!r}: external data {key} {raw!r} is not an integer") from None
    if v < 0:
        raise ModelError(f"tensor {t.name!r}: external data {key} {v} is negative")
    return v


def _load_external_data(model: onnx.ModelProto, base: Path) -> None:
    for t, initializer in _tensors_with_external_data(model.graph):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in t.external_data}
        if not all(isinstance(x, str) for kv in info.items() for x in kv) or not isinstance(t.name, str):
            raise ModelError(f"tensor {t.name!r} has external data entries that are not valid UTF-8 text",
                             "the file is corrupt")
        loc = info.get("location", "")
        target = (base / loc).resolve()
        if not loc or os.path.isabs(loc) or (base != target and base not in target.parents):
            raise ModelError(f"tensor {t.name!r} names external data {loc!r} outside the model's folder",
                             "external data files must sit in the model's folder or below it")
        if not target.is_file():
            raise ModelError(f"tensor {t.name!r}: external data file {loc!r} not found next to the model")
        # the size the dims and type need, checked before a byte is read
        need = tensor_bytes(t, f"tensor {t.name!r}")
        if need is None:
            raise UnsupportedError([f"external data of tensor {t.name!r}, element type "
                                    f"{onnx.TensorProto.DataType.Name(t.data_type)}"])
        offset = _external_int(t, info, "offset") or 0
        length = _external_int(t, info, "length")
        if length is not None and length != need:
            raise ModelError(f"tensor {t.name!r}: external data length {length} bytes, its dims {list(t.dims)} "
                             f"need {need}", "the external data entry does not match the tensor: re-export the model")
        size = target.stat().st_size
        if offset + need > size:
            raise ModelError(f"tensor {t.name!r}: external data {loc!r} is shorter than the tensor needs "
                             f"({need} bytes at offset {offset}, the file has {size})")
        if initializer and mapped.mappable(t):
            mapped.mark(t, str(target), offset, need)      # mapped when imported (frontend/mapped.py)
        else:
            mapped.read_into(t, str(target), offset, need)


def attr_value(a: AttributeProto):
    if a.type == AttributeProto.FLOAT:
        return float(a.f)
    if a.type == AttributeProto.INT:
        return int(a.i)
    if a.type == AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if a.type == AttributeProto.TENSOR:
        return numpy_helper.to_array(a.t)
    if a.type == AttributeProto.FLOATS:
        return [float(x) for x in a.floats]
    if a.type == AttributeProto.INTS:
        return [int(x) for x in a.ints]
    if a.type == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if a.type == AttributeProto.GRAPH:
        return import_subgraph(a.g)
    if a.type == AttributeProto.GRAPHS:
        return [import_subgraph(x) for x in a.graphs]
    if a.type == AttributeProto.TENSORS:
        return [numpy_helper.to_array(t) for t in a.tensors]
    return a  # sparse tensors, type protos: kept raw; ops that need them say so


def import_subgraph(graph: onnx.GraphProto) -> Subgraph:
    """A node's subgraph (If branch, Loop/Scan/SequenceMap body) in the graph IR, in its own names
    (ir.graph.Subgraph): its initializers read and widened as the graph's are, its nodes'
    attributes imported (nested subgraphs too) and their narrow types widened (frontend/narrow.py,
    a CastLike to one of its narrow initializers included)."""
    unreadable = [("sparse", t.values.name, "") for t in graph.sparse_initializer]
    initializers: dict[str, np.ndarray] = {}
    narrow: dict[str, int] = {}                   # (a CastLike to one of them rounds or wraps)
    files = mapped.Files()
    for t in graph.initializer:
        try:
            arr = np.asarray(files.array(t)).astype(dtypes.from_onnx(t.data_type), copy=False)
        except dtypes.UnsupportedDtype as e:
            unreadable.append(("dtype", t.name, str(e)))
            continue
        initializers[t.name] = widen_array(arr)
        if dtypes.is_narrow(arr.dtype):
            narrow[t.name] = t.data_type
    nodes = [Node(p.op_type, list(p.input), list(p.output), {a.name: attr_value(a) for a in p.attribute}, p.name,
                  p.domain) for p in graph.node]
    widen_nodes(nodes, narrow)
    return Subgraph([i.name for i in graph.input], [o.name for o in graph.output], nodes, initializers, unreadable)


def model_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _value_info_type(vi: onnx.ValueInfoProto):
    tt = vi.type.tensor_type
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "untyped"
        raise UnsupportedError([f"graph input {vi.name!r} is not a tensor but a {kind.replace('_type', '')}"],
                               "the artifact's inputs are tensors (sequences and optionals inside the graph "
                               "are resolved at compile time)")
    dt = dtypes.from_onnx(tt.elem_type)
    dims = []
    if tt.HasField("shape"):
        for d in tt.shape.dim:
            dims.append(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?"))
    else:
        dims = None
    return dt, dims


def _range_symbol(name: str, spec, flag: str) -> Symbol:
    """A Symbol from (lo, hi) or (lo, hi, multiple)."""
    try:
        lo, hi, *rest = spec
        if len(rest) > 1 or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                    for v in (lo, hi, *rest)):
            raise ValueError
    except (TypeError, ValueError):
        raise ShapeError(f"{flag} {name}: a range is (lo, hi) or (lo, hi, multiple) of integers, not {spec!r}",
                         "CLI: --dim seq=1..512, --shape x=1x3x32..960%32x32..960%32") from None
    return Symbol(name, int(lo), int(hi), int(rest[0]) if rest else 1)


def _shape_entries(name: str, dims) -> tuple:
    """An input's --shape: ints, and ranges as (lo, hi[, multiple]) tuples."""
    if isinstance(dims, (str, bytes)) or not hasattr(dims, "__iter__"):
        raise ShapeError(f"shapes must map input names to sequences of dims, not {dims!r} for {name!r}")
    out = []
    for d in dims:
        if isinstance(d, (tuple, list)):
            _range_symbol(name, d, "--shape")
            out.append(tuple(d))
            continue
        try:
            if isinstance(d, bool) or int(d) != d:
                raise ValueError
        except (TypeError, ValueError):
            raise ShapeError(f"shapes must map input names to sequences of integers or (lo, hi) ranges, "
                             f"not {list(dims)!r} for {name!r}") from None
        out.append(int(d))
    return tuple(out)


def _dim_of(sym: Symbol):
    """A bound dim_param: its Dim, or the one size a range of one size has."""
    return sym.lo if sym.lo == sym.hi else Dim.of(sym)


def _spec(d) -> str:
    return str(d) if isinstance(d, int) else _range_symbol("", d, "").spec()


def _ranged(named: dict, sym_name: str, spec):
    """The Dim of a ranged --shape entry: the model's dim_param at that place names it (shared with
    every input naming it), else `<input>.<axis>`; a range of one size is that int."""
    sym = _range_symbol(sym_name, spec, "--shape")
    have = named.setdefault(sym_name, sym)
    if have != sym:
        raise ShapeError(f"dimension {sym_name!r} is bound to {have.spec()} and to {sym.spec()}",
                         "inputs that share a dim_param share its range: give it once, with --dim")
    return _dim_of(have)


def import_model(model: onnx.ModelProto, name: str = "model", shapes: Mapping[str, tuple] | None = None,
                 consts: Mapping[str, np.ndarray] | None = None, dims: Mapping[str, tuple] | None = None) -> Graph:
    """The model as a Graph. `shapes` bind inputs' dims: an int each, or a range (lo, hi) or
    (lo, hi, multiple) for a run-time dimension; `dims` bind the model's dim_params by name to
    ranges (ir/dims.py)."""
    shapes = {k: _shape_entries(k, v) for k, v in (shapes or {}).items()}
    named = {k: _range_symbol(k, v, "dims") for k, v in (dims or {}).items()}
    dim_flags = set(named)
    consts = dict(consts or {})
    opset = validate_model(model)
    fixed = {k: v for k, v in shapes.items() if all(isinstance(d, int) for d in v)}
    expanded = expand_schema_functions(expand_rewrites(model, fixed))
    if expanded is not model:
        model = expanded
        opset = validate_model(model)       # the bodies' nodes, against the model's opset
    for k, given in shapes.items():
        if any(isinstance(d, int) and d < 0 for d in given):
            raise ShapeError(f"--shape {k}: dims {list(given)} must not be negative")
    gp = model.graph
    g = Graph(name, opset)
    # opset per domain, for messages about nodes of other domains (custom ops)
    g.domain_opsets = {(imp.domain or "ai.onnx"): int(imp.version)
                       for imp in model.opset_import}

    if len(gp.sparse_initializer):
        raise UnsupportedError([f"sparse initializer {sp.values.name!r}" for sp in gp.sparse_initializer],
                               "store these initializers densely (onnx.numpy_helper)")
    files = mapped.Files()                  # the weights, read in place (frontend/mapped.py)
    for t in gp.initializer:
        try:
            dt = dtypes.from_onnx(t.data_type)
            arr = files.array(t)
        except dtypes.UnsupportedDtype as e:
            raise UnsupportedError([f"initializer {t.name!r}: {e}"]) from None
        arr = np.asarray(arr.astype(dt, copy=False), order="C")
        g.add_value(Value(t.name, dt, tuple(arr.shape), arr))

    known = set(shapes) | set(consts)
    input_names = [vi.name for vi in gp.input]
    for k in known:
        if k not in input_names:
            raise ShapeError(f"--shape/--const names {k!r}, which is not a graph input",
                             f"graph inputs are: {', '.join(input_names) or '(none)'}")
    unbound: list[tuple[str, str, str]] = []          # (input, its dims, an example --shape value)
    declared: set[str] = set()                        # the inputs' dim_params (for --dim)
    for vi in gp.input:
        if vi.name in g.values and vi.name not in consts:
            continue                   # an initializer also listed as input (old exporters): its default
                                       # value, unless --const overrides it as ONNX Runtime's feeds would
        try:
            dt, dims = _value_info_type(vi)
        except dtypes.UnsupportedDtype as e:
            raise UnsupportedError([f"graph input {vi.name!r}: {e}"]) from None
        declared.update(d for d in dims or [] if isinstance(d, str) and d != "?")
        if vi.name in consts:
            try:
                arr = np.asarray(np.asarray(consts[vi.name]).astype(dt), order="C")
            except (TypeError, ValueError) as e:
                raise ShapeError(f"--const {vi.name}: cannot use the array as {dtypes.name(dt)}: {e}") from None
            if dims is not None and len(dims) != arr.ndim:
                raise ShapeError(f"--const {vi.name}: array has rank {arr.ndim}, the model says {len(dims)}")
            g.add_value(Value(vi.name, dt, tuple(arr.shape), arr))
            continue
        if vi.name in shapes:
            given = shapes[vi.name]
            if dims is not None:
                if len(given) != len(dims):
                    raise ShapeError(f"--shape {vi.name}: rank {len(given)} given, the model says {len(dims)}")
                for k, (a, b) in enumerate(zip(given, dims)):
                    if isinstance(b, int) and b != a:
                        raise ShapeError(f"--shape {vi.name}: dim {k} is {b} in the model, {_spec(a)} given")
            dims = [d if isinstance(d, int) else
                    _ranged(named, dims[k] if dims is not None and isinstance(dims[k], str) and dims[k] != "?"
                            else f"{vi.name}.{k}", d) for k, d in enumerate(given)]
        elif dims is not None:
            dims = [_dim_of(named[d]) if isinstance(d, str) and d in named else d for d in dims]
        if dims is None or any(isinstance(d, str) for d in dims):
            shown = "?" if dims is None else "x".join(str(d) for d in dims)
            example = "1x3x224x224" if dims is None else "x".join(str(d) if isinstance(d, int) else "1" for d in dims)
            unbound.append((vi.name, shown, example, [d for d in dims or [] if isinstance(d, str) and d != "?"]))
            continue
        g.add_value(Value(vi.name, dt, tuple(dims)))
        g.inputs.append(vi.name)
    unused = sorted(dim_flags - declared)
    if unused:
        raise ShapeError(f"--dim names {', '.join(map(repr, unused))}, which no graph input declares",
                         "the inputs' symbolic dims (dim_param) are: " + (", ".join(sorted(declared)) or "none"))
    g.symbols = {s.name: s for n in g.inputs for s in shape_symbols(g.values[n].shape)}
    nodes = []
    for k, n in enumerate(gp.node):
        attrs = {a.name: attr_value(a) for a in n.attribute}
        nodes.append(Node(n.op_type, list(n.input), list(n.output), attrs, n.name or f"{n.op_type}_{k}", n.domain))
    if unbound:
        # an operator aotc does not compile is the first thing to say: binding the shapes
        # would not help
        check_supported(g, nodes)
        # every input that needs --shape at once, not one per attempt
        flags = " ".join(f"--shape {name}={example}" for name, _, example, _ in unbound)
        params = sorted({p for *_, ps in unbound for p in ps})
        what = ", ".join(f"{name!r} ({shown})" for name, shown, _, _ in unbound)
        name, shown, _, _ = unbound[0]
        ranges = (" ".join(f"--dim {p}=1..N" for p in params) + " (Python: dims={...})") if params else \
            "a range in --shape (1..N for a dim)"
        raise ShapeError(f"input {name!r} has unbound symbolic dimensions ({shown})" if len(unbound) == 1 else
                         f"inputs {what} have unbound symbolic dimensions",
                         f"fix them at compile time with {flags} (Python: shapes={{...}}), choosing the sizes "
                         f"you need, or let them vary at run time within a range: {ranges}")

    narrow_outputs = {o.name: o.type.tensor_type.elem_type for o in gp.output
                      if o.type.HasField("tensor_type") and o.type.tensor_type.elem_type in NARROW}
    if narrow_outputs or any(dtypes.is_narrow(v.dtype) for v in g.values.values()):
        narrow_outputs.update(untyped_narrow_outputs(model))
        nodes = narrow_edges(g, nodes, narrow_outputs)
    else:
        widen_nodes(nodes)             # (narrow attributes and Casts of a model without narrow values)
    g.nodes = _topo_sort(nodes, set(g.values))
    g.outputs = [o.name for o in gp.output]
    produced = {o for n in g.nodes for o in n.outputs if o} | set(g.values)
    for o in g.outputs:
        if o not in produced:
            raise ModelError(f"graph output {o!r} is not computed by any node")
    return g


def _topo_sort(nodes: list[Node], available: set[str]) -> list[Node]:
    producer: dict[str, int] = {}
    for k, n in enumerate(nodes):
        for o in n.outputs:
            if not o:
                continue
            if o in producer or o in available:
                raise ModelError(f"value {o!r} is produced twice (by node {n.name!r})", "the graph is not in SSA form")
            producer[o] = k
    for n in nodes:
        for i in n.inputs:
            if i and i not in producer and i not in available:
                raise ModelError(f"node {n.name!r} ({n.op_type}) reads {i!r}, which nothing produces",
                                 "the graph has a dangling input")
    # what each node reads: its inputs, and the outer names its subgraphs (If branches) read
    reads = [[i for i in n.inputs if i] + sorted(subgraph_reads(n)) for n in nodes]
    order, state = [], [0] * len(nodes)      # 0 new, 1 visiting, 2 done
    for start in range(len(nodes)):
        if state[start]:
            continue
        stack = [(start, 0)]
        while stack:
            k, pos = stack.pop()
            if pos == 0:
                if state[k] == 2:
                    continue
                state[k] = 1
            deps = [producer[i] for i in reads[k] if i in producer]
            if pos < len(deps):
                stack.append((k, pos + 1))
                d = deps[pos]
                if state[d] == 1:
                    raise ModelError(f"the graph has a cycle through node {nodes[d].name!r} ({nodes[d].op_type})")
                if state[d] == 0:
                    stack.append((d, 0))
                continue
            state[k] = 2
            order.append(nodes[k])
    return order
