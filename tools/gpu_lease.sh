#!/bin/bash
# One GPU lease's measurements for docs/GPU.md, in priority order, so that a lease cut short
# still returns the most important tables:
#   1. a smoke run (one small model end to end: a broken setup stops here in seconds);
#   2. every table's artifacts built at once (`gpu_check ... --phase build`, in parallel: the
#      machine's cores are idle while the GPU times), and beside the builds (the GPU idles then)
#      the tests that run the cuda target on its CPU emulation, run on the GPU instead
#      (AOTC_TEST_ON_GPU=1: run-time Ifs and Loops, bounded outputs, bfloat16, random and
#      integer operators, which no zoo model has; run-time dimensions);
#   3. zoo parity at full size, 4. beside PyTorch at batch 1 and 32, 5. the schedule variants
#      at batch 1 (and TF32 at batch 32), 6. BERT's per-kernel profile, 7. the contrib-operator
#      models in .gpufiles/ when carried (ORT's optimizer's and onnxruntime-genai's, written here
#      by `python -m tools.contrib_files .gpufiles`), 8. the KV-cache decoders (`gpu_check
#      decode`: the builder's files in .gpufiles and Hugging Face exports made there, tokens
#      against ONNX Runtime's, prefill and step times), 9. one ranged BERT-base against fixed
#      builds (tools/dims_bench.py),
# each timed alone and written to OUTDIR as it finishes.
#
#   bash tools/gpu_lease.sh OUTDIR [STAGE...]
#
# STAGEs (default: all, in this order): zoo torch variants profile tests files decode dims. A
# lease too short for all names the ones it needs (`... OUT tests decode`); the smoke run
# always comes first, the builds of zoo / torch / variants / decode run together before any
# timing.
# On the lent machines python3 holds PyTorch, ONNX and ONNX Runtime but not cffi: put its
# wheels (cffi, pycparser; cp312 manylinux) in .whl/ and they are installed first.
set -u
OUT=${1:?usage: gpu_lease.sh OUTDIR [STAGE...]}
shift
STAGES=" ${*:-zoo torch variants profile tests files decode dims} "
want() { [[ $STAGES == *" $1 "* ]]; }
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site
fi
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}$PWD
log() { tee -a "$OUT/run.log"; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
    nvcc --version | tail -1
    gcc --version | head -1
    python3 -c "import sys, torch, onnx, onnxruntime, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'onnx', onnx.__version__, 'ort', onnxruntime.__version__, 'numpy', numpy.__version__)"
    ls /etc/OpenCL/vendors 2>&1
} 2>&1 | tee "$OUT/env.txt"

G="python3 -m tools.gpu_check"
W=build/gpu
TORCH_COMPILED=bert,gpt2,vit            # torch.compile is timed for the transformers (issue 6's target)
VARIANT_MODELS=resnet50,mobilenetv2,bert,gpt2,lstm

timeout -k 5 90 $G zoo --size small --models mlp,lenet5 --runs 5 --jobs 2 --workdir build/gpu-smoke 2>&1 | log
grep -q "| mlp | PASS" "$OUT/run.log" || { echo "smoke run failed: stopping" | log; exit 1; }

echo "== build $(date -u +%T)" | log
want zoo && timeout -k 5 240 $G zoo --phase build --jobs 5 --workdir $W >"$OUT/build.log" 2>&1 &
want torch && timeout -k 5 240 $G torch --phase build --jobs 5 --compile-models $TORCH_COMPILED --workdir $W >"$OUT/build_torch.log" 2>&1 &
if want variants; then
    timeout -k 5 240 $G variants --phase build --models $VARIANT_MODELS --jobs 5 --workdir $W >"$OUT/build_variants.log" 2>&1 &
    timeout -k 5 240 $G variants --phase build --models bert,resnet50 --batch 32 --variant tf32:numerics.tf32=true \
        --jobs 2 --workdir build/gpu32 >"$OUT/build_variants32.log" 2>&1 &
fi
want decode && timeout -k 5 240 $G decode --phase build --dir .gpufiles --jobs 5 --workdir build/gpu-decode >"$OUT/build_decode.log" 2>&1 &
# the tests that check the cuda target on its CPU emulation, on the GPU itself (AOTC_TEST_ON_GPU=1),
# beside the builds (which use the CPU cores while the GPU idles)
# (the tf32 check goes through the CLI, whose typer needs pydantic: carry its wheels too, or it fails
# on the import)
want tests && AOTC_TEST_ON_GPU=1 timeout -k 5 300 python3 -m pytest -q -n 6 -k cuda -p no:cacheprovider \
    tests/test_runtime_if.py tests/test_runtime_loop.py tests/test_bounded.py tests/test_bfloat16.py \
    tests/test_float16.py tests/test_random_ops.py tests/test_integer_gemm.py tests/test_narrow_types.py \
    tests/test_nan_semantics.py tests/test_attention.py tests/test_im2col_packing.py tests/test_gpu_schedule.py \
    tests/test_contrib_nbits.py tests/test_cuda_emulated.py tests/test_run_time_dims_gpu.py >"$OUT/gpu_tests.txt" 2>&1 &
wait
for f in build_torch build_variants build_variants32 build_decode; do
    [ -f "$OUT/$f.log" ] && { echo "== $f"; cat "$OUT/$f.log"; } >>"$OUT/build.log" && rm "$OUT/$f.log"
done
[ -f "$OUT/build.log" ] && grep -E "built|Error|error" "$OUT/build.log" | head -40 | log
want tests && { echo "== emulated-cuda tests on the GPU"; tail -n 15 "$OUT/gpu_tests.txt"; } | log

if want zoo; then
echo "== zoo $(date -u +%T)" | log
timeout -k 5 100 $G zoo --phase time --runs 30 --workdir $W --report "$OUT/zoo.md" 2>&1 | log
fi
if want torch; then
echo "== torch $(date -u +%T)" | log
timeout -k 5 200 $G torch --phase time --runs 30 --compile-models $TORCH_COMPILED --workdir $W --report "$OUT/torch.md" 2>&1 | log
fi
if want variants; then
echo "== variants $(date -u +%T)" | log
timeout -k 5 90 $G variants --phase time --models $VARIANT_MODELS --runs 36 --rounds 6 --workdir $W --report "$OUT/variants.md" 2>&1 | log
timeout -k 5 40 $G variants --phase time --models bert,resnet50 --batch 32 --variant tf32:numerics.tf32=true \
    --runs 12 --rounds 3 --workdir build/gpu32 --report "$OUT/variants32.md" 2>&1 | log
[ -f "$OUT/variants32.md" ] && { echo; cat "$OUT/variants32.md"; } >>"$OUT/variants.md" && rm "$OUT/variants32.md"
fi
if want profile; then
echo "== profile $(date -u +%T)" | log
timeout -k 5 60 python3 -m tools.profile bert --target cuda:sm_90 --threads 1 --runs 20 --top 20 --by-strategy \
    --workdir build/gpu-profile >"$OUT/profile_bert.txt" 2>&1
fi
# 7. the contrib-operator models (ORT's optimizer, onnxruntime-genai's builder: neither on the lent
#    machine), written beforehand by `python -m tools.contrib_files .gpufiles` and carried
if want files && [ -d .gpufiles ]; then
    echo "== files $(date -u +%T)" | log
    timeout -k 5 200 $G files --dir .gpufiles --jobs 8 --runs 30 --workdir build/gpu-files --report "$OUT/files.md" 2>&1 | log
fi
# 8. the KV-cache decoders: tokens against ONNX Runtime's, prefill and step times
if want decode; then
    echo "== decode $(date -u +%T)" | log
    timeout -k 5 200 $G decode --phase time --dir .gpufiles --rounds 3 --workdir build/gpu-decode --report "$OUT/decode.md" 2>&1 | log
fi
# 9. run-time dimensions: one BERT-base artifact over 1..128 positions against builds fixed to 64 and 128
if want dims; then
    echo "== dims $(date -u +%T)" | log
    timeout -k 5 240 python3 -m tools.dims_bench --target cuda:sm_90 --size full --models bert --threads 1 --runs 30 \
        --rounds 5 --report "$OUT/dims.md" 2>&1 | tail -n 12 | log
fi
echo "== done $(date -u +%T)" | log
