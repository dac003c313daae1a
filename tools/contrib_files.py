"""The contrib-operator models the tests build, written as files for a GPU lease.

python -m tools.contrib_files DIR [--encoders-only]

ONNX Runtime's transformers optimizer (BERT, GPT-2, ViT: Attention, EmbedLayerNormalization,
SkipLayerNormalization, BiasGelu, FastGelu) and onnxruntime-genai's model builder (LLaMA fp32;
LLaMA, Qwen2 and Phi-3 int4: GroupQueryAttention, Simplified/SkipSimplifiedLayerNormalization,
MatMulNBits, GatherBlockQuantized) are not on the lent GPU machines. This builds the same small
random-weight models as tests/test_contrib_models.py and tests/test_contrib_genai.py, with the
inputs those tests check them on, as DIR/NAME.onnx + DIR/NAME.npz; `python -m tools.gpu_check
files --dir DIR` compiles them for the cuda target there and compares with ONNX Runtime.
The decoders' MatMulNBits are set to accuracy_level 0 (the exact product: a model with int8
activations amplifies last-bit differences of float sums into differences of its int8 values,
so the float product is the tighter check of the GPU's kernels); the IR version is lowered to
10 (the lent machines' ONNX Runtime reads up to 13).
"""
from __future__ import annotations

import argparse
import tempfile
import warnings
from pathlib import Path

import numpy as np
import onnx


def _save(model: onnx.ModelProto, out: Path, name: str, feeds: dict) -> None:
    model.ir_version = min(model.ir_version, 10)
    onnx.save(model, str(out / f"{name}.onnx"))
    np.savez(out / f"{name}.npz", **feeds)


def encoders(out: Path, tmp: Path) -> None:
    import torch
    from onnxruntime.transformers import optimizer

    import tests.test_contrib_models as cm
    for name in ("classic_bert", "gpt2", "vit"):
        model_type, level, _ = cm.CASES[name]
        torch.manual_seed(0)
        model = (cm.ClassicBert() if name == "classic_bert" else cm._transformers(name)).eval()
        kind = "bert" if name == "classic_bert" else name
        feeds = cm._inputs(kind, 0)
        plain, opt = tmp / f"{name}.onnx", tmp / f"{name}_opt.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(model, tuple(torch.from_numpy(v) for v in feeds.values()), str(plain),
                              input_names=list(feeds), output_names=["y"], opset_version=14, dynamo=False)
            optimizer.optimize_model(str(plain), model_type=model_type, num_heads=cm.HEADS, hidden_size=cm.HID,
                                     opt_level=level).save_model_to_file(str(opt))
        _save(onnx.load(str(opt)), out, f"{name}_opt", cm._inputs(kind, 1))


def decoders(out: Path, tmp: Path) -> None:
    import tests.test_contrib_genai as cg
    from models.decoders import genai_build, genai_source
    for name in ("llama_fp32", "llama_int4", "qwen2_int4", "phi3_int4"):
        kind, precision, extra, _ = cg.MODELS[name]
        hf = tmp / f"{kind}_hf"
        if not hf.exists():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                genai_source(kind, hf)
        built = genai_build(hf, tmp / name, precision, tmp / "cache", extra).parent
        model = onnx.load(str(built / "model.onnx"))
        for n in model.graph.node:
            if n.op_type == "MatMulNBits":
                for a in n.attribute:
                    if a.name == "accuracy_level":
                        a.i = 0
        _save(model, out, name, cg._prefill_feeds(np.random.default_rng(7)))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--encoders-only", action="store_true", help="skip the genai decoders")
    a = ap.parse_args(argv)
    a.dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as d:
        encoders(a.dir, Path(d))
        if not a.encoders_only:
            decoders(a.dir, Path(d))
    print(" ".join(sorted(p.name for p in a.dir.glob("*.onnx"))))


if __name__ == "__main__":
    main()
