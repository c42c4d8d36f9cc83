#!/usr/bin/env python3
"""bench/gpu/compare_runs.py: how far apart two zhost runs ended, from their run folders.

Reads RUN_DIR/metrics.jsonl (the per-step losses) and RUN_DIR/weights.bin + weights.json (the final fp32
weights, written with run.save_final_weights = true) of runs A and B, and prints:
  - the losses: steps compared, max |A - B| and max |A - B| / |B| over the steps;
  - the weights: byte-identical or not; if not, the largest |A - B| of any element, the largest
    ||A - B|| / ||B|| of any tensor (the tensor named), and the largest max|A - B| / max|B| of any tensor.
The last line starts with "figure:" and sums the comparison up in one line (scripts/gpu-check's table).

Expectations (all given must hold, else exit code 1; exit code 2 when a run's files are missing or differ in
shape):
  --bitwise              weights.bin byte for byte and every loss equal
  --loss-rel X           max |A - B| / |B| of the losses <= X
  --weights-rel X        every tensor's ||A - B|| / ||B|| <= X (tests/training's weights_norm_mismatch)
  --weights-tol R:A      every element |A - B| <= R * max|B of its tensor| + A (tests/training's weights_mismatch)
  --losses-only          compare the losses alone (no weights were saved)

Standard library only: the GPU machine's python and this machine's both run it.
Usage: compare_runs.py RUN_A RUN_B [expectations]
"""
import argparse
import array
import json
import math
import os
import sys


class Unusable(Exception):
    """A run folder that cannot be compared: files missing, unreadable or of another shape."""


def read_losses(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        raise Unusable(f"{path} does not exist")
    losses = []
    with open(path) as f:
        for line in f:
            if line.strip():
                loss = json.loads(line).get("loss")
                losses.append(float("nan") if loss is None else float(loss))
    if not losses:
        raise Unusable(f"{path} holds no step")
    return losses


def read_weights(run):
    """{name: array('f')} in the order of weights.json, and the raw bytes of weights.bin."""
    index_path, data_path = os.path.join(run, "weights.json"), os.path.join(run, "weights.bin")
    for path in (index_path, data_path):
        if not os.path.exists(path):
            raise Unusable(f"{path} does not exist (run.save_final_weights = true?)")
    with open(index_path) as f:
        index = json.load(f)
    with open(data_path, "rb") as f:
        raw = f.read()
    values = array.array("f")
    values.frombytes(raw[: len(raw) // 4 * 4])
    if sys.byteorder != "little":
        values.byteswap()
    tensors = {}
    for entry in index:
        start, count = int(entry["offset"]), int(entry["numel"])
        if start + count > len(values):
            raise Unusable(f"{data_path} is shorter than {index_path} says")
        tensors[entry["name"]] = values[start:start + count]
    return tensors, raw


def compare_losses(a, b):
    if len(a) != len(b):
        raise Unusable(f"the runs have {len(a)} and {len(b)} steps")
    max_abs = max_rel = 0.0
    for x, y in zip(a, b):
        if math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return {"steps": len(a), "max_abs": math.inf, "max_rel": math.inf, "equal": False}
            continue
        diff = abs(x - y)
        max_abs = max(max_abs, diff)
        max_rel = max(max_rel, diff / abs(y) if y != 0 else (0.0 if diff == 0 else math.inf))
    equal = all(x == y or (math.isnan(x) and math.isnan(y)) for x, y in zip(a, b))
    return {"steps": len(a), "max_abs": max_abs, "max_rel": max_rel, "equal": equal,
            "first": (a[0], b[0]), "last": (a[-1], b[-1])}


def compare_weights(a, b, tol):
    """Per tensor: max |difference|, ||difference|| / ||b||, and whether it is within tol = (R, A)."""
    if a.keys() != b.keys():
        raise Unusable("the runs hold different parameters")
    result = {"max_abs": 0.0, "norm_rel": 0.0, "norm_rel_name": "", "max_rel": 0.0, "max_rel_name": "",
              "tol_ok": True, "tol_worst": ""}
    for name, vb in b.items():
        va = a[name]
        if len(va) != len(vb):
            raise Unusable(f"parameter {name} has {len(va)} and {len(vb)} elements")
        diff_sq = norm_sq = 0.0
        max_diff = scale = 0.0
        for x, y in zip(va, vb):
            d = abs(x - y)
            diff_sq += d * d
            norm_sq += y * y
            max_diff = max(max_diff, d)
            scale = max(scale, abs(y))
        norm_rel = math.sqrt(diff_sq) / max(math.sqrt(norm_sq), 1e-30)
        max_rel = max_diff / max(scale, 1e-30)
        result["max_abs"] = max(result["max_abs"], max_diff)
        if norm_rel > result["norm_rel"] or not result["norm_rel_name"]:
            result["norm_rel"], result["norm_rel_name"] = norm_rel, name
        if max_rel > result["max_rel"] or not result["max_rel_name"]:
            result["max_rel"], result["max_rel_name"] = max_rel, name
        if tol and max_diff > tol[0] * scale + tol[1]:
            result["tol_ok"] = False
            result["tol_worst"] = f"{name}: max |difference| {max_diff:.3g} > {tol[0]:g} * {scale:.3g} + {tol[1]:g}"
    return result


def parse_tol(text):
    try:
        r, a = text.split(":")
        return float(r), float(a)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--weights-tol wants R:A, e.g. 2e-5:5e-6, not {text!r}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("run_a")
    p.add_argument("run_b")
    p.add_argument("--bitwise", action="store_true")
    p.add_argument("--loss-rel", type=float)
    p.add_argument("--weights-rel", type=float)
    p.add_argument("--weights-tol", type=parse_tol)
    p.add_argument("--losses-only", action="store_true")
    args = p.parse_args()

    try:
        losses = compare_losses(read_losses(args.run_a), read_losses(args.run_b))
        weights = identical = None
        if not args.losses_only:
            (wa, raw_a), (wb, raw_b) = read_weights(args.run_a), read_weights(args.run_b)
            identical = raw_a == raw_b and wa.keys() == wb.keys()
            weights = compare_weights(wa, wb, args.weights_tol)
    except Unusable as e:
        print(f"compare_runs: {e}")
        print(f"figure: not comparable: {e}")
        return 2

    print(f"A: {args.run_a}\nB: {args.run_b}")
    print(f"losses: {losses['steps']} steps, max |A-B| {losses['max_abs']:.3g}, max |A-B|/|B| {losses['max_rel']:.3g}"
          f"{', every one equal' if losses['equal'] else ''}; first {losses['first'][0]:.6g} / {losses['first'][1]:.6g}, "
          f"last {losses['last'][0]:.6g} / {losses['last'][1]:.6g}")
    if weights is not None:
        if identical:
            print("weights: weights.bin byte-identical")
        else:
            print(f"weights: differ; max |A-B| {weights['max_abs']:.3g}; max ||A-B||/||B|| {weights['norm_rel']:.3g} "
                  f"({weights['norm_rel_name']}); max max|A-B|/max|B| {weights['max_rel']:.3g} ({weights['max_rel_name']})")

    failures = []
    if args.bitwise:
        if not losses["equal"]:
            failures.append("losses not equal")
        if weights is not None and not identical:
            failures.append("weights not byte-identical")
    if args.loss_rel is not None and not losses["max_rel"] <= args.loss_rel:
        failures.append(f"loss rel {losses['max_rel']:.3g} > {args.loss_rel:g}")
    if weights is not None and not identical:
        if args.weights_rel is not None and not weights["norm_rel"] <= args.weights_rel:
            failures.append(f"weights rel {weights['norm_rel']:.3g} > {args.weights_rel:g} ({weights['norm_rel_name']})")
        if args.weights_tol and not weights["tol_ok"]:
            failures.append(weights["tol_worst"])

    if weights is not None and identical and losses["equal"]:
        figure = "bitwise (weights.bin and losses)"
    else:
        figure = f"loss rel {losses['max_rel']:.2g}"
        if weights is not None:
            figure += ", weights identical" if identical else f", weights rel {weights['norm_rel']:.2g}"
    if failures:
        figure += "; " + "; ".join(failures)
    print(f"figure: {figure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
