#!/usr/bin/env python3
"""bench/vs_pytorch/sgemm.py: this machine's fp32 matrix-product rate through LibTorch's BLAS, the
denominator of MFU. Prints JSON: GFLOP/s of a 1024^3 sgemm with 1 thread and with --threads threads."""
import argparse
import json
import time

import torch


def rate(threads, n=1024, repeats=20):
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(3):
        a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * n ** 3 / best / 1e9


parser = argparse.ArgumentParser()
parser.add_argument("--threads", type=int, required=True)
args = parser.parse_args()
print(json.dumps({"sgemm_gflops_1thread": rate(1), "sgemm_gflops_all": rate(args.threads), "threads": args.threads}))
