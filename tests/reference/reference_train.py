#!/usr/bin/env python3
"""tests/reference/reference_train.py: the PyTorch side of the training reference check.

Trains reference_models.py's model (tests/model) with torch.optim.AdamW for a few steps, from the initial
weights and on the batches that tests/reference/reference_training_test.cpp wrote, the way DeepSpeed
defines a step: the loss is the mean cross-entropy over the step's whole global batch (every rank's every
micro-batch, in one forward), torch.nn.utils.clip_grad_norm_ clips the gradient, AdamW steps, and
DeepSpeed's WarmupLR (transcribed below) sets the learning rate. zhost must reach the same numbers through
data parallelism and gradient accumulation.

The folder holds manifest.json: "spec" and "params" as reference_models.py reads them (the initial
weights), "steps": for each step its "batches" ({"tokens", "targets"} raw int64 entries, concatenated in
order), "optimizer", "scheduler" and "gradient_clipping", and optionally "delayed_update" ({"start_step",
"extrapolation", "lookahead"}: train with ZeRO-Offload's delayed parameter update, as delayed_step below
transcribes it from docs/config.md). Writes back result.json ({"losses", "grad_norms", "lrs"}: per step, the loss
before the update, the gradient norm before clipping and the lr used) and final/<parameter index>.bin (raw
float32 weights after the last step).
Usage: reference_train.py <folder>
"""
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "model"))
from reference_models import MODELS, read_raw, write_raw  # noqa: E402


class WarmupLR:
    """DeepSpeed's WarmupLR (deepspeed/runtime/lr_schedules.py) as DeepSpeed's engine drives it: the
    constructor writes warmup_min_lr into the optimizer (last_batch_iteration = -1), and step() follows
    every applied optimizer step. So step 1 and step 2 both use warmup_min_lr."""

    def __init__(self, optimizer, warmup_min_lr, warmup_max_lr, warmup_num_steps, warmup_type):
        self.optimizer = optimizer
        self.min_lr = warmup_min_lr
        self.delta_lr = warmup_max_lr - warmup_min_lr
        self.warmup_num_steps = max(2, warmup_num_steps)
        self.warmup_type = warmup_type
        self.inverse_log_warm_up = 1.0 / math.log(self.warmup_num_steps)
        self.last_batch_iteration = -1
        self._set_lr(self.min_lr)

    def _gamma(self):
        i = self.last_batch_iteration
        if i < self.warmup_num_steps:
            if self.warmup_type == "log":
                return self.inverse_log_warm_up * math.log(i + 1)
            return i / self.warmup_num_steps
        return 1.0

    def _set_lr(self, lr):
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def step(self):
        self.last_batch_iteration += 1
        self._set_lr(self.min_lr + self.delta_lr * self._gamma())


class DelayedUpdate:
    """The delayed parameter update as docs/config.md states it ("Delayed parameter update"), with S the start
    step, k the extrapolation and c the lookahead: steps before S update the weights the forward reads at once;
    from S on the optimizer steps its own copy (the master) and the forward keeps older weights. At the boundary
    of step t > S, where step t-1's update is applied, the forward gets
        W_{t-1} + k (W_{t-1} - W_{t-2}) - c lr_t sqrt(N) g_t / ||g_t||
    (W the master after each step, g_t the clipped gradients of step t, N the parameter count); at step S's
    boundary it keeps what it had. The last step applies the master itself."""

    def __init__(self, params, settings):
        self.params = params
        self.master = [p.detach().clone().requires_grad_(True) for p in params]
        self.start = settings["start_step"]
        self.k = settings["extrapolation"]
        self.c = settings["lookahead"]
        self.optimizer = None  # steps self.master
        self.before = None  # the master before the step in flight
        self.count = sum(p.numel() for p in params)

    def step(self, t, last):
        with torch.no_grad():
            for m, p in zip(self.master, self.params):
                m.grad = p.grad.clone()
            if t < self.start:
                self.optimizer.step()
                self._apply(self.master)
                return
            if t > self.start:
                lr = self.optimizer.param_groups[0]["lr"]
                norm = torch.sqrt(sum((m.grad.double() ** 2).sum() for m in self.master)).item()
                factor = self.c * lr * math.sqrt(self.count) / norm
                self._apply([m + self.k * (m - b) - factor * m.grad for m, b in zip(self.master, self.before)])
            self.before = [m.detach().clone() for m in self.master]
            self.optimizer.step()
            if last:
                self._apply(self.master)

    def _apply(self, weights):
        for p, w in zip(self.params, weights):
            p.copy_(w)


def global_batch(folder, step):
    tokens = torch.cat([read_raw(folder, b["tokens"], torch.int64) for b in step["batches"]])
    targets = torch.cat([read_raw(folder, b["targets"], torch.int64) for b in step["batches"]])
    return tokens, targets


def main():
    folder = sys.argv[1]
    torch.set_num_threads(1)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    model = MODELS[manifest["spec"]["type"]](manifest["spec"])
    model.load_state_dict({p["name"]: read_raw(folder, p, torch.float32) for p in manifest["params"]}, strict=True)

    hyper = manifest["optimizer"]
    params = list(model.parameters())
    delayed = DelayedUpdate(params, manifest["delayed_update"]) if "delayed_update" in manifest else None
    optimizer = torch.optim.AdamW(delayed.master if delayed else params, lr=hyper["lr"], betas=tuple(hyper["betas"]),
                                  eps=hyper["eps"], weight_decay=hyper["weight_decay"])
    if delayed:
        delayed.optimizer = optimizer
    schedule = manifest["scheduler"]
    scheduler = WarmupLR(optimizer, schedule["warmup_min_lr"], schedule["warmup_max_lr"],
                         schedule["warmup_num_steps"], schedule["warmup_type"])
    max_norm = manifest["gradient_clipping"] if manifest["gradient_clipping"] > 0 else math.inf

    result = {"losses": [], "grad_norms": [], "lrs": []}
    for t, step in enumerate(manifest["steps"], start=1):
        tokens, targets = global_batch(folder, step)
        model.zero_grad(set_to_none=True)
        logits = model(tokens)
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        result["losses"].append(loss.item())
        result["grad_norms"].append(grad_norm.item())
        result["lrs"].append(optimizer.param_groups[0]["lr"])
        if delayed:
            delayed.step(t, t == len(manifest["steps"]))
        else:
            optimizer.step()
        scheduler.step()

    with open(os.path.join(folder, "result.json"), "w") as f:
        json.dump(result, f)
    os.makedirs(os.path.join(folder, "final"), exist_ok=True)
    named = dict(model.named_parameters())
    for index, p in enumerate(manifest["params"]):
        write_raw(os.path.join(folder, "final", f"{index}.bin"), named[p["name"]])


if __name__ == "__main__":
    main()
