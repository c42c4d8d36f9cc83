#!/usr/bin/env python3
"""bench/vs_deepspeed/compare.py: the same ds_config.json, Hugging Face folder and batches trained by DeepSpeed and
by zhost on 2 CPU ranks each, and their per-step losses, grad norms, lrs and final fp32 weights compared.

  compare.py make WORK [--kind gpt2|llama] [--model-config JSON] [--init-std S]
      WORK/model (a seeded HF folder, tests/hf/hf_models.py, dropout 0: zhost has none) and WORK/tokens.bin
      (the license texts of /usr/share/common-licenses as uint16 byte ids).
  compare.py one DS_CONFIG WORK [--steps N] [--name NAME] [--peer deepspeed|ddp|compile|fsdp2] [--attn A]
                [--peer-dtype float32|float64]
      Trains DS_CONFIG with zhost and the peer (DeepSpeed unless --peer) and prints one JSON line: max |loss diff|,
      max |weight diff|, ...
  compare.py matrix WORK [--steps N] [--only NAME,...] [--kind gpt2|llama] [--out FILE]
      The configs of CONFIGS below (each written as WORK/configs/NAME.json), one line each, and a markdown
      table to FILE.
  compare.py speed WORK [--steps N] [--rounds R] [--attn sdpa|eager] [--only NAME,...] [--out FILE]
      Tokens/s (whole job) and peak RSS per rank of zhost, DeepSpeed (the configs of SPEED) and the PyTorch peers
      (TORCH_PEERS: DDP, DDP + torch.compile, FSDP2), same threads (--threads, OMP_NUM_THREADS for every side;
      zhost's run.intra_op_threads follows it), medians of R rounds, and the peers' losses against zhost's.
  compare.py check WORK
      The ctest Peer.SameLossesAndWeightsAsDeepSpeed: CHECKS and CHECK_TORCH_PEERS below, each within its
      tolerances; exit 77 (skipped) when DeepSpeed is not installed.

zhost: ZHOST (default build/bin/zhost) run DS_CONFIG --nproc 2 --companion WORK/NAME/companion.toml (model,
data, steps, seed, where to write: what a ds_config.json leaves to the training script), then `zhost export`
of its final checkpoint. DeepSpeed: torchrun --nproc-per-node 2 ds_train.py (deepspeed.initialize with the
file as it is). Both read the same token windows: ds_train.py reproduces zhost's sampling (samples.py).
"""
import argparse
import copy
import json
import os
import shutil
import struct
import subprocess
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SEQ_LEN = 64
SEED = 1234
SIZES = {"gpt2": {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_positions": 128,
                  "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0},
         "llama": {"num_hidden_layers": 4, "hidden_size": 128, "intermediate_size": 344,
                   "max_position_embeddings": 128}}

BASE = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
        "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8,
                                                  "weight_decay": 0.01}},
        "zero_optimization": {"stage": 0}}


def variant(stage, dtype="fp32", offload=False, gas=1, clip=0.0, scheduler=None, optimizer="AdamW",
            adam_w_mode=None, bf16_master=False, bf16_states=False):
    c = copy.deepcopy(BASE)
    c["zero_optimization"]["stage"] = stage
    if dtype == "bf16":
        c["bf16"] = {"enabled": True}
        if bf16_master:
            c["bf16"]["bf16_master_weights_and_grads"] = True
        if bf16_states:
            c["bf16"]["bf16_optimizer_states"] = True
    if offload:
        c["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
    c["gradient_accumulation_steps"] = gas
    if clip:
        c["gradient_clipping"] = clip
    if scheduler == "WarmupLR":
        c["scheduler"] = {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                         "warmup_num_steps": 10, "warmup_type": "linear"}}
    elif scheduler == "WarmupDecayLR":
        c["scheduler"] = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                                              "warmup_num_steps": 10, "total_num_steps": 50}}
    elif scheduler == "OneCycle":  # cycle_momentum unwritten: on, as DeepSpeed's default (betas change every step)
        c["scheduler"] = {"type": "OneCycle", "params": {
            "cycle_min_lr": 1e-4, "cycle_max_lr": 1e-3, "cycle_first_step_size": 5, "cycle_second_step_size": 5,
            "decay_step_size": 5, "decay_lr_rate": 0.1, "cycle_min_mom": 0.85, "cycle_max_mom": 0.95,
            "decay_mom_rate": 0.001}}
    c["optimizer"]["type"] = optimizer
    if adam_w_mode is not None:
        c["optimizer"]["params"]["adam_w_mode"] = adam_w_mode
    return c


CONFIGS = {}
for _stage in range(4):
    CONFIGS[f"s{_stage}-fp32"] = variant(_stage)
    CONFIGS[f"s{_stage}-bf16"] = variant(_stage, "bf16")
for _stage in (2, 3):
    CONFIGS[f"s{_stage}-offload-fp32"] = variant(_stage, offload=True)
    CONFIGS[f"s{_stage}-offload-bf16"] = variant(_stage, "bf16", offload=True)
CONFIGS["s1-gas2"] = variant(1, gas=2)
CONFIGS["s2-gas2-bf16"] = variant(2, "bf16", gas=2)
CONFIGS["s2-clip"] = variant(2, clip=1.0)
CONFIGS["s3-clip-bf16"] = variant(3, "bf16", clip=1.0)
CONFIGS["s0-warmuplr"] = variant(0, scheduler="WarmupLR")
CONFIGS["s2-warmupdecaylr"] = variant(2, scheduler="WarmupDecayLR")
CONFIGS["s1-adam"] = variant(1, optimizer="Adam")
CONFIGS["s2-adam-l2"] = variant(2, optimizer="Adam", adam_w_mode=False)
CONFIGS["s2-offload-adam-l2"] = variant(2, offload=True, optimizer="Adam", adam_w_mode=False)
CONFIGS["s0-onecycle"] = variant(0, scheduler="OneCycle")
CONFIGS["s2-offload-onecycle"] = variant(2, offload=True, scheduler="OneCycle")
for _stage in (1, 2, 3):  # DeepSpeed's bf16 master weights and gradients (ZeRO-Offload with its CPU Adam)
    CONFIGS[f"s{_stage}-offload-bf16master"] = variant(_stage, "bf16", offload=True, bf16_master=True)
    CONFIGS[f"s{_stage}-offload-bf16states"] = variant(_stage, "bf16", offload=True, bf16_master=True,
                                                        bf16_states=True)
    # without offload: masters and moments in bf16 on the device (DeepSpeed's fused Adam; zhost's kit Adam)
    CONFIGS[f"s{_stage}-bf16states"] = variant(_stage, "bf16", bf16_master=True, bf16_states=True)


def venv_python():
    venv = os.environ.get("ZHOST_VENV") or os.path.join(os.environ.get("XDG_CACHE_HOME") or
                                                        os.path.expanduser("~/.cache"), "zhost/venv")
    return os.path.join(venv, "bin")


def make(work, kind, overrides=None, init_std=0.2):
    """WORK/model, a seeded HF folder of SIZES[kind] (OVERRIDES, a dict, replaces entries: a bigger model for
    memory; INIT_STD: the weights' normal init, GPT-2's own is 0.02), and WORK/tokens.bin, the license texts as
    byte tokens."""
    model = os.path.join(work, "model")
    os.makedirs(model, exist_ok=True)
    subprocess.run([os.path.join(venv_python(), "python"), os.path.join(ROOT, "tests/hf/hf_models.py"), "make",
                    kind, model, "--seed", "1", "--config", json.dumps({**SIZES[kind], **(overrides or {})}),
                    "--std", str(init_std)],
                   check=True)
    licenses = "/usr/share/common-licenses"
    data = b"".join(open(os.path.join(licenses, f), "rb").read() for f in sorted(os.listdir(licenses))
                    if os.path.isfile(os.path.join(licenses, f)))
    with open(os.path.join(work, "tokens.bin"), "wb") as out:
        out.write(b"".join(struct.pack("<H", b) for b in data))


def read_safetensors(path):
    from safetensors.torch import load_file
    return load_file(path)


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def run_logged(cmd, log, env=None, timeout=1800):
    with open(log, "w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=ROOT)
    if proc.returncode != 0:
        with open(log) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}; the end of {log}:\n{tail}")


def threads_env(threads):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(threads)
    env["DS_ACCELERATOR"] = "cpu"
    return env


def run_zhost(config_path, work, run, steps, zhost, threads, extra_set=(), export=True):
    os.makedirs(run, exist_ok=True)
    companion = os.path.join(run, "companion.toml")
    with open(companion, "w") as out:
        out.write(f'steps = {steps}\nseed = {SEED}\n[model]\ntype = "hf"\npath = "{work}/model"\n'
                  f'seq_len = {SEQ_LEN}\n[data]\ntype = "tokens"\npath = "{work}/tokens.bin"\n'
                  f'[run]\ndir = "{run}"\nname = "zhost"\n'
                  f'[checkpoint]\ndir = "{run}/zhost-checkpoints"\nat_end = true\n')
    shutil.rmtree(os.path.join(run, "zhost"), ignore_errors=True)
    shutil.rmtree(os.path.join(run, "zhost-checkpoints"), ignore_errors=True)
    shutil.rmtree(os.path.join(run, "zhost-export"), ignore_errors=True)
    cmd = [zhost, "run", config_path, "--companion", companion, "--nproc", "2"]
    for s in extra_set:
        cmd += ["--set", s]
    start = time.time()
    run_logged(cmd, os.path.join(run, "zhost.log"), threads_env(threads))
    wall = time.time() - start
    if not export:
        return wall
    run_logged([zhost, "export", os.path.join(run, "zhost-checkpoints"), os.path.join(run, "zhost-export")],
               os.path.join(run, "zhost-export.log"))
    return wall


def run_peer(config_path, work, run, steps, threads, peer="deepspeed", attn="eager", dtype="float32"):
    out = os.path.join(run, peer)
    shutil.rmtree(out, ignore_errors=True)
    cmd = [os.path.join(venv_python(), "torchrun"), "--nproc-per-node", "2", "--master-port",
           str(29500 + os.getpid() % 1000), os.path.join(HERE, "ds_train.py"),
           "--config", config_path, "--model", os.path.join(work, "model"), "--tokens",
           os.path.join(work, "tokens.bin"), "--seq-len", str(SEQ_LEN), "--steps", str(steps), "--seed",
           str(SEED), "--out", out, "--peer", peer, "--attn", attn, "--dtype", dtype]
    start = time.time()
    run_logged(cmd, out + ".log", threads_env(threads))
    return time.time() - start


def compare(run, peer="deepspeed"):
    """Max differences between the zhost and PEER runs in RUN."""
    z = [r for r in read_jsonl(os.path.join(run, "zhost", "metrics.jsonl")) if "loss" in r]
    d = read_jsonl(os.path.join(run, peer, "metrics.jsonl"))
    if len(z) != len(d):
        raise RuntimeError(f"{run}: zhost logged {len(z)} steps, {peer} {len(d)}")
    loss = [abs(a["loss"] - b["loss"]) for a, b in zip(z, d)]
    lr = [abs(a["lr"] - b["lr"]) for a, b in zip(z, d)]
    norms = [abs(a["grad_norm"] - b["grad_norm"]) / max(abs(b["grad_norm"]), 1e-12) for a, b in zip(z, d)
             if b.get("grad_norm") is not None and a.get("grad_norm") is not None]
    zw = {}
    export = os.path.join(run, "zhost-export")
    for f in sorted(os.listdir(export)):
        if f.endswith(".safetensors"):
            zw.update(read_safetensors(os.path.join(export, f)))
    dw = read_safetensors(os.path.join(run, peer, "weights.safetensors"))
    missing = sorted(set(dw) ^ set(zw))
    if missing:
        raise RuntimeError(f"{run}: tensors in only one of the two weight sets: {missing[:6]}")
    weight, worst, rest, rest_worst = 0.0, "", 0.0, ""
    for name, t in dw.items():
        diff = (zw[name].float() - t.float()).abs()
        if diff.max().item() > weight:
            weight, worst = diff.max().item(), name
        # GPT-2's attention key bias: softmax ignores a score added to a whole row, so its gradient is 0 but for
        # rounding, and Adam turns that noise into steps of up to lr: it differs between any two implementations.
        if name.endswith("attn.c_attn.bias"):
            width = diff.numel() // 3
            diff = torch.cat([diff[:width], diff[2 * width:]])
        if diff.max().item() > rest:
            rest, rest_worst = diff.max().item(), name
    first = next((i + 1 for i, x in enumerate(loss) if x > 1e-5), None)
    return {"steps": len(z), "max_loss_diff": max(loss), "first_step_loss_diff_over_1e-5": first,
            "step1_loss_diff": loss[0], "max_lr_diff": max(lr), "max_grad_norm_rel_diff": max(norms) if norms else None,
            "max_weight_diff": weight, "worst_tensor": worst, "max_weight_diff_but_key_bias": rest,
            "worst_tensor_but_key_bias": rest_worst, "final_loss_zhost": z[-1]["loss"],
            "final_loss_deepspeed": d[-1]["loss"]}


def one(config, work, name, steps, zhost, threads, extra_set=(), peer="deepspeed", attn="eager",
        peer_dtype="float32"):
    run = os.path.join(work, "runs", name if peer == "deepspeed" else f"{name}-{peer}")
    os.makedirs(run, exist_ok=True)
    path = os.path.join(run, "ds_config.json")
    if isinstance(config, dict):
        with open(path, "w") as out:
            json.dump(config, out, indent=2)
    else:
        shutil.copyfile(config, path)
    run_zhost(path, work, run, steps, zhost, threads, extra_set)
    run_peer(path, work, run, steps, threads, peer, attn, peer_dtype)
    result = {"name": name if peer == "deepspeed" else f"{name} {peer}", **compare(run, peer)}
    print(json.dumps(result), flush=True)
    return result


def table(results):
    lines = ["| config | steps | max loss diff | first step > 1e-5 | max weight diff (tensor) | same, but the key bias "
             "(tensor) | grad-norm rel diff | lr diff | final loss zhost / DeepSpeed |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['name']} | - | error: {r['error']} | | | | | | |")
            continue
        norm = "-" if r["max_grad_norm_rel_diff"] is None else f"{r['max_grad_norm_rel_diff']:.1e}"
        short = lambda name: name.replace("transformer.", "").replace("model.", "")  # noqa: E731
        lines.append(f"| {r['name']} | {r['steps']} | {r['max_loss_diff']:.2e} | "
                     f"{r['first_step_loss_diff_over_1e-5'] or '-'} | {r['max_weight_diff']:.1e} ({short(r['worst_tensor'])}) "
                     f"| {r['max_weight_diff_but_key_bias']:.1e} ({short(r['worst_tensor_but_key_bias'])}) | {norm} | "
                     f"{r['max_lr_diff']:.1e} | {r['final_loss_zhost']:.5f} / {r['final_loss_deepspeed']:.5f} |")
    return "\n".join(lines)


SPEED = ["s0-fp32", "s1-fp32", "s2-fp32", "s3-fp32", "s2-offload-fp32", "s3-offload-fp32", "s3-bf16"]
# The PyTorch peers of `speed` (ds_train.py's --peer, Note [The PyTorch peers]) and the config each trains, whose
# zhost and DeepSpeed runs they are set against: DDP (eager and compiled) against stage 0, FSDP2 against stage 3.
TORCH_PEERS = {"ddp": "s0-fp32", "compile": "s0-fp32", "fsdp2": "s3-fp32"}
PEER_NAMES = {"deepspeed": "DeepSpeed", "ddp": "PyTorch DDP", "compile": "PyTorch DDP + torch.compile",
              "fsdp2": "PyTorch FSDP2"}


def speed_of(side_dir, side, config):
    """Tokens/s of the whole job (from the median step time of step 6 on, the same rule for every side) and peak
    RSS per rank of one side's run."""
    import statistics
    tokens = config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * 2 * SEQ_LEN
    if side == "zhost":
        steps = [r["step_time_ms"] / 1e3 for r in read_jsonl(os.path.join(side_dir, "metrics.jsonl"))
                 if "step_time_ms" in r]
        rss = [max(r["memory"]["peak_rss"] for r in read_jsonl(os.path.join(side_dir, f"steps.rank{k}.jsonl")))
               for k in range(2)]
    else:
        steps = [r["step_s"] for r in read_jsonl(os.path.join(side_dir, "metrics.jsonl"))]
        rss = [json.load(open(os.path.join(side_dir, f"rank{k}.json")))["peak_rss_bytes"] for k in range(2)]
    return {"tokens_per_s": tokens / statistics.median(steps[5:]), "peak_rss_mb": [x / 2**20 for x in rss]}


def losses(side_dir):
    return [r["loss"] for r in read_jsonl(os.path.join(side_dir, "metrics.jsonl")) if "loss" in r]


def speed(work, steps, zhost, threads, rounds, attn, only=()):
    """Every side of SPEED and TORCH_PEERS, ROUNDS times; within a round the configs and, for each config, the
    order of its sides move on by one each round (the machine is shared: a side run first or last in every round
    would meet the same neighbours every time). Medians over the rounds."""
    import statistics
    groups = {name: ["zhost", "deepspeed"] for name in SPEED if not only or name in only}
    for peer, name in TORCH_PEERS.items():
        if name in groups:
            groups[name].append(peer)
    names = list(groups)
    got, loads = {}, []
    for r in range(rounds):
        loads.append(os.getloadavg())
        print(f"round {r + 1}: load average {loads[-1][0]:.2f} {loads[-1][1]:.2f} {loads[-1][2]:.2f}", flush=True)
        for name in names[r % len(names):] + names[:r % len(names)]:
            sides = groups[name][r % len(groups[name]):] + groups[name][:r % len(groups[name])]
            run = os.path.join(work, "speed", f"round{r + 1}", name)
            os.makedirs(run, exist_ok=True)
            path = os.path.join(run, "ds_config.json")
            with open(path, "w") as out:
                json.dump(CONFIGS[name], out, indent=2)
            for side in sides:
                if side == "zhost":
                    run_zhost(path, work, run, steps, zhost, threads, export=False)
                else:
                    run_peer(path, work, run, steps, threads, peer=side, attn=attn)
                got.setdefault((name, side), []).append(speed_of(os.path.join(run, side), side, CONFIGS[name]))
                print(json.dumps({"round": r + 1, "config": name, "side": side, **got[(name, side)][-1]}),
                      flush=True)
    med = {k: {"tokens_per_s": statistics.median(x["tokens_per_s"] for x in v),
               "peak_rss_mb": [statistics.median(x["peak_rss_mb"][k2] for x in v) for k2 in range(2)]}
           for k, v in got.items()}
    lines = [f"Medians of {rounds} rounds; ratios are peer / zhost (tokens/s above 1: the peer is faster; RSS above "
             f"1: the peer takes more).", "",
             "| peer | config | peer tokens/s | zhost tokens/s | peer / zhost | peer peak RSS per rank (MB) | "
             "zhost peak RSS per rank (MB) | peer / zhost |", "|---|---|---|---|---|---|---|---|"]
    for name in names:
        z = med[(name, "zhost")]
        for side in groups[name][1:]:
            p = med[(name, side)]
            lines.append(f"| {PEER_NAMES[side]} | {name} | {p['tokens_per_s']:.0f} | {z['tokens_per_s']:.0f} | "
                         f"{p['tokens_per_s'] / z['tokens_per_s']:.2f} | {p['peak_rss_mb'][0]:.0f}, "
                         f"{p['peak_rss_mb'][1]:.0f} | {z['peak_rss_mb'][0]:.0f}, {z['peak_rss_mb'][1]:.0f} | "
                         f"{max(p['peak_rss_mb']) / max(z['peak_rss_mb']):.2f} |")
    lines += ["", "Tokens/s of every round (load average 1/5/15 min at the round's start):", "",
              "| config | side | " + " | ".join(f"round {r + 1} ({l[0]:.1f}/{l[1]:.1f}/{l[2]:.1f})"
                                               for r, l in enumerate(loads)) + " |",
              "|---|---|" + "---|" * rounds]
    for name in names:
        for side in groups[name]:
            lines.append(f"| {name} | {side} | " + " | ".join(f"{x['tokens_per_s']:.0f}" for x in got[(name, side)])
                         + " |")
    lines += ["", "Losses of round 1 against zhost's run of the same config (same init, same batches):", "",
              "| config | side | step-1 loss zhost | step-1 loss diff | max loss diff, steps 1-5 | max loss diff, "
              "all steps |", "|---|---|---|---|---|---|"]
    for name in names:
        z = losses(os.path.join(work, "speed", "round1", name, "zhost"))
        for side in groups[name][1:]:
            p = losses(os.path.join(work, "speed", "round1", name, side))
            d = [abs(a - b) for a, b in zip(z, p)]
            lines.append(f"| {name} | {side} | {z[0]:.7f} | {d[0]:.1e} | {max(d[:5]):.1e} | {max(d):.1e} |")
    return "\n".join(lines)


# `check` (the ctest Peer.SameLossesAndWeightsAsDeepSpeed): these configs, CHECK_STEPS steps each, and the
# largest differences each may show (RESULTS.md gives what they were measured to be, and why they are not 0).
CHECK_STEPS = 20
CHECKS = {  # name: (max |loss diff| at any step, max |weight diff| but the key bias, max |lr diff|)
    "s1-gas2": (5e-5, 1e-3, 1e-9),
    "s2-warmupdecaylr": (5e-5, 1e-3, 1e-9),
    "s2-offload-adam-l2": (5e-5, 1e-3, 1e-9),
    "s0-onecycle": (5e-5, 1e-3, 1e-9),  # OneCycle's momentum: stage 0's per-step betas
    "s2-offload-onecycle": (5e-5, 1e-3, 1e-9),  # the CPU tier's
    "s3-bf16": (2e-2, 5e-2, 1e-9),
    "s2-offload-bf16states": (2e-2, 5e-2, 1e-9),  # bf16 masters and Adam moments in the CPU tier
    "s3-bf16states": (2e-2, 5e-2, 1e-9),  # the same without offload, kept by stage 3 (the master is the shard)
}
# The same on the Llama folder (`make --kind llama`: rotary embeddings, RMSNorm, SiLU gating, grouped key/value
# heads), fp32 at stage 3; its bf16 rows are outside the GPT-2 bf16 tolerance (RESULTS.md, Llama).
CHECKS_LLAMA = {"s3-fp32": (5e-5, 1e-3, 1e-9)}
# The PyTorch peers of TORCH_PEERS checked the same way (HF's sdpa attention, as `speed` runs them; the slow
# compile of DDP + torch.compile is left to `speed`, which reports its losses).
CHECK_TORCH_PEERS = {"ddp": (5e-5, 1e-3, 1e-9), "fsdp2": (5e-5, 1e-3, 1e-9)}


def check(work, zhost, threads):
    try:
        import deepspeed  # noqa: F401
        import transformers  # noqa: F401
        import xxhash  # noqa: F401
    except ImportError as e:
        print(f"SKIPPED: DeepSpeed's side is not installed in this venv ({e}); install it with "
              f"bench/vs_deepspeed/README.md's command, then run ctest -L peer")
        return 77
    llama = os.path.join(work, "llama")
    for folder, kind in ((work, "gpt2"), (llama, "llama")):
        if not os.path.exists(os.path.join(folder, "tokens.bin")):
            make(folder, kind)
    failures = []
    # (model folder, config, run name, peer, attention of the Python side, tolerances)
    runs = [(work, name, name, "deepspeed", "eager", tols) for name, tols in CHECKS.items()]
    runs += [(llama, name, "llama-" + name, "deepspeed", "eager", tols) for name, tols in CHECKS_LLAMA.items()]
    runs += [(work, TORCH_PEERS[peer], TORCH_PEERS[peer], peer, "sdpa", tols)
             for peer, tols in CHECK_TORCH_PEERS.items()]
    for folder, config, name, peer, attn, (loss_tol, weight_tol, lr_tol) in runs:
        r = one(CONFIGS[config], folder, name, CHECK_STEPS, zhost, threads, peer=peer, attn=attn)
        name = r["name"]
        for what, got, tol in (("loss", r["max_loss_diff"], loss_tol),
                               ("weight (but the key bias)", r["max_weight_diff_but_key_bias"], weight_tol),
                               ("lr", r["max_lr_diff"], lr_tol)):
            if not got <= tol:
                failures.append(f"{name}: max {what} diff {got:.3e} > {tol:.1e}")
    for f in failures:
        print("FAILED:", f)
    print(f"{len(runs) - len({f.split(':')[0] for f in failures})} passed, "
          f"{len({f.split(':')[0] for f in failures})} failed")
    return 1 if failures else 0


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["make", "one", "matrix", "check", "speed"])
    p.add_argument("args", nargs="+")
    p.add_argument("--kind", default="gpt2")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--name", default=None)
    p.add_argument("--only", default="")
    p.add_argument("--out", default=None)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--rounds", type=int, default=3, help="speed: rounds, medians over them")
    p.add_argument("--attn", default=None, help="HF attn_implementation of the Python side(s): eager or sdpa "
                   "(default: sdpa for speed, eager for one)")
    p.add_argument("--peer", default="deepspeed", choices=["deepspeed", "ddp", "compile", "fsdp2"],
                   help="one: the side set against zhost")
    p.add_argument("--set", action="append", default=[], dest="extra_set")
    p.add_argument("--zhost", default=os.path.join(ROOT, "build/bin/zhost"))
    p.add_argument("--init-std", type=float, default=0.2, help="make: std of the weights' normal init")
    p.add_argument("--peer-dtype", default="float32", choices=["float32", "float64"],
                   help="one: the PyTorch peer's dtype (float64: a reference for fp32 rounding)")
    p.add_argument("--model-config", default="{}",
                   help="make: JSON entries that replace SIZES[kind]'s, e.g. '{\"n_layer\": 12, \"n_embd\": 768}'")
    a = p.parse_args()
    if a.what == "check":
        sys.exit(check(os.path.abspath(a.args[0]), a.zhost, a.threads))
    if a.what == "speed":
        text = speed(os.path.abspath(a.args[0]), a.steps, a.zhost, a.threads, a.rounds, a.attn or "sdpa",
                     [n for n in a.only.split(",") if n])
        print(text)
        if a.out:
            with open(a.out, "w") as out:
                out.write(text + "\n")
        return
    if a.what == "make":
        make(os.path.abspath(a.args[0]), a.kind, json.loads(a.model_config), a.init_std)
    elif a.what == "one":
        config, work = a.args[0], os.path.abspath(a.args[1])
        one(config, work, a.name or os.path.splitext(os.path.basename(config))[0], a.steps, a.zhost, a.threads,
            a.extra_set, a.peer, a.attn or "eager", a.peer_dtype)
    else:
        work = os.path.abspath(a.args[0])
        names = [n for n in CONFIGS if not a.only or n in a.only.split(",")]
        results = []
        for n in names:
            try:
                results.append(one(CONFIGS[n], work, n, a.steps, a.zhost, a.threads, a.extra_set))
            except Exception as e:  # one failing config does not stop the others; it is in the table
                print(f"{n}: {e}", file=sys.stderr, flush=True)
                results.append({"name": n, "error": str(e).splitlines()[0][:200]})
        text = table(results)
        print(text)
        if a.out:
            with open(a.out, "w") as out:
                out.write(text + "\n")


if __name__ == "__main__":
    main()
