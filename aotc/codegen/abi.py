"""The artifact's C ABI, the same for every backend: `<name>.h` (inputs/outputs structs, run,
create/invoke/destroy, status codes), the ports the manifest lists, and the weights blob.

    int  <name>_run(in, out, workspace)                  one thread, the caller's workspace
    int  <name>_run_with_weights(weights, in, out, ws)   the same with the caller's weights
    int  <name>_create(weights_path, &model)             an instance: workspace, pool / device
    int  <name>_create_with_options(path, options, &m)   the same, threads / device chosen
    int  <name>_invoke(model, in, out)
    const char *<name>_failure(model)                    the kernel that failed the last invoke
    void <name>_destroy(model)

GPU targets have no host workspace: their run / run_with_weights return
AOTC_ERR_NOT_SUPPORTED, and create / invoke do the work (device memory, queue or stream).
"""
from __future__ import annotations

import hashlib
import io
import zlib
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..frontend.mapped import drop_pages
from ..ir import dtypes
from ..ir.dims import Dim, is_dim, upper_shape
from ..ir.graph import Graph
from ..ir.internal import IN_PLACE
from ..kernel.names import c_ident
from ..memory.planner import MemoryPlan
from ..targets import Target


# numpy dtype -> C type used for storage. Bool is one byte holding 0 or 1, as numpy stores it.
_C_TYPES = {
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int8): "int8_t",
    np.dtype(np.int16): "int16_t",
    np.dtype(np.int32): "int32_t",
    np.dtype(np.int64): "int64_t",
    np.dtype(np.uint8): "uint8_t",
    np.dtype(np.uint16): "uint16_t",
    np.dtype(np.uint32): "uint32_t",
    np.dtype(np.uint64): "uint64_t",
    np.dtype(np.bool_): "uint8_t",
    np.dtype(np.float16): "uint16_t",        # IEEE half bits (graph inputs and outputs only)
    dtypes.BFLOAT16: "uint16_t",             # bfloat16 bits: a float32's upper 16 (the same)
    # 8- and 4-bit floats, 4- and 2-bit integers: one per byte (the same)
    **{dt: "uint8_t" for dt in dtypes.SMALL_FLOATS + tuple(dtypes.SMALL_INTS)},
}


def ctype(dt) -> str:
    """The C type that stores elements of dt (bool: one byte holding 0 or 1, as numpy does)."""
    return _C_TYPES[np.dtype(dt)]


@dataclass
class Port:
    name: str        # ONNX name (what the model's user calls it)
    field: str       # C struct field
    dtype: np.dtype
    shape: tuple
    value: str = ""  # the graph value behind it (differs from `name` when materialize_outputs renamed it)
    # axes whose size is known only after a run (passes/bounded.py): `shape` is then the most the
    # output can hold, and run() writes the shape into the outputs struct's `shape_field`
    run_time_axes: tuple = ()
    shape_field: str = ""
    # run-time dimensions (ir/dims.py): (axis, Dim) of the axes whose size the caller chooses
    # within a range; `shape` is then the capacity, the shape travels in `shape_field` (an
    # input's is filled by the caller, an output's by run()), and run_time_axes lists them
    dims: tuple = ()


def ports(g: Graph, names: list[str]) -> list[Port]:
    labels = g.output_labels
    used: set[str] = set()

    def unique(base: str) -> str:
        f, k = base, 1
        while f in used:
            f, k = f"{base}_{k}", k + 1
        used.add(f)
        return f

    fields = [unique(c_ident(labels.get(n, n), 64)) for n in names]
    out = []
    for n, f in zip(names, fields):
        v = g.values[n]
        ranged = tuple((a, d) for a, d in enumerate(v.shape) if is_dim(d))
        axes = tuple(sorted(set(g.bounded.get(n, {})) | {a for a, _ in ranged}))
        out.append(Port(labels.get(n, n), f, v.dtype, upper_shape(v.shape), n, axes,
                        unique(f"{f}_shape") if axes else "", ranged))
    return out


def shape_comment(p: Port) -> str:
    """An input's or output's type as the header shows it: float32[batch (1..64), 64]."""
    ranged = dict(p.dims)
    dims = [f"{ranged[a]} ({ranged[a].lo}..{ranged[a].hi})" if a in ranged else
            f"at most {d}" if a in p.run_time_axes else str(d) for a, d in enumerate(p.shape)]
    return f"{dtypes.name(p.dtype)}[{', '.join(dims)}]"


PORT_DECLARATIONS = [
    "/* Inputs and outputs by position (graph order, 0 .. <P>_NUM_INPUTS - 1) and by name, for code",
    "   written for any model (a language binding; examples/llm's decoder loop). _index: the",
    "   position of a name, -1 if none. _name, _type (\"float32\", \"int64\", ...): NULL outside.",
    "   _shape: the rank (-1 outside), and each dim's smallest and largest size in min / max",
    "   (either may be NULL; fixed dims give their size twice). set_input: the array and, for an",
    "   input with run-time dims, its shape (copied); set_output: the array, allocated at the",
    "   largest shape; output_dims: the shape the last run gave an output (its fixed one where it",
    "   has no run-time dims); output_in_place: the input whose array an output may be (a cache",
    "   the run updates in place, writing only its new positions), -1 if none. Where the output",
    "   is longer than the input (a cache that grows: past, then past + new positions), that one",
    "   array is allocated at the output's largest shape and both are laid out at its strides,",
    "   each row's positions from its start; given two arrays, each is dense at its own shape. */",
    "int {p}_input_index(const char *name);",
    "int {p}_output_index(const char *name);",
    "const char *{p}_input_name(int i);",
    "const char *{p}_output_name(int i);",
    "const char *{p}_input_type(int i);",
    "const char *{p}_output_type(int i);",
    "int {p}_input_shape(int i, int64_t *min, int64_t *max);",
    "int {p}_output_shape(int i, int64_t *min, int64_t *max);",
    "int {p}_set_input({p}_inputs *in, int i, const void *data, const int64_t *shape);",
    "int {p}_set_output({p}_outputs *out, int i, void *data);",
    "const int64_t *{p}_output_dims(const {p}_outputs *out, int i);",
    "int {p}_output_in_place(int i);",
]


def in_place(g: Graph, ins: list[Port], outs: list[Port]) -> dict[int, int]:
    """Output position -> the input position whose array it may be (a cache its TensorScatter
    or Attention updates in place: passes/caches.py)."""
    pairs = {n.outputs[o]: n.inputs[i] for n in g.nodes for o, i in n.attrs.get(IN_PLACE, ())}
    at = {p.value: i for i, p in enumerate(ins)}
    return {o: at[pairs[p.value]] for o, p in enumerate(outs) if p.value in pairs and pairs[p.value] in at}


def port_functions(prefix: str, ins: list[Port], outs: list[Port], shared: dict[int, int]) -> list[str]:
    """The definitions of PORT_DECLARATIONS: tables of the ports' names, types and bounds, and
    switches over the structs' fields."""
    p = prefix
    L = []

    def table(kind: str, ports_: list[Port]) -> None:
        n = max(len(ports_), 1)
        names = ", ".join(f'"{c_string(x.name)}"' for x in ports_) or "NULL"
        types = ", ".join(f'"{dtypes.name(x.dtype)}"' for x in ports_) or "NULL"
        ranks = ", ".join(str(len(x.shape)) for x in ports_) or "0"
        lows, highs = [], []
        for x in ports_:
            ranged = dict(x.dims)
            lows.append([ranged[a].lo if a in ranged else (0 if a in x.run_time_axes else d)
                         for a, d in enumerate(x.shape)])
            highs.append(list(x.shape))
        width = max([len(x.shape) for x in ports_] + [1])
        rows = lambda vals: ", ".join("{" + ", ".join(map(str, v or [0])) + "}" for v in vals) or "{0}"  # noqa: E731
        L.extend([f"static const char *const {p}_{kind}_names[{n}] = {{{names}}};",
                  f"static const char *const {p}_{kind}_types[{n}] = {{{types}}};",
                  f"static const int {p}_{kind}_ranks[{n}] = {{{ranks}}};",
                  f"static const int64_t {p}_{kind}_min[{n}][{width}] = {{{rows(lows)}}};",
                  f"static const int64_t {p}_{kind}_max[{n}][{width}] = {{{rows(highs)}}};", "",
                  f"int {p}_{kind}_index(const char *name)", "{",
                  f"    for (int i = 0; name && i < {len(ports_)}; ++i)",
                  f"        if (strcmp({p}_{kind}_names[i], name) == 0) return i;",
                  "    return -1;", "}", "",
                  f"const char *{p}_{kind}_name(int i)", "{",
                  f"    return i >= 0 && i < {len(ports_)} ? {p}_{kind}_names[i] : NULL;", "}", "",
                  f"const char *{p}_{kind}_type(int i)", "{",
                  f"    return i >= 0 && i < {len(ports_)} ? {p}_{kind}_types[i] : NULL;", "}", "",
                  f"int {p}_{kind}_shape(int i, int64_t *min, int64_t *max)", "{",
                  f"    if (i < 0 || i >= {len(ports_)}) return -1;",
                  f"    for (int a = 0; a < {p}_{kind}_ranks[i]; ++a) {{",
                  f"        if (min) min[a] = {p}_{kind}_min[i][a];",
                  f"        if (max) max[a] = {p}_{kind}_max[i][a];", "    }",
                  f"    return {p}_{kind}_ranks[i];", "}", ""])

    table("input", ins)
    table("output", outs)
    L += [f"int {p}_set_input({p}_inputs *in, int i, const void *data, const int64_t *shape)", "{",
          "    if (!in) return AOTC_ERR_NULL_ARGUMENT;", "    switch (i) {"]
    for i, x in enumerate(ins):
        body = f"in->{x.field} = ({'const ' + ctype(x.dtype)} *)data;"
        if x.dims:
            body = (f"if (!shape) return AOTC_ERR_NULL_ARGUMENT; {body}"
                    f" memcpy(in->{x.shape_field}, shape, sizeof in->{x.shape_field});")
        L.append(f"    case {i}: {body} return AOTC_OK;")
    L += ["    default: (void)data; (void)shape; return AOTC_ERR_NO_SUCH_PORT;", "    }", "}", "",
          f"int {p}_set_output({p}_outputs *out, int i, void *data)", "{",
          "    if (!out) return AOTC_ERR_NULL_ARGUMENT;", "    switch (i) {"]
    for i, x in enumerate(outs):
        L.append(f"    case {i}: out->{x.field} = ({ctype(x.dtype)} *)data; return AOTC_OK;")
    L += ["    default: (void)data; return AOTC_ERR_NO_SUCH_PORT;", "    }", "}", "",
          f"const int64_t *{p}_output_dims(const {p}_outputs *out, int i)", "{",
          "    if (!out) return NULL;", "    switch (i) {"]
    for i, x in enumerate(outs):
        where = f"out->{x.shape_field}" if x.run_time_axes else f"{p}_output_max[{i}]"
        L.append(f"    case {i}: return {where};")
    L += ["    default: return NULL;", "    }", "}", "",
          f"int {p}_output_in_place(int i)", "{", "    switch (i) {",
          *(f"    case {o}: return {i};" for o, i in sorted(shared.items())),
          "    default: return -1;", "    }", "}", ""]
    return L


def c_string(s: str, limit: int | None = None) -> str:
    """s inside a C string literal (backslashes and quotes escaped, newlines as spaces), cut to
    `limit` characters."""
    s = s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return s if limit is None else s[:limit]


def dim_macros(prefix: str, ins: list[Port]) -> list[str]:
    """#define <P>_<INPUT>_DIM<k>_MIN / _MAX (and _MULTIPLE where it is not 1) of each input axis
    whose size is chosen at run time."""
    L = []
    for p in ins:
        for a, d in p.dims:
            stem = f"{prefix.upper()}_{p.field.upper()}_DIM{a}"
            L += [f"#define {stem}_MIN {d.lo}", f"#define {stem}_MAX {d.hi}"]
            syms = d.symbols()
            if len(syms) == 1 and d == Dim.of(syms[0]) and syms[0].multiple > 1:
                L.append(f"#define {stem}_MULTIPLE {syms[0].multiple}")
    return L


def emit_header(prefix: str, g: Graph, plan: MemoryPlan, external: bool, threads: int, target: Target,
                weights_crc32: int = 0) -> str:
    """`weights_crc32`: the external weights file's CRC-32 (codegen/weights_check.py), checked at create."""
    P = prefix.upper()
    ins, outs = ports(g, g.inputs), ports(g, g.outputs)
    gpu = target.is_gpu
    L = [f"/* {prefix}.h: generated by aotc from model '{g.name}' for target {target.name}. Do not edit. */",
         f"#ifndef {P}_H", f"#define {P}_H", "", '#include "aotc_runtime.h"', "",
         "#ifdef __cplusplus", 'extern "C" {', "#endif", "",
         f"/* Bytes of scratch memory one call of {prefix}_run needs, and its alignment"
         + (" (GPU targets: 0, the\n   device holds the workspace). */" if gpu else
            f" (it holds the\n   per-thread scratch of {P}_THREADS threads). */"),
         f"#define {P}_WORKSPACE_BYTES ((size_t){0 if gpu else plan.arena_bytes})",
         f"#define {P}_WORKSPACE_ALIGN {plan.alignment}",
         f"/* Threads a model instance runs on at most (the compile's --threads); {prefix}_create uses",
         "   as many as the machine has cores, up to this. */",
         f"#define {P}_THREADS {threads}",
         f"/* Bytes of weights; 1 when they live in a separate file that {prefix}_create loads. */",
         f"#define {P}_WEIGHTS_BYTES ((size_t){plan.weights_bytes})",
         f"#define {P}_WEIGHTS_EXTERNAL {1 if external else 0}",
         *([f"/* CRC-32 (zlib's) of {prefix}.weights, checked by {prefix}_create. */",
            f"#define {P}_WEIGHTS_CRC32 0x{weights_crc32:08x}u"] if external else []),
         f"#define {P}_NUM_INPUTS {len(ins)}", f"#define {P}_NUM_OUTPUTS {len(outs)}", ""]
    narrow = {dtypes.name(p.dtype) for p in ins + outs if dtypes.is_narrow(p.dtype)}
    wide = sorted(narrow & {"float16", "bfloat16"})
    if wide:
        L += [f"/* {' and '.join(wide)} elements are uint16_t bit patterns (C has no such types)."]
        if "float16" in wide:
            L += ["   float16: IEEE 754 binary16."]
        if "bfloat16" in wide:
            L += ["   bfloat16: the upper 16 bits of a float32. To float: (uint32_t)b << 16, exact; from",
                  "   float: round to nearest even, (u + 0x7fff + ((u >> 16) & 1)) >> 16 of its bits u,",
                  "   a NaN as (u >> 16) | 0x40."]
        L[-1] += " */"
        L.append("")
    small = sorted(narrow - {"float16", "bfloat16"})
    if small:
        L += [f"/* {', '.join(small)} elements are one per uint8_t, as ml_dtypes (Python) holds them:",
              "   float8_*: the 8-bit pattern of OCP / ONNX's float8 formats; float4_e2m1fn, int4, uint4,",
              "   int2, uint2: the pattern in the byte's low 4 or 2 bits (two's complement for int4 and",
              "   int2), the high bits 0 in outputs and ignored in inputs. */", ""]
    macros = dim_macros(prefix, ins)
    if macros:
        L += ["/* The sizes each input's run-time dimensions may take (the caller gives the sizes of a",
              "   run in <input>_shape; inputs naming one dimension must agree). */"] + macros + [""]
    L.append("/* Inputs, in graph order. Each points to a dense row-major array"
             + (";\n   an input with run-time dimensions comes with its shape. */" if macros else ". */"))
    L.append("typedef struct {")
    for p in ins:
        L.append(f"    const {ctype(p.dtype)} *{p.field};  /* '{p.name}': {shape_comment(p)} */")
        if p.dims:
            L.append(f"    int64_t {p.shape_field}[{len(p.shape)}];  /* {p.field}'s shape, given by the caller */")
    if not ins:
        L.append("    int unused_;")
    L.append(f"}} {prefix}_inputs;")
    L.append("")
    L.append("/* Outputs, in graph order: caller-allocated arrays that run() fills.")
    if any(p.dims for p in outs):
        L += ["   An output with dimensions known only at run time (\"at most\", or a range): allocate",
              "   the largest shape, run() writes the one it made into <output>_shape and its elements",
              "   densely, in row-major order of that shape, from the start of the array."]
    elif any(p.run_time_axes for p in outs):
        L += ["   An output marked \"at most\" has dimensions known only at run time: allocate the shape",
              "   given, run() writes the one it made into <output>_shape and its elements densely, in",
              "   row-major order of that shape, from the start of the array."]
    L[-1] += " */"
    L.append("typedef struct {")
    shared = in_place(g, ins, outs)
    for o, p in enumerate(outs):
        if o in shared:
            grows = tuple(p.shape) != tuple(ins[shared[o]].shape)
            L.append(f"    /* may be the array of in->{ins[shared[o]].field}, which the run then updates in place"
                     + (" (allocated at this output's largest shape, whose strides both then take)" if grows else "")
                     + " */")
        if not p.run_time_axes:
            L.append(f"    {ctype(p.dtype)} *{p.field};  /* '{p.name}': {dtypes.name(p.dtype)}{list(p.shape)} */")
            continue
        L.append(f"    {ctype(p.dtype)} *{p.field};  /* '{p.name}': {shape_comment(p)} */")
        L.append(f"    int64_t {p.shape_field}[{len(p.shape)}];  /* {p.field}'s shape, written by run() */")
    L.append(f"}} {prefix}_outputs;")
    L += ["",
          "/* Runs the model on the calling thread. Re-entrant: no global state; give each concurrent",
          f"   call its own workspace of {P}_WORKSPACE_BYTES bytes aligned to {P}_WORKSPACE_ALIGN.",
          "   Returns AOTC_OK or an error code (AOTC_ERR_NOT_SUPPORTED on GPU targets: use invoke). */",
          f"int {prefix}_run(const {prefix}_inputs *in, {prefix}_outputs *out, void *workspace);",
          "",
          "/* Same, with the weights given by the caller (the bytes of the .weights file, 8-byte aligned). */",
          f"int {prefix}_run_with_weights(const void *weights, const {prefix}_inputs *in, {prefix}_outputs *out,",
          "    void *workspace);",
          "",
          "/* The embedded weights, or NULL when the model was built with external weights. */",
          f"const void *{prefix}_embedded_weights(void);",
          "",
          "/* Human-readable text for a status code. */",
          f"const char *{prefix}_strerror(int status);",
          "",
          "/* A model instance: it owns a workspace, its weights when they are external (weights_path is",
          "   ignored for embedded weights and may be NULL), and a thread pool (CPU targets) or a device",
          "   context and queue (GPU targets), all made once here. One invoke at a time per instance;",
          "   several instances run at once on several threads. options may be NULL (defaults). */",
          f"typedef struct {prefix}_model {prefix}_model;",
          f"int {prefix}_create(const char *weights_path, {prefix}_model **model);",
          f"int {prefix}_create_with_options(const char *weights_path, const aotc_options *options,",
          f"    {prefix}_model **model);",
          f"int {prefix}_invoke({prefix}_model *model, const {prefix}_inputs *in, {prefix}_outputs *out);",
          "/* Threads the instance runs on (CPU targets; 1 on GPU targets). */",
          f"int {prefix}_threads(const {prefix}_model *model);",
          "/* After an invoke that failed in a kernel (an index out of range, say): that kernel and the",
          "   ONNX nodes it computes; NULL otherwise. */",
          f"const char *{prefix}_failure(const {prefix}_model *model);",
          "/* With aotc_options.profile set at create: the number of kernels, and in *ms the milliseconds",
          "   each took summed over the invokes so far, in *names what each computes (0 otherwise). */",
          f"int {prefix}_profile(const {prefix}_model *model, const double **ms, const char *const **names);",
          "/* Caches updated in place (<name>_output_in_place) on GPU targets: with keep set, a cache",
          "   whose one array the caller passes as input and output stays on the device between",
          "   invokes: copied in by the first invoke that passes that array, then neither read nor",
          "   written by the invokes that pass it again (its contents are the device's, not the",
          "   array's, until keep is cleared: that writes each kept cache back into its array). An",
          "   invoke that passes another array takes that array's contents. Off at create. On CPU",
          "   targets the array is the cache: this does nothing. AOTC_OK, or an error code. */",
          f"int {prefix}_keep_caches({prefix}_model *model, int keep);",
          f"void {prefix}_destroy({prefix}_model *model);", "",
          *(line.replace("<P>", P).replace("{p}", prefix) for line in PORT_DECLARATIONS),
          "", "#ifdef __cplusplus", "}", "#endif", "", f"#endif /* {P}_H */", ""]
    return "\n".join(L)


def bounded_epilogue(program, out_ports: list[Port], count: Callable[[int], str]) -> list[str]:
    """Host C after the last launch (every backend's): each output of run-time size gets its
    shape, from the counts its kernels left in the workspace (`count(offset)` spells the one at
    that byte offset), and its elements moved into that shape's dense layout where the
    capacity's layout differs (passes/bounded.py)."""
    by_value = {p.value: p for p in out_ports}
    L = []
    for b in program.bounded:
        p = by_value[b.value]
        L.append(f"/* '{p.name}': its size along axes {sorted(b.counts)} was known only now */")
        for a, d in enumerate(b.capacity):
            size = count(b.counts[a]) if a in b.counts else str(d)
            L.append(f"out->{p.shape_field}[{a}] = {size};")
        if not b.dense_prefix:
            cap = ", ".join(str(d) for d in b.capacity)
            L += ["{", f"    static const int64_t capacity[{len(b.capacity)}] = {{{cap}}};",
                  f"    aotc_compact(out->{p.field}, {b.itemsize}, {len(b.capacity)}, capacity, out->{p.shape_field});",
                  "}"]
    return L


def count_offsets(program) -> list[int]:
    """The workspace offsets of the counts the outputs of run-time size need, each once: a
    GPU host reads them back after the run."""
    return sorted({off for b in program.bounded for off in b.counts.values()})


def write_weights(g: Graph, plan: MemoryPlan, f) -> tuple[int, str]:
    """The weights blob written to the binary file `f` weight by weight (none of a large model's
    weights copied whole: a mapped one is read from its file, frontend/mapped.py): (its CRC-32
    as aotc_read_weights computes it, its sha256)."""
    crc, sha, at = 0, hashlib.sha256(), 0

    def put(data) -> None:
        nonlocal crc, at
        f.write(data)
        crc = zlib.crc32(data, crc)
        sha.update(data)
        at += len(data)

    for name in sorted(plan.weight_order, key=lambda n: plan.locations[n].offset):
        off = plan.locations[name].offset
        put(bytes(off - at))                        # alignment padding
        arr = np.ascontiguousarray(g.values[name].const)
        put(memoryview(arr.reshape(-1).view(np.uint8)))
        drop_pages(arr)
    put(bytes(plan.weights_bytes - at))
    return crc & 0xFFFFFFFF, sha.hexdigest()


def weights_blob(g: Graph, plan: MemoryPlan) -> bytes:
    """The weights blob in memory (embedded weights: small)."""
    buf = io.BytesIO()
    write_weights(g, plan, buf)
    return buf.getvalue()


def emit_weights_c(prefix: str, blob: bytes) -> str:
    """The weights as a const array of 64-bit little-endian words (so 8-byte aligned)."""
    n = max(1, (len(blob) + 7) // 8)
    padded = blob + b"\0" * (n * 8 - len(blob))
    words = np.frombuffer(padded, dtype="<u8")
    L = [f"/* {prefix}_weights.c: generated by aotc; {len(blob)} bytes of weights as little-endian words. */",
         "#include <stdint.h>", "",
         f"extern const uint64_t {prefix}_weights_data[{n}];",
         f"const uint64_t {prefix}_weights_data[{n}] = {{"]
    hexes = [f"0x{w:016x}" for w in words.tolist()]
    for i in range(0, len(hexes), 6):
        L.append("    " + ", ".join(hexes[i:i + 6]) + ",")
    L.append("};")
    L.append("")
    return "\n".join(L)
