#!/usr/bin/env python3
"""bench/zero_stages/report.py: the table of bench/zero_stages/run.sh from its run directories.

Per stage: median over rounds of the step time (ms: the global batch over the measured window's samples/s),
its ratio to stage 0's step time in the same round (median over rounds), the phase breakdown (forward,
backward, reduction, step ms per step, from wall_clock_breakdown) and the bytes each rank sent per step.
Usage: report.py RESULTS_DIR ROUNDS GLOBAL_BATCH
"""
import json
import os
import statistics
import sys


def measured_record(path, batch):
    """The measured steps' averages: every record after the first (warm-up) covers WARMUP steps."""
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()][1:]
    mean = {key: statistics.mean(r[key] for r in records)
            for key in ("forward_ms", "backward_ms", "reduction_ms", "step_ms", "comm_bytes_sent")}
    mean["step_time_ms"] = statistics.mean(1000.0 * batch / r["samples_per_s"] for r in records)
    return mean


def main():
    results, rounds, batch = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    per_stage = {s: [] for s in (0, 1, 2)}
    for r in range(1, rounds + 1):
        for s in per_stage:
            run = os.path.join(results, f"round{r}", f"stage{s}")
            record = measured_record(os.path.join(run, "metrics.jsonl"), batch)
            with open(os.path.join(run, "model_states.json")) as f:
                states = json.load(f)
            record["model_states_mb"] = states["measured"]["total"] / 1e6
            per_stage[s].append(record)
    print("| stage | step ms (median) | vs stage 0 (median of per-round ratios) | fwd ms | bwd ms | reduce ms | "
          "step-phase ms | sent MB/step/rank | model states MB/rank |")
    print("|---|---|---|---|---|---|---|---|---|")
    step_ms = {s: [rec["step_time_ms"] for rec in recs] for s, recs in per_stage.items()}
    for s, recs in per_stage.items():
        ratios = [step_ms[s][i] / step_ms[0][i] for i in range(rounds)]
        med = lambda key: statistics.median(rec[key] for rec in recs)  # noqa: E731
        print(f"| {s} | {statistics.median(step_ms[s]):.1f} | {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f}) | {med('forward_ms'):.1f} | {med('backward_ms'):.1f} | "
              f"{med('reduction_ms'):.1f} | {med('step_ms'):.1f} | {med('comm_bytes_sent') / 1e6:.2f} | "
              f"{med('model_states_mb'):.2f} |")


if __name__ == "__main__":
    main()
