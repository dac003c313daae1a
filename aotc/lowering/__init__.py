"""Lowering: fusion groups -> kernels in the kernel IR (what each computes: the ops' lower(), the
elementwise chains fused after them, GEMM epilogues), each bound to the graph values its
parameters stand for (KernelStep). Everything after it (schedule, memory plan, host program,
printers) works on these steps."""
