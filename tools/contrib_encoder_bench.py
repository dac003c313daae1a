"""An encoder before and after ONNX Runtime's transformers optimizer, both compiled by aotc, timed
alternating in one process (aotc.bench.time_engines: rounds of back-to-back runs per engine,
medians), with ONNX Runtime on both files beside them. The model is tests/test_contrib_models.py's
recipe at a larger size: a transformers BertModel from a config (random weights, eager attention),
exported by torch.onnx.export (opset 14), then onnxruntime.transformers.optimizer (model_type bert,
opt_level 0: its Python fusions into Attention, SkipLayerNormalization, BiasGelu, ...).
Issue 29 asks that the optimized file run no slower in aotc than the plain one.

python -m tools.contrib_encoder_bench [--hidden 512] [--layers 4] [--heads 8] [--seq 128] [--batch 1]
                                      [--threads 1] [--runs 60] [--rounds 6] [--target native]
"""
from __future__ import annotations

import argparse
import collections
import statistics
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx


def export(work: Path, hidden: int, layers: int, heads: int, seq: int, batch: int) -> tuple[Path, Path, dict]:
    """(plain model, optimized model, inputs)"""
    import torch
    import transformers as tf
    from onnxruntime.transformers import optimizer
    torch.manual_seed(0)
    cfg = tf.BertConfig(attn_implementation="eager", hidden_size=hidden, num_hidden_layers=layers,
                        num_attention_heads=heads, intermediate_size=4 * hidden, vocab_size=1000,
                        max_position_embeddings=max(512, seq))
    bert = tf.BertModel(cfg).eval()
    names = ["input_ids", "attention_mask", "token_type_ids"]

    class LastHidden(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, *args):
            return self.bert(**dict(zip(names, args))).last_hidden_state

    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, seq), np.int64),
             "token_type_ids": rng.integers(0, 2, (batch, seq)).astype(np.int64)}
    plain, opt = work / "bert.onnx", work / "bert_opt.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(LastHidden(), tuple(torch.from_numpy(v) for v in feeds.values()), str(plain),
                          input_names=names, output_names=["y"], opset_version=14, dynamo=False)
        optimizer.optimize_model(str(plain), model_type="bert", num_heads=heads, hidden_size=hidden,
                                 opt_level=0).save_model_to_file(str(opt))
    return plain, opt, feeds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--target", default="native")
    args = ap.parse_args()

    from aotc.bench import BoundInstance, ort_session, time_engines
    from aotc.compiler import compile_model
    with tempfile.TemporaryDirectory(prefix="encoder-bench-") as work:
        plain, opt, feeds = export(Path(work), args.hidden, args.layers, args.heads, args.seq, args.batch)
        contrib = collections.Counter(n.op_type for n in onnx.load(str(opt)).graph.node
                                      if n.domain == "com.microsoft" or n.op_type == "LayerNormalization")
        engines, outputs, kernels = {}, {}, {}
        for label, path in (("aotc plain", plain), ("aotc optimized", opt)):
            out = compile_model(path, target=args.target, output_dir=Path(work) / label.replace(" ", "_"),
                                threads=args.threads)
            inst = BoundInstance(out, feeds, threads=args.threads)
            kernels[label] = len(inst.lib.manifest["kernels"])
            engines[label], outputs[label] = inst.run, inst.outputs[0]
            target = inst.lib.manifest["target"]
        for label, path in (("ORT plain", plain), ("ORT optimized", opt)):
            sess = ort_session(path, args.threads)
            engines[label] = (lambda s=sess, lb=label: outputs.__setitem__(lb, s.run(None, feeds)[0]))
        samples = time_engines(engines, args.runs, 5, args.rounds)
    med = {k: 1e3 * statistics.median(v) for k, v in samples.items()}
    print(f"BERT (transformers BertModel, hidden {args.hidden}, {args.layers} layers, {args.heads} heads, "
          f"batch {args.batch} x {args.seq} tokens); target {target}, {args.threads} thread(s); medians of "
          f"{args.runs} runs per engine in {args.rounds} rounds (ms)")
    print(f"  the optimizer wrote: {', '.join(f'{k} x{v}' for k, v in sorted(contrib.items()))}")
    ref = outputs["ORT plain"]
    for k, v in med.items():
        extra = f"   {kernels[k]} kernels" if k in kernels else ""
        print(f"  {k:15s} {v:9.3f}   largest difference from ORT plain {np.abs(outputs[k] - ref).max():.2e}{extra}")
    print(f"  aotc plain / aotc optimized: {med['aotc plain'] / med['aotc optimized']:.3f} "
          f"(above 1: the optimized file runs faster)")
    print(f"  ORT optimized / aotc optimized: {med['ORT optimized'] / med['aotc optimized']:.3f}")


if __name__ == "__main__":
    main()
