#!/usr/bin/env python3
"""bench/gpu/pytorch_gpt.py: PyTorch eager's training speed on the gpt that scripts/gpu-check times zhost on.

The model is tests/model/reference_models.py's Gpt (the independent PyTorch implementation that zhost's
model tests check logits and gradients against), built on --device. Each step: random tokens, forward,
fp32 cross-entropy, backward, clip_grad_norm_(1.0), torch.optim.AdamW (its default implementation), as in
zhost's speed job (gradient_clipping = 1.0, AdamW). With --bf16, as zhost's bf16 mode: the model's
parameters and gradients are bf16, AdamW steps fp32 master copies of them, and the updated masters are
copied back into the bf16 parameters.

Attention, --attention (several may be given, each a separate measurement in this process):
  math  reference_models' explicit softmax(q k^T) v, the [B, H, T, T] scores materialised, as zhost does;
  sdpa  torch.nn.functional.scaled_dot_product_attention(is_causal=True) (flash / memory-efficient kernels).

Prints one JSON line per variant: median step time after --warmup, tokens/s, MFU against --peak-tflops
(model FLOPs per token by zhost's formula, Model::flops_per_token: 6 x (the matmul parameters of the
blocks and the tied head + 2 x width x seq_len per layer)), and the peak of torch's CUDA allocator. Then a
line starting with "figure:".
Usage: pytorch_gpt.py --layers L --width C --heads H --seq-len T --vocab V --micro-batch B --steps N
                      --warmup W [--device cuda] [--bf16] [--attention math sdpa] [--peak-tflops X]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "tests", "model"))
sys.dont_write_bytecode = True  # no __pycache__ in the checkout
import reference_models  # noqa: E402  (after the path above)

math_attention = reference_models.causal_softmax_attention


def sdpa_attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def flops_per_token(model, spec):
    """zhost's Model::flops_per_token for its gpt: the embedding lookups cost nothing, the head's
    projection is the tied token table, and each layer's attention adds 2 x width x seq_len MACs."""
    macs = sum(p.numel() for p in model.blocks.parameters()) + sum(p.numel() for p in model.head.parameters())
    macs += spec["vocab"] * spec["width"] + spec["layers"] * 2 * spec["width"] * spec["seq_len"]
    return 6.0 * macs


def init_like_zhost(model):
    """GPT-2's initialisation, as zhost's gpt (model.init_std = 0.02): matrices and tables N(0, 0.02), biases 0,
    LayerNorm weights 1. (PyTorch's default N(0, 1) embeddings would make the tied head's logits huge.)"""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.normal_(0.0, 0.02)
            elif "norm" in name and name.endswith("weight"):
                p.fill_(1.0)
            else:
                p.zero_()


def measure(args, attention):
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    reference_models.causal_softmax_attention = {"math": math_attention, "sdpa": sdpa_attention}[attention]
    torch.manual_seed(1234)
    spec = {"layers": args.layers, "width": args.width, "heads": args.heads, "seq_len": args.seq_len,
            "vocab": args.vocab, "ffn_width": 4 * args.width}
    torch.set_default_device(device)  # reference_models makes its positions and masks on the default device
    model = reference_models.Gpt(spec)
    init_like_zhost(model)
    params = list(model.parameters())
    if args.bf16:
        masters = [p.detach().clone().float().requires_grad_(True) for p in params]
        model.to(torch.bfloat16)
    else:
        masters = params
    optimizer = torch.optim.AdamW(masters, lr=3e-4, weight_decay=0.01)
    generator = torch.Generator(device=device).manual_seed(1000)
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
    times, losses = [], []
    for _ in range(args.steps):
        tokens = torch.randint(args.vocab, (args.micro_batch, args.seq_len + 1), generator=generator, device=device)
        start = time.perf_counter()
        logits = model(tokens[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), tokens[:, 1:].reshape(-1))
        loss.backward()
        if args.bf16:
            for master, p in zip(masters, params):
                master.grad = p.grad.float()
                p.grad = None
        torch.nn.utils.clip_grad_norm_(masters, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if args.bf16:
            with torch.no_grad():
                for master, p in zip(masters, params):
                    p.copy_(master)
        losses.append(loss.item())  # waits for the step, as zhost reads each step's loss
        times.append(time.perf_counter() - start)
    torch.set_default_device("cpu")
    step_s = statistics.median(times[args.warmup:] or times)
    tokens_per_s = args.micro_batch * args.seq_len / step_s
    fpt = flops_per_token(model, spec)
    result = {"attention": attention, "bf16": args.bf16, "device": str(device), "params": sum(p.numel() for p in params),
              "step_ms": 1000 * step_s, "tokens_per_s": tokens_per_s, "tflops": tokens_per_s * fpt / 1e12,
              "mfu": tokens_per_s * fpt / 1e12 / args.peak_tflops if args.peak_tflops > 0 else None,
              "cuda_peak_mb": torch.cuda.max_memory_allocated(device) / 2**20 if cuda else None,
              "first_loss": losses[0], "last_loss": losses[-1]}
    del model, params, masters, optimizer
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name in ("layers", "width", "heads", "seq-len", "vocab", "micro-batch", "steps", "warmup"):
        p.add_argument("--" + name, type=int, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--attention", nargs="+", choices=("math", "sdpa"), default=["math"])
    p.add_argument("--peak-tflops", type=float, default=0.0)
    args = p.parse_args()
    figures = []
    for attention in args.attention:
        r = measure(args, attention)
        print(json.dumps(r), flush=True)
        figure = f"{attention}: {r['tokens_per_s']:.0f} tok/s"
        if r["mfu"] is not None:
            figure += f", MFU {100 * r['mfu']:.1f}%"
        if r["cuda_peak_mb"] is not None:
            figure += f", peak {r['cuda_peak_mb'] / 1024:.2f} GiB"
        figures.append(figure)
    print("figure: " + "; ".join(figures))


if __name__ == "__main__":
    main()
