#!/usr/bin/env bash
# bench/zero_stage3/run.sh: what ZeRO stage 3 (the `stage3` plugin) costs and saves, in three parts, same
# machine, one run:
#   prefetch  the gathers' overlap with compute: one job with stage3_prefetch_bucket_size off (0), about two
#             blocks, and the default (the whole model), on 2 and on 4 ranks; per round the three settings
#             go back to back in an order that rotates between rounds; the report takes the median (and
#             range) over rounds of the time spent waiting for all-gathers per step, of the step time and
#             of its ratio to prefetch-off's in the same round. stage3_max_reuse_distance = 0, so every
#             block's parameters are gathered in forward and again in backward.
#   memory    a model whose model states dominate (tens of millions of fp32 parameters, micro-batch 1,
#             short sequences): rank 0's peak RSS and its model-state bytes for stage 0 and stage 3 on 1, 2
#             and 4 ranks, and stage 3 / stage 0 per rank count.
#   traffic   bytes one rank sends per step with stage 3 (reuse distance 0, persistence threshold 0, so
#             every parameter is gathered twice and reduce-scattered once) against 3cΨ(N-1)/N.
#   agreement stage 3 against stage 0 on 2 and 4 ranks with experimental.stage3_rank_agreement = each_collective
#             (a blocking 16-byte exchange before every gather and reduction) and each_micro_batch (none),
#             the three back to back per round in a rotating order: step time, stage 3 / stage 0 in the
#             same round, and the host's time blocked on agreement per step ("stage3/rank_agreement_ms").
#
#   bench/zero_stage3/run.sh [RESULTS_DIR]
#
# Environment: BUILD (default: build/ of this checkout, with zhost and the stage3 plugin built),
# PARTS ("prefetch memory traffic"), ROUNDS (3), RANKS ("2 4": rank counts of the prefetch part),
# MICRO (micro-batch per rank of the prefetch part, 1), WARMUP (1 step, not timed), MEASURED (3 steps),
# PREFETCH (the stage3_prefetch_bucket_size values compared, "0 1600000 50000000": off, two of the
# prefetch model's 787,456-element blocks, DeepSpeed's default), SIZE (the prefetch and traffic model,
# gpt 8 x 256, Ψ = 6.4 M), MEMSIZE (the memory model, gpt 16 x 512, Ψ = 50.5 M), MEMPREFETCH (the memory
# part's stage-3 prefetch, 6400000 = two of its blocks), MEMSTEPS (2; the peak is reached in step 1).
# Every rank runs with OMP_NUM_THREADS=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
parts=${PARTS:-"prefetch memory traffic agreement"}
rounds=${ROUNDS:-3}
ranks_list=${RANKS:-"2 4"}
micro=${MICRO:-1}
warmup=${WARMUP:-1}
measured=${MEASURED:-3}
prefetch_list=${PREFETCH:-"0 1600000 50000000"}
size=${SIZE:-"--set model.layers=8 --set model.width=256 --set model.heads=4 --set model.seq_len=64"}
memsize=${MEMSIZE:-"--set model.layers=16 --set model.width=512 --set model.heads=8 --set model.seq_len=32"}
memprefetch=${MEMPREFETCH:-6400000}
memsteps=${MEMSTEPS:-2}
results=${1:-$(mktemp -d /tmp/zhost-zero-stage3.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }
(( measured % warmup == 0 )) || { echo "run.sh: MEASURED must be a multiple of WARMUP" >&2; exit 2; }
mkdir -p "$results"

source "$here/../machine.sh"
describe_machine "$zhost" "PARTS='$parts' ROUNDS=$rounds RANKS='$ranks_list' MICRO=$micro WARMUP=$warmup \
MEASURED=$measured PREFETCH='$prefetch_list' SIZE='$size' MEMSIZE='$memsize' MEMPREFETCH=$memprefetch \
MEMSTEPS=$memsteps bench/zero_stage3/run.sh" > "$results/machine.txt"

# run NAME RANKS ARGS...: one job; its run directory is RESULTS/NAME, its output RESULTS/NAME.log. The load
# average before each job goes to RESULTS/load.txt (the machine may be shared).
run() {
  local name=$1 nproc=$2
  shift 2
  echo "$name $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/load.txt"
  mkdir -p "$(dirname "$results/$name")"
  OMP_NUM_THREADS=1 "$zhost" --log-level warn run "$root/examples/configs/train.toml" --nproc "$nproc" \
    --set "run.dir=$(dirname "$results/$name")" --set "run.name=$(basename "$name")" \
    --set run.save_final_weights=false --set gradient_accumulation_steps=1 --set wall_clock_breakdown=true "$@" \
    > "$results/$name.log" 2>&1 || { echo "run.sh: $name failed, see $results/$name.log" >&2; return 1; }
}

failed=0
stage3_common=(--set zero.stage=3 --set zero.stage3_max_reuse_distance=0)

if [[ " $parts " == *" prefetch "* ]]; then
  # steps_per_print = WARMUP: the first metrics record covers the warm-up (the first step records the block
  # order; prefetching starts with the second), the others the measured steps.
  read -ra settings <<< "$prefetch_list"
  for (( round = 1; round <= rounds; ++round )); do
    for ranks in $ranks_list; do
      order=("${settings[@]}")
      for (( shift = 0; shift < round % ${#settings[@]}; ++shift )); do order=("${order[@]:1}" "${order[0]}"); done
      for prefetch in "${order[@]}"; do
        echo "run.sh: prefetch round $round/$rounds ranks $ranks prefetch $prefetch" >&2
        # shellcheck disable=SC2086
        run "prefetch/round$round/n$ranks-p$prefetch" "$ranks" "${stage3_common[@]}" $size \
          --set zero.stage3_param_persistence_threshold=1000 --set "zero.stage3_prefetch_bucket_size=$prefetch" \
          --set "steps=$((warmup + measured))" --set "steps_per_print=$warmup" \
          --set "train_micro_batch_size_per_gpu=$micro" || failed=1
      done
    done
  done
fi

if [[ " $parts " == *" memory "* ]]; then
  for ranks in 1 2 4; do
    for stage in 0 3; do
      echo "run.sh: memory ranks $ranks stage $stage" >&2
      extra=()
      (( stage == 3 )) && extra=("${stage3_common[@]}" --set zero.stage3_param_persistence_threshold=1000
                                 --set "zero.stage3_prefetch_bucket_size=$memprefetch")
      # shellcheck disable=SC2086
      run "memory/n$ranks-stage$stage" "$ranks" --set "zero.stage=$stage" "${extra[@]}" $memsize \
        --set "steps=$memsteps" --set steps_per_print=1 --set train_micro_batch_size_per_gpu=1 || failed=1
    done
  done
fi

if [[ " $parts " == *" traffic "* ]]; then
  for ranks in 2 4; do
    echo "run.sh: traffic ranks $ranks" >&2
    # shellcheck disable=SC2086
    run "traffic/n$ranks" "$ranks" "${stage3_common[@]}" $size --set zero.stage3_param_persistence_threshold=0 \
      --set steps=3 --set steps_per_print=1 --set train_micro_batch_size_per_gpu=1 || failed=1
  done
fi
if [[ " $parts " == *" agreement "* ]]; then
  settings=(stage0 each_collective each_micro_batch)
  for (( round = 1; round <= rounds; ++round )); do
    for ranks in $ranks_list; do
      order=("${settings[@]}")
      for (( shift = 0; shift < round % ${#settings[@]}; ++shift )); do order=("${order[@]:1}" "${order[0]}"); done
      for setting in "${order[@]}"; do
        echo "run.sh: agreement round $round/$rounds ranks $ranks $setting" >&2
        extra=(--set zero.stage=0)
        [[ $setting != stage0 ]] && extra=("${stage3_common[@]}" --set zero.stage3_param_persistence_threshold=1000
                                           --set "experimental.stage3_rank_agreement=$setting")
        # shellcheck disable=SC2086
        run "agreement/round$round/n$ranks-$setting" "$ranks" "${extra[@]}" $size \
          --set "steps=$((warmup + measured))" --set "steps_per_print=$warmup" \
          --set "train_micro_batch_size_per_gpu=$micro" || failed=1
      done
    done
  done
fi
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"

python3 "$here/report.py" "$results" "$rounds" "$micro" | tee "$results/table.md"
exit $failed
