#!/usr/bin/env python3
"""bench/vs_pytorch/pytorch_ddp.py: the PyTorch eager side of bench/vs_pytorch.

Trains the gpt of tests/model/reference_models.py (the independent PyTorch implementation the model tests
compare zhost's logits and gradients with) as PyTorch users do: DistributedDataParallel over Gloo, AdamW,
clip_grad_norm_, cross-entropy, random tokens. Starts --nproc ranks as processes of its own, each with
--threads intra-op threads, and prints one JSON line from rank 0: the step times in ms after --warmup.

Usage: pytorch_ddp.py --layers L --width C --heads H --seq-len T --vocab V --micro-batch B
                      --steps N --warmup W --nproc P --threads K [--port PORT]
"""
import argparse
import json
import os
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "model"))


def parse():
    p = argparse.ArgumentParser()
    for name in ("layers", "width", "heads", "seq-len", "vocab", "micro-batch", "steps", "warmup", "nproc",
                 "threads"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--port", type=int, default=29611)
    p.add_argument("--rank", type=int, default=-1, help=argparse.SUPPRESS)
    return p.parse_args()


def run_rank(args):
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from reference_models import Gpt

    torch.set_num_threads(args.threads)
    torch.manual_seed(1234)
    world = args.nproc
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank,
                                world_size=world)
    spec = {"layers": args.layers, "width": args.width, "heads": args.heads, "seq_len": args.seq_len,
            "vocab": args.vocab, "ffn_width": 4 * args.width}
    model = Gpt(spec)  # PyTorch's default initialisation: the values do not change the work
    if world > 1:
        model = torch.nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    generator = torch.Generator().manual_seed(1000 + args.rank)
    times = []
    for step in range(args.steps):
        tokens = torch.randint(args.vocab, (args.micro_batch, args.seq_len + 1), generator=generator)
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), tokens[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        loss.item()
        times.append((time.perf_counter() - start) * 1000.0)
    if world > 1:
        dist.destroy_process_group()
    if args.rank == 0:
        params = sum(p.numel() for p in model.parameters())
        print(json.dumps({"step_ms": times[args.warmup:], "params": params,
                          "tokens_per_step": world * args.micro_batch * args.seq_len}))


def main():
    args = parse()
    if args.rank >= 0:
        run_rank(args)
        return
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    children = []
    for rank in range(args.nproc):
        argv = [sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + ["--rank", str(rank)]
        children.append(subprocess.Popen(argv, env=env))
    codes = [c.wait() for c in children]
    if any(codes):
        sys.exit(f"pytorch_ddp.py: a rank failed (exit codes {codes})")


if __name__ == "__main__":
    main()
