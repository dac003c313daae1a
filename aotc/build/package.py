"""Build files for C users in an artifact directory: a pkg-config file, a CMake package config and,
on request, a static library beside the shared one.

All of them find the artifact where it lies (pkg-config's ${pcfiledir}, CMake's
CMAKE_CURRENT_LIST_DIR), so the directory can be moved or installed as it is:

    cc app.c $(PKG_CONFIG_PATH=out pkg-config --cflags --libs mlp)          # out/mlp.pc
    cc app.c $(PKG_CONFIG_PATH=out pkg-config --cflags --libs mlp-static)   # out/lib<name>.a linked in
    find_package(mlp REQUIRED) ... target_link_libraries(app PRIVATE mlp::mlp)   # or mlp::mlp_static

The shared library has no soname, so it is linked as -l<name> (pkg-config; CMake's
IMPORTED_NO_SONAME), with the artifact directory as the program's run path. A static library's
users link what the shared one was linked with: the target's ldflags without -shared.
"""
from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import AotcError, BuildError
from ..targets import Target
from ..version import __version__

# the languages whose artifacts are C compiled by the target's cc: they can be archived
STATIC_LANGUAGES = ("c", "opencl")


def static_library(out: Path, manifest: dict, target: Target) -> Path:
    """Compile the artifact's C sources again as objects (the target's compiler and flags) and
    archive them into out/lib<name>.a. C-hosted targets only (c, c-avx2, c-avx512, opencl)."""
    if manifest["language"] not in STATIC_LANGUAGES:
        raise AotcError(f"--static: target {manifest['target']!r} builds a shared library only",
                        "static libraries are built for the c and opencl targets")
    cc = target.cc
    ar = shutil.which("ar")
    if shutil.which(cc) is None or ar is None:
        raise BuildError(f"--static needs {cc!r} and 'ar'", "install gcc (or clang) and binutils")
    lib = out / f"lib{manifest['name']}.a"
    with tempfile.TemporaryDirectory(prefix="aotc-static-") as tmp:
        objects = []
        for src in (s for s in manifest["sources"] if s.endswith(".c")):
            obj = Path(tmp) / (Path(src).stem + ".o")
            _run([cc, *target.cflags, f"-I{out}", "-c", str(out / src), "-o", str(obj)])
            objects.append(str(obj))
        lib.unlink(missing_ok=True)
        _run([ar, "rcs", str(lib), *objects])
    return lib


def _run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join(proc.stderr.strip().splitlines()[-20:])
        raise BuildError(f"building the static library failed: {' '.join(cmd[:2])} ...:\n{tail}",
                         "this is a bug in aotc: please report it with the model")


def link_flags(target: Target) -> list[str]:
    """What a program linking the static library links besides it: the target's ldflags for the
    shared library, less -shared."""
    return [f for f in target.ldflags if f != "-shared"]


def pkg_config(manifest: dict, target: Target, static: bool) -> str:
    """<name>.pc (the shared library) or, with `static`, <name>-static.pc (lib<name>.a)."""
    name = manifest["name"]
    libs = (f"${{libdir}}/lib{name}.a {' '.join(link_flags(target))}" if static
            else f"-L${{libdir}} -Wl,-rpath,${{libdir}} -l{name}")
    return "\n".join([
        "prefix=${pcfiledir}",
        "includedir=${prefix}",
        "libdir=${prefix}",
        "",
        f"Name: {name}{'-static' if static else ''}",
        f"Description: {manifest['model']} compiled by aotc {__version__} for target {manifest['target']}"
        + (" (static library)" if static else ""),
        f"Version: {__version__}",
        "Cflags: -I${includedir}",
        f"Libs: {libs.strip()}",
        "",
    ])


def cmake_config(manifest: dict, target: Target) -> str:
    """<name>Config.cmake: the imported targets <name>::<name> (the shared library) and, where
    the artifact has lib<name>.a, <name>::<name>_static."""
    name = manifest["name"]
    deps, threads = [], False
    for f in link_flags(target):
        if f == "-pthread":
            threads = True
            deps.append("Threads::Threads")
        elif f.startswith("-l"):
            deps.append(f[2:])
        else:
            deps.append(f)
    lines = [
        f"# {name}: {manifest['model']} compiled by aotc {__version__} for target {manifest['target']}.",
        f"# find_package({name}) (with {name}_DIR or CMAKE_PREFIX_PATH naming this directory) defines",
        f"# {name}::{name} (lib{name}.so) and, if aotc compile --static built it, {name}::{name}_static",
        f"# (lib{name}.a). Written by aotc/build/package.py.",
        'get_filename_component(_aotc_dir "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)',
        f"if(NOT TARGET {name}::{name})",
        f"  add_library({name}::{name} SHARED IMPORTED)",
        f"  set_target_properties({name}::{name} PROPERTIES",
        f'    IMPORTED_LOCATION "${{_aotc_dir}}/lib{name}.so"',
        "    IMPORTED_NO_SONAME TRUE",
        '    INTERFACE_INCLUDE_DIRECTORIES "${_aotc_dir}")',
        "endif()",
    ]
    if manifest["language"] in STATIC_LANGUAGES:
        lines += [
            f'if(EXISTS "${{_aotc_dir}}/lib{name}.a" AND NOT TARGET {name}::{name}_static)',
            *(["  include(CMakeFindDependencyMacro)", "  find_dependency(Threads)"] if threads else []),
            f"  add_library({name}::{name}_static STATIC IMPORTED)",
            f"  set_target_properties({name}::{name}_static PROPERTIES",
            f'    IMPORTED_LOCATION "${{_aotc_dir}}/lib{name}.a"',
            '    INTERFACE_INCLUDE_DIRECTORIES "${_aotc_dir}"',
            f'    INTERFACE_LINK_LIBRARIES "{";".join(deps)}")',
            "endif()",
        ]
    lines += ["unset(_aotc_dir)", f"set({name}_FOUND TRUE)", ""]
    return "\n".join(lines)


def write_build_files(out: Path, manifest: dict, target: Target, static: bool) -> list[str]:
    """The pkg-config file(s) and the CMake config into the artifact directory `out`, and with
    `static` the static library; without it, a static library and its .pc left there by an
    earlier compile are removed (they would not match the new shared library). Returns the files
    written."""
    name = manifest["name"]
    written = []
    if static:
        written.append(static_library(out, manifest, target).name)
        (out / f"{name}-static.pc").write_text(pkg_config(manifest, target, static=True))
        written.append(f"{name}-static.pc")
    else:
        for stale in (out / f"lib{name}.a", out / f"{name}-static.pc"):
            stale.unlink(missing_ok=True)
    (out / f"{name}.pc").write_text(pkg_config(manifest, target, static=False))
    (out / f"{name}Config.cmake").write_text(cmake_config(manifest, target))
    return written + [f"{name}.pc", f"{name}Config.cmake"]
