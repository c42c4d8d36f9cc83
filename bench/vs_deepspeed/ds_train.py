#!/usr/bin/env python3
"""bench/vs_deepspeed/ds_train.py: one rank of a peer (DeepSpeed, or plain PyTorch: DDP, DDP + torch.compile,
FSDP2) training a Hugging Face model folder on a token file, with zhost's batches (samples.py) - the peer side of
bench/vs_deepspeed.

Started by torchrun (RANK, WORLD_SIZE, MASTER_ADDR in the environment), one process per rank, on the CPU:

  DS_ACCELERATOR=cpu torchrun --nproc-per-node 2 ds_train.py --config ds_config.json --model DIR \
      --tokens FILE --seq-len T --steps N --seed S --out DIR [--peer deepspeed|ddp|compile|fsdp2] [--attn sdpa]

--peer deepspeed (the default): deepspeed.initialize gets the ds_config.json as it is (read by DeepSpeed itself).
The PyTorch peers (Note [The PyTorch peers]) read from it only what a training script would hand to torch:
the micro batch, gradient accumulation, AdamW's parameters and the clipping threshold.
Writes OUT/metrics.jsonl (rank 0: step, loss (mean over ranks and micro-batches), grad_norm, lr, step_s),
OUT/weights.safetensors (rank 0: the fp32 master weights, assembled from every rank), OUT/rank{r}.json (peak
RSS, tokens/s).
"""
import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import samples  # noqa: E402


def parse():
    p = argparse.ArgumentParser()
    p.add_argument("--config", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--tokens", required=True)
    p.add_argument("--seq-len", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--attn", default="eager", help="HF attn_implementation (eager or sdpa)")
    p.add_argument("--peer", default="deepspeed", choices=["deepspeed", "ddp", "compile", "fsdp2"])
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"],
                   help="the PyTorch peers' parameter dtype: float64 gives a reference for fp32 rounding")
    p.add_argument("--out", required=True)
    return p.parse_args()


def load_model(folder, attn, dtype="float32"):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, attn_implementation=attn,
                                                              dtype=getattr(torch, dtype))
    model.train()
    return model


def loss_of(model, tokens, targets):
    logits = model(input_ids=tokens).logits
    logits = logits.to(torch.promote_types(logits.dtype, torch.float32))  # bf16 up to fp32; fp64 stays
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def main():
    args = parse()
    with open(args.config) as f:
        import hjson  # DeepSpeed's own reader of ds_config.json (comments, trailing commas)
        config = json.loads(json.dumps(hjson.load(f)))
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    os.makedirs(args.out, exist_ok=True)
    micro = config["train_micro_batch_size_per_gpu"]
    gas = config.get("gradient_accumulation_steps", 1)
    data = samples.TokenFile(args.tokens, args.seq_len, args.seed)
    if args.dtype != "float32" and args.peer == "deepspeed":
        raise SystemExit("--dtype: only the PyTorch peers (--peer ddp, compile, fsdp2) take another dtype")
    model = load_model(args.model, args.attn, args.dtype)
    if args.peer != "deepspeed":
        return train_torch(args, config, model, data, rank, world)

    import deepspeed
    deepspeed.init_distributed(dist_backend="gloo")
    engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=args.config)

    records, step_times = [], []
    for step in range(args.steps):
        start = time.perf_counter()
        loss_sum = 0.0
        lr = None
        for k in range(gas):
            tokens, targets = data.batch(step, samples.first_index(k, rank, world, micro), micro)
            loss = loss_of(engine, tokens, targets)
            engine.backward(loss)  # scales by 1/gas itself
            if k == gas - 1:
                lr = engine.get_lr()[0]  # the lr this step applies (the scheduler moves on in step())
            engine.step()
            loss_sum += loss.item()
        grad_norm = engine.get_global_grad_norm()
        grad_norm = float(grad_norm) if grad_norm is not None else None
        step_times.append(time.perf_counter() - start)
        records.append(record(step, loss_sum / gas, grad_norm, lr, step_times[-1], world))
    finish(args, records, step_times, final_weights(model), rank, micro * gas)


def record(step, loss, grad_norm, lr, step_s, world):
    mean = torch.tensor([loss], dtype=torch.float64)
    dist.all_reduce(mean)
    return {"step": step + 1, "loss": mean.item() / world, "grad_norm": grad_norm, "lr": lr, "step_s": step_s}


def finish(args, records, step_times, weights, rank, samples_per_step):
    if rank == 0:
        with open(os.path.join(args.out, "metrics.jsonl"), "w") as out:
            for r in records:
                out.write(json.dumps(r) + "\n")
        from safetensors.torch import save_file
        save_file({k: v.contiguous() for k, v in weights.items()}, os.path.join(args.out, "weights.safetensors"))
    timed = step_times[min(2, len(step_times) - 1):]  # the first steps warm up (allocations, JIT)
    tokens_per_s = samples_per_step * args.seq_len * len(timed) / sum(timed)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    with open(os.path.join(args.out, f"rank{rank}.json"), "w") as out:
        json.dump({"rank": rank, "tokens_per_s": tokens_per_s, "peak_rss_bytes": peak_rss}, out)
    dist.barrier()
    # Everything is written: leave without tearing gloo down. A DDP rank once hung for minutes in
    # destroy_process_group after its peer had exited (2026-11-28, round 4 of a 5-round `speed` run).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# Note [The PyTorch peers]
# What a user who picks plain PyTorch instead of zhost would write, fed the same folder, batches and ds_config.json
# hyperparameters as DeepSpeed and zhost:
# - ddp: DistributedDataParallel over gloo (its default buckets), eager.
# - compile: the same DDP module wrapped in torch.compile (inductor, default mode; DDPOptimizer splits the graph at
#   the bucket boundaries so that the all-reduces overlap the backward). The loss and AdamW stay eager.
# - fsdp2: fully_shard on every transformer block and then on the whole model over a 1-D CPU mesh (gloo): the
#   parameters, gradients and AdamW's states are sharded between the ranks, as in ZeRO stage 3.
# Optimizer: torch.optim.AdamW with the config's lr, betas, eps and weight_decay, torch's default implementation on
# the CPU (the for-loop one; foreach and fused are picked by default only for CUDA tensors). Clipping: the config's
# gradient_clipping, 1.0 where it has none, as DeepSpeed 0.19.8 and zhost read that file
# (Note [DeepSpeed's clipping default]); clip_grad_norm_ returns the norm before clipping, which is logged.
# The loss is divided by gradient_accumulation_steps before backward, as DeepSpeed's engine does; with gas > 1,
# DDP and FSDP2 reduce on every micro-batch (no no_sync), which is what DeepSpeed does too.
def train_torch(args, config, model, data, rank, world):
    micro = config["train_micro_batch_size_per_gpu"]
    gas = config.get("gradient_accumulation_steps", 1)
    opt = config.get("optimizer", {})
    if opt.get("type", "AdamW").lower() != "adamw":
        raise SystemExit(f"--peer {args.peer}: the PyTorch peers train with AdamW; the config asks for "
                         f"{opt.get('type')!r} (use a config with optimizer.type AdamW)")
    params = opt.get("params", {})
    clip = config.get("gradient_clipping", 1.0)
    dist.init_process_group("gloo")
    if args.peer in ("ddp", "compile"):
        from torch.nn.parallel import DistributedDataParallel
        wrapped = DistributedDataParallel(model)
        if args.peer == "compile":
            wrapped = torch.compile(wrapped)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (world,))
        for block in model.transformer.h:
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    optimizer = torch.optim.AdamW(model.parameters(), lr=params.get("lr", 1e-3),
                                  betas=tuple(params.get("betas", (0.9, 0.999))), eps=params.get("eps", 1e-8),
                                  weight_decay=params.get("weight_decay", 0.01))
    records, step_times = [], []
    for step in range(args.steps):
        start = time.perf_counter()
        loss_sum = 0.0
        for k in range(gas):
            tokens, targets = data.batch(step, samples.first_index(k, rank, world, micro), micro)
            loss = loss_of(wrapped, tokens, targets)
            (loss / gas).backward()
            loss_sum += loss.item()
        grad_norm = None
        if clip > 0:
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            grad_norm = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        lr = optimizer.param_groups[0]["lr"]
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step_times.append(time.perf_counter() - start)
        records.append(record(step, loss_sum / gas, grad_norm, lr, step_times[-1], world))
    weights = {}
    for name, p in model.named_parameters():
        full = p.full_tensor() if hasattr(p, "full_tensor") else p  # FSDP2's DTensor: a collective
        weights[name] = full.detach().float().cpu().clone()
    finish(args, records, step_times, weights, rank, micro * gas)


def final_weights(model):
    """Every parameter's fp32 master value, whole, under HF's names (a collective: every rank calls it)."""
    from deepspeed.utils import safe_get_full_fp32_param
    out = {}
    for name, p in model.named_parameters():
        full = safe_get_full_fp32_param(p)  # None where DeepSpeed keeps no master (stage 0 in fp32)
        out[name] = (full if full is not None else p.detach()).float().cpu().clone()
    return out


if __name__ == "__main__":
    main()
