"""The matrix-product rate the C++ benchmarks measure (bench_util / job_matmul_gflops), for the
PyTorch reference scripts beside them: median of three 2048x2048 torch.mm into `c`, in the dtype
of the matrices given (fp32, or bf16 for bf16 runs)."""
import statistics
import time

import torch


def matmul_gflops(a, b, c):
    t = []
    for _ in range(3):
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        t.append(time.perf_counter() - t0)
    return 2 * 2048**3 / statistics.median(t) / 1e9
