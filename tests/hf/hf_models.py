#!/usr/bin/env python3
"""tests/hf/hf_models.py: tiny Hugging Face models for zhost's model.type = "hf" tests, and an independent
PyTorch implementation of their forward pass (written here from HF's modeling code's semantics, not from
zhost's C++).

  hf_models.py make KIND DIR [--shards N] [--dtype F32|BF16] [--seed S] [--config JSON]
      KIND: gpt2 | llama (grouped-query, untied head) | mistral (grouped-query, tied head, head_dim !=
      hidden/heads, rope_theta in rope_parameters). Writes DIR/config.json and DIR/model.safetensors (or N
      shards + model.safetensors.index.json) with HF's exact names and layouts (GPT-2 Conv1D [in, out]).
      --config: a JSON object merged into the config (a larger model for bench/hf_load).
  hf_models.py make-set DIR
      The tests' set, in one call (importing torch is the slow part): DIR/gpt2, DIR/llama (3 shards),
      DIR/llama1 (one file), DIR/mistral (BF16), all F32 but mistral.
  hf_models.py logits DIR TOKENS OUT [DIR TOKENS OUT ...]
      TOKENS: raw int64 [B, T] with B, T in TOKENS.json; writes the logits [B, T, V] as raw float32 to OUT.
Uses only torch and numpy (no transformers, no safetensors package: the format is written and read here).
"""
import json
import math
import struct
import sys

import numpy as np
import torch

CONFIGS = {
    "gpt2": {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "n_layer": 2, "n_embd": 48, "n_head": 4,
             "n_inner": None, "vocab_size": 320, "n_positions": 40, "layer_norm_epsilon": 1e-5,
             "activation_function": "gelu_new", "tie_word_embeddings": True},
    "llama": {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2,
              "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4, "num_key_value_heads": 2,
              "vocab_size": 320, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
              "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False},
    "mistral": {"model_type": "mistral", "architectures": ["MistralForCausalLM"], "num_hidden_layers": 2,
                "hidden_size": 48, "intermediate_size": 80, "num_attention_heads": 4, "num_key_value_heads": 1,
                "head_dim": 16, "vocab_size": 300, "max_position_embeddings": 64, "rms_norm_eps": 1e-5,
                "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0}, "hidden_act": "silu",
                "tie_word_embeddings": True, "sliding_window": None},
}

DTYPES = {"F32": (torch.float32, 4), "BF16": (torch.bfloat16, 2), "F16": (torch.float16, 2)}


def shapes(config):
    """HF's parameter names and shapes, in module order."""
    out = []
    if config["model_type"] == "gpt2":
        c, v, p = config["n_embd"], config["vocab_size"], config["n_positions"]
        f = config["n_inner"] or 4 * c
        out += [("transformer.wte.weight", [v, c]), ("transformer.wpe.weight", [p, c])]
        for i in range(config["n_layer"]):
            h = f"transformer.h.{i}."
            out += [(h + "ln_1.weight", [c]), (h + "ln_1.bias", [c]),
                    (h + "attn.c_attn.weight", [c, 3 * c]), (h + "attn.c_attn.bias", [3 * c]),
                    (h + "attn.c_proj.weight", [c, c]), (h + "attn.c_proj.bias", [c]),
                    (h + "ln_2.weight", [c]), (h + "ln_2.bias", [c]),
                    (h + "mlp.c_fc.weight", [c, f]), (h + "mlp.c_fc.bias", [f]),
                    (h + "mlp.c_proj.weight", [f, c]), (h + "mlp.c_proj.bias", [c])]
        out += [("transformer.ln_f.weight", [c]), ("transformer.ln_f.bias", [c])]
        return out
    c, v, f = config["hidden_size"], config["vocab_size"], config["intermediate_size"]
    heads, kv = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or c // heads
    out.append(("model.embed_tokens.weight", [v, c]))
    for i in range(config["num_hidden_layers"]):
        h = f"model.layers.{i}."
        out += [(h + "input_layernorm.weight", [c]), (h + "self_attn.q_proj.weight", [heads * d, c]),
                (h + "self_attn.k_proj.weight", [kv * d, c]), (h + "self_attn.v_proj.weight", [kv * d, c]),
                (h + "self_attn.o_proj.weight", [c, heads * d]), (h + "post_attention_layernorm.weight", [c]),
                (h + "mlp.gate_proj.weight", [f, c]), (h + "mlp.up_proj.weight", [f, c]),
                (h + "mlp.down_proj.weight", [c, f])]
    out.append(("model.norm.weight", [c]))
    if not config["tie_word_embeddings"]:
        out.append(("lm_head.weight", [v, c]))
    return out


def write_safetensors(path, tensors, dtype):
    torch_dtype, size = DTYPES[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, tensor in tensors:
        data = tensor.to(torch_dtype).contiguous().view(torch.int16 if size == 2 else torch.int32).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        blob = raw[8 + n + begin:8 + n + end]
        if entry["dtype"] == "F32":
            t = torch.from_numpy(np.frombuffer(blob, dtype=np.float32).copy())
        else:  # BF16 / F16: reinterpret 16-bit words
            t = torch.from_numpy(np.frombuffer(blob, dtype=np.int16).copy()).view(
                torch.bfloat16 if entry["dtype"] == "BF16" else torch.float16)
        out[name] = t.reshape(entry["shape"]).float()
    return out


def make(kind, folder, shards=1, dtype="F32", seed=0, overrides="{}", std=0.2):
    config = dict(CONFIGS[kind])
    config.update(json.loads(overrides))
    generator = torch.Generator().manual_seed(seed)
    tensors = []
    for name, shape in shapes(config):
        if name.endswith("norm.weight") or name.endswith("ln_1.weight") or name.endswith("ln_2.weight") \
                or name.endswith("ln_f.weight"):
            t = 1.0 + 0.1 * torch.randn(shape, generator=generator)
        else:
            t = std * torch.randn(shape, generator=generator)
        tensors.append((name, t))
    with open(f"{folder}/config.json", "w") as out:
        json.dump(config, out, indent=2)
    if shards == 1:
        write_safetensors(f"{folder}/model.safetensors", tensors, dtype)
        return
    per = math.ceil(len(tensors) / shards)
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[s * per:(s + 1) * per]
        write_safetensors(f"{folder}/{file}", part, dtype)
        weight_map.update({name: file for name, _ in part})
    with open(f"{folder}/model.safetensors.index.json", "w") as out:
        json.dump({"metadata": {}, "weight_map": weight_map}, out, indent=2)


def load(folder):
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    try:
        with open(f"{folder}/model.safetensors.index.json") as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    except FileNotFoundError:
        files = ["model.safetensors"]
    weights = {}
    for file in files:
        weights.update(read_safetensors(f"{folder}/{file}"))
    return config, weights


def attention(q, k, v):
    """q [B, H, T, D], k, v [B, KV, T, D]: causal softmax attention, key/value heads repeated (HF repeat_kv)."""
    repeats = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(repeats, dim=1)
    v = v.repeat_interleave(repeats, dim=1)
    t = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def gpt2_logits(config, w, tokens):
    c, heads, eps = config["n_embd"], config["n_head"], config.get("layer_norm_epsilon", 1e-5)
    b, t = tokens.shape
    x = w["transformer.wte.weight"][tokens] + w["transformer.wpe.weight"][:t]

    def conv1d(x, name):  # HF Conv1D: x @ W + b, W [in, out]
        return torch.addmm(w[name + ".bias"], x.reshape(-1, x.shape[-1]), w[name + ".weight"]).reshape(
            *x.shape[:-1], -1)

    def ln(x, name):
        return torch.nn.functional.layer_norm(x, (c,), w[name + ".weight"], w[name + ".bias"], eps)

    def heads_of(y):
        return y.reshape(b, t, heads, c // heads).permute(0, 2, 1, 3)

    for i in range(config["n_layer"]):
        h = f"transformer.h.{i}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(c, dim=-1)
        y = attention(heads_of(q), heads_of(k), heads_of(v)).permute(0, 2, 1, 3).reshape(b, t, c)
        x = x + conv1d(y, h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        m = 0.5 * m * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (m + 0.044715 * m.pow(3))))  # gelu_new
        x = x + conv1d(m, h + "mlp.c_proj")
    return ln(x, "transformer.ln_f") @ w["transformer.wte.weight"].t()


def llama_logits(config, w, tokens):
    c, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim") or c // heads
    eps = config.get("rms_norm_eps", 1e-6)
    theta = config.get("rope_parameters", {}).get("rope_theta", config.get("rope_theta", 10000.0))
    b, t = tokens.shape

    def rms(x, name):
        return w[name] * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    angles = torch.arange(t, dtype=torch.float32)[:, None] * inv_freq[None, :]
    cos, sin = torch.cat([angles, angles], -1).cos(), torch.cat([angles, angles], -1).sin()

    def rope(x):  # rotate_half layout: dimension i pairs with i + d/2
        x1, x2 = x[..., :d // 2], x[..., d // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    x = w["model.embed_tokens.weight"][tokens]
    for i in range(config["num_hidden_layers"]):
        h = f"model.layers.{i}."
        n = rms(x, h + "input_layernorm.weight")
        q = (n @ w[h + "self_attn.q_proj.weight"].t()).reshape(b, t, heads, d).transpose(1, 2)
        k = (n @ w[h + "self_attn.k_proj.weight"].t()).reshape(b, t, kv, d).transpose(1, 2)
        v = (n @ w[h + "self_attn.v_proj.weight"].t()).reshape(b, t, kv, d).transpose(1, 2)
        y = attention(rope(q), rope(k), v).transpose(1, 2).reshape(b, t, heads * d)
        x = x + y @ w[h + "self_attn.o_proj.weight"].t()
        n = rms(x, h + "post_attention_layernorm.weight")
        gate = n @ w[h + "mlp.gate_proj.weight"].t()
        x = x + (gate * torch.sigmoid(gate) * (n @ w[h + "mlp.up_proj.weight"].t())) @ w[h + "mlp.down_proj.weight"].t()
    head = w["model.embed_tokens.weight"] if config.get("tie_word_embeddings") else w["lm_head.weight"]
    return rms(x, "model.norm.weight") @ head.t()


def main(argv):
    if argv[1] == "make":
        options = dict(zip(argv[4::2], argv[5::2]))
        make(argv[2], argv[3], int(options.get("--shards", 1)), options.get("--dtype", "F32"),
             int(options.get("--seed", 0)), options.get("--config", "{}"), float(options.get("--std", 0.2)))
    elif argv[1] == "make-set":
        import os
        for name, kind, shards, dtype in [("gpt2", "gpt2", 1, "F32"), ("llama", "llama", 3, "F32"),
                                          ("llama1", "llama", 1, "F32"), ("mistral", "mistral", 1, "BF16")]:
            os.makedirs(f"{argv[2]}/{name}", exist_ok=True)
            make(kind, f"{argv[2]}/{name}", shards, dtype)
    elif argv[1] == "logits":
        for folder, tokens_file, out in zip(argv[2::3], argv[3::3], argv[4::3]):
            config, weights = load(folder)
            with open(tokens_file + ".json") as f:
                b, t = json.load(f)
            tokens = torch.from_numpy(np.fromfile(tokens_file, dtype=np.int64).reshape(b, t))
            with torch.no_grad():
                run = gpt2_logits if config["model_type"] == "gpt2" else llama_logits
                logits = run(config, weights, tokens)
            logits.float().contiguous().numpy().tofile(out)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
