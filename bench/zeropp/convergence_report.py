#!/usr/bin/env python3
"""bench/zeropp/convergence_report.py: the table and plot of bench/zeropp/convergence.sh.

Per model and type: each variant's final loss (mean over the last 20 steps, and the last step's) and its
relative difference to plain stage 3's; a run that did not finish shows as "failed". The loss curves go to
RESULTS_DIR/convergence.png (one panel per model and type).
Usage: convergence_report.py RESULTS_DIR "MODELS" "TYPES" "VARIANTS"
"""
import json
import os
import sys


def losses(results, name):
    path = os.path.join(results, "runs", name, "metrics.jsonl")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r["step"], r["loss"]) for r in records if "loss" in r and "step" in r] or None


def main():
    results, models, types, variants = sys.argv[1], sys.argv[2].split(), sys.argv[3].split(), sys.argv[4].split()
    curves = {}
    print("| model | type | variant | final loss (last 20 steps) | vs plain | last step | vs plain |")
    print("|---|---|---|---|---|---|---|")
    for model in models:
        for dtype in types:
            base = None
            for variant in variants:
                run = losses(results, f"{model}-{dtype}-{variant}")
                curves[(model, dtype, variant)] = run
                if not run:
                    print(f"| {model} | {dtype} | {variant} | failed | | | |")
                    continue
                tail = [loss for _, loss in run[-20:]]
                mean, last = sum(tail) / len(tail), run[-1][1]
                if variant == "plain":
                    base = (mean, last)
                rel = (lambda a, b: f"{(a - b) / b:+.2%}") if base else (lambda a, b: "")
                print(f"| {model} | {dtype} | {variant} | {mean:.4f} | {rel(mean, base[0]) if base else ''} "
                      f"| {last:.4f} | {rel(last, base[1]) if base else ''} |")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, axes = plt.subplots(len(models), len(types), figsize=(5 * len(types), 3.5 * len(models)), squeeze=False)
    for i, model in enumerate(models):
        for j, dtype in enumerate(types):
            ax = axes[i][j]
            for variant in variants:
                run = curves.get((model, dtype, variant))
                if run:
                    ax.plot([s for s, _ in run], [loss for _, loss in run], label=variant, linewidth=1)
            ax.set_title(f"{model}, {dtype}")
            ax.set_xlabel("step")
            ax.set_ylabel("loss")
            ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(results, "convergence.png"), dpi=80)


if __name__ == "__main__":
    main()
