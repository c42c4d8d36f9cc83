#!/usr/bin/env python3
"""bench/gpu/matmul_peak.py: the device's dense bf16 matmul rate through torch, the denominator of MFU in
scripts/gpu-check (passed to zhost as run.peak_tflops, and used by pytorch_gpt.py).

Times --repeats products of two --size x --size bf16 matrices after a warm-up and prints JSON: the best
of --rounds rounds in TFLOP/s, the device's name. On a GPU 8192^3 products keep the tensor cores busy; the
dry run on a CPU uses a small size only to run the code.
Usage: matmul_peak.py [--device cuda|cpu] [--size N] [--repeats R] [--rounds K]
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--size", type=int, default=8192)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    n = args.size
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    out = torch.empty(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        torch.matmul(a, b, out=out)
    sync()
    best = float("inf")
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.repeats):
            torch.matmul(a, b, out=out)
        sync()
        best = min(best, (time.perf_counter() - start) / args.repeats)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    print(json.dumps({"bf16_tflops": 2 * n ** 3 / best / 1e12, "size": n, "device": name,
                      "torch": torch.__version__}))


if __name__ == "__main__":
    main()
