#!/usr/bin/env bash
# bench/dpu/run.sh BUILD_DIR DIR [ROUNDS] [STEPS]: throughput with ZeRO-Offload's delayed parameter update
# (zero.offload_optimizer.delayed_update, docs/config.md "Delayed parameter update") against the same job
# without it, on a job where the offloaded optimizer step is a large share of the step: a wide gpt (width
# 1024, 4 layers, 50M parameters) on 16-token micro-batches of 1 sample, stage 2, 2 ranks. Three setups:
#   cpu     the CPU tier (zero.offload_optimizer.device = "cpu")
#   nvme    the NVMe tier (device = "nvme", its files under DIR)
#   cpu-1r  the CPU tier on 1 rank with 1 compute thread and 1 optimizer thread: a core left to the
#           background step (the other setups keep every core busy with compute)
# Each setup runs without and with DPU (delayed from step 1), alternating, ROUNDS times. Per run: the median
# tokens/s over steps 3 to STEPS-1 (the first steps warm up, the last one waits for its update) and the mean
# time the host waits in the stage's step(); per setup: the median over rounds and the ratio with / without.
# EXTRAPOLATION=K and/or LOOKAHEAD=C add a third run per setup and round, DPU with
# experimental.delayed_update_extrapolation = K and experimental.delayed_update_lookahead = C
# ("ext"), and its ratios to DPU without them and to no DPU. STAGE=3 runs the same jobs at ZeRO stage 3 (default 2).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR DIR [ROUNDS] [STEPS]}
dir=${2:?usage: run.sh BUILD_DIR DIR [ROUNDS] [STEPS]}
rounds=${3:-3}
steps=${4:-12}
work=$(mktemp -d "$dir/bench-dpu-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/nvme"
cat >"$work/job.toml" <<TOML
steps = $steps
seed = 1234
train_micro_batch_size_per_gpu = 1
steps_per_print = $steps
gradient_clipping = 1.0
[model]
type = "gpt"
layers = 4
heads = 8
width = 1024
vocab = 256
seq_len = 16
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 3e-4
[zero]
stage = ${STAGE:-2}
[run]
device = "cpu"
TOML
echo "stage ${STAGE:-2}, date $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git -C "$(dirname "$0")" rev-parse --short HEAD)," \
  "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
out=$work/results.txt
predicted=${EXTRAPOLATION:-}${LOOKAHEAD:-}  # non-empty: the third run
for round in $(seq "$rounds"); do
  for setup in cpu nvme cpu-1r; do
    for dpu in off on ${predicted:+ext}; do
      case $setup in
        cpu) args=(--nproc 2 --set zero.offload_optimizer.device=cpu) ;;
        nvme) args=(--nproc 2 --set zero.offload_optimizer.device=nvme --set zero.offload_optimizer.nvme_path="$work/nvme") ;;
        cpu-1r) args=(--nproc 1 --set zero.offload_optimizer.device=cpu --set run.intra_op_threads=1
          --set offload_cpu.threads=1) ;;
      esac
      [ $dpu != off ] && args+=(--set zero.offload_optimizer.delayed_update=true
        --set zero.offload_optimizer.delayed_update_start_step=1)
      [ $dpu = ext ] && args+=(--set experimental.delayed_update_extrapolation="${EXTRAPOLATION:-0}"
        --set experimental.delayed_update_lookahead="${LOOKAHEAD:-0}")
      name=$setup-$dpu-$round
      "$build/bin/zhost" run "$work/job.toml" "${args[@]}" --set run.dir="$work/runs" --set run.name="$name" \
        >"$work/$name.log" 2>&1 || { cat "$work/$name.log"; exit 1; }
      /usr/bin/python3 - "$work/runs/$name/metrics.jsonl" "$setup" "$dpu" "$steps" <<'PY' | tee -a "$out"
import json, statistics, sys
path, setup, dpu, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
records = [json.loads(line) for line in open(path)]
kept = [r for r in records if 3 <= r["step"] < steps]
print(setup, dpu, "%.1f" % statistics.median(r["tokens_per_s"] for r in kept),
      "%.1f" % statistics.mean(r["step_ms"] for r in kept), "%.1f" % statistics.mean(r["step_time_ms"] for r in kept))
PY
      rm -rf "$work/runs/$name"
    done
  done
done
echo "load average after $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    setup, dpu, tokens, step_ms, iteration_ms = line.split()
    runs.setdefault((setup, dpu), []).append((float(tokens), float(step_ms), float(iteration_ms)))
def table(base, other, base_name, other_name):
    """One row per setup: `other` against `base` (tokens/s, the host's time in step(), the whole step)."""
    print(f"| setup | tokens/s {base_name} | {other_name} | ratio {other_name} / {base_name} | "
          f"step() ms {base_name} / {other_name} | step time ms {base_name} / {other_name} |")
    print("|---|---|---|---|---|---|")
    med = lambda rs, i: statistics.median(r[i] for r in rs)
    for setup in ("cpu", "nvme", "cpu-1r"):
        a, b = runs[(setup, base)], runs[(setup, other)]
        print(f"| {setup} | {med(a, 0):.1f} | {med(b, 0):.1f} | {med(b, 0) / med(a, 0):.2f} "
              f"(rounds: {', '.join(f'{y[0] / x[0]:.2f}' for x, y in zip(a, b))}) | "
              f"{med(a, 1):.0f} / {med(b, 1):.0f} | {med(a, 2):.0f} / {med(b, 2):.0f} |")
table("off", "on", "without DPU", "with DPU")
if any(dpu == "ext" for _, dpu in runs):
    print()
    table("on", "ext", "DPU", "DPU predicted")
    print()
    table("off", "ext", "without DPU", "DPU predicted")
PY
