"""Developer tools around the compiler: benchmarks (bench, gemm_bench, ...), conformance and
golden-source checks, GPU lease scripts, robustness runs (sanitize, stress) and the fitting of
runtime/aotc_math.h's polynomials. The model zoo they use is in models/."""
