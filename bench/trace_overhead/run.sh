#!/usr/bin/env bash
# bench/trace_overhead/run.sh: step time with run.trace = true relative to the same job without it
# (Note [Trace file]), in one run: per round the two go back to back, in an order that alternates between
# rounds; the ratio is the median over rounds of (traced step time / untraced step time in that round).
# Step time: the mean of metrics.jsonl's step_time_ms over the steps after WARMUP.
#
#   bench/trace_overhead/run.sh [RESULTS_DIR]
#
# Environment: BUILD (default build/), RANKS (2), ROUNDS (5), WARMUP (3), MEASURED (12), STAGE (3: the
# stage with the most events: per-block gathers, reduce-scatters and hooks), SIZE (model overrides).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
ranks=${RANKS:-2}
rounds=${ROUNDS:-5}
warmup=${WARMUP:-3}
measured=${MEASURED:-12}
stage=${STAGE:-3}
size=${SIZE:-"--set model.layers=4 --set model.width=256 --set model.heads=4 --set model.seq_len=64"}
results=${1:-$(mktemp -d /tmp/zhost-trace-overhead.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }
mkdir -p "$results"

source "$here/../machine.sh"
describe_machine "$zhost" "RANKS=$ranks ROUNDS=$rounds WARMUP=$warmup MEASURED=$measured STAGE=$stage SIZE='$size' \
bench/trace_overhead/run.sh" > "$results/machine.txt"

run_one() {  # TRACE(true|false) ROUND
  local args=(--set "zero.stage=$stage" --set "steps=$((warmup + measured))" --set "steps_per_print=$((warmup + measured))"
              --set train_micro_batch_size_per_gpu=4 --set gradient_accumulation_steps=1
              --set "run.dir=$results/round$2" --set "run.name=trace-$1" --set "run.trace=$1"
              --set run.save_final_weights=false)
  # shellcheck disable=SC2206
  args+=($size)
  OMP_NUM_THREADS=1 "$zhost" --log-level warn run "$root/examples/configs/train.toml" --nproc "$ranks" "${args[@]}" \
    > "$results/round$2-trace-$1.log" 2>&1 || { echo "run.sh: trace=$1 failed, see $results/round$2-trace-$1.log" >&2; exit 1; }
}

for (( round = 1; round <= rounds; ++round )); do
  order=(false true)
  (( round % 2 == 0 )) && order=(true false)
  for trace in "${order[@]}"; do
    echo "run.sh: round $round/$rounds trace=$trace" >&2
    run_one "$trace" "$round"
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"

/usr/bin/python3 - "$results" "$rounds" "$warmup" <<'PY' | tee "$results/table.md"
import glob, json, os, statistics, sys
results, rounds, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def step_ms(run):
    records = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if l.strip()]
    timed = [r["step_time_ms"] for r in records if r["step"] > warmup]
    return sum(timed) / len(timed), len(records)
ratios, off_ms, on_ms, sizes, events = [], [], [], [], []
for r in range(1, rounds + 1):
    off, steps = step_ms(os.path.join(results, "round%d" % r, "trace-false"))
    on, _ = step_ms(os.path.join(results, "round%d" % r, "trace-true"))
    off_ms.append(off); on_ms.append(on); ratios.append(on / off)
    trace = os.path.join(results, "round%d" % r, "trace-true", "trace.rank0.json")
    sizes.append(os.path.getsize(trace) / steps)
    events.append(sum(1 for _ in open(trace)) / steps)
print("| | step ms (median) | traced / untraced (median of per-round ratios) | trace bytes per step, rank 0 | events per step, rank 0 |")
print("|---|---|---|---|---|")
print("| run.trace = false | %.1f | 1.000 | - | - |" % statistics.median(off_ms))
print("| run.trace = true | %.1f | %.3f (min %.3f, max %.3f) | %.0f | %.0f |" % (
    statistics.median(on_ms), statistics.median(ratios), min(ratios), max(ratios), statistics.median(sizes),
    statistics.median(events)))
PY
