#!/usr/bin/env python3
"""bench/dpu/stale_rule_torch.py: the cost of the one-step-stale rule measured without zhost.

zhost's delayed parameter update follows Note [Delayed parameter update] (zhost/zero/delayed_update.hpp)
exactly (tests/zero/delayed_update_test.cpp). Whether the loss it costs on the example job belongs to the rule
or to zhost is answered here by an independent implementation of the same rule in PyTorch eager: the
example job's model (tests/model/reference_models.py; width 128, 2 layers, 4 heads, seq 64, vocab 256), AdamW
(weight decay 0.01), gradient clipping 1.0, WarmupCosineLR (10 linear warm-up steps, cosine to 1e-4 of the
peak over the job), 16 sequences per step (the example's 2 ranks x 8) drawn from the bytes of
/usr/share/common-licenses, zhost's initialisation. One process, one thread.

The rule, from step S on: step t's gradients are taken on the weights before the previous update (the forward
model keeps W_{t-1} while the optimizer's copy moves to W_t); before S the update is applied at once. With
--extrapolation K (experimental.delayed_update_extrapolation) the forward model gets
W_{t-1} + K (W_{t-1} - W_{t-2}) instead of W_{t-1}, once a delayed update has a predecessor to extrapolate from.
With --lookahead C (experimental.delayed_update_lookahead) it also gets C lr_t sqrt(N) g_t / ||g_t||
subtracted, g_t the step's clipped gradients and N the parameter count (Note [Delayed parameter update]);
--lookahead-scale tensor scales g_t by each tensor's own root mean square instead (not built in zhost). With
--adam-lookahead (an experiment, not built in zhost: bench/dpu/RESULTS.md, "Predicting the step in flight") the
forward model gets W_t itself as AdamW would compute it from W_{t-1}, the moments before step t and g_t, except
that the second moment is v_{t-1} (not yet updated by g_t).

Usage: stale_rule_torch.py --model gpt|llama --start S --lr LR [--steps N] [--seed K] [--extrapolation K]
       [--lookahead C [--lookahead-scale global|tensor]] [--adam-lookahead] (--start 0: no delay). Prints one
       JSON line: the mean loss of the last 10 steps and the settings.
"""
import argparse
import glob
import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "model"))
import reference_models  # noqa: E402


def lr_ratio(i, steps, warmup=10, floor=1e-4):
    """WarmupCosineLR's ratio for schedule index i (host/optim/schedule.hpp)."""
    if i < warmup:
        return i / warmup
    progress = min(1.0, (i - warmup + 1) / max(1, steps - warmup))
    return max(0.0, floor + (1 - floor) * (1 + math.cos(math.pi * progress)) / 2)


def initialise_as_zhost(model, kind, layers, std=0.02):
    """zhost's initialisation (host/model/gpt.cpp, llama.cpp): normal(0, std) matrices and embeddings, the gpt's
    residual projections std / sqrt(2 layers), biases 0, norms 1."""
    with torch.no_grad():
        for name, w in model.named_parameters():
            if w.dim() == 1:
                if name.endswith(".bias"):
                    w.zero_()
                else:
                    w.fill_(1.0)
            elif kind == "gpt" and (name.endswith("attn.proj.weight") or name.endswith("mlp.proj.weight")):
                w.normal_(0.0, std / math.sqrt(2 * layers))
            else:
                w.normal_(0.0, std)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=("gpt", "llama"), required=True)
    p.add_argument("--start", type=int, required=True, help="first delayed step; 0: no delay")
    p.add_argument("--lr", type=float, required=True)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--extrapolation", type=float, default=0.0, help="k; 0: the stale weights themselves")
    p.add_argument("--lookahead", type=float, default=0.0,
                   help="C: the forward model also steps C lr ahead along g_t scaled to unit RMS; 0: no lookahead")
    p.add_argument("--lookahead-scale", choices=("global", "tensor"), default="global",
                   help="g_t's RMS over the whole model (zhost's) or per tensor")
    p.add_argument("--adam-lookahead", action="store_true",
                   help="the forward model gets W_t predicted from Adam's states before step t and g_t")
    args = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)

    files = sorted(f for f in glob.glob("/usr/share/common-licenses/*") if os.path.isfile(f))
    data = torch.tensor(list(b"".join(open(f, "rb").read() for f in files)), dtype=torch.long)
    spec = {"layers": 2, "width": 128, "heads": 4, "kv_heads": 4, "seq_len": 64, "vocab": 256, "ffn_width": 512}
    model = reference_models.Gpt(spec) if args.model == "gpt" else reference_models.Llama(spec)
    initialise_as_zhost(model, args.model, spec["layers"])
    forward_weights = list(model.parameters())                       # what forward and backward read
    master = [w.detach().clone().requires_grad_(True) for w in forward_weights]  # what the optimizer steps
    optimizer = torch.optim.AdamW(master, lr=args.lr, weight_decay=0.01)
    batches = torch.Generator().manual_seed(args.seed + 7)
    losses = []
    before_update = None  # W_{t-1} while step t's update is computed
    for t in range(1, args.steps + 1):
        starts = torch.randint(len(data) - spec["seq_len"] - 1, (16,), generator=batches)
        batch = torch.stack([data[s:s + spec["seq_len"] + 1] for s in starts])
        for w in forward_weights:
            w.grad = None
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, spec["vocab"]), batch[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(forward_weights, 1.0)
        losses.append(loss.item())
        for m, w in zip(master, forward_weights):
            m.grad = w.grad.clone()
        for group in optimizer.param_groups:  # step 1 at the initial lr, step t at the schedule's t-2
            group["lr"] = args.lr if t == 1 else args.lr * lr_ratio(t - 2, args.steps)
        with torch.no_grad():
            if args.start > 0 and t >= args.start and args.adam_lookahead:  # W_t predicted with v_{t-1}
                group = optimizer.param_groups[0]
                beta1, beta2 = group["betas"]
                lr, wd, eps = group["lr"], group["weight_decay"], group["eps"]
                for m, w in zip(master, forward_weights):
                    state = optimizer.state.get(m)
                    step = (int(state["step"]) if state else 0) + 1
                    exp_avg = state["exp_avg"] if state else torch.zeros_like(m)
                    exp_avg_sq = state["exp_avg_sq"] if state else torch.zeros_like(m)
                    m_t = beta1 * exp_avg + (1 - beta1) * m.grad
                    v = exp_avg_sq if state else (1 - beta2) * m.grad * m.grad
                    denominator = (v / (1 - beta2 ** step)).sqrt() + eps
                    w.copy_(m * (1 - lr * wd) - lr / (1 - beta1 ** step) * m_t / denominator)
                optimizer.step()
            elif args.start > 0 and t >= args.start:  # delayed: the next step still reads W_{t-1} (extrapolated)
                count = sum(m.numel() for m in master)
                norm = torch.sqrt(sum((m.grad.double() ** 2).sum() for m in master)).item()
                lr = optimizer.param_groups[0]["lr"]
                for i, (m, w) in enumerate(zip(master, forward_weights)):
                    if t == args.start:
                        w.copy_(m)
                        continue
                    if args.lookahead_scale == "tensor":
                        factor = args.lookahead * lr * math.sqrt(m.numel()) / max(m.grad.norm().item(), 1e-30)
                    else:
                        factor = args.lookahead * lr * math.sqrt(count) / norm
                    w.copy_(m + args.extrapolation * (m - before_update[i]) - factor * m.grad)
                before_update = [m.detach().clone() for m in master]
                optimizer.step()
            else:
                optimizer.step()
                for m, w in zip(master, forward_weights):
                    w.copy_(m)
    print(json.dumps({"model": args.model, "start": args.start, "lr": args.lr, "steps": args.steps,
                      "seed": args.seed, "extrapolation": args.extrapolation, "lookahead": args.lookahead,
                      "lookahead_scale": args.lookahead_scale, "adam_lookahead": args.adam_lookahead,
                      "final_loss": round(sum(losses[-10:]) / 10, 4)}))


if __name__ == "__main__":
    main()
