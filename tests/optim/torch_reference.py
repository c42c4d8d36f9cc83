#!/usr/bin/env python3
"""tests/optim/torch_reference.py: runs torch.optim.AdamW/Adam/SGD on data written by test_optim, so
that the test can compare zhost_optim with PyTorch itself.

Usage: torch_reference.py DIR
DIR holds spec.json ({"kind", "numel", "steps", "lrs": [per step], "betas", "eps", "weight_decay",
"momentum"}), param.bin (float32[numel]) and grads.bin (float32[steps, numel]), raw little-endian.
Writes param_out.bin and one <state name>.bin per state tensor (exp_avg, exp_avg_sq, momentum_buffer),
float32[numel] each.
"""
import json
import os
import sys

import numpy as np
import torch

STATE_NAMES = ("exp_avg", "exp_avg_sq", "momentum_buffer")


def read_floats(path, count):
    values = np.fromfile(path, dtype="<f4")
    if values.size != count:
        raise SystemExit(f"{path}: expected {count} float32 values, found {values.size}")
    return torch.from_numpy(values.copy())


def make_optimizer(spec, param):
    kind = spec["kind"]
    # foreach=False: the per-tensor loop, the same path on every torch version and device.
    if kind == "adamw":
        return torch.optim.AdamW([param], lr=spec["lrs"][0], betas=tuple(spec["betas"]), eps=spec["eps"],
                                 weight_decay=spec["weight_decay"], foreach=False)
    if kind == "adam":
        return torch.optim.Adam([param], lr=spec["lrs"][0], betas=tuple(spec["betas"]), eps=spec["eps"],
                                weight_decay=spec["weight_decay"], foreach=False)
    if kind == "sgd":
        return torch.optim.SGD([param], lr=spec["lrs"][0], momentum=spec["momentum"],
                               weight_decay=spec["weight_decay"], foreach=False)
    raise SystemExit(f"unknown optimizer kind {kind!r}")


def main(directory):
    with open(os.path.join(directory, "spec.json")) as spec_file:
        spec = json.load(spec_file)
    numel, steps = spec["numel"], spec["steps"]
    param = read_floats(os.path.join(directory, "param.bin"), numel).requires_grad_()
    grads = read_floats(os.path.join(directory, "grads.bin"), steps * numel).view(steps, numel)
    optimizer = make_optimizer(spec, param)
    for step in range(steps):
        for group in optimizer.param_groups:
            group["lr"] = spec["lrs"][step]
        param.grad = grads[step].clone()
        optimizer.step()
    param.detach().numpy().astype("<f4").tofile(os.path.join(directory, "param_out.bin"))
    for name, value in optimizer.state[param].items():
        if name in STATE_NAMES and torch.is_tensor(value):
            value.detach().numpy().astype("<f4").tofile(os.path.join(directory, f"{name}.bin"))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
