"""Structural validation of an ONNX model, before anything builds a graph from it.

Every rule here turns a malformed model into one `ModelError` line that names the node or
value and the rule broken, with a hint; nothing later in the pipeline then has to guard
against garbage (a short initializer reaching numpy's reshape, a negative dimension reaching
the planner, an attribute of the wrong type reaching an op's lowering).

What is checked (docs/ROBUSTNESS.md keeps the list for users):
  opsets        ai.onnx imported once (or several times at one version), at a version from
                MIN_OPSET to the newest the installed onnx package defines, or older where
                no operator of the model was redefined up to MIN_OPSET (it is then compiled
                as MIN_OPSET); other domains are left to the operator check
  graph         at least one output; names of inputs, outputs and initializers non-empty;
                inputs and initializers each unique; every node output defined once and not
                over an input or initializer; every node input defined
  tensors       (initializers and tensor attributes) a known element type; dims
                non-negative, at most MAX_RANK of them, a byte size that fits in 63 bits;
                the payload (raw_data, or the typed field the element type uses) holding
                exactly the elements the dims declare
  value infos   (graph inputs, outputs, value_info) dims non-negative, sizes that fit
  nodes         (ai.onnx, against the schema of the imported opset) the op exists at that
                opset, input and output counts, required inputs present, attribute names
                unique, required attributes present, no attribute the schema does not
                define, attribute types as declared
  element types graph inputs' and initializers' types, propagated through nodes where the
                schema fixes an output's type, against each schema's type constraints and
                against the graph outputs' declared types; outputs declared as tensors
  text          every name protobuf could decode as UTF-8
External data is checked where it is read (onnx_import._load_external_data, with
`tensor_bytes` from here), before a byte of it is read.
"""
from __future__ import annotations

import onnx
from onnx import AttributeProto, TensorProto, defs

from ..errors import ModelError
from ..ir.internal import OPSET_ATTR
from .mapped import is_marked

MIN_OPSET = 7
MAX_RANK = 32
MAX_BYTES = (1 << 63) - 1
DEFAULT_DOMAINS = ("", "ai.onnx")
# operators ONNX Runtime registers in the default domain at opsets before ONNX defined them
# (its LayerNormalization-1): such a node is ONNX Runtime's operator, rewritten when the model is
# read (frontend/contrib.py), not a model written against the wrong opset
ORT_EARLIER = {"LayerNormalization"}

# element type -> bytes per element in raw_data (None: packed, see _PACKED_BITS; 0: strings)
_ITEMSIZE = {
    TensorProto.FLOAT: 4, TensorProto.UINT8: 1, TensorProto.INT8: 1, TensorProto.UINT16: 2,
    TensorProto.INT16: 2, TensorProto.INT32: 4, TensorProto.INT64: 8, TensorProto.STRING: 0,
    TensorProto.BOOL: 1, TensorProto.FLOAT16: 2, TensorProto.DOUBLE: 8, TensorProto.UINT32: 4,
    TensorProto.UINT64: 8, TensorProto.COMPLEX64: 8, TensorProto.COMPLEX128: 16, TensorProto.BFLOAT16: 2,
}
for _name in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "FLOAT8E8M0"):
    if hasattr(TensorProto, _name):
        _ITEMSIZE[getattr(TensorProto, _name)] = 1
# sub-byte types, packed in raw_data and in int32_data alike: bits per element
_PACKED_BITS = {getattr(TensorProto, k): bits for k, bits in
                (("UINT4", 4), ("INT4", 4), ("FLOAT4E2M1", 4), ("UINT2", 2), ("INT2", 2)) if hasattr(TensorProto, k)}
_ITEMSIZE.update({code: None for code in _PACKED_BITS})

# typed payload field for each element type, and how many entries one element takes there
_TYPED_FIELD = {
    TensorProto.FLOAT: ("float_data", 1), TensorProto.COMPLEX64: ("float_data", 2),
    TensorProto.DOUBLE: ("double_data", 1), TensorProto.COMPLEX128: ("double_data", 2),
    TensorProto.INT64: ("int64_data", 1), TensorProto.STRING: ("string_data", 1),
    TensorProto.UINT32: ("uint64_data", 1), TensorProto.UINT64: ("uint64_data", 1),
}
_TYPED_FIELDS = ("float_data", "int32_data", "string_data", "int64_data", "double_data", "uint64_data")


def _type_name(code: int) -> str:
    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return str(code)


# ------------------------------------------------------------------------------------------ opsets
def default_opset(model: onnx.ModelProto) -> int:
    """The ai.onnx opset version the model imports, after checking it is one aotc knows."""
    newest = defs.onnx_opset_version()
    versions = [int(imp.version) for imp in model.opset_import if imp.domain in DEFAULT_DOMAINS]
    if not versions and not any(n.domain in DEFAULT_DOMAINS for n in model.graph.node):
        return newest        # (only other domains' operators, as ai.onnx.ml models: said unsupported later)
    if not versions:
        raise ModelError("the model imports no default-domain (ai.onnx) opset",
                         "add an opset_import entry for domain '' (ai.onnx)")
    if len(set(versions)) > 1:             # (the same version twice, as skl2onnx writes it, is one)
        raise ModelError(f"the model imports the ai.onnx opset {len(versions)} times "
                         f"(versions {', '.join(map(str, versions))})",
                         "keep one opset_import entry for domain '' (ai.onnx)")
    opset = versions[0]
    if opset < MIN_OPSET:
        return _lift_old_opset(model, opset)
    if opset > newest:
        raise ModelError(f"opset {opset} (ai.onnx) is newer than the newest aotc knows, {newest}",
                         f"re-export the model with opset {newest} or older")
    return opset


def all_graphs(graph: onnx.GraphProto):
    """The graph and every subgraph in it (If, Loop, Scan bodies, nested), graph first."""
    yield graph
    for n in graph.node:
        for a in n.attribute:
            for g in ([a.g] if a.type == AttributeProto.GRAPH else list(a.graphs)):
                yield from all_graphs(g)


def _lift_old_opset(model: onnx.ModelProto, opset: int) -> int:
    """A model of an opset older than MIN_OPSET is the same model at MIN_OPSET when none of
    its operators changed in between (each op's definition at `opset` is the one in force at
    MIN_OPSET): then it is compiled as MIN_OPSET, else refused, naming the ops that changed."""
    changed, missing = [], []
    for op in sorted({n.op_type for g in all_graphs(model.graph) for n in g.node if n.domain in DEFAULT_DOMAINS}):
        try:
            then = defs.get_schema(op, opset).since_version
        except defs.SchemaError:
            missing.append(op)
            continue
        now = defs.get_schema(op, MIN_OPSET).since_version
        if then != now:
            changed.append(f"{op} (version {then}, redefined in {now})")
    if missing:
        raise ModelError(f"opset {opset} defines no {', '.join(missing)}",
                         "the model's opset_import is older than its operators; re-export it")
    if changed:
        raise ModelError(f"opset {opset} is older than the oldest supported, {MIN_OPSET}, and these operators "
                         f"were redefined since: {'; '.join(changed)}",
                         "re-export the model with a newer opset, or convert it with "
                         "onnx.version_converter.convert_version")
    return MIN_OPSET


# ------------------------------------------------------------------------------------------ tensors
def element_count(dims, what: str) -> int:
    """Checked product of `dims` (non-negative, at most MAX_RANK, fits in 63 bits)."""
    if len(dims) > MAX_RANK:
        raise ModelError(f"{what} has rank {len(dims)}, above the most aotc handles, {MAX_RANK}")
    n = 1
    nonzero = 1
    for k, d in enumerate(dims):
        d = int(d)
        if d < 0:
            raise ModelError(f"{what} has a negative dimension ({d} at axis {k})",
                             "dimensions are sizes: 0 or more")
        n *= d
        nonzero *= max(d, 1)
    if nonzero > MAX_BYTES:
        raise ModelError(f"{what} has dims {list(map(int, dims))}, more elements than a 64-bit size holds")
    return n


def _packed_bytes(code: int, n: int) -> int:
    return (n * _PACKED_BITS[code] + 7) // 8


def tensor_bytes(t: TensorProto, what: str) -> int | None:
    """Bytes the tensor's data takes in raw form, after checking its type and dims; None for
    strings (no raw form) and for types whose layout is not known here."""
    if t.data_type == TensorProto.UNDEFINED or t.data_type not in TensorProto.DataType.values():
        raise ModelError(f"{what} has element type {_type_name(t.data_type)}, which is not an ONNX tensor type",
                         "the file is corrupt, or written by a newer ONNX than aotc knows")
    n = element_count(t.dims, what)
    size = _ITEMSIZE.get(t.data_type, 0)
    if size == 0:                  # strings, and types whose layout aotc does not know (it refuses them later)
        return None
    nbytes = _packed_bytes(t.data_type, n) if size is None else n * size
    if nbytes > MAX_BYTES:
        raise ModelError(f"{what} has dims {list(t.dims)}: {nbytes} bytes do not fit a 64-bit size")
    return nbytes


def check_tensor(t: TensorProto, what: str) -> None:
    """Type, dims, and a payload that holds exactly the declared elements."""
    nbytes = tensor_bytes(t, what)
    if is_marked(t):
        return                     # checked where the loader found it (frontend/onnx_import.py)
    if t.data_location == TensorProto.EXTERNAL:
        raise ModelError(f"{what} keeps its data in an external file, which was not loaded",
                         "load the model from its file (aotc reads external data from the model's folder)")
    n = element_count(t.dims, what)
    if t.data_type not in _ITEMSIZE:
        return                     # an element type aotc does not handle: the importer names it
    used = [f for f in _TYPED_FIELDS if len(getattr(t, f))]
    if t.HasField("raw_data") or t.raw_data:
        if nbytes is None:
            raise ModelError(f"{what} is a string tensor with raw_data", "strings belong in string_data")
        if len(t.raw_data) != nbytes:
            raise ModelError(f"{what} holds {len(t.raw_data)} bytes of raw_data, its dims {list(t.dims)} and type "
                             f"{_type_name(t.data_type)} need {nbytes}",
                             "the initializer is truncated or its dims are wrong: re-export the model")
        if used:
            raise ModelError(f"{what} has both raw_data and {used[0]}", "a tensor keeps its data in one field")
        return
    field, per = _TYPED_FIELD.get(t.data_type, ("int32_data", 1))
    if _ITEMSIZE[t.data_type] is None:                          # 4-bit and 2-bit types: packed
        want = _packed_bytes(t.data_type, n)
    else:
        want = n * per
    have = len(getattr(t, field))
    others = [f for f in used if f != field]
    if others:
        raise ModelError(f"{what} of type {_type_name(t.data_type)} has its data in {others[0]}, not {field}",
                         "the file is corrupt: re-export the model")
    if have != want:
        raise ModelError(f"{what} holds {have} values in {field}, its dims {list(t.dims)} need {want}",
                         "the initializer is truncated or its dims are wrong: re-export the model")


def _check_value_info(vi: onnx.ValueInfoProto, what: str) -> None:
    if not vi.type.HasField("tensor_type"):
        return                       # sequences, maps: the importer names them as unsupported
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return
    if len(tt.shape.dim) > MAX_RANK:
        raise ModelError(f"{what} has rank {len(tt.shape.dim)}, above the most aotc handles, {MAX_RANK}")
    dims = []
    for k, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            if d.dim_value < 0:
                raise ModelError(f"{what} has a negative dimension ({d.dim_value} at axis {k})",
                                 "dimensions are sizes: 0 or more (symbolic ones are names, dim_param)")
            dims.append(d.dim_value)
    n = element_count(dims, what)
    size = _ITEMSIZE.get(tt.elem_type) or 1
    if n * size > MAX_BYTES:
        raise ModelError(f"{what} has dims {dims}: {n * size} bytes do not fit a 64-bit size")


# ------------------------------------------------------------------------------------------ nodes
def _node_label(n: onnx.NodeProto, k: int) -> str:
    return f"node {n.name or f'{n.op_type}_{k}'!r} ({n.op_type})"


def _schema(n: onnx.NodeProto, opset: int, label: str = ""):
    """The node's ai.onnx schema at the imported opset; None for other domains and for op
    types ONNX does not define (the operator check lists those as unsupported)."""
    if n.domain not in DEFAULT_DOMAINS or not n.op_type:
        return None
    try:
        return defs.get_schema(n.op_type, opset, "")
    except Exception:
        pass
    first = next((v for v in range(opset + 1, defs.onnx_opset_version() + 1) if defs.has(n.op_type, v, "")), None)
    if first is None or n.op_type in ORT_EARLIER:       # no such operator at all, or ONNX Runtime's own
        return None
    raise ModelError(f"{label or n.op_type} uses {n.op_type}, which ai.onnx opset {opset} does not have "
                     f"(it appears in opset {first})", f"re-export the model with opset {first} or newer")


def node_opset(n: onnx.NodeProto, opset: int) -> int:
    """The opset a node is written in: the model's, or the one aotc's rewrites mark it with."""
    return next((int(a.i) for a in n.attribute if a.name == OPSET_ATTR), opset)


def _check_node(n: onnx.NodeProto, k: int, opset: int) -> None:
    label = _node_label(n, k)
    opset = node_opset(n, opset)
    seen = set()
    for a in n.attribute:
        if not a.name:
            raise ModelError(f"{label} has an attribute without a name")
        if a.name in seen:
            raise ModelError(f"{label} sets attribute {a.name!r} twice")
        seen.add(a.name)
        if a.type == AttributeProto.UNDEFINED:
            raise ModelError(f"{label}: attribute {a.name!r} has no type", "the file is corrupt: re-export the model")
        if a.type not in AttributeProto.AttributeType.values():     # (protobuf parses unknown codes as 0)
            raise ModelError(f"{label}: attribute {a.name!r} has type code {a.type}, which ONNX does not define",
                             "the file is corrupt, or written by a newer ONNX than aotc knows")
        if a.type == AttributeProto.TENSOR:
            check_tensor(a.t, f"{label} attribute {a.name!r}")
        elif a.type == AttributeProto.TENSORS:
            for j, t in enumerate(a.tensors):
                check_tensor(t, f"{label} attribute {a.name!r}[{j}]")
    schema = _schema(n, opset, label)
    if schema is None:
        return
    where = f"the {n.op_type}-{schema.since_version} schema"
    n_in, n_out = len(n.input), len(n.output)
    if not schema.min_input <= n_in <= schema.max_input:
        want = (f"{schema.min_input}" if schema.min_input == schema.max_input
                else f"{schema.min_input} to {schema.max_input}" if schema.max_input < 1 << 30
                else f"at least {schema.min_input}")
        raise ModelError(f"{label} has {n_in} inputs, {where} takes {want}")
    if not schema.min_output <= n_out <= schema.max_output:
        want = (f"{schema.min_output}" if schema.min_output == schema.max_output
                else f"{schema.min_output} to {schema.max_output}" if schema.max_output < 1 << 30
                else f"at least {schema.min_output}")
        raise ModelError(f"{label} has {n_out} outputs, {where} gives {want}")
    single = defs.OpSchema.FormalParameterOption.Single
    for pos, name in enumerate(n.input):
        formal = schema.inputs[min(pos, len(schema.inputs) - 1)] if schema.inputs else None
        if not name and formal is not None and formal.option == single:
            raise ModelError(f"{label} leaves input {pos} ({formal.name}) empty, and {where} requires it")
    declared = schema.attributes
    for a in n.attribute:
        spec = declared.get(a.name)
        if a.name == OPSET_ATTR:
            continue
        if spec is None:
            raise ModelError(f"{label} has attribute {a.name!r}, which {where} does not define",
                             f"{n.op_type}'s attributes at this opset: {', '.join(sorted(declared)) or '(none)'}")
        if int(spec.type) != int(a.type):
            raise ModelError(f"{label}: attribute {a.name!r} is {AttributeProto.AttributeType.Name(a.type)}, "
                             f"{where} declares {AttributeProto.AttributeType.Name(int(spec.type))}")
    for name, spec in declared.items():
        if spec.required and name not in seen:
            raise ModelError(f"{label} lacks attribute {name!r}, which {where} requires")


# ------------------------------------------------------------------------------------------ element types
def _type_str(code: int) -> str:
    """ONNX schema spelling of an element type: tensor(float), tensor(int64)..."""
    return f"tensor({_type_name(code).lower()})"


def _check_node_types(n: onnx.NodeProto, label: str, schema, types: dict[str, int],
                      makes_tensor: dict[str, str]) -> None:
    """Input element types against the schema's type constraints; records the output types
    the constraints determine, and (in `makes_tensor`) the outputs that can only be tensors.
    Inputs of unknown type (outputs of Cast & co.) are skipped."""
    allowed = {tc.type_param_str: set(tc.allowed_type_strs) for tc in schema.type_constraints}
    where = f"the {n.op_type}-{schema.since_version} schema"
    bound: dict[str, tuple[int, str]] = {}
    for pos, name in enumerate(n.input):
        if not name or name not in types or not schema.inputs:
            continue
        formal = schema.inputs[min(pos, len(schema.inputs) - 1)]
        param, code = formal.type_str, types[name]
        ts = _type_str(code)
        ok = allowed.get(param, {param})
        if ts not in ok:
            names = ", ".join(sorted(t[7:-1] for t in ok if t.startswith("tensor("))) or ", ".join(sorted(ok))
            raise ModelError(f"{label}: input {pos} ({formal.name}) is {_type_name(code).lower()}, {where} "
                             f"allows {names}", "the model breaks the operator's type constraints")
        if param in allowed and (formal.option != defs.OpSchema.FormalParameterOption.Variadic
                                 or formal.is_homogeneous):
            prev = bound.setdefault(param, (code, formal.name))
            if prev[0] != code:
                raise ModelError(f"{label}: inputs {prev[1]} and {formal.name} share type {param} in {where}, "
                                 f"but are {_type_name(prev[0]).lower()} and {_type_name(code).lower()}",
                                 "insert a Cast so both have one element type")
    for pos, name in enumerate(n.output):
        if not name or not schema.outputs:
            continue
        param = schema.outputs[min(pos, len(schema.outputs) - 1)].type_str
        if all(t.startswith("tensor(") for t in allowed.get(param, {param})):
            makes_tensor[name] = label
        if param in bound:
            types[name] = bound[param][0]
            continue
        only = allowed.get(param, {param})            # a fixed type, or a parameter with one choice
        if len(only) == 1 and next(iter(only)).startswith("tensor("):
            code = getattr(TensorProto, next(iter(only))[7:-1].upper(), None)
            if isinstance(code, int):
                types[name] = code


def _check_types(gp: onnx.GraphProto, opset: int) -> None:
    types: dict[str, int] = {}
    for vi in gp.input:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type:
            types[vi.name] = vi.type.tensor_type.elem_type
    for t in gp.initializer:
        types[t.name] = t.data_type
    # visit nodes in dependency order (a file's order need not be); cycles are reported later
    produced = {o for n in gp.node for o in n.output if o}
    done: set[str] = set()
    makes_tensor: dict[str, str] = {}
    pending = list(enumerate(gp.node))
    while pending:
        waiting = []
        for k, n in pending:
            if any(i in produced and i not in done for i in n.input if i):
                waiting.append((k, n))
                continue
            schema = _schema(n, node_opset(n, opset))
            if schema is not None:
                _check_node_types(n, _node_label(n, k), schema, types, makes_tensor)
            done.update(o for o in n.output if o)
        if len(waiting) == len(pending):
            break
        pending = waiting
    # a graph output declared with one element type must not be computed as another: ONNX
    # Runtime refuses such a model, and aotc would hand back the computed type
    for vi in gp.output:
        kind = vi.type.WhichOneof("value")
        if kind not in (None, "tensor_type") and vi.name in makes_tensor:
            raise ModelError(f"graph output {vi.name!r} is declared as a {kind.replace('_type', '')}, but "
                             f"{makes_tensor[vi.name]} computes a tensor", "fix the output's declared type")
        if kind != "tensor_type":
            continue                 # (outputs of sequence-making ops: the operator check lists those)
        declared = vi.type.tensor_type.elem_type
        have = types.get(vi.name)
        if declared and have is not None and declared != have:
            raise ModelError(f"graph output {vi.name!r} is declared {_type_name(declared).lower()}, but the graph "
                             f"computes {_type_name(have).lower()}", "fix the output's declared type")


# ------------------------------------------------------------------------------------------ text fields
def _text(value, what: str) -> None:
    """protobuf hands back a string field with invalid UTF-8 as bytes: refuse it here, before
    it reaches code that formats or compares names."""
    if not isinstance(value, str):
        raise ModelError(f"{what} is not valid UTF-8 text ({bytes(value)[:40]!r})", "the file is corrupt")


def _check_text(model: onnx.ModelProto) -> None:
    for imp in model.opset_import:
        _text(imp.domain, "an opset_import domain")
    gp = model.graph
    for kind, infos in (("graph input", gp.input), ("graph output", gp.output), ("value_info", gp.value_info)):
        for vi in infos:
            _text(vi.name, f"the name of a {kind}")
            if vi.type.HasField("tensor_type"):
                for d in vi.type.tensor_type.shape.dim:
                    _text(d.dim_param, f"a symbolic dimension of {kind} {vi.name!r}")
    for t in gp.initializer:
        _text(t.name, "the name of an initializer")
        for e in t.external_data:
            _text(e.key, f"an external data key of {t.name!r}")
            _text(e.value, f"an external data value of {t.name!r}")
    for k, n in enumerate(gp.node):
        _text(n.name, f"the name of node {k}")
        _text(n.op_type, f"the op_type of node {k}")
        _text(n.domain, f"the domain of node {k}")
        for i in list(n.input) + list(n.output):
            _text(i, f"a value name in node {k}")
        for a in n.attribute:
            _text(a.name, f"an attribute name in node {k}")


# ------------------------------------------------------------------------------------------ the model
def validate_model(model: onnx.ModelProto) -> int:
    """Check the rules listed at the top of this module; returns the ai.onnx opset."""
    _check_text(model)
    opset = default_opset(model)
    gp = model.graph
    if not gp.output:
        raise ModelError("the graph declares no outputs", "a model must return at least one value")

    inputs: set[str] = set()
    for vi in gp.input:
        if not vi.name:
            raise ModelError("a graph input has an empty name")
        if vi.name in inputs:
            raise ModelError(f"graph input {vi.name!r} is declared twice", "graph input names must be unique")
        inputs.add(vi.name)
        _check_value_info(vi, f"graph input {vi.name!r}")
    inits: set[str] = set()
    for t in gp.initializer:
        if not t.name:
            raise ModelError("an initializer has an empty name")
        if t.name in inits:
            raise ModelError(f"initializer {t.name!r} is defined twice", "initializer names must be unique")
        inits.add(t.name)
        check_tensor(t, f"initializer {t.name!r}")
    for vi in gp.output:
        if not vi.name:
            raise ModelError("a graph output has an empty name")
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type == TensorProto.UNDEFINED:
            raise ModelError(f"graph output {vi.name!r} is declared as a tensor of element type UNDEFINED",
                             "leave the type out, or give the element type")
        _check_value_info(vi, f"graph output {vi.name!r}")
    for vi in gp.value_info:
        _check_value_info(vi, f"value {vi.name!r}")

    defined = inputs | inits | {sp.values.name for sp in gp.sparse_initializer}
    producer: dict[str, str] = {}
    for k, n in enumerate(gp.node):
        for o in n.output:
            if not o:
                continue
            if o in producer or o in defined:
                raise ModelError(f"value {o!r} is produced twice (by node {n.name or f'{n.op_type}_{k}'!r})",
                                 "the graph is not in SSA form")
            producer[o] = n.name
    available = defined | set(producer)
    for k, n in enumerate(gp.node):
        for i in n.input:
            if i and i not in available:
                raise ModelError(f"node {n.name or f'{n.op_type}_{k}'!r} ({n.op_type}) reads {i!r}, which nothing "
                                 "produces", "the graph has a dangling input")
        _check_node(n, k, opset)
    _check_types(gp, opset)
    return opset
