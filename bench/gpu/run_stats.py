#!/usr/bin/env python3
"""bench/gpu/run_stats.py: the speed, memory and loss of one zhost run, from its run folder.

From RUN_DIR/metrics.jsonl, over the steps after --warmup: the median tokens/s, TFLOP/s and MFU (zhost's
own fields, MFU against the run's run.peak_tflops); over every step: the largest cuda_peak_mb (the CUDA
caching allocator's peak, CUDA jobs only) and the first and last losses. From RUN_DIR/model_states.json:
rank 0's model-state bytes as measured and as ZeRO's formula gives them (stage, Ψ, N), and their ratio.
Prints one JSON object, then a line starting with "figure:" for scripts/gpu-check's table. With
--expect-decrease the figure is the losses and the exit code 1 unless the last loss is below the first
(the run trains); with --memory the figure is the memory alone.
Standard library only. Usage: run_stats.py RUN_DIR [--warmup N] [--expect-decrease | --memory]
"""
import argparse
import json
import os
import statistics
import sys


def size(mib):
    return f"{mib / 1024:.2f} GiB" if mib >= 1024 else f"{mib:.1f} MiB"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run")
    p.add_argument("--warmup", type=int, default=5, help="steps left out of the medians")
    p.add_argument("--expect-decrease", action="store_true", help="fail unless the last loss is below the first")
    p.add_argument("--memory", action="store_true", help="a figure of the memory alone")
    args = p.parse_args()

    path = os.path.join(args.run, "metrics.jsonl")
    if not os.path.exists(path):
        print(f"figure: {path} does not exist")
        return 2
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    measured = [r for r in records if r.get("step", 0) > args.warmup] or records
    if not measured:
        print(f"figure: {path} holds no step")
        return 2

    def median(key):
        values = [r[key] for r in measured if isinstance(r.get(key), (int, float))]
        return statistics.median(values) if values else None

    stats = {"steps": len(records), "measured_steps": len(measured), "tokens_per_s": median("tokens_per_s"),
             "tflops": median("tflops"), "mfu": median("mfu"), "step_time_ms": median("step_time_ms")}
    losses = [r.get("loss") for r in records]
    stats["first_loss"], stats["last_loss"] = losses[0], losses[-1]
    peaks = [r["cuda_peak_mb"] for r in records if isinstance(r.get("cuda_peak_mb"), (int, float))]
    stats["cuda_peak_mb"] = max(peaks) if peaks else None
    states_path = os.path.join(args.run, "model_states.json")
    if os.path.exists(states_path):
        with open(states_path) as f:
            states = json.load(f)
        stats["states"] = {"stage": states.get("stage"), "world_size": states.get("world_size"),
                           "num_params": states.get("num_params"), "formula_text": states.get("formula_text"),
                           "measured_bytes": states["measured"]["total"], "formula_bytes": states["formula"]["total"],
                           "ratio": states.get("ratio")}
    print(json.dumps(stats))

    if args.expect_decrease:
        first, last = stats["first_loss"], stats["last_loss"]
        decreased = isinstance(first, float) and isinstance(last, float) and last < first
        print(f"figure: loss {first:.4g} -> {last:.4g} in {len(records)} steps" if decreased
              else f"figure: loss {first} -> {last}: no decrease")
        return 0 if decreased else 1
    parts = []
    if stats["tokens_per_s"] is not None and not args.memory:
        parts.append(f"{stats['tokens_per_s']:.0f} tok/s")
    if stats["mfu"] is not None and not args.memory:
        parts.append(f"MFU {100 * stats['mfu']:.1f}%")
    if stats["cuda_peak_mb"] is not None:
        parts.append(f"peak {size(stats['cuda_peak_mb'])}")
    if "states" in stats:
        s = stats["states"]
        parts.append(f"states {size(s['measured_bytes'] / 2**20)} = {s['ratio']:.2f}x formula {s['formula_text']}"
                     f" (N={s['world_size']})")
    print("figure: " + ", ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
