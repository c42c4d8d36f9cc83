#!/usr/bin/env bash
# bench/engine_overhead/run.sh: zhost's step time and host overhead per step for gpt at two sizes on 1
# and 2 ranks, each against a plain LibTorch loop doing the same work, measured side by side.
#
#   bench/engine_overhead/run.sh [RESULTS_DIR]
#
# Per round, for each configuration, the reference and `zhost run` go back to back, in an order that
# alternates between rounds, so that the machine's drift hits both alike; the report (report.cpp) takes
# the median over rounds of each round's zhost/reference ratio and prints the tables of RESULTS.md.
#
# Environment: BUILD (default: build/ of this checkout, with the targets zhost and bench_engine_overhead built),
# ROUNDS (5), WARMUP (5 steps, not timed), MEASURED (20 steps, a multiple of WARMUP), THREADS_PER_RANK (1:
# intra-op threads of every rank, both sides; more than one thread per rank on a shared machine turns
# other jobs' load into OpenMP barrier stalls that swamp the figures).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD:-$(cd "$here/../.." && pwd)/build}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-5}
measured=${MEASURED:-20}
results=${1:-$(mktemp -d /tmp/zhost-engine-overhead.XXXXXX)}
zhost=$build/bin/zhost
harness=$build/bin/bench_engine_overhead
config=$here/gpt.toml
threads_per_rank=${THREADS_PER_RANK:-1}

for program in "$zhost" "$harness"; do
  [[ -x $program ]] || { echo "run.sh: $program not built (cmake --build $build --target $(basename "$program"))" >&2; exit 2; }
done
if (( measured % warmup != 0 )); then echo "run.sh: MEASURED must be a multiple of WARMUP" >&2; exit 2; fi
mkdir -p "$results"

# name: --set overrides of gpt.toml
declare -A sizes=(
  [tiny]="model.layers=2 model.width=64 model.heads=4 model.seq_len=32 train_micro_batch_size_per_gpu=4"
  [small]="model.layers=4 model.width=128 model.heads=4 model.seq_len=64 train_micro_batch_size_per_gpu=4"
)
size_order=(tiny small)
rank_counts=(1 2)

overrides_for() {  # SIZE -> "--set k=v ..." shared by both sides
  local args=(--set "steps=$((warmup + measured))" --set "steps_per_print=$warmup")
  for assignment in ${sizes[$1]}; do args+=(--set "$assignment"); done
  echo "${args[@]}"
}

run_reference() {  # SIZE RANKS ROUND_DIR
  local nproc_args=()
  (( $2 > 1 )) && nproc_args=(--nproc "$2")
  # shellcheck disable=SC2046
  "$harness" reference "$config" $(overrides_for "$1") "${nproc_args[@]}" --warmup "$warmup" \
    --out "$3/reference.json" > "$3/reference.log" 2>&1
}

run_zhost() {  # SIZE RANKS ROUND_DIR
  local nproc_args=()
  (( $2 > 1 )) && nproc_args=(--nproc "$2")
  # shellcheck disable=SC2046
  "$zhost" --log-level warn run "$config" $(overrides_for "$1") --set "run.dir=$3" "${nproc_args[@]}" \
    > "$3/zhost.log" 2>&1
}

source "$here/../machine.sh"
describe_machine "$zhost" "BUILD=$build ROUNDS=$rounds WARMUP=$warmup MEASURED=$measured \
THREADS_PER_RANK=$threads_per_rank bench/engine_overhead/run.sh $*" > "$results/machine.txt"

start=$SECONDS
loads=()  # 1-minute load average before each configuration of each round
echo "run.sh: per-call micro-benchmarks" >&2
export OMP_NUM_THREADS=$threads_per_rank
"$harness" hooks "$config" --benchmark_min_time=0.3 \
  --benchmark_out="$results/hooks.json" --benchmark_out_format=json > "$results/hooks.log" 2>&1

for (( round = 1; round <= rounds; ++round )); do
  for size in "${size_order[@]}"; do
    for ranks in "${rank_counts[@]}"; do
      dir=$results/$size-${ranks}rank/round$round
      mkdir -p "$dir"
      echo "run.sh: round $round/$rounds $size on $ranks rank(s) ($((SECONDS - start)) s so far)" >&2
      loads+=("$(cut -d' ' -f1 /proc/loadavg)")
      sides=(run_reference run_zhost)
      (( round % 2 )) || sides=(run_zhost run_reference)
      for side in "${sides[@]}"; do
        "$side" "$size" "$ranks" "$dir" || { echo "run.sh: $side failed, see $dir/*.log" >&2; exit 1; }
      done
    done
  done
done
{
  echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "1-min load average before each run pair: ${loads[*]}"
} >> "$results/machine.txt"

{
  sed 's/^/    /' "$results/machine.txt"
  echo
  "$harness" report "$results"
} | tee "$results/table.md"
echo "run.sh: $((SECONDS - start)) s; results in $results" >&2
