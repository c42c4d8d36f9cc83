#!/usr/bin/env python3
"""bench/zeropp/report.py: the table of bench/zeropp/run.sh from its run directories.

Per variant: the median over rounds of its step time (ms: the median of rank 0's step_time_ms over the
measured steps), the median (min, max) over rounds of its ratio to the baseline's step time in the same
round, rank 0's bytes sent per step (comm_bytes_sent) and, when metrics.jsonl has them, its inter-node bytes
sent and received per step, and the bytes through the inter-node link per step (tc's counters of both
nodes' tbf over the whole run, divided by its steps). A variant that failed in a round is left out of that
round and said so.
Usage: report.py RESULTS_DIR ROUNDS WARMUP STEPS NAME... (the first NAME is the baseline)
"""
import json
import os
import re
import statistics
import sys


def measured(path, warmup):
    """Rank 0's metrics records after the warm-up steps, or None when the run left none."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    records = [r for r in records if r.get("step", 0) > warmup]
    return records or None


def link_bytes(results, rnd, name):
    """Bytes both nodes' tbf sent during the run, or None without tc's counters."""
    total = 0
    for node in (0, 1):
        path = os.path.join(results, f"round{rnd}", f"{name}.qdisc{node}.txt")
        if not os.path.exists(path):
            return None
        with open(path) as f:
            match = re.search(r"qdisc tbf .*\n\s*Sent (\d+) bytes", f.read())
        if not match:
            return None
        total += int(match.group(1))
    return total


def median_of(records, key):
    values = [r[key] for r in records if key in r]
    return statistics.median(values) if values else None


def mb(value):
    return "-" if value is None else f"{value / 1e6:.2f}"


def main():
    results, rounds, warmup, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    names = sys.argv[5:]
    step_ms = {n: {} for n in names}
    columns = {n: {"sent": [], "inter_sent": [], "inter_received": [], "link": []} for n in names}
    for rnd in range(1, rounds + 1):
        for name in names:
            records = measured(os.path.join(results, f"round{rnd}", name, "metrics.jsonl"), warmup)
            if records is None:
                continue
            step_ms[name][rnd] = statistics.median(r["step_time_ms"] for r in records)
            for column, key in (("sent", "comm_bytes_sent"), ("inter_sent", "comm_inter_node_bytes_sent"),
                                ("inter_received", "comm_inter_node_bytes_received")):
                value = median_of(records, key)
                if value is not None:
                    columns[name][column].append(value)
            link = link_bytes(results, rnd, name)
            if link is not None:
                columns[name]["link"].append(link / steps)
    base = names[0]
    print(f"| variant | step ms (median) | vs {base} (median of per-round ratios) | sent MB/step (rank 0) | "
          "inter-node sent / received MB/step (rank 0) | link MB/step (both directions, tc) |")
    print("|---|---|---|---|---|---|")
    for name in names:
        done = sorted(step_ms[name])
        if not done:
            print(f"| {name} | failed in every round | | | | |")
            continue
        ratios = [step_ms[name][r] / step_ms[base][r] for r in done if r in step_ms[base]]
        ratio = (f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})"
                 if ratios else "-")
        if len(done) < rounds:
            ratio += f"; {rounds - len(done)} of {rounds} rounds failed"
        med = lambda column: statistics.median(columns[name][column]) if columns[name][column] else None  # noqa: E731
        inter = "-" if med("inter_sent") is None else f"{mb(med('inter_sent'))} / {mb(med('inter_received'))}"
        print(f"| {name} | {statistics.median(step_ms[name].values()):.1f} | {ratio} | {mb(med('sent'))} | "
              f"{inter} | {mb(med('link'))} |")


if __name__ == "__main__":
    main()
