"""Loads an artifact directory through cffi, using only its manifest and library."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import cffi
import numpy as np

from ..errors import ArtifactError, InputError
from ..ir import dtypes


class Library:
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
        fields_in = "".join(f"const void *{x['c_name']};" for x in m["inputs"]) or "int unused_;"
        fields_out = "".join(f"void *{x['c_name']};" for x in m["outputs"])
        self.ffi.cdef(f"""
            typedef struct {{ {fields_in} }} {p}_inputs;
            typedef struct {{ {fields_out} }} {p}_outputs;
            int {p}_run_with_weights(const void *weights, const {p}_inputs *in, {p}_outputs *out, void *workspace);
            const void *{p}_embedded_weights(void);
            const char *{p}_strerror(int status);
        """)
        self.lib = _dlopen(self.ffi, lib_path)
        self._run = getattr(self.lib, f"{p}_run_with_weights")
        w = m["weights"]
        if w["mode"] == "external":
            wf = d / w["file"]
            if not wf.is_file() or wf.stat().st_size != w["bytes"]:
                raise ArtifactError(f"weights file {wf} is missing or has the wrong size")
            raw = np.fromfile(wf, dtype=np.uint8)
            self._weights_buf = _aligned(len(raw), 64)
            self._weights_buf[:] = raw
            self.weights = self.ffi.from_buffer(self._weights_buf)
        else:
            self.weights = getattr(self.lib, f"{p}_embedded_weights")()
        self.inputs = [(x["name"], x["c_name"], np.dtype(x["dtype"]), tuple(x["shape"])) for x in m["inputs"]]
        self.outputs = [(x["name"], x["c_name"], np.dtype(x["dtype"]), tuple(x["shape"])) for x in m["outputs"]]

    def new_workspace(self) -> np.ndarray:
        return _aligned(self.manifest["workspace_bytes"], self.manifest["workspace_alignment"])

    def run(self, arrays: list[np.ndarray], workspace: np.ndarray | None = None) -> list[np.ndarray]:
        ffi, p = self.ffi, self.prefix
        cin = ffi.new(f"{p}_inputs *")
        cout = ffi.new(f"{p}_outputs *")
        keep = []
        for (name, field, dt, shape), a in zip(self.inputs, arrays):
            a = np.ascontiguousarray(a)
            keep.append(a)
            setattr(cin, field, ffi.from_buffer(a))
        outs = []
        for name, field, dt, shape in self.outputs:
            o = np.empty(shape, dtype=dt)
            outs.append(o)
            setattr(cout, field, ffi.from_buffer(o))
        ws = workspace if workspace is not None else self.new_workspace()
        status = self._run(self.weights, cin, cout, ffi.from_buffer(ws))
        if status != 0:
            msg = ffi.string(getattr(self.lib, f"{p}_strerror")(status)).decode()
            raise InputError(f"{p}_run failed with status {status}: {msg}")
        return outs


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


def _aligned(nbytes: int, align: int) -> np.ndarray:
    raw = np.empty(nbytes + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + nbytes]


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
        if a.dtype != dt:
            raise InputError(f"input {name!r} has dtype {a.dtype}, the model expects {dtypes.name(dt)}",
                             f"convert it, e.g. x.astype(np.{dtypes.name(dt)})")
        if tuple(a.shape) != shape:
            raise InputError(f"input {name!r} has shape {tuple(a.shape)}, the model was compiled for {shape}",
                             "recompile with --shape to change it")
        out.append(np.ascontiguousarray(a))
    return out
