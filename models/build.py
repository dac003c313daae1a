"""python -m models.build NAME [--size small|full] -o FILE.onnx  (or `all` -o DIR)."""
from __future__ import annotations

import argparse
from pathlib import Path

import onnx

from .zoo import ZOO


def save(model: onnx.ModelProto, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if model.ByteSize() > 1_500_000_000:
        onnx.save(model, str(path), save_as_external_data=True, location=path.name + ".data")
    else:
        onnx.save(model, str(path))


def symbolic_input(model: onnx.ModelProto, names: list) -> onnx.ModelProto:
    """The model with its first input's dims renamed to the dim_params in `names` (None keeps a
    dim fixed) and the shapes inside it and of its outputs dropped: a zoo model built at fixed
    sizes as an exporter with dynamic axes writes it (run-time dimensions, issue 28)."""
    for d, name in zip(model.graph.input[0].type.tensor_type.shape.dim, names):
        if name:
            d.ClearField("dim_value")
            d.dim_param = name
    del model.graph.value_info[:]
    for o in model.graph.output:
        o.type.tensor_type.ClearField("shape")
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("name", help=f"one of: {', '.join(ZOO)}, or all")
    ap.add_argument("--size", default="small", choices=["small", "full"])
    ap.add_argument("-o", "--output", required=True, type=Path)
    a = ap.parse_args()
    names = list(ZOO) if a.name == "all" else [a.name]
    for n in names:
        if n not in ZOO:
            raise SystemExit(f"unknown model {n!r}; known: {', '.join(ZOO)}")
        path = a.output / f"{n}.onnx" if a.name == "all" else a.output
        save(ZOO[n].build(a.size), path)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
