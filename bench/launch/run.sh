#!/usr/bin/env bash
# bench/launch/run.sh: how long a short training job takes from the command to its exit (start-up,
# rendezvous, set-up, 2 steps, shut-down), zhost against PyTorch, in one run.
#
#   bench/launch/run.sh [RESULTS_DIR]
#
# Sides, each a 2-rank job of bench/vs_pytorch's 3m gpt (2 steps, micro-batch 8, seq 128):
#   forked   `zhost run --nproc 2`: ranks forked from the launcher (Note [Forked ranks])
#   exec     the same with ZHOST_LAUNCH=exec: every rank runs zhost again and loads LibTorch itself
#   pytorch  bench/vs_pytorch/pytorch_ddp.py --nproc 2 (the venv's torch, DDP over Gloo)
# The sides run back to back in an order that rotates between rounds; the result is each side's median
# wall time over the rounds and the ratios of the medians.
#
# Environment: BUILD (default: build/ of this checkout), ROUNDS (7), PYTHON ($ZHOST_VENV/bin/python).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
rounds=${ROUNDS:-7}
source "$root/scripts/lib/env.sh"
python=${PYTHON:-$ZHOST_VENV/bin/python}  # torch 2.11, the LibTorch zhost builds against
results=${1:-$(mktemp -d /tmp/zhost-launch.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null || { echo "run.sh: $python has no torch (scripts/setup-deps installs it into $ZHOST_VENV)" >&2; exit 2; }
mkdir -p "$results"
unset OMP_NUM_THREADS ZHOST_LAUNCH

source "$here/../machine.sh"
describe_machine "$zhost" "BUILD=$build ROUNDS=$rounds bench/launch/run.sh $*" > "$results/machine.txt"

gpt=(--set model.layers=4 --set model.width=256 --set model.heads=8 --set model.seq_len=128
     --set train_micro_batch_size_per_gpu=8 --set steps=2 --set run.save_final_weights=false)

run_side() {  # SIDE ROUND -> wall seconds on stdout
  local start end
  start=$(date +%s.%N)
  case $1 in
    forked) "$zhost" --log-level warn run "$root/bench/vs_pytorch/gpt.toml" --nproc 2 "${gpt[@]}" \
              --set "run.dir=$results/runs" --set "run.name=forked$2" > "$results/forked$2.log" 2>&1 ;;
    exec) ZHOST_LAUNCH=exec "$zhost" --log-level warn run "$root/bench/vs_pytorch/gpt.toml" --nproc 2 "${gpt[@]}" \
            --set "run.dir=$results/runs" --set "run.name=exec$2" > "$results/exec$2.log" 2>&1 ;;
    pytorch) "$python" "$root/bench/vs_pytorch/pytorch_ddp.py" --layers 4 --width 256 --heads 8 --seq-len 128 \
               --vocab 256 --micro-batch 8 --steps 2 --warmup 0 --nproc 2 --threads 1 \
               --port $((29500 + RANDOM % 1000)) > "$results/pytorch$2.log" 2>&1 ;;
  esac
  end=$(date +%s.%N)
  awk -v start="$start" -v end="$end" 'BEGIN { printf "%.3f\n", end - start }'
}

sides=(forked exec pytorch)
: > "$results/times.txt"
for (( round = 1; round <= rounds; ++round )); do
  for (( i = 0; i < ${#sides[@]}; ++i )); do
    side=${sides[$(( (i + round - 1) % ${#sides[@]} ))]}
    seconds=$(run_side "$side" "$round") || { echo "run.sh: $side failed, see $results/$side$round.log" >&2; exit 1; }
    echo "$side $seconds" >> "$results/times.txt"
  done
done

"$python" - "$results/times.txt" <<'PY'
import statistics, sys
times = {}
for line in open(sys.argv[1]):
    side, seconds = line.split()
    times.setdefault(side, []).append(float(seconds))
median = {side: statistics.median(values) for side, values in times.items()}
print("| side | median s | min s | max s |")
print("|---|---|---|---|")
for side in ("forked", "exec", "pytorch"):
    print(f"| {side} | {median[side]:.2f} | {min(times[side]):.2f} | {max(times[side]):.2f} |")
print()
print(f"forked / exec: {median['forked'] / median['exec']:.2f}; forked / pytorch: {median['forked'] / median['pytorch']:.2f}")
PY
