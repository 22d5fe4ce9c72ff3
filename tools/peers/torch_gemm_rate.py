#!/usr/bin/env python3
"""The f32 GEMM rate PyTorch reaches on this CPU with K threads: square
1024^3 and 2048^3 products and the char-6L fc1 linear layer (2048 x 384 ->
1536), best of 5 after 3 warm-ups. Read it beside the GEMM peak that
`meshtrain bench train` prints, to see how much of a training-step ratio is
the GEMM library.

  OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 python3 tools/peers/torch_gemm_rate.py --threads 1
"""
import argparse
import time

import torch


def rate(fn, flops):
    for _ in range(3):
        fn()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return flops / best / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    if a.threads < 1:
        ap.error("--threads must be >= 1")
    torch.set_num_threads(a.threads)
    for n in (1024, 2048):
        x, y = torch.randn(n, n), torch.randn(n, n)
        print(f"matmul {n}^3: {rate(lambda: x @ y, 2 * n ** 3):.1f} GFLOP/s")
    inp, w = torch.randn(2048, 384), torch.randn(1536, 384)
    r = rate(lambda: torch.nn.functional.linear(inp, w), 2 * 2048 * 1536 * 384)
    print(f"linear 2048x384 -> 1536: {r:.1f} GFLOP/s")
    print(f"PyTorch {torch.__version__}, {a.threads} thread(s), BLAS: "
          f"{'MKL' if torch.backends.mkl.is_available() else 'other'}")


if __name__ == "__main__":
    main()
