#!/usr/bin/env python3
"""bench/zeropp/seeds_report.py RESULTS SEEDS MODELS TYPES VARIANTS: the table of seeds.sh.

Per model, type and variant: each seed's final loss (mean of the last 20 steps) relative to plain stage 3 of the
same seed, the mean of those differences over the seeds, and the largest |difference| of one seed. Plain
stage 3's own spread over seeds is printed too (the final loss's standard deviation across seeds, relative to
its mean), for scale.
"""
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from convergence_report import losses  # noqa: E402


def final(results, name):
    run = losses(results, name)
    if not run:
        return None
    tail = [loss for _, loss in run[-20:]]
    return sum(tail) / len(tail)


def main():
    results, seeds, models, types, variants = (sys.argv[1], sys.argv[2].split(), sys.argv[3].split(),
                                               sys.argv[4].split(), sys.argv[5].split())
    print("| model | type | variant | per seed (" + ", ".join(seeds) + ") | mean | largest |")
    print("|---|---|---|---|---|---|")
    for model in models:
        for dtype in types:
            plain = {s: final(os.path.join(results, f"seed-{s}"), f"{model}-{dtype}-plain") for s in seeds}
            finished = [v for v in plain.values() if v]
            if len(finished) > 1:
                spread = statistics.stdev(finished) / statistics.mean(finished)
                print(f"| {model} | {dtype} | plain | " + ", ".join(f"{plain[s]:.4f}" if plain[s] else "failed"
                                                                   for s in seeds) +
                      f" | spread {spread:.2%} | |")
            for variant in variants:
                if variant == "plain":
                    continue
                diffs = []
                cells = []
                for s in seeds:
                    value = final(os.path.join(results, f"seed-{s}"), f"{model}-{dtype}-{variant}")
                    if value is None or not plain[s]:
                        cells.append("failed")
                        continue
                    diffs.append(value / plain[s] - 1)
                    cells.append(f"{diffs[-1]:+.2%}")
                mean = f"**{statistics.mean(diffs):+.2%}**" if diffs else ""
                largest = f"{max(abs(d) for d in diffs):.2%}" if diffs else ""
                print(f"| {model} | {dtype} | {variant} | {', '.join(cells)} | {mean} | {largest} |")


if __name__ == "__main__":
    main()
