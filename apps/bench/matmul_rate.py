"""The matrix-product rate the C++ benchmarks measure (bench_util / job_matmul_gflops), for the
PyTorch reference scripts beside them: median of three 2048x2048 torch.mm into `c`, in the dtype
of the matrices given (fp32, or bf16 for bf16 runs)."""
import statistics
import time

import torch


def matmul_gflops(a, b, c):
    """Square matrices of any size (2048 on CPUs; a GPU run passes larger ones, timed with syncs)."""
    n = a.shape[0]
    cuda = a.is_cuda
    t = []
    for _ in range(3):
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        if cuda:
            torch.cuda.synchronize()
        t.append(time.perf_counter() - t0)
    return 2 * n**3 / statistics.median(t) / 1e9
