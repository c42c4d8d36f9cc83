#!/usr/bin/env bash
# bench/checkpoint/async.sh BUILD_DIR DIR [ROUNDS]: what a checkpoint costs a training job, synchronous and
# asynchronous. The 101M-parameter llama of examples/configs/stage3.toml on 2 ranks at stage 2 trains 12 steps
# three ways, interleaved for ROUNDS rounds: without checkpoints, saving every 4 steps (3 saves of 1.2 GB: fp32
# masters and Adam's two states), and the same with experimental.checkpoint_async. Prints each run's wall time and, per
# save, the time the run took over the one without checkpoints (medians over rounds).
set -euo pipefail
build=${1:?usage: async.sh BUILD_DIR DIR [ROUNDS]}
dir=${2:?usage: async.sh BUILD_DIR DIR [ROUNDS]}
rounds=${3:-2}
work=$(mktemp -d "$dir/bench-async-XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/job.toml" <<TOML
steps = 12
seed = 1234
train_micro_batch_size_per_gpu = 1
steps_per_print = 12
[model]
type = "llama"
layers = 32
heads = 8
width = 512
vocab = 256
seq_len = 64
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 3e-4
[zero]
stage = 2
[run]
device = "cpu"
TOML
job() {
  "$build/bin/zhost" run "$work/job.toml" --nproc 2 --set run.dir="$work/runs" --set checkpoint.dir="$work/ckpt-$1" \
    "${@:2}" >"$work/$1.log" 2>&1 || { cat "$work/$1.log"; exit 1; }
}
out=$work/times.txt
for round in $(seq "$rounds"); do
  for variant in none sync async; do
    case $variant in
      none) args=() ;;
      sync) args=(--set checkpoint.interval=4) ;;
      async) args=(--set checkpoint.interval=4 --set experimental.checkpoint_async=true) ;;
    esac
    start=$(date +%s.%N)
    job "$variant" "${args[@]}"
    end=$(date +%s.%N)
    echo "$variant $(/usr/bin/python3 -c "print($end - $start)")" | tee -a "$out"
    rm -rf "$work/ckpt-$variant" "$work/runs"
  done
done
/usr/bin/python3 - "$out" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    name, seconds = line.split()
    times.setdefault(name, []).append(float(seconds))
med = {k: statistics.median(v) for k, v in times.items()}
print("median wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in med.items()))
for k in ("sync", "async"):
    print(f"{k}: {(med[k] - med['none']) / 3:.2f} s per save over the run without checkpoints")
PY
