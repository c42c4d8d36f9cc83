#!/usr/bin/env bash
# bench/vs_pytorch/run.sh: zhost's training speed on the CPU against PyTorch eager on the same model,
# LibTorch, BLAS, threads and batch, in one run.
#
#   bench/vs_pytorch/run.sh [RESULTS_DIR]
#
# Sides: PyTorch DistributedDataParallel over Gloo (pytorch_ddp.py, the venv's torch) and `zhost run` at
# ZeRO stages 0, 2 and 3, each on 1 and 2 local ranks, for a gpt of ~3M and one of ~30M parameters.
# Threads: both sides run CPUs / ranks intra-op threads per rank (zhost chooses that itself, Note [CPU
# threads per rank]; PyTorch is told). Per round the sides of a configuration run back to back in an order
# that rotates between rounds, so the machine's drift hits all alike; report.py takes each round's ratio
# to PyTorch and prints the median over rounds. The machine's sgemm GFLOP/s (sgemm.py) is measured in the
# same run, for MFU.
#
# Environment: BUILD (default: build/ of this checkout, zhost and the stage plugins built), ROUNDS (3),
# WARMUP (3 steps, not timed), MEASURED (5 steps), SIZES ("3m 30m"), RANKS ("1 2"), PYTHON ($ZHOST_VENV/bin/python).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
rounds=${ROUNDS:-3}
warmup=${WARMUP:-3}
measured=${MEASURED:-5}
read -r -a size_order <<< "${SIZES:-3m 30m}"
read -r -a rank_counts <<< "${RANKS:-1 2}"
source "$root/scripts/lib/env.sh"
python=${PYTHON:-$ZHOST_VENV/bin/python}  # torch 2.11, the LibTorch zhost builds against
results=${1:-$(mktemp -d /tmp/zhost-vs-pytorch.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null || { echo "run.sh: $python has no torch (scripts/setup-deps installs it into $ZHOST_VENV)" >&2; exit 2; }
mkdir -p "$results"
cpus=$(nproc)
unset OMP_NUM_THREADS  # zhost picks its threads per rank itself; PyTorch is given the same count

source "$here/sizes.sh"

source "$here/../machine.sh"
describe_machine "$zhost" "BUILD=$build ROUNDS=$rounds WARMUP=$warmup MEASURED=$measured SIZES='${size_order[*]}' \
RANKS='${rank_counts[*]}' bench/vs_pytorch/run.sh $*" > "$results/machine.txt"
echo "python: $("$python" -c 'import torch; print("torch", torch.__version__)')" >> "$results/machine.txt"

"$python" "$here/sgemm.py" --threads "$cpus" > "$results/sgemm.json"

run_pytorch() {  # SIZE RANKS DIR
  local layers width heads seq micro
  read -r layers width heads seq micro <<< "${sizes[$1]}"
  "$python" "$here/pytorch_ddp.py" --layers "$layers" --width "$width" --heads "$heads" --seq-len "$seq" \
    --vocab 256 --micro-batch "$micro" --steps $((warmup + measured)) --warmup "$warmup" --nproc "$2" \
    --threads $((cpus / $2 > 0 ? cpus / $2 : 1)) --port $((29500 + RANDOM % 1000)) > "$3/pytorch.json" 2> "$3/pytorch.log"
}

run_zhost() {  # STAGE SIZE RANKS DIR
  local layers width heads seq micro
  read -r layers width heads seq micro <<< "${sizes[$2]}"
  "$zhost" --log-level warn run "$here/gpt.toml" --nproc "$3" --set "zero.stage=$1" \
    --set "model.layers=$layers" --set "model.width=$width" --set "model.heads=$heads" --set "model.seq_len=$seq" \
    --set "train_micro_batch_size_per_gpu=$micro" --set "steps=$((warmup + measured))" \
    --set "run.dir=$4" --set "run.name=stage$1" > "$4/stage$1.log" 2>&1
}

sides=(pytorch 0 2 3)
start=$SECONDS
for (( round = 1; round <= rounds; ++round )); do
  for size in "${size_order[@]}"; do
    for ranks in "${rank_counts[@]}"; do
      dir=$results/$size-${ranks}rank/round$round
      mkdir -p "$dir"
      echo "run.sh: round $round/$rounds, $size on $ranks rank(s) ($((SECONDS - start)) s so far)" >&2
      echo "$(cut -d' ' -f1 /proc/loadavg)" > "$dir/load"
      for (( i = 0; i < ${#sides[@]}; ++i )); do
        side=${sides[$(( (i + round - 1) % ${#sides[@]} ))]}
        if [[ $side == pytorch ]]; then
          run_pytorch "$size" "$ranks" "$dir" || { echo "run.sh: PyTorch failed, see $dir/pytorch.log" >&2; exit 1; }
        else
          run_zhost "$side" "$size" "$ranks" "$dir" || { echo "run.sh: zhost stage $side failed, see $dir/stage$side.log" >&2; exit 1; }
        fi
      done
    done
  done
done
echo "run.sh: done in $((SECONDS - start)) s; results in $results" >&2
"$python" "$here/report.py" "$results" "$warmup" | tee "$results/report.md"
