"""Every zoo model (small variant) compiles for the native target and matches ONNX Runtime, on
one thread and on two (the opencl target's run is in test_opencl.py; full size: make zoo-full)."""
import onnx
import pytest

from aotc.check.runner import run_check
from models.zoo import ZOO


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_zoo_model_parity(name, threads, tmp_path):
    e = ZOO[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(e.build("small"), str(path))
    res = run_check(path, shapes=e.shapes_for("small"), rtol=e.rtol, atol=e.atol, output_dir=tmp_path / "out",
                    seed=3, threads=threads)
    assert res.outputs
    for o in res.outputs:
        assert o.passed, (f"{name}/{o.name} on {threads} thread(s): max_abs={o.max_abs_err:.3g} "
                          f"max_rel={o.max_rel_err:.3g} {o.note}")


def test_vs_ort_charges_onnx_runtime_nodes_to_aotc_kernels(tmp_path):
    """`python -m tools.vs_ort` (aotc's kernels beside ONNX Runtime's profiled nodes): on
    LeNet-5 every kernel gets a row, ONNX Runtime's fused Conv and Gemm nodes are charged to
    the kernels holding those ONNX nodes, and the totals are positive."""
    import re
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-m", "tools.vs_ort", "lenet5", "--size", "small", "--runs", "3",
                        "--workdir", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    head = re.search(r"aotc ([\d.]+) ms in kernels, ONNX Runtime ([\d.]+) ms in nodes", r.stdout)
    assert head and float(head.group(1)) > 0 and float(head.group(2)) > 0, r.stdout
    rows = {ln.split(":")[0]: ln.split()[-2:] for ln in r.stdout.splitlines() if re.match(r"k\d{3}_", ln)}
    convs = [k for k in rows if "conv" in k]
    assert convs and all(float(rows[k][0]) > 0 for k in convs), r.stdout     # ORT time charged
    lost = [ln for ln in r.stdout.splitlines() if ln.startswith("ONNX Runtime nodes not matched")]
    assert not any("fused" in ln or "conv" in ln for ln in lost), lost    # (Reorder nodes may stay)
