"""Convolutions read straight from their input: the rewrite the CPU and GPU schedules share.

A convolution lowers to an im2col buffer filled by loops, then a GEMM whose B is that buffer
and which also says what B is in terms of the input (`Matrix.direct`, layout 'im2col'). A
schedule whose GEMM can read that form (the CPU's packer, block by block; a GPU GEMM's tile
staging, element by element) swaps it in: the fill loops, and the buffer where nothing else
uses it, go."""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

from ..kernel.ir import Buffer, CallStmt, Fail, Gemm, Loop, Rewriter, Stmt, Store, walk_buffers, walk_stmts


def read_im2col_directly(stmts: list[Stmt], wanted: Callable[[Gemm], bool]) -> list[Stmt]:
    """`stmts` with every GEMM that has a direct B and for which wanted(g) holds reading it,
    the statements before it at its level that only fill its im2col buffer dropped, and each
    loop's private scratch list kept to what its body still uses. The other GEMMs forget
    their direct form (no kernel gets the input as an argument it does not read)."""
    return _Direct(wanted).stmts(stmts)


class _Direct(Rewriter):
    def __init__(self, wanted: Callable[[Gemm], bool]):
        self.wanted = wanted

    def stmts(self, ss: list[Stmt]) -> list[Stmt]:
        out: list[Stmt] = []
        for s in ss:
            if isinstance(s, Gemm) and s.b.direct is not None and self.wanted(s):
                out = [x for x in out if not _only_fills(x, s.b.buf)]
                s = replace(s, b=s.b.direct)
            elif isinstance(s, Gemm) and s.b.direct is not None:
                s = replace(s, b=replace(s.b, direct=None))
            else:
                s = self.node(s)
            out.append(s)
        return out

    def visit_Loop(self, s: Loop) -> Loop:
        s = self.generic(s)
        used = {b.name for b in walk_buffers(s.body)}
        return replace(s, private=tuple(n for n in s.private if n in used))

    def visit_Gemm(self, s: Gemm) -> Gemm:
        return s


def _only_fills(s: Stmt, buf: Buffer) -> bool:
    """Does s do nothing but store into buf (an im2col nest)?"""
    stores = [x for x in walk_stmts([s]) if isinstance(x, Store)]
    return bool(stores) and all(x.buf is buf for x in stores) and \
        not any(isinstance(x, (Gemm, Fail, CallStmt)) for x in walk_stmts([s]))


def drop_unused_scratch(k) -> None:
    """Forget the kernel's scratch buffers that its body no longer uses."""
    used = {b.name for b in walk_buffers(k.body)}
    k.scratch = [b for b in k.scratch if b.name in used]
