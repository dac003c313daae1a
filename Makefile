# aotc developer entry points. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
JOBS   ?= 2

.PHONY: bench-bf16 llm-bench llm-bench-1b llm-memory dims-bench all venv demo test opencl-deps zoo-full conformance golden golden-update bench support-matrix clean fuzz sanitize hf-bert stress sass-deps

all: test

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test]'
	touch $@

venv: $(VENV)/.installed

# Build the sample model, compile it for the C target, run it, print parity with ONNX Runtime.
demo: venv
	@mkdir -p build/demo
	$(BIN)/python -m models.build mlp -o build/demo/mlp.onnx
	$(BIN)/aotc compile build/demo/mlp.onnx --target c -o build/demo/out --shape x=1x64
	$(BIN)/python -c "import numpy as np; np.save('build/demo/x.npy', np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32))"
	$(BIN)/aotc run build/demo/out --input x=build/demo/x.npy --output-dir build/demo/outputs
	$(BIN)/aotc check build/demo/mlp.onnx --target c --shape x=1x64

test: venv
	$(BIN)/python -m pytest -q -n $(JOBS) --durations=30 tests

# OpenCL on the CPU (PoCL) for the opencl target and its tests (Debian/Ubuntu, as root).
opencl-deps:
	@if [ -e /usr/include/CL/cl.h ] && ls /etc/OpenCL/vendors/*.icd >/dev/null 2>&1; then \
		echo "OpenCL headers and an ICD are installed"; \
	else \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pocl-opencl-icd ocl-icd-opencl-dev; \
	fi

# Full-size zoo models (ResNet-50, BERT-base, GPT-2 small, ...) through `aotc check` on native at 1 and 2
# threads and on opencl; writes docs/ZOO.md.
zoo-full: venv
	$(BIN)/python -m models.check_zoo --size full --targets native:1,native:2,opencl --report docs/ZOO.md

# Every ONNX backend node test case compiled and run by aotc (about 3 minutes on 2 cores); writes docs/CONFORMANCE.md.
conformance: venv
	$(BIN)/python -m tools.conformance --report docs/CONFORMANCE.md

# Hashes of the sources aotc generates for the small zoo models and every ONNX node test case on
# the targets and variants tools/golden.py lists, against tools/golden_sources.json (about 3
# minutes on 2 cores): a change meant to keep the generated code keeps every hash; golden-update
# records the new ones.
golden: venv
	$(BIN)/python -m tools.golden --check tools/golden_sources.json

golden-update: venv
	$(BIN)/python -m tools.golden --write tools/golden_sources.json

# aotc vs ONNX Runtime and OpenVINO at 1 and 2 threads, medians and ratios; updates the table in
# docs/PERFORMANCE.md (about 35 minutes; BENCH_FLAGS=--baseline-checkout DIR adds a column for another
# checkout's artifact).
BENCH_FLAGS ?=
bench: venv
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python -m tools.bench --size full --threads 1,2 --runs 30 --rounds 10 --openvino $(BENCH_FLAGS) --report docs/PERFORMANCE.md

# Run-time dimensions: one ranged artifact against builds fixed to a size (tools/dims_bench.py),
# its table in docs/PERFORMANCE.md. (Runs of 0.1-1 ms: 300 of each in 30 rounds; at 40 in 8, one
# model's ratio moved between 1.08 and 1.27 from one run of the bench to the next.)
# the target option bf16 (float32 GEMMs on AMX tiles) on ResNet-50 and BERT against aotc float32,
# ONNX Runtime and OpenVINO in float32 and bfloat16, at 1 and 2 threads; its table in
# docs/PERFORMANCE.md (about 10 minutes; needs a CPU with AMX)
bench-bf16: venv
	$(BIN)/python -m pip install -q -e '.[test,bench]'
	$(BIN)/python -m tools.bf16_bench --threads 1,2 --report docs/PERFORMANCE.md

# decoding speed of a 125M LLaMA-style decoder (fp32, int4, the static-cache and Hugging Face
# forms) against ONNX Runtime and its genai generator; updates the "Language models" table in
# docs/PERFORMANCE.md
llm-bench: venv
	$(BIN)/python -m tools.llm_bench --threads 1,2 --report docs/PERFORMANCE.md

# the same for int4 weights of a 1B-parameter decoder (hidden 2048, 20 layers: issue 29's int4 step);
# its own table in docs/PERFORMANCE.md
llm-bench-1b: venv
	$(BIN)/python -m tools.llm_bench --model 1b --precision int4 --threads 1,2 --report docs/PERFORMANCE.md

# compile and run memory of a 1B-parameter float32 decoder (4 GB of weights; about 12 GB of disk
# while it runs): aotc's compile, the C example, aotc's Python runtime and ONNX Runtime, each in
# its own process; updates its table in docs/PERFORMANCE.md
llm-memory: venv
	$(BIN)/python -m tools.llm_memory --config 1b --report docs/PERFORMANCE.md

dims-bench: venv
	$(BIN)/python -m tools.dims_bench --threads 1,2 --runs 300 --rounds 30 --report docs/PERFORMANCE.md

# Regenerates docs/ONNX_SUPPORT.md from the op registry.
support-matrix: venv
	$(BIN)/python -m aotc.support > docs/ONNX_SUPPORT.md

clean:
	rm -rf build .pytest_cache

# Robustness (docs/ROBUSTNESS.md) ------------------------------------------------------------
FUZZ_SECONDS ?= 300

# Coverage-guided fuzzing (atheris, installed here if missing; else the seeded random mutator)
# of the loader and the compile path, seeded with the zoo and ONNX node cases, for FUZZ_SECONDS.
# Findings (model + traceback) go to build/fuzz/findings/<time>/; the target fails if there are any.
fuzz: venv
	$(BIN)/python -m pip install -q atheris || echo "atheris did not install: using the seeded random mutator"
	@run=build/fuzz/findings/$$(date +%Y%m%d-%H%M%S); \
	$(BIN)/python -m tests.fuzz_onnx --seconds $(FUZZ_SECONDS) --findings $$run || true; \
	if ls $$run/*.onnx >/dev/null 2>&1; then echo "fuzz: findings in $$run (replay: python -m tests.fuzz_onnx --replay FILE)"; exit 1; \
	else echo "fuzz: no findings in $(FUZZ_SECONDS)s"; fi

# Every small zoo model built with ASan+UBSan and under valgrind memcheck, outputs compared
# with ONNX Runtime (about 90 s).
sanitize: venv
	$(BIN)/python -m tools.sanitize

# Thread-safety stress: every small zoo model, one artifact driven at once by 8 threads calling
# <name>_run (a workspace each) and 4 instances (a 2-thread pool each, created and destroyed
# twice), 3000 calls per build, each result vs ONNX Runtime and bit for bit vs the same call made
# alone; built with ThreadSanitizer (2000 calls; zero reports) and at -O3 (6-9 min).
stress: venv
	$(BIN)/python -m tools.stress --calls 3000 --tsan-calls 2000

# Hugging Face BertModel(BertConfig()) exported by torch.onnx dynamo at opset 18, seq 128,
# compiled and checked against ONNX Runtime (about 30 s).
hf-bert: venv
	$(BIN)/python -m models.hf_bert --size base --check

# cuobjdump and nvdisasm (PyPI's nvidia-cuda-cuobjdump, -nvdisasm) into the venv, for `python -m tools.sass_stats`: what
# the cuda target's kernels compile to (registers, spills, FFMA / HMMA / LDS / SHFL counts)
# where the CUDA toolkit has nvcc but no cuobjdump and there is no GPU.
sass-deps: venv
	$(BIN)/python -m pip install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
