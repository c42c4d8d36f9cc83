#!/usr/bin/env python3
"""bench/vs_pytorch/report.py: the tables of RESULTS.md from a run.sh results folder.

Per configuration (size x ranks) and round: PyTorch's tokens/s from the median of its measured step
times; zhost's from the median of the per-step tokens_per_s in metrics.jsonl after the warm-up (every
step is a record: steps_per_print = 1). Ratios are taken within a round, then the median over rounds is
printed with the range. MFU = model FLOP/s (zhost's flops_per_token x tokens/s) / the machine's sgemm
GFLOP/s with all CPUs, measured in the same run.

Usage: report.py RESULTS_DIR WARMUP
"""
import json
import os
import statistics
import sys

results, warmup = sys.argv[1], int(sys.argv[2])
sgemm = json.load(open(os.path.join(results, "sgemm.json")))
stages = ["0", "2", "3"]


def zhost_side(folder, stage):
    path = os.path.join(folder, f"stage{stage}", "metrics.jsonl")
    records = [json.loads(line) for line in open(path)]
    measured = [r for r in records if r["step"] > warmup]
    tokens = statistics.median(r["tokens_per_s"] for r in measured)
    flops_per_token = statistics.median(r["tflops"] * 1e12 / r["tokens_per_s"] for r in measured)
    return tokens, flops_per_token


def pytorch_side(folder):
    data = json.load(open(os.path.join(folder, "pytorch.json")))
    return data["tokens_per_step"] / statistics.median(data["step_ms"]) * 1000.0, data["params"]


def spread(values):
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


print(f"sgemm 1024^3: {sgemm['sgemm_gflops_1thread']:.1f} GFLOP/s on 1 thread, "
      f"{sgemm['sgemm_gflops_all']:.1f} GFLOP/s on {sgemm['threads']} threads\n")
print("| config | params | PyTorch tok/s | stage 0 tok/s | stage 2 tok/s | stage 3 tok/s | stage 0 / PyTorch "
      "| stage 2 / stage 0 | stage 3 / stage 0 | MFU PyTorch | MFU stage 0 | MFU stage 3 | load |")
print("|" + "---|" * 13)
for config in sorted(os.listdir(results)):
    folder = os.path.join(results, config)
    if not os.path.isdir(folder):
        continue
    rounds = sorted(d for d in os.listdir(folder) if d.startswith("round"))
    py, z, ratio0, ratio2, ratio3, loads, flops = [], {s: [] for s in stages}, [], [], [], [], []
    params = 0
    for name in rounds:
        round_dir = os.path.join(folder, name)
        py_tokens, params = pytorch_side(round_dir)
        py.append(py_tokens)
        for stage in stages:
            tokens, per_token = zhost_side(round_dir, stage)
            z[stage].append(tokens)
            flops.append(per_token)
        ratio0.append(z["0"][-1] / py_tokens)
        ratio2.append(z["2"][-1] / z["0"][-1])
        ratio3.append(z["3"][-1] / z["0"][-1])
        loads.append(float(open(os.path.join(round_dir, "load")).read()))
    per_token = statistics.median(flops)
    peak = sgemm["sgemm_gflops_all"] * 1e9

    def mfu(tokens):
        return f"{100 * statistics.median(tokens) * per_token / peak:.0f}%"

    print(f"| {config} | {params / 1e6:.1f}M | {statistics.median(py):.0f} | {statistics.median(z['0']):.0f} | "
          f"{statistics.median(z['2']):.0f} | {statistics.median(z['3']):.0f} | {spread(ratio0)} | {spread(ratio2)} | "
          f"{spread(ratio3)} | {mfu(py)} | {mfu(z['0'])} | {mfu(z['3'])} | {min(loads):.1f}-{max(loads):.1f} |")
print(f"\nratios: median over {len(rounds)} rounds (range); tok/s: median over rounds of each side's median step.")
