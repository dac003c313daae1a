"""Loads an artifact directory through cffi, using only its manifest and library."""
from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
import zlib
from pathlib import Path

import cffi
import numpy as np

from ..errors import ArtifactError, InputError, RunError
from ..ir import dtypes
from .status import STATUS

AOTC_OK = STATUS["AOTC_OK"]
AOTC_ERR_BAD_OPTION = STATUS["AOTC_ERR_BAD_OPTION"]
AOTC_ERR_NO_DEVICE = STATUS["AOTC_ERR_NO_DEVICE"]
AOTC_ERR_DEVICE_MISMATCH = STATUS["AOTC_ERR_DEVICE_MISMATCH"]
AOTC_ERR_WEIGHTS_FILE = STATUS["AOTC_ERR_WEIGHTS_FILE"]            # missing, unreadable, of the wrong size
AOTC_ERR_WEIGHTS_CHECKSUM = STATUS["AOTC_ERR_WEIGHTS_CHECKSUM"]    # the right size, not the compiled CRC-32

# runtime/aotc_runtime.h: create() refused the external weights file


class Library:
    """An artifact's library, used through its model-instance API (create / invoke / destroy),
    which every target has: CPU instances own a workspace and a thread pool, GPU instances a
    device context."""

    def __init__(self, directory: str | Path):
        d = Path(directory)
        mf = d / "manifest.json"
        if not mf.is_file():
            raise ArtifactError(f"{d} has no manifest.json", "is this a directory written by `aotc compile`?")
        self.dir = d
        self.manifest = json.loads(mf.read_text())
        m = self.manifest
        self.prefix = m["name"]
        lib_path = d / m["library"]
        if not lib_path.is_file():
            raise ArtifactError(f"{lib_path} is missing", "re-run `aotc compile`")
        self.ffi = cffi.FFI()
        p = self.prefix
        fields_in = "".join(f"const void *{x['c_name']};" + (f"int64_t {x['shape_field']}[{len(x['shape'])}];"
                                                               if x.get("dims") else "")
                            for x in m["inputs"]) or "int unused_;"
        fields_out = "".join(f"void *{x['c_name']};" + (f"int64_t {x['shape_field']}[{len(x['shape'])}];"
                                                           if x.get("run_time_axes") else "")
                             for x in m["outputs"])
        self.ffi.cdef(f"""
            typedef struct {{ {fields_in} }} {p}_inputs;
            typedef struct {{ {fields_out} }} {p}_outputs;
            typedef struct {{ int threads; int platform; int device; int profile; }} aotc_options;
            typedef struct {p}_model {p}_model;
            int {p}_create_with_options(const char *weights_path, const aotc_options *options, {p}_model **model);
            int {p}_invoke({p}_model *model, const {p}_inputs *in, {p}_outputs *out);
            int {p}_threads(const {p}_model *model);
            const char *{p}_failure(const {p}_model *model);
            int {p}_profile(const {p}_model *model, const double **ms, const char *const **names);
            int {p}_keep_caches({p}_model *model, int keep);
            void {p}_destroy({p}_model *model);
            const char *{p}_strerror(int status);
        """)
        self.lib = _dlopen(self.ffi, lib_path)
        w = m["weights"]
        self.weights_path = None
        if w["mode"] == "external":
            # checked by <name>_create itself (size and CRC-32); weights_problem() explains a failure
            self.weights_path = str(d / w["file"])
        # (bfloat16, float8, int4... ports: ml_dtypes arrays, numpy having no such types)
        self.inputs = [(x["name"], x["c_name"], dtypes.from_name(x["dtype"]), tuple(x["shape"])) for x in m["inputs"]]
        self.outputs = [(x["name"], x["c_name"], dtypes.from_name(x["dtype"]), tuple(x["shape"]))
                        for x in m["outputs"]]
        # outputs of run-time size (shape above: the most they hold): the outputs struct's
        # field the run writes their shape into
        self.shape_fields = {x["c_name"]: x["shape_field"] for x in m["outputs"] if x.get("run_time_axes")}
        # inputs with run-time dimensions: axis -> {min, max, multiple, dim} (the caller's shape
        # goes into the inputs struct's shape_field)
        self.input_dims = {x["name"]: ({d["axis"]: d for d in x["dims"]}, x["shape_field"])
                           for x in m["inputs"] if x.get("dims")}
        # output position -> the input position whose array it may be (a cache the run updates
        # in place; one that grows is then laid out at the output's largest shape)
        names = [x["name"] for x in m["inputs"]]
        self.in_place = {k: names.index(x["in_place_of"]) for k, x in enumerate(m["outputs"]) if x.get("in_place_of")}

    def _fn(self, name: str):
        return getattr(self.lib, f"{self.prefix}_{name}")

    def error(self, status: int) -> str:
        return self.ffi.string(self._fn("strerror")(status)).decode()

    def create(self, threads: int = 0, device: int = 0, platform: int = 0, profile: bool = False):
        """A model instance (freed when the returned handle is collected)."""
        opts = self.ffi.new("aotc_options *", {"threads": threads, "platform": platform, "device": device,
                                               "profile": int(profile)})
        out = self.ffi.new(f"{self.prefix}_model **")
        path = self.ffi.new("char[]", self.weights_path.encode()) if self.weights_path else self.ffi.NULL
        status = self._fn("create_with_options")(path, opts, out)
        if status != AOTC_OK:
            hint = None
            if status == AOTC_ERR_BAD_OPTION:
                hint = (f"this artifact was compiled for at most {self.manifest.get('threads', 1)} threads"
                        if threads > 1 else "check the device options")
            elif status in (AOTC_ERR_NO_DEVICE, AOTC_ERR_DEVICE_MISMATCH) and self.manifest.get("language") == "cuda":
                hint = ("it needs an NVIDIA GPU of compute capability 8.0 or newer and a driver for CUDA 13 "
                        f"(compiled for {self.manifest.get('target')}); cuda artifacts compile anywhere nvcc is")
            elif status == AOTC_ERR_NO_DEVICE:
                hint = "no OpenCL device was found: install a driver (make opencl-deps installs PoCL)"
            elif status in (AOTC_ERR_WEIGHTS_FILE, AOTC_ERR_WEIGHTS_CHECKSUM) and self.weights_path:
                raise ArtifactError(f"{self.prefix}_create failed with status {status}: {self.weights_problem(status)}",
                                    f"use the {Path(self.weights_path).name} written with {self.manifest['library']} "
                                    "by the same `aotc compile`, or compile again")
            raise ArtifactError(f"{self.prefix}_create failed with status {status}: {self.error(status)}", hint)
        return self.ffi.gc(out[0], self._fn("destroy"))

    def weights_problem(self, status: int) -> str:
        """What is wrong with the external weights file, in words (after create refused it)."""
        w, wf = self.manifest["weights"], Path(self.weights_path)
        if not wf.exists():
            return f"weights file {wf} is missing"
        if not wf.is_file():
            return f"weights file {wf} is not a regular file"
        size = wf.stat().st_size
        if size != w["bytes"]:
            return f"weights file {wf} has the wrong size: {size} bytes, the artifact needs {w['bytes']}"
        try:
            with open(wf, "rb") as f:
                crc = zlib.crc32(f.read()) & 0xFFFFFFFF
        except OSError as e:
            return f"weights file {wf} is unreadable ({e.strerror})"
        want = w.get("crc32", "?")
        if want == f"{crc:08x}":            # it was fixed meanwhile, or the C side could not read it
            return f"weights file {wf}: {self.error(status)}"
        return (f"weights file {wf} is corrupted: its CRC-32 is {crc:08x}, the artifact was compiled "
                f"for {want} ({self.error(AOTC_ERR_WEIGHTS_CHECKSUM)})")

    def profile(self, instance) -> list[tuple[str, float]]:
        """(kernel, milliseconds summed over the invokes so far) of an instance created with
        profile=True; [] otherwise."""
        ms, names = self.ffi.new("double **"), self.ffi.new("char ***")
        n = self._fn("profile")(instance, ms, self.ffi.cast("const char *const **", names))
        return [(self.ffi.string(names[0][k]).decode(), float(ms[0][k])) for k in range(n)]

    def threads(self, instance) -> int:
        return int(self._fn("threads")(instance))

    def keep_caches(self, instance, keep: bool) -> None:
        """<name>_keep_caches: on a GPU target, caches updated in place stay on the device
        between runs while the same array is passed (see CompiledModel.keep_caches)."""
        if not self.in_place:
            return                  # (nothing to keep)
        try:
            fn = self._fn("keep_caches")
        except AttributeError:      # (an artifact older than the function: a CPU one, GPU ones
            return                  #  had no caches in place then)
        status = fn(instance, int(keep))
        if status != AOTC_OK:
            raise ArtifactError(f"{self.prefix}_keep_caches failed with status {status}: {self.error(status)}")

    def run(self, instance, arrays: list[np.ndarray], into: dict[int, np.ndarray] | None = None) -> list[np.ndarray]:
        """The outputs of a run on `arrays` (graph order); `into` gives arrays for outputs to be
        written into (by position: C-contiguous, of the output's type and largest size), an
        input's own where the manifest says the output may share it (in_place_of). An output
        with run-time axes is returned as a view of its array's leading part, of the run's
        sizes. A cache that grows (the output one run longer than the input) shares its array
        as the leading part of the output's largest shape: the input is given as a view of
        that part (`full[:, :, :past]`), the output comes back as one (`full[:, :, :past +
        seq]`), and the run writes only the new positions."""
        ffi, p = self.ffi, self.prefix
        into = into or {}
        arrays = list(arrays)
        cin = ffi.new(f"{p}_inputs *")
        cout = ffi.new(f"{p}_outputs *")
        # inputs whose array is their in-place output's, given as the part of it that they fill
        # (a growing cache: a view of the output's array at its largest shape)
        shared = {}
        for o, i in self.in_place.items():
            full = into.get(o)
            if full is None:
                continue
            if _start(arrays[i]) == _start(full) and _lays_in(arrays[i], full, self.outputs[o][3]):
                shared[i] = full
            elif np.may_share_memory(arrays[i], full):
                arrays[i] = arrays[i].copy()   # (memory of the output's laid out otherwise: a copy keeps
                #                                 the run's meaning, the run writing where it reads)
        keep = []
        for i, ((name, field, dt, shape), a) in enumerate(zip(self.inputs, arrays)):
            a_shape = a.shape
            a = shared[i] if i in shared else np.ascontiguousarray(a)
            keep.append(a)
            setattr(cin, field, ffi.from_buffer(a))
            if name in self.input_dims:
                getattr(cin, self.input_dims[name][1])[0:len(a_shape)] = list(a_shape)
        outs = []
        for k, (name, field, dt, shape) in enumerate(self.outputs):
            o = into.get(k)
            if o is None:
                o = np.empty(shape, dtype=dt)
            else:
                self.check_output(k, o, "given")
            outs.append(o)
            setattr(cout, field, ffi.from_buffer(o))
        self.invoke(instance, cin, cout)
        for k, (name, field, dt, shape) in enumerate(self.outputs):
            if field in self.shape_fields:
                # the run's size of an output with run-time axes: the leading part of the array
                # (a view: a decoder's 16 MB of prompt logits copied out of a 25 MB buffer took
                # longer than the attention that made them)
                dims = tuple(int(d) for d in getattr(cout, self.shape_fields[field]))
                if self.in_place.get(k) in shared:    # (laid out at the largest shape)
                    outs[k] = _at_largest(outs[k], shape)[tuple(slice(0, n) for n in dims)]
                else:
                    outs[k] = outs[k].reshape(-1)[:math.prod(dims)].reshape(dims)
        return outs


    def check_output(self, k: int, a: np.ndarray, how: str) -> None:
        """An array the caller gives (or binds) for output k: its type, C-contiguous, writeable,
        at least the output's largest size."""
        name, _, dt, shape = self.outputs[k]
        if a.dtype != dt or not a.flags.c_contiguous or not a.flags.writeable or a.size < math.prod(shape):
            raise InputError(f"{self.prefix}: the array {how} for output {name!r} is {a.dtype}{list(a.shape)}",
                             f"give a writeable C-contiguous {dtypes.name(dt)} array of {list(shape)}")

    def invoke(self, instance, cin, cout) -> None:
        """<name>_invoke on filled structs; a failure raised as what it is (a shape the run
        refused: InputError naming the rule; else RunError naming the kernel)."""
        status = self._fn("invoke")(instance, cin, cout)
        if status == AOTC_OK:
            return
        ffi, p = self.ffi, self.prefix
        where = self._fn("failure")(instance)
        at = f" in kernel {ffi.string(where).decode()}" if where != ffi.NULL else ""
        if status == STATUS["AOTC_ERR_SHAPE"] and where != ffi.NULL:
            raise InputError(f"{p}: {ffi.string(where).decode()[len('shape check: '):]}", self.error(status))
        raise RunError(f"{p} failed{at}: {self.error(status)} (status {status})")


class Binding:
    """An instance's inputs and outputs bound to arrays once, for a loop that runs it again and
    again on the same arrays with only some inputs' sizes or values changing (a decoder's steps:
    aotc.generate). A run through it sets what changed and invokes, none of run()'s work per
    call: the arrays are checked when bound (type, C-contiguous, an output's size), and the run
    checks the shapes itself (an InputError names a bad one). An input bound as its in-place
    output's array (`input(i, full, shape)` with that output's own array) is shared as run()
    shares a view of it. The bound arrays are kept referenced here."""

    def __init__(self, lib: Library, instance):
        self.lib, self.instance = lib, instance
        self.cin = lib.ffi.new(f"{lib.prefix}_inputs *")
        self.cout = lib.ffi.new(f"{lib.prefix}_outputs *")
        self.arrays: dict = {}
        # input position -> its shape field (inputs with run-time dims)
        self.shape_fields = {i: lib.input_dims[x[0]][1] for i, x in enumerate(lib.inputs) if x[0] in lib.input_dims}

    def input(self, i: int, a: np.ndarray, shape: tuple | None = None) -> None:
        name, field, dt, _ = self.lib.inputs[i]
        if a.dtype != dt or not a.flags.c_contiguous:
            raise InputError(f"input {name!r}: a C-contiguous {dtypes.name(dt)} array is bound, not {a.dtype}"
                             + ("" if a.flags.c_contiguous else " with strides"))
        setattr(self.cin, field, self.lib.ffi.from_buffer(a))
        self.arrays["in", i] = a
        if shape is not None:
            self.shape(i, shape)

    def shape(self, i: int, shape) -> None:
        """The shape input i has in the next runs (an input with run-time dims)."""
        getattr(self.cin, self.shape_fields[i])[0:len(shape)] = shape

    def output(self, k: int, a: np.ndarray) -> None:
        self.lib.check_output(k, a, "bound")
        setattr(self.cout, self.lib.outputs[k][1], self.lib.ffi.from_buffer(a))
        self.arrays["out", k] = a

    def run(self) -> None:
        self.lib.invoke(self.instance, self.cin, self.cout)

    def output_dims(self, k: int) -> tuple:
        """Output k's shape after the last run (its fixed one where it has no run-time axes)."""
        field = self.lib.outputs[k][1]
        if field in self.lib.shape_fields:
            return tuple(getattr(self.cout, self.lib.shape_fields[field]))
        return self.lib.outputs[k][3]


def _start(a: np.ndarray) -> int:
    return a.__array_interface__["data"][0]


def _at_largest(full: np.ndarray, largest: tuple) -> np.ndarray:
    return full.reshape(-1)[:math.prod(largest)].reshape(largest)


def _lays_in(a: np.ndarray, full: np.ndarray, largest: tuple) -> bool:
    """Whether `a` is the leading part of `full` viewed at the shape `largest` (a[i, j, ...] is
    that view's [i, j, ...]), as a cache updated in place lies in its output's array."""
    if a.dtype != full.dtype or a.ndim != len(largest) or any(n > m for n, m in zip(a.shape, largest)):
        return False
    if a.size == 0:
        return True             # (an empty part at its start: strides say nothing; the run reads none)
    stride = a.itemsize
    for n, m, st in zip(reversed(a.shape), reversed(largest), reversed(a.strides)):
        if n > 1 and st != stride:
            return False
        stride *= m
    return True


# library path -> identity (device, inode, size, mtime) of the file first dlopen()ed under it
_OPENED: dict[str, tuple] = {}


def _dlopen(ffi: cffi.FFI, lib_path: Path):
    """dlopen() hands back the library already loaded under a path even when the file there
    has been rebuilt since (compiling into the same directory twice in one process would run
    the old model). A changed file is loaded from a private copy under a fresh name."""
    path = str(lib_path.resolve())
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if _OPENED.setdefault(path, ident) == ident:
        return ffi.dlopen(path)
    fd, copy = tempfile.mkstemp(prefix=f"{lib_path.stem}-", suffix=".so")
    os.close(fd)
    try:
        shutil.copyfile(path, copy)
        return ffi.dlopen(copy)
    finally:
        os.unlink(copy)          # the mapping stays valid after the name is gone


def check_inputs(lib: Library, feeds) -> list[np.ndarray]:
    """Accept a dict by name or a list in graph order; say exactly what is wrong."""
    names = [x[0] for x in lib.inputs]
    if isinstance(feeds, dict):
        unknown = [k for k in feeds if k not in names]
        if unknown:
            raise InputError(f"unknown input(s) {', '.join(map(repr, unknown))}",
                             f"the model's inputs are: {', '.join(names)}")
        missing = [n for n in names if n not in feeds]
        if missing:
            raise InputError(f"missing input(s) {', '.join(map(repr, missing))}",
                             f"the model's inputs are: {', '.join(names)}")
        arrays = [feeds[n] for n in names]
    else:
        arrays = list(feeds)
        if len(arrays) != len(names):
            raise InputError(f"{len(arrays)} inputs given, the model takes {len(names)} ({', '.join(names)})")
    out = []
    for (name, _, dt, shape), a in zip(lib.inputs, arrays):
        a = np.asarray(a)
        if a.dtype != dt and a.dtype.kind == "V" and a.dtype.names is None and dt.kind == "V" \
                and a.dtype.itemsize == dt.itemsize:
            a = a.view(dt)     # raw elements, as np.load gives back np.save's ml_dtypes arrays
        if a.dtype != dt:
            raise InputError(f"input {name!r} has dtype {a.dtype}, the model expects {dtypes.name(dt)}",
                             _conversion_hint(a.dtype, dt))
        ranged = lib.input_dims.get(name, ({},))[0]
        if ranged:
            _check_ranged(name, a.shape, shape, ranged)
        elif tuple(a.shape) != shape:
            raise InputError(f"input {name!r} has shape {tuple(a.shape)}, the model was compiled for {shape}",
                             "recompile with --shape to change it")
        out.append(a)            # (run() makes it contiguous, unless it lies in its output's array)
    return out


def _check_ranged(name: str, have: tuple, capacity: tuple, ranged: dict) -> None:
    """An input with run-time dimensions: its rank, its fixed dims and each run-time dim's range
    (the run checks them too, and that inputs sharing a dimension agree)."""
    def want() -> str:       # (written only for an error: a decoder's step checks 50 inputs)
        return ", ".join(f"{ranged[a]['dim']} in {ranged[a]['min']}..{ranged[a]['max']}" if a in ranged else str(n)
                         for a, n in enumerate(capacity))
    if len(have) != len(capacity):
        raise InputError(f"input {name!r} has shape {tuple(have)}, the model takes [{want()}]")
    for a, (n, size) in enumerate(zip(capacity, have)):
        d = ranged.get(a)
        bad = size != n if d is None else not (d["min"] <= size <= d["max"] and size % d.get("multiple", 1) == 0)
        if bad:
            raise InputError(f"input {name!r} has shape {tuple(have)}, the model takes [{want()}]"
                             + (f" (dim {a}: a multiple of {d['multiple']})" if d and d.get("multiple", 1) > 1
                                else ""), "recompile with other --shape / --dim ranges to change them")


def _conversion_hint(have: np.dtype, want: np.dtype) -> str:
    if want.kind != "V":
        return f"convert it, e.g. x.astype(np.{dtypes.name(want)})"
    # numpy has no bfloat16, float8 or int4: ml_dtypes' (an onnx dependency). Bit patterns are
    # not taken as values, or values as bit patterns, without the caller saying which they hold.
    name = dtypes.name(want)
    hint = f"convert it, e.g. x.astype(ml_dtypes.{name}) (import ml_dtypes)"
    if have.itemsize == want.itemsize and have.kind in "uiV":
        hint += f"; if it holds {name} bit patterns, x.view(ml_dtypes.{name})"
    return hint
