"""NonMaxSuppression as a detector's head runs it, aotc beside ONNX Runtime, on as many threads
each (aotc runs the classes in parallel; ONNX Runtime's kernel is sequential).

python -m tools.nms_bench [--target native] [--threads 1] [--runs 21] [--workdir build/nms_bench]

Shapes: 8400 boxes and 80 classes (a YOLOv8-sized head at 640 x 640), center-format boxes,
at most 100 kept per class, IoU 0.45, score threshold 0.25; "dense" scores are uniform (three
quarters of the boxes pass the threshold in every class), "sparse" scores are uniform**8 (about
one in six). Each engine's output is checked equal to the other's first, then medians of `--runs`
runs after 3 warm-up runs, the engines taking turns, in ms.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from aotc.api import load
from aotc.compiler import compile_model

BATCHES, CLASSES, BOXES, MOST, IOU, SCORE = 1, 80, 8400, 100, 0.45, 0.25


def nms_model(path: Path) -> None:
    inits = [numpy_helper.from_array(np.array([MOST], np.int64), "most"),
             numpy_helper.from_array(np.array([IOU], np.float32), "iou"),
             numpy_helper.from_array(np.array([SCORE], np.float32), "score")]
    g = helper.make_graph(
        [helper.make_node("NonMaxSuppression", ["boxes", "scores", "most", "iou", "score"], ["selected"],
                          center_point_box=1)], "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [BATCHES, BOXES, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [BATCHES, CLASSES, BOXES])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, ["n", 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.save(m, str(path))


def inputs(kind: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    xy, wh = rng.uniform(0, 640, (BATCHES, BOXES, 2)), rng.uniform(5, 80, (BATCHES, BOXES, 2))
    scores = rng.random((BATCHES, CLASSES, BOXES))
    if kind == "sparse":
        scores = scores ** 8
    return {"boxes": np.concatenate([xy, wh], -1).astype(np.float32), "scores": scores.astype(np.float32)}


def main(argv=None) -> None:
    import onnxruntime as ort
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="native")
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--workdir", type=Path, default=Path("build/nms_bench"))
    a = ap.parse_args(argv)
    a.workdir.mkdir(parents=True, exist_ok=True)
    path = a.workdir / "nms.onnx"
    nms_model(path)
    model = load(compile_model(path, target=a.target, output_dir=a.workdir / "out", threads=a.threads),
                 threads=a.threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads, so.inter_op_num_threads = a.threads, 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    print(f"{a.threads} thread(s), target {a.target}")
    print("| scores | rows kept | ONNX Runtime ms | aotc ms | ORT / aotc |")
    print("|---|---|---|---|---|")
    for kind in ("dense", "sparse"):
        feeds = inputs(kind)
        want, got = sess.run(None, feeds)[0], model.run(feeds)[0]
        assert np.array_equal(want, got), f"{kind}: aotc's rows differ from ONNX Runtime's"
        engines = {"ort": lambda: sess.run(None, feeds), "aotc": lambda: model.run(feeds)}
        times: dict[str, list[float]] = {k: [] for k in engines}
        for r in range(3 + a.runs):
            for k, f in engines.items():
                t0 = time.perf_counter()
                f()
                if r >= 3:
                    times[k].append((time.perf_counter() - t0) * 1e3)
        o, c = statistics.median(times["ort"]), statistics.median(times["aotc"])
        print(f"| {kind} | {len(got)} | {o:.2f} | {c:.2f} | {o / c:.2f} |")


if __name__ == "__main__":
    main()
