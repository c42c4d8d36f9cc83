#!/usr/bin/env python3
"""bench/zero_stage3/report.py: the tables of bench/zero_stage3/run.sh from its run directories.

prefetch: per rank count and stage3_prefetch_bucket_size, the median over rounds (and min-max) of the
  wait for parameter all-gathers per step ("stage3/gather_wait_ms"), of the step time (forward + backward
  + reduction + step phase, ms per step, from wall_clock_breakdown) and of its ratio to prefetch off's in
  the same round, plus the wall-clock step time (global batch / samples per s) and rank 0's gather window.
memory: per rank count, rank 0's peak RSS and model-state bytes (model_states.json: the partition's
  tensors, and for stage 3 the peak of gathered parameters apart) for stage 0 and stage 3, and 3 / 0.
traffic: bytes rank 0 sent in the last step against 3cΨ(N-1)/N (c = 4 bytes, fp32).
agreement: per rank count, stage 0's step time and stage 3's with experimental.stage3_rank_agreement =
  each_collective and each_micro_batch, stage 3 / stage 0 in the same round, and the host's time blocked on
  rank agreement per step ("stage3/rank_agreement_ms").
Parts whose run directories are missing are left out; a missing or failed run shows as "failed".
Usage: report.py RESULTS_DIR ROUNDS MICRO
"""
import json
import os
import statistics
import sys


def load(run):
    """(metrics records, model_states.json) of a run directory, or None when the run did not finish."""
    metrics, states = os.path.join(run, "metrics.jsonl"), os.path.join(run, "model_states.json")
    if not (os.path.exists(metrics) and os.path.exists(states)):
        return None
    with open(metrics) as f:
        records = [json.loads(line) for line in f if line.strip()]
    with open(states) as f:
        model_states = json.load(f)
    return (records, model_states) if records else None


def spread(values, fmt="{:.1f}"):
    """'median (min-max)' of a list."""
    return (fmt + " (" + fmt + "-" + fmt + ")").format(statistics.median(values), min(values), max(values))


def prefetch_table(results, rounds, micro):
    base = os.path.join(results, "prefetch")
    if not os.path.isdir(base):
        return
    names = sorted({n for r in os.listdir(base) for n in os.listdir(os.path.join(base, r))
                    if os.path.isdir(os.path.join(base, r, n))})
    keys = sorted({(int(n.split("-")[0][1:]), int(n.split("-")[1][1:])) for n in names})
    print("## Prefetch (stage3_max_reuse_distance = 0)\n")
    print("| ranks | prefetch bucket (elements) | gather wait ms/step | fwd ms | bwd ms | step time ms (fwd+bwd+reduce+step) "
          "| vs prefetch 0, same round | wall step ms | gather window MB |")
    print("|---|---|---|---|---|---|---|---|---|")
    for ranks, prefetch in keys:
        per_round, off_per_round = {}, {}
        for r in range(1, rounds + 1):
            for p, target in ((prefetch, per_round), (0, off_per_round)):
                run = load(os.path.join(base, f"round{r}", f"n{ranks}-p{p}"))
                if run is None:
                    continue
                records, states = run
                measured = records[1:] or records  # the first record covers the warm-up
                mean = lambda key: statistics.mean(rec.get(key, 0.0) for rec in measured)  # noqa: E731
                target[r] = {
                    "wait": mean("stage3/gather_wait_ms"), "fwd": mean("forward_ms"), "bwd": mean("backward_ms"),
                    "step": mean("forward_ms") + mean("backward_ms") + mean("reduction_ms") + mean("step_ms"),
                    "wall": statistics.mean(1000.0 * micro * ranks / rec["samples_per_s"] for rec in measured),
                    "window": states.get("gather_window", 0.0) / 1e6,
                }
        if not per_round:
            print(f"| {ranks} | {prefetch} | failed | | | | | | |")
            continue
        col = lambda key: [v[key] for v in per_round.values()]  # noqa: E731
        paired = [per_round[r]["step"] / off_per_round[r]["step"] for r in per_round if r in off_per_round]
        ratio = spread(paired, "{:.3f}") if paired else "-"
        print(f"| {ranks} | {prefetch} | {spread(col('wait'))} | {statistics.median(col('fwd')):.1f} | "
              f"{statistics.median(col('bwd')):.1f} | {spread(col('step'))} | {ratio} | "
              f"{statistics.median(col('wall')):.1f} | {statistics.median(col('window')):.2f} |")
    print(f"\n(median over rounds, min-max in brackets; {rounds} round(s) asked, "
          "a setting's count is lower where runs failed)\n")


def memory_table(results):
    base = os.path.join(results, "memory")
    if not os.path.isdir(base):
        return
    print("## Memory (rank 0)\n")
    print("| ranks | stage | Ψ | peak RSS MB | model states MB (measured) | formula MB | gathered params peak MB "
          "| states + gathered MB | peak RSS 3/0 | states + gathered 3/0 |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for ranks in (1, 2, 4):
        rows = {}
        for stage in (0, 3):
            run = load(os.path.join(base, f"n{ranks}-stage{stage}"))
            if run is None:
                print(f"| {ranks} | {stage} | failed | | | | | | | |")
                continue
            records, states = run
            peak = max(rec["peak_rss_mb"] for rec in records)
            window = states.get("gather_window", 0.0) / 1e6
            total = states["measured"]["total"] / 1e6
            rows[stage] = (peak, total + window)
            if stage == 3 and 0 in rows:
                ratios = f"{peak / rows[0][0]:.3f} | {(total + window) / rows[0][1]:.3f}"
            else:
                ratios = " | "
            print(f"| {ranks} | {stage} | {states['num_params'] / 1e6:.2f} M | {peak:.0f} | {total:.1f} | "
                  f"{states['formula']['total'] / 1e6:.1f} ({states['formula_text']}) | {window:.1f} | "
                  f"{total + window:.1f} | {ratios} |")
    print()


def traffic_table(results):
    base = os.path.join(results, "traffic")
    if not os.path.isdir(base):
        return
    print("## Traffic (stage 3, reuse distance 0, persistence threshold 0; rank 0, last step)\n")
    print("| ranks | Ψ | sent bytes/step | 3cΨ(N-1)/N | measured / formula |")
    print("|---|---|---|---|---|")
    for ranks in (2, 4):
        run = load(os.path.join(base, f"n{ranks}"))
        if run is None:
            print(f"| {ranks} | failed | | | |")
            continue
        records, states = run
        psi, n = states["num_params"], states["world_size"]
        formula = 3 * 4 * psi * (n - 1) / n
        sent = records[-1]["comm_bytes_sent"]
        print(f"| {n} | {psi} | {sent} | {formula:.0f} | {sent / formula:.4f} |")
    print()


def step_times(run):
    """(step ms = fwd + bwd + reduction + step phase, agreement ms) per step, over the measured records."""
    records = run[0][1:] or run[0]  # the first record covers the warm-up
    mean = lambda key: statistics.mean(rec.get(key, 0.0) for rec in records)  # noqa: E731
    return (mean("forward_ms") + mean("backward_ms") + mean("reduction_ms") + mean("step_ms"),
            mean("stage3/rank_agreement_ms"))


def agreement_table(results, rounds):
    base = os.path.join(results, "agreement")
    if not os.path.isdir(base):
        return
    ranks_list = sorted({int(n.split("-")[0][1:]) for r in os.listdir(base) for n in os.listdir(os.path.join(base, r))})
    print("## Rank agreement (stage 3 vs stage 0)\n")
    print("| ranks | setting | step time ms | vs stage 0, same round | blocked on agreement ms/step |")
    print("|---|---|---|---|---|")
    for ranks in ranks_list:
        for setting in ("stage0", "each_collective", "each_micro_batch"):
            steps, ratios, blocked = [], [], []
            for r in range(1, rounds + 1):
                run = load(os.path.join(base, f"round{r}", f"n{ranks}-{setting}"))
                base_run = load(os.path.join(base, f"round{r}", f"n{ranks}-stage0"))
                if run is None:
                    continue
                step, agree = step_times(run)
                steps.append(step)
                blocked.append(agree)
                if base_run is not None:
                    ratios.append(step / step_times(base_run)[0])
            if not steps:
                print(f"| {ranks} | {setting} | failed | | |")
                continue
            print(f"| {ranks} | {setting} | {spread(steps)} | {spread(ratios, '{:.3f}') if ratios else '-'} | "
                  f"{spread(blocked, '{:.2f}')} |")
    print(f"\n(median over rounds, min-max in brackets; {rounds} round(s) asked)\n")


def main():
    results, rounds, micro = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    prefetch_table(results, rounds, micro)
    memory_table(results)
    traffic_table(results)
    agreement_table(results, rounds)


if __name__ == "__main__":
    main()
