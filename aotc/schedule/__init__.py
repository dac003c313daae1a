"""Schedules: how each kernel runs on a kind of machine (cpu.py for CPU targets). Ops say what
to compute (kernel IR with loop roles and typed GEMMs); a schedule, driven by the target
description, says how: parallel / vectorized / unrolled / GPU-bound loops, GEMM tiles,
weight layouts, threads, accumulation precision."""
