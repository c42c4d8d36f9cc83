#!/usr/bin/env bash
# bench/zero_stages/run.sh: step time of ZeRO stages 1 and 2 relative to stage 0 (data parallel), same
# job, same machine, same run: per round the three stages go back to back in an order that rotates
# between rounds, so the machine's drift hits all alike; the report takes the median over rounds of each
# stage's step time and of its ratio to stage 0's step time in the same round.
#
#   bench/zero_stages/run.sh [RESULTS_DIR]
#
# Environment: BUILD (default: build/ of this checkout, with zhost and the stage plugins built), RANKS (2),
# MICRO (micro-batch per rank, 4),
# ROUNDS (5), WARMUP (5 steps, not timed), MEASURED (20 steps), SIZE ("--set" overrides of the model),
# EXTRA (more overrides for stages 1 and 2, e.g. "--set zero.overlap_comm=true").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
ranks=${RANKS:-2}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-5}
measured=${MEASURED:-20}
micro=${MICRO:-4}
size=${SIZE:-"--set model.layers=4 --set model.width=256 --set model.heads=4 --set model.seq_len=64"}
extra=${EXTRA:-}
results=${1:-$(mktemp -d /tmp/zhost-zero-stages.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }
(( measured % warmup == 0 )) || { echo "run.sh: MEASURED must be a multiple of WARMUP" >&2; exit 2; }
mkdir -p "$results"

source "$here/../machine.sh"
describe_machine "$zhost" "RANKS=$ranks MICRO=$micro ROUNDS=$rounds WARMUP=$warmup MEASURED=$measured SIZE='$size' \
EXTRA='$extra' bench/zero_stages/run.sh" > "$results/machine.txt"

# steps_per_print = WARMUP: the first metrics record covers the warm-up, the others the measured steps.
run_stage() {  # STAGE ROUND
  local args=(--set "zero.stage=$1" --set "steps=$((warmup + measured))" --set "steps_per_print=$warmup"
              --set "train_micro_batch_size_per_gpu=$micro" --set gradient_accumulation_steps=1
              --set "run.dir=$results/round$2" --set "run.name=stage$1" --set run.save_final_weights=false)
  # shellcheck disable=SC2206
  args+=($size)
  # shellcheck disable=SC2206
  (( $1 > 0 )) && args+=($extra)
  OMP_NUM_THREADS=1 "$zhost" --log-level warn run "$root/examples/configs/train.toml" --nproc "$ranks" "${args[@]}" \
    > "$results/round$2-stage$1.log" 2>&1 || { echo "run.sh: stage $1 failed, see $results/round$2-stage$1.log" >&2; exit 1; }
}

for (( round = 1; round <= rounds; ++round )); do
  order=(0 1 2)
  for (( shift = 0; shift < round % 3; ++shift )); do order=("${order[@]:1}" "${order[0]}"); done
  for stage in "${order[@]}"; do
    echo "run.sh: round $round/$rounds stage $stage" >&2
    run_stage "$stage" "$round"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"

python3 "$here/report.py" "$results" "$rounds" "$((micro * ranks))" | tee "$results/table.md"
