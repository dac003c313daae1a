"""Text features: TfIdfVectorizer on integer tokens (int32 / int64 input, pool_int64s).

The pool is known at compile time (attributes), so it is built here into a trie, the tables
of which are constants of the artifact: node 0 is the root, the others are the pool's n-grams
and their prefixes, level by level, each level in lexicographic order, so that the children of
a node are consecutive and sorted by their last item:
    keys[t]        the item on the edge into node t
    first_child[t] the children of node t are nodes first_child[t] .. first_child[t+1] - 1
    slots[t]       the output index of the n-gram ending at node t, -1 for a mere prefix
    weights[t]     that n-gram's weight (IDF and TFIDF with weights only)
For each row, each skip k (items k+1 apart) and each start position, the kernel walks the trie
down the row: at every level a binary search for the next item among the children, and a count
wherever a pool n-gram ends. 1-grams count at skip 0 only (skips do not change them).

As ONNX Runtime (which the spec's text agrees with, the reference implementation does not):
weights[i] belongs to the i-th n-gram of the pool; each occurrence adds 1 (TF, and TFIDF
without weights) or its weight (TFIDF), or sets the output to 1 (IDF) or to its weight (IDF
with weights; where n-grams share an output index, the last one found wins: skip by skip, start
by start, shorter first). Only n-grams of lengths min_gram_length .. max_gram_length are
loaded; the others keep their ids. Attribute rules are ONNX Runtime's, which refuses the same
models (duplicate n-grams, ngram_counts out of the pool, counts that are not whole n-grams,
weights of another length than ngram_indexes).
"""
from __future__ import annotations

from typing import NamedTuple, Optional

import numpy as np

from ..errors import ShapeError, UnsupportedError
from ..ir import dtypes
from ..kernel.ir import F32, I64, ORDERED, SPATIAL, Load, binop, cast, const, select
from .registry import register

_MODES = ("TF", "IDF", "TFIDF")


class _Pool(NamedTuple):
    mode: str
    skips: int                              # max_skip_count + 1
    grams: dict                             # n-gram (tuple) -> (output index, weight or None)
    size: int                               # output length: max(ngram_indexes) + 1
    weighted: bool                          # weights given and used by the mode


def _where(node) -> str:
    return f"TfIdfVectorizer node {node.name!r}"


def _ints(node, key: str) -> Optional[list[int]]:
    v = node.attr(key)
    return None if v is None else [int(x) for x in v]


def _pool(node) -> _Pool:
    """The attributes, checked (as ONNX Runtime checks them), and the loaded n-grams."""
    where = _where(node)
    if node.attr("pool_strings") is not None:
        raise UnsupportedError([f"{where} with pool_strings (aotc has no string tensors; integer tokens with "
                                "pool_int64s compile)"])
    mode = node.attr("mode")
    mode = mode.decode(errors="replace") if isinstance(mode, bytes) else mode
    if mode not in _MODES:
        raise ShapeError(f"{where}: mode {mode!r} is not one of {', '.join(_MODES)}")
    lo, hi, skip = (node.attr(k) for k in ("min_gram_length", "max_gram_length", "max_skip_count"))
    if lo is None or hi is None or skip is None:
        raise ShapeError(f"{where}: min_gram_length, max_gram_length and max_skip_count are required")
    lo, hi, skip = int(lo), int(hi), int(skip)
    if lo < 1 or hi < lo:
        raise ShapeError(f"{where}: gram lengths min {lo} .. max {hi} must satisfy 1 <= min <= max")
    if skip < 0:
        raise ShapeError(f"{where}: max_skip_count {skip} must be >= 0")
    counts, indexes, pool = _ints(node, "ngram_counts"), _ints(node, "ngram_indexes"), _ints(node, "pool_int64s")
    if not counts:
        raise ShapeError(f"{where}: ngram_counts must be given and not empty")
    if hi > len(counts):
        raise ShapeError(f"{where}: max_gram_length {hi} exceeds the {len(counts)} n-gram lengths ngram_counts "
                         "gives")
    if not indexes or min(indexes) < 0:
        raise ShapeError(f"{where}: ngram_indexes must be given, not empty, with no negative values")
    if not pool:
        raise ShapeError(f"{where}: pool_int64s must be given and not empty")
    weights = node.attr("weights")
    if weights is not None and len(weights) != len(indexes):
        raise ShapeError(f"{where}: {len(weights)} weights for {len(indexes)} ngram_indexes (one weight per "
                         "n-gram of the pool)")
    grams: dict = {}
    gram_id = 0                                 # the n-gram's place in the pool, over every length
    for k, start in enumerate(counts):
        n = k + 1
        end = counts[k + 1] if k + 1 < len(counts) else len(pool)
        if not 0 <= start <= end <= len(pool):
            raise ShapeError(f"{where}: the {n}-grams at pool_int64s[{start}:{end}] are outside the pool of "
                             f"{len(pool)} items (ngram_counts {counts})")
        if (end - start) % n:
            raise ShapeError(f"{where}: the {end - start} items of pool_int64s[{start}:{end}] are not whole "
                             f"{n}-grams")
        if not lo <= n <= hi:
            gram_id += (end - start) // n
            continue
        for at in range(start, end, n):
            gram = tuple(pool[at:at + n])
            if gram in grams:
                raise ShapeError(f"{where}: the {n}-gram {list(gram)} is twice in pool_int64s")
            if gram_id >= len(indexes):
                raise ShapeError(f"{where}: {len(indexes)} ngram_indexes for a pool of at least {gram_id + 1} "
                                 "n-grams (one output index per n-gram)")
            grams[gram] = (indexes[gram_id], None if weights is None else float(weights[gram_id]))
            gram_id += 1
    weighted = weights is not None and mode != "TF"
    return _Pool(mode, skip + 1, grams, max(indexes) + 1, weighted)


class _Trie(NamedTuple):
    keys: np.ndarray            # int64 [T + 2]: node t's item; the last entry pads a search ending at T + 1
    first_child: np.ndarray     # int64 [T + 2]
    slots: np.ndarray           # int64 [T + 1]
    weights: np.ndarray         # float32 [T + 1]
    depth: int                  # the longest n-gram
    fanout: int                 # the most children of a node


def _trie(p: _Pool) -> _Trie:
    depth = max(len(g) for g in p.grams)
    levels = [sorted({g[:n] for g in p.grams if len(g) >= n}) for n in range(1, depth + 1)]
    nodes = [()] + [prefix for level in levels for prefix in level]
    number = {prefix: t for t, prefix in enumerate(nodes)}
    children = np.zeros(len(nodes), np.int64)
    for prefix in nodes[1:]:
        children[number[prefix[:-1]]] += 1
    first_child = np.concatenate([[1], 1 + np.cumsum(children)]).astype(np.int64)
    keys = np.array([0] + [prefix[-1] for prefix in nodes[1:]] + [0], np.int64)
    slots = np.full(len(nodes), -1, np.int64)
    weights = np.zeros(len(nodes), np.float32)
    for gram, (slot, w) in p.grams.items():
        slots[number[gram]] = slot
        weights[number[gram]] = 0.0 if w is None else w
    return _Trie(keys, first_child, slots, weights, depth, int(children.max()))


def _rows(x) -> tuple[int, int]:
    return (1, x.shape[0]) if len(x.shape) == 1 else (x.shape[0], x.shape[1])


def _child(b, keys, first_child, at, item, fanout: int):
    """Emit the binary search for `item` among the children of node `at`; the child found, or -1."""
    lo = b.local("lo", Load(first_child, at))
    end = b.local("end", Load(first_child, at + 1))
    hi = b.local("hi", end)
    b.comment(f"binary search among the node's children (at most {fanout})")
    with b.loops([fanout.bit_length()], ["step"], role=ORDERED):
        with b.if_(lo < hi):
            mid = b.local("mid", (lo + hi) / 2)
            less = b.local("less", Load(keys, mid) < item)
            b.assign(lo, select(less, mid + 1, lo))
            b.assign(hi, select(less, hi, mid))
    return select(binop("&&", lo < end, Load(keys, lo).eq(item)), lo, const(-1))


def _count(ctx, p: _Pool, r, C: int) -> None:
    """Emit the walks of row r (C tokens), each hit updating its output."""
    X, Y, b = ctx.ins[0], ctx.outs[0], ctx.b
    t = _trie(p)
    keys, first_child = ctx.table(t.keys, "keys"), ctx.table(t.first_child, "first_child")
    slots = ctx.table(t.slots, "slots")
    weights = ctx.table(t.weights, "weights") if p.weighted else None
    skips = p.skips if t.depth > 1 else 1
    once = skips > 1 and any(len(g) == 1 for g in p.grams)      # 1-grams, which count at skip 0 only
    b.comment(f"the pool's {len(p.grams)} n-grams as a trie of {len(t.slots)} nodes, node 0 the root: the "
              "children of node t are first_child[t] .. first_child[t+1]-1, sorted by keys; slots: the output "
              "index of the n-gram ending there, -1 if none")
    b.comment(f"walk it from every start, the items skip+1 apart (skip < {skips})"
              + ("; 1-grams count at skip 0 only" if once else ""))
    with b.loops([skips], ["skip"], role=ORDERED) as (k,):
        with b.loop(C, "start", role=ORDERED) as s:
            at = b.local("node", const(0))
            with b.loops([t.depth], ["level"], role=ORDERED) as (level,):
                pos = b.local("pos", s + level * (k + 1))
                with b.if_(binop("&&", at >= 0, pos < C)):
                    item = b.local("item", cast(Load(X, r * C + pos), I64))
                    b.assign(at, _child(b, keys, first_child, at, item, t.fanout))
                    with b.if_(at >= 0):
                        slot = b.local("slot", Load(slots, at))
                        hit = slot >= 0
                        if once:
                            hit = binop("&&", hit, binop("||", k.eq(0), level > 0))
                        with b.if_(hit):
                            out = r * p.size + slot
                            w = Load(weights, at) if weights is not None else const(1.0, F32)
                            b.store(Y, out, w if p.mode == "IDF" else Load(Y, out) + w)


def _lower(node, ctx):
    X, Y, b = ctx.ins[0], ctx.outs[0], ctx.b
    p = _pool(node)
    rows, C = _rows(X)
    with b.loops([rows], ["r"], role=SPATIAL) as (r,):
        with b.loop(p.size, "j", role=SPATIAL) as j:
            b.store(Y, r * p.size + j, const(0.0, F32))
        if p.grams and C:
            _count(ctx, p, r, C)


# (not folded by ONNX's reference, which takes weights[i] for output i where ONNX Runtime and the
# spec take the i-th n-gram of the pool)
@register("TfIdfVectorizer", lower=_lower, reference_fold=False,
          how="kernel: the pool as a trie of constant tables (int32/int64 tokens; pool_strings unsupported)")
def _tfidf(node, ins):
    x = ins[0]
    p = _pool(node)
    if x.dtype not in (dtypes.INT32, dtypes.INT64):
        raise UnsupportedError([f"{_where(node)} on element type {dtypes.name(x.dtype)} (int32 and int64 tokens)"])
    if len(x.shape) not in (1, 2):
        raise ShapeError(f"{_where(node)}: input of shape {list(x.shape)}; it must be [C] or [N, C]")
    if len(x.shape) == 2 and x.shape[0] < 1:
        raise ShapeError(f"{_where(node)}: input of shape {list(x.shape)} has no rows (N must be > 0)")
    return [(dtypes.FLOAT32, (p.size,) if len(x.shape) == 1 else (x.shape[0], p.size))]
