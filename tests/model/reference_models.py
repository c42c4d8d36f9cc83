#!/usr/bin/env python3
"""tests/model/reference_models.py: independent PyTorch (1.13+) references of zhost's built-in models.

gpt is written after nanoGPT / GPT-2, llama after Hugging Face's LlamaModel (rotate_half rotary
embeddings, repeat_kv for grouped-query attention), mlp after the ZeRO profiling MLP. The C++ test
(tests/model/reference_test.cpp) writes a folder with manifest.json, each parameter as raw float32 and the
batch as raw int64; this script loads the parameters into its own modules (whose state_dict names match
zhost's parameter names, so load_state_dict(strict=True) also checks names and shapes), runs forward and
loss.backward(), and writes back, as raw float32:
    logits.bin, loss.bin, grads/<parameter index>.bin
Usage: reference_models.py <folder>
"""
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


def causal_softmax_attention(q, k, v):
    """q: [B, H, T, D], k, v: [B, H, T, D] -> [B, H, T, D] (explicit, no fused kernel)."""
    T, D = q.size(-2), q.size(-1)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    att = att.masked_fill(~mask, float("-inf"))
    return F.softmax(att.float(), dim=-1).to(q.dtype) @ v


# ---- gpt (nanoGPT) ----

class GptAttention(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        y = causal_softmax_attention(q, k, v).transpose(1, 2).contiguous().view(B, T, C)
        return self.proj(y)


class GptMlp(nn.Module):
    def __init__(self, width, ffn_width):
        super().__init__()
        self.fc = nn.Linear(width, ffn_width)
        self.proj = nn.Linear(ffn_width, width)

    def forward(self, x):
        return self.proj(F.gelu(self.fc(x), approximate="tanh"))


class GptBlock(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.attn_norm = nn.LayerNorm(spec["width"])
        self.attn = GptAttention(spec["width"], spec["heads"])
        self.mlp_norm = nn.LayerNorm(spec["width"])
        self.mlp = GptMlp(spec["width"], spec["ffn_width"])

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class GptEmbed(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.tokens = nn.Embedding(spec["vocab"], spec["width"])
        self.positions = nn.Embedding(spec["seq_len"], spec["width"])


class GptHead(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.norm = nn.LayerNorm(spec["width"])


class Gpt(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed = GptEmbed(spec)
        self.blocks = nn.ModuleList(GptBlock(spec) for _ in range(spec["layers"]))
        self.head = GptHead(spec)

    def forward(self, tokens):
        T = tokens.size(1)
        x = self.embed.tokens(tokens) + self.embed.positions(torch.arange(T))
        for block in self.blocks:
            x = block(x)
        return F.linear(self.head.norm(x), self.embed.tokens.weight)  # tied head


# ---- llama (Hugging Face) ----

class RMSNorm(nn.Module):
    def __init__(self, width, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotary_cos_sin(T, D, theta=10000.0):
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2).float() / D))
    freqs = torch.einsum("i,j->ij", torch.arange(T).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def repeat_kv(x, n_rep):
    B, KV, T, D = x.shape
    if n_rep == 1:
        return x
    return x[:, :, None, :, :].expand(B, KV, n_rep, T, D).reshape(B, KV * n_rep, T, D)


class LlamaAttention(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.heads, self.kv_heads = spec["heads"], spec["kv_heads"]
        self.head_dim = spec["width"] // self.heads
        self.q = nn.Linear(spec["width"], self.heads * self.head_dim, bias=False)
        self.k = nn.Linear(spec["width"], self.kv_heads * self.head_dim, bias=False)
        self.v = nn.Linear(spec["width"], self.kv_heads * self.head_dim, bias=False)
        self.proj = nn.Linear(self.heads * self.head_dim, spec["width"], bias=False)

    def forward(self, x):
        B, T, _ = x.size()
        q = self.q(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v(x).view(B, T, self.kv_heads, self.head_dim).transpose(1, 2)
        cos, sin = rotary_cos_sin(T, self.head_dim)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        n_rep = self.heads // self.kv_heads
        y = causal_softmax_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep))
        return self.proj(y.transpose(1, 2).reshape(B, T, -1))


class LlamaMlp(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.gate = nn.Linear(spec["width"], spec["ffn_width"], bias=False)
        self.up = nn.Linear(spec["width"], spec["ffn_width"], bias=False)
        self.down = nn.Linear(spec["ffn_width"], spec["width"], bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class LlamaBlock(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.attn_norm = RMSNorm(spec["width"])
        self.attn = LlamaAttention(spec)
        self.mlp_norm = RMSNorm(spec["width"])
        self.mlp = LlamaMlp(spec)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


class TokenEmbed(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.tokens = nn.Embedding(spec["vocab"], spec["width"])


class LlamaHead(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.norm = RMSNorm(spec["width"])
        self.proj = nn.Linear(spec["width"], spec["vocab"], bias=False)


class Llama(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed = TokenEmbed(spec)
        self.blocks = nn.ModuleList(LlamaBlock(spec) for _ in range(spec["layers"]))
        self.head = LlamaHead(spec)

    def forward(self, tokens):
        x = self.embed.tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head.proj(self.head.norm(x))


# ---- mlp (ZeRO profiling MLP, language-model shaped) ----

class MlpBlock(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.mlp = GptMlp(spec["width"], spec["ffn_width"])

    def forward(self, x):
        return x + self.mlp.proj(F.relu(self.mlp.fc(x)))


class MlpHead(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.proj = nn.Linear(spec["width"], spec["vocab"])


class Mlp(nn.Module):
    def __init__(self, spec):
        super().__init__()
        self.embed = TokenEmbed(spec)
        self.blocks = nn.ModuleList(MlpBlock(spec) for _ in range(spec["layers"]))
        self.head = MlpHead(spec)

    def forward(self, tokens):
        x = self.embed.tokens(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head.proj(x)


MODELS = {"gpt": Gpt, "llama": Llama, "mlp": Mlp}


def read_raw(folder, entry, dtype):
    numel = math.prod(entry["shape"])
    return torch.from_file(os.path.join(folder, entry["file"]), size=numel, dtype=dtype).view(entry["shape"])


def write_raw(path, tensor):
    tensor.detach().to(torch.float32).contiguous().numpy().tofile(path)


def main():
    folder = sys.argv[1]
    torch.set_num_threads(1)
    with open(os.path.join(folder, "manifest.json")) as f:
        manifest = json.load(f)
    spec = manifest["spec"]
    model = MODELS[spec["type"]](spec)
    state = {p["name"]: read_raw(folder, p, torch.float32) for p in manifest["params"]}
    model.load_state_dict(state, strict=True)
    named = dict(model.named_parameters())
    tokens = read_raw(folder, manifest["tokens"], torch.int64)
    targets = read_raw(folder, manifest["targets"], torch.int64)

    logits = model(tokens)
    loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
    loss.backward()

    write_raw(os.path.join(folder, "logits.bin"), logits)
    write_raw(os.path.join(folder, "loss.bin"), loss.reshape(1))
    os.makedirs(os.path.join(folder, "grads"), exist_ok=True)
    for index, p in enumerate(manifest["params"]):
        write_raw(os.path.join(folder, "grads", f"{index}.bin"), named[p["name"]].grad)


if __name__ == "__main__":
    main()
