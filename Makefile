# aotc developer entry points. Everything runs inside .venv, created on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
JOBS   ?= 2

.PHONY: all venv demo test opencl-deps zoo-full conformance bench support-matrix clean

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
	$(BIN)/python -m pytest -q -n $(JOBS) tests

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
	$(BIN)/python -m models.conformance --report docs/CONFORMANCE.md

# aotc vs ONNX Runtime, medians and ratios; updates the table in docs/PERFORMANCE.md.
bench: venv
	$(BIN)/python -m models.bench --size full --models resnet50,mobilenetv2,yolo,bert,gpt2,vit --runs 15 --report docs/PERFORMANCE.md

# Regenerates docs/ONNX_SUPPORT.md from the op registry.
support-matrix: venv
	$(BIN)/python -m aotc.support > docs/ONNX_SUPPORT.md

clean:
	rm -rf build .pytest_cache
