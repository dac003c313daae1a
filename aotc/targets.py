"""Target descriptions: data files under targets/, one per target, plus `native`.

Every file is read once, here, into a typed `Target` (`load_target`): each of its tables is one
of the dataclasses below, with the default of every key written once; a key no table declares,
a table aotc does not know or a value of the wrong type is an error naming the file and the key.
The schedules, passes, printers and the build read a Target's fields, never the file.

`native` is not a file: it is the best CPU target this machine runs, picked by the ISA
extensions each target file `requires` (from /proc/cpuinfo) and its `native_rank`.
A target name may add an architecture (`cuda:sm_90`: that one alone) and options after commas
(`cuda,tf32`, `native,direct_conv`): each option is a switch of the target's [numerics] table that
its [options] table lists, with what it does.
"""
from __future__ import annotations

import platform
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from pathlib import Path
from typing import Optional

from .errors import AotcError
from .paths import TARGETS_DIR

NATIVE = "native"
# the languages aotc prints and builds (a backend each: codegen/__init__.py)
LANGUAGES = ("c", "cuda", "opencl")


@dataclass(frozen=True)
class GemmConfig:
    """[gemm]: how GEMMs run. CPU targets: the float32 GEMM of runtime/aotc_gemm_packed.h (its
    micro-tile mr x nr, its cache blocks kc, mc, nc and its prefetch distance, measured with
    tools/gemm_bench.py); every target: whether a convolution's GEMM reads its im2col matrix
    from the input itself."""
    mr: int = 0
    nr: int = 0
    kc: int = 0
    mc: int = 0
    nc: int = 0
    prefetch: int = 0
    # what storing one element of a product computed transposed costs beyond a plain store, in
    # micro-tile multiply-adds (schedule/gemm_cpu.py prefers_transposed)
    transpose_cost: int = 64
    # a convolution's GEMM packs (CPU) or stages (GPU) its B straight from the input, not from an
    # im2col buffer filled first
    im2col_packing: bool = True
    # ... on a CPU when each tap's plan serves at least im2col_min_channels input channels, or
    # every packed element feeds at least im2col_min_rows rows of the product, or the buffer
    # would exceed im2col_max_buffer bytes (schedule/gemm_cpu.py packs_im2col says why)
    im2col_min_channels: int = 8
    im2col_min_rows: int = 64
    im2col_max_buffer: int = 1 << 20
    # a convolution's GEMM with at most conv_broadcast_max_rows rows (output channels) is summed
    # with the channels in vector lanes, each input element broadcast to them, and no im2col
    # matrix packed (runtime/aotc_gemm_packed.h aotc_conv_broadcast; AVX-512 targets)
    conv_broadcast: bool = False
    conv_broadcast_max_rows: int = 0
    # a GEMM's epilogue runs on each whole micro-tile's sums in registers (schedule/gemm_cpu.py)
    tile_epilogue: bool = True
    # the 8-bit integer GEMM (runtime/aotc_igemm.h) outruns the float32 one: quantized
    # convolutions and QDQ islands become integer GEMMs (passes/decompose.py, passes/qdq.py)
    int8_tile: bool = False
    # block-quantized weights times int8 activations (MatMulNBits at accuracy_level 4) by the
    # runtime's product (runtime/aotc_nbits.h: AVX-512 VNNI where the CPU has it), not loops
    nbits_kernel: bool = False
    # the integer GEMM runs on AMX-INT8 tiles where the CPU has them (chosen at run time;
    # runtime/aotc_igemm.h), its scratch and packed constants sized for them
    int8_amx: bool = False


@dataclass(frozen=True)
class ThreadsConfig:
    """[threads]: the CPU schedule (schedule/cpu.py). A loop runs on the thread pool when its
    estimated work reaches min_parallel_work, a GEMM when its multiply-adds reach
    min_parallel_gemm_macs; each thread's copy of per-thread scratch starts on its own
    scratch_block-byte block (kernel/ir.py Buffer.thread_stride)."""
    min_parallel_work: int = 32768
    min_parallel_gemm_macs: int = 262144
    scratch_block: int = 4096


@dataclass(frozen=True)
class VectorConfig:
    """[vector]: loops an op lets run an iteration twice, of at most run_max_statements
    statements, are walked in runs of `run` iterations (the vector lanes); 0: never."""
    run: int = 0
    run_max_statements: int = 0


@dataclass(frozen=True)
class WinogradConfig:
    """[winograd]: a Winograd convolution whose transformed weights fit in block_bytes runs in
    blocks of tile rows taking at most that much (passes/winograd.py block_rows); 0: no blocks."""
    block_bytes: int = 0


@dataclass(frozen=True)
class NumericsConfig:
    """[numerics]: what the target computes in. accumulate_float32: the type float32 reductions
    sum in ("float64" or "float32"; absent: the CPU schedule's float64, the GPU one's float32).
    The switches, each an option a target may list in [options]: winograd (3 x 3 convolutions
    by F(2x2, 3x3)), winograd4 (F(4x4, 3x3) too), direct_conv (no Winograd), qdq_float (QDQ
    models as written), tf32 (float32 GEMMs on TF32 tensor cores), bf16 (a CPU's float32 GEMMs on
    AMX tiles or AVX512-BF16 dot products, with bfloat16 operands, where the CPU has them:
    runtime/aotc_gemm_packed.h), bf16_winograd (with bf16, Winograd convolutions still: what
    pays where the bf16 products are AVX512-BF16's, `native,bf16` adds it on such a CPU),
    ieee_subnormals (a CPU or CUDA target computes subnormal floats as IEEE says, instead of as
    zero: passes/subnormals.py), planar (every tensor channels-first: no channels-last values
    around depthwise convolutions, passes/layout.py)."""
    accumulate_float32: Optional[str] = None
    winograd: bool = False
    winograd4: bool = False
    direct_conv: bool = False
    qdq_float: bool = False
    tf32: bool = False
    bf16: bool = False
    bf16_winograd: bool = False
    ieee_subnormals: bool = False
    planar: bool = False


@dataclass(frozen=True)
class GpuConfig:
    """[gpu]: the GPU schedule (schedule/gpu.py, schedule/gpu_group.py; targets/cuda.toml says
    what each key does)."""
    block: int = 256              # work-items per group of an elementwise launch
    tm: int = 64                  # GEMM tile: rows of C per work-group
    tn: int = 64                  # columns of C per work-group
    tk: int = 16                  # K step staged in local memory
    rm: int = 4                   # rows of C per work-item
    rn: int = 4                   # columns of C per work-item
    host_loop_max: int = 4096     # an ordered loop with launches inside runs on the host up to this many times
    min_groups: int = 0           # a GEMM launch with fewer groups gets smaller tiles, then split K (0: never)
    split_min_k: int = 256        # the least K a split GEMM's chunk takes
    group_min_work: int = 256     # loop iterations per spatial iteration from which a work-group shares them
    min_items: int = 0            # a launch of fewer work-items leaves the device idle: groups share from 32
    warp: int = 0                 # work-items that run in lockstep on banked local memory (CUDA: 32); 0: none
    shuffle: int = 0              # 1: a warp's work-items exchange registers (reductions combine by shuffles)
    gemv_rows: int = 0            # a GEMM of at most this many rows: one work-item per result, no tiles
    gemv_max_k: int = 2048        # ... and of at most this K (a longer dot product per work-item: tiles split along K)
    min_results: int = 4          # halved tiles keep at least this many results per work-item (rm * rn)
    floor_groups: int = 0         # ... unless even split along K the launch has fewer groups: then 2 x 2
    small_tk: int = 0             # the K step of halved tiles (0: tk)
    max_grid_z: int = 65535       # the most work-groups along grid axis 2 (batched GEMMs)

    def threads(self) -> int:
        """Work-items per GEMM tile."""
        return (self.tm // self.rm) * (self.tn // self.rn)


@dataclass(frozen=True)
class Target:
    """A target: its compiler and flags, the ISA it needs, and a table per part of the
    compiler it steers. `requested` is the name asked for (`native`), `path` the file."""
    name: str
    language: str
    description: str = ""
    cc: str = "cc"
    cflags: tuple = ()
    ldflags: tuple = ()
    alignment: int = 64
    requires: tuple = ()                 # the CPU's ISA extensions it needs (/proc/cpuinfo flags)
    native_rank: Optional[int] = None    # its rank when `native` picks the best one that runs
    arch: tuple = ()                     # GPU architectures compiled for (cuda: sm_80, sm_90)
    gemm: GemmConfig = field(default_factory=GemmConfig)
    threads: ThreadsConfig = field(default_factory=ThreadsConfig)
    vector: VectorConfig = field(default_factory=VectorConfig)
    winograd: WinogradConfig = field(default_factory=WinogradConfig)
    numerics: NumericsConfig = field(default_factory=NumericsConfig)
    gpu: Optional[GpuConfig] = None
    options: dict = field(default_factory=dict)      # option -> what it does ([options])
    requested: str = ""
    path: Optional[Path] = None

    @property
    def is_gpu(self) -> bool:
        return self.language != "c"

    @property
    def flushes_subnormals(self) -> bool:
        """A run computes subnormal floats as zero: a CPU target (its run sets the cores' flags) or
        a CUDA one (nvcc -ftz=true), without ieee_subnormals. OpenCL's -cl-denorms-are-zero only
        permits a device to flush, so an OpenCL target computes them as its device does."""
        return self.language in ("c", "cuda") and not self.numerics.ieee_subnormals


_TABLES = {"gemm": GemmConfig, "threads": ThreadsConfig, "vector": VectorConfig, "winograd": WinogradConfig,
           "numerics": NumericsConfig, "gpu": GpuConfig}
# keys of the file itself (not tables); `requested` and `path` are the loader's
_TOP = {f.name: f.type for f in fields(Target) if f.name not in _TABLES and f.name not in ("requested", "path")}


def _typed(value, kind: str, where: str):
    """value checked against a field's annotation (int, bool, str, tuple of str, dict of str,
    Optional[...]); tuples come from TOML arrays."""
    if kind.startswith("Optional["):
        return None if value is None else _typed(value, kind[len("Optional["):-1], where)
    ok = {"int": isinstance(value, int) and not isinstance(value, bool),
          "bool": isinstance(value, bool),
          "str": isinstance(value, str),
          "tuple": isinstance(value, list) and all(isinstance(x, str) for x in value),
          "dict": isinstance(value, dict) and all(isinstance(x, str) for x in value.values())}.get(kind)
    if not ok:
        want = {"tuple": "an array of strings", "dict": "a table of strings", "int": "an integer",
                "bool": "true or false", "str": "a string"}[kind]
        raise AotcError(f"{where} must be {want}, not {value!r}")
    return tuple(value) if kind == "tuple" else dict(value) if kind == "dict" else value


def _table(cls, values, file: str, table: str):
    where = f"{file} [{table}]"
    if not isinstance(values, dict):
        raise AotcError(f"{where} must be a table, not {values!r}")
    declared = {f.name: f.type for f in fields(cls)}
    for key in values:
        if key not in declared:
            raise AotcError(f"{where}: unknown key {key!r}", f"[{table}] takes {', '.join(declared)}")
    return cls(**{k: _typed(v, declared[k], f"{where} key {k!r}") for k, v in values.items()})


def parse_target(t: dict, path: Path) -> Target:
    """A target file's contents as a Target, every key and type checked."""
    where = f"target file {path}"
    kw = {}
    for key, value in t.items():
        if key in _TABLES:
            kw[key] = _table(_TABLES[key], value, where, key)
        elif key in _TOP:
            kw[key] = _typed(value, _TOP[key], f"{where}: key {key!r}")
        else:
            raise AotcError(f"{where}: unknown key {key!r}",
                            f"a target file has the keys {', '.join(_TOP)} and the tables {', '.join(_TABLES)}")
    for key in ("name", "language"):
        if key not in kw:
            raise AotcError(f"{where} needs a {key}")
    if kw["language"] not in LANGUAGES:
        raise AotcError(f"target {kw['name']!r} has language {kw['language']!r}, which aotc has no backend for",
                        f"backends: {', '.join(LANGUAGES)}")
    switches = {f.name for f in fields(NumericsConfig) if f.type == "bool"}
    for opt in kw.get("options", {}):
        if opt not in switches:
            raise AotcError(f"{where} [options]: {opt!r} is no switch of [numerics] ({', '.join(sorted(switches))})")
    acc = kw.get("numerics", NumericsConfig()).accumulate_float32
    if acc not in (None, "float32", "float64"):
        raise AotcError(f"{where} [numerics] key 'accumulate_float32' must be \"float32\" or \"float64\", not {acc!r}")
    gpu = kw.get("gpu")
    if gpu is not None:
        if min(gpu.tm, gpu.tn, gpu.tk, gpu.rm, gpu.rn, gpu.block) < 1 or gpu.tm % gpu.rm or gpu.tn % gpu.rn \
                or (gpu.tm * gpu.tk) % gpu.threads() or (gpu.tn * gpu.tk) % gpu.threads():
            raise AotcError(f"{where} [gpu]: tiles tm {gpu.tm}, tn {gpu.tn}, tk {gpu.tk}, rm {gpu.rm}, rn {gpu.rn} "
                            "do not divide evenly")
        if gpu.shuffle and not gpu.warp:
            raise AotcError(f"{where} [gpu]: shuffle needs the warp width (warp = 32)")
    return Target(**kw, path=path)


def available() -> list[str]:
    """Target names: the files under targets/, and native."""
    return sorted(p.stem for p in TARGETS_DIR.glob("*.toml")) + [NATIVE]


def _read(name: str) -> Target:
    """A target by name (targets/<name>.toml) or by the path of a .toml file of one's own."""
    p = Path(name) if name.endswith(".toml") else TARGETS_DIR / f"{name}.toml"
    if not p.is_file():
        raise AotcError(f"unknown target {name!r}",
                        f"available targets: {', '.join(available())}, or the path of a target .toml file")
    try:
        with open(p, "rb") as f:
            t = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise AotcError(f"cannot read target file {p}: {e}") from None
    return parse_target(t, p)


@lru_cache(maxsize=1)
def cpu_flags() -> frozenset:
    """The ISA extensions of this CPU (x86 flags from /proc/cpuinfo; empty elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def runs_here(t: Target) -> bool:
    """Can this machine run code built for target t?"""
    req = set(t.requires)
    if req and platform.machine() not in ("x86_64", "AMD64", "i686", "i386"):
        return False
    return req <= cpu_flags()


def bf16_by_dot_products() -> bool:
    """This CPU computes bfloat16 products by AVX512-BF16's dot products, not on AMX tiles
    (runtime/aotc_gemm_packed.h aotc_bf16_ready): about 2x float32's rate, where Winograd's
    fewer products still pay (AMX's are several times faster, and they do not)."""
    flags = cpu_flags()
    return "avx512_bf16" in flags and "amx_bf16" not in flags


def native_target() -> str:
    """The best CPU target this machine runs."""
    best, rank = "c", -1
    for p in sorted(TARGETS_DIR.glob("*.toml")):
        t = _read(p.stem)
        if t.language == "c" and t.native_rank is not None and runs_here(t) and t.native_rank > rank:
            best, rank = p.stem, t.native_rank
    return best


def load_target(name: str) -> Target:
    """A target, by name or .toml path; `native` resolves to the best CPU target of this
    machine (its `requested` field then says native). `name:arch` picks one architecture of a
    target that has several (cuda:sm_90); `,option` turns on one of the target's [options],
    each a switch in its [numerics] table (cuda,tf32)."""
    requested = name
    spec, *options = [name] if name.endswith(".toml") else name.split(",")   # cuda:sm_90,tf32: with options
    if spec == NATIVE:                         # native,winograd4: the native target with an option
        spec = native_target()
        if "bf16" in options and "bf16_winograd" not in options and bf16_by_dot_products():
            options.append("bf16_winograd")    # (this machine's bf16 products: see the option)
        name = ",".join([spec, *options])
    base, _, arch = spec.partition(":")        # cuda:sm_90: the cuda target for one architecture
    t = _read(base if arch else spec)
    if arch:
        if not t.arch or not re.fullmatch(r"sm_\d+a?", arch):
            raise AotcError(f"target {name!r}: {base!r} takes no architecture {arch!r}",
                            "write it as cuda:sm_80, cuda:sm_90...")
        t = replace(t, arch=(arch,))
    for opt in options:
        if opt not in t.options:
            raise AotcError(f"target {name!r}: {base!r} has no option {opt!r}",
                            f"its options: {', '.join(t.options) or 'none'}")
        t = replace(t, numerics=replace(t.numerics, **{opt: True}))
    if arch or options:
        t = replace(t, name=name)
    return replace(t, requested=requested)
