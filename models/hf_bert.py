"""Hugging Face `transformers` BertModel, exported the way users export it, checked with aotc.

The model is built from a BertConfig with random weights (nothing is downloaded) and exported
by `torch.onnx.export(..., dynamo=True, opset_version=18)` with eager attention. The exporter
folds BERT's token-type buffer into a GatherElements on two constants, which aotc must fold
itself (see aotc/passes/evaluate.py).

    python -m models.hf_bert --size base -o build/hf_bert/bert.onnx   # export only
    python -m models.hf_bert --size base --check                       # export + aotc check (make hf-bert)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

# size -> (BertConfig keyword arguments, sequence length)
SIZES = {
    "small": (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                   vocab_size=100, max_position_embeddings=64), 16),
    "base": ({}, 128),          # BertConfig() defaults: BERT-base, 12 layers, hidden 768
}


def export(size: str, path: Path, seed: int = 0) -> tuple[Path, int, int]:
    """Export BertModel(BertConfig(**SIZES[size])) to `path`. Returns (path, seq, vocab)."""
    import torch
    from transformers import BertConfig, BertModel

    kwargs, seq = SIZES[size]
    cfg = BertConfig(attn_implementation="eager", **kwargs)
    torch.manual_seed(seed)
    model = BertModel(cfg).eval()
    ids = torch.randint(0, cfg.vocab_size, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.onnx.export(model, (ids, mask), str(path), dynamo=True, opset_version=18, verbose=False)
    return path, seq, cfg.vocab_size


def sample_feeds(seq: int, vocab: int, seed: int) -> dict[str, np.ndarray]:
    """Token ids over the whole vocabulary and a mask that hides a random-length tail."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, (1, seq), dtype=np.int64)
    mask = np.ones((1, seq), np.int64)
    mask[0, int(rng.integers(seq // 2, seq)):] = 0
    return {"input_ids": ids, "attention_mask": mask}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=sorted(SIZES), default="base")
    ap.add_argument("-o", "--output", type=Path, default=None)
    ap.add_argument("--check", action="store_true", help="compile with aotc and compare with ONNX Runtime")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    args = ap.parse_args(argv)
    out = args.output or Path("build/hf_bert") / f"bert_{args.size}.onnx"
    t0 = time.perf_counter()
    path, seq, vocab = export(args.size, out)
    print(f"exported {path} in {time.perf_counter() - t0:.1f}s")
    if not args.check:
        return 0
    from aotc.check.runner import run_check
    t0 = time.perf_counter()
    res = run_check(path, inputs=sample_feeds(seq, vocab, args.seed), rtol=args.rtol, atol=args.atol,
                    output_dir=path.parent / f"out_{args.size}")
    print(f"aotc check in {time.perf_counter() - t0:.1f}s (rtol {args.rtol:g}, atol {args.atol:g})")
    for o in res.outputs:
        print(f"  {o.name:20} {str(o.shape):>16} max abs {o.max_abs_err:.3g} max rel {o.max_rel_err:.3g} "
              f"{'ok' if o.passed else 'MISMATCH'}")
    print("PASS" if res.passed else "FAIL")
    return 0 if res.passed else 1


if __name__ == "__main__":
    sys.exit(main())
