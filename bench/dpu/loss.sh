#!/usr/bin/env bash
# bench/dpu/loss.sh BUILD_DIR DIR [SEEDS] [STEPS] [SETTINGS...]: what ZeRO-Offload's delayed parameter update
# costs in loss on the example job (examples/configs/train.toml: 2 ranks, stage 2, the CPU tier), per model (gpt,
# llama) and seed: the mean loss of the last 10 steps with each setting against the same job without DPU
# (docs/config.md "Delayed parameter update"). A setting is extra `zhost run` arguments; the default settings are
# the plain rule, extrapolation 1.5, and extrapolation 1.2 with lookahead 0.1, each from the default start step.
# COMMON="ARGS" adds arguments to every run, the one without DPU included (e.g. --set optimizer.lr=1e-3).
# Prints one line per model, seed and setting, then per model and setting the mean over seeds.
set -euo pipefail
build=$(cd "${1:?usage: loss.sh BUILD_DIR DIR [SEEDS] [STEPS] [SETTINGS...]}" && pwd)
dir=${2:?usage: loss.sh BUILD_DIR DIR [SEEDS] [STEPS] [SETTINGS...]}
seeds=${3:-4}
steps=${4:-200}
shift $(($# < 4 ? $# : 4))
dpu="--set zero.offload_optimizer.delayed_update=true"
settings=("$@")
if [ ${#settings[@]} -eq 0 ]; then
  settings=("$dpu" "$dpu --set experimental.delayed_update_extrapolation=1.5"
            "$dpu --set experimental.delayed_update_extrapolation=1.2 --set experimental.delayed_update_lookahead=0.1")
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d "$dir/bench-dpu-loss-XXXXXX")
trap 'rm -rf "$work"' EXIT
last10() {  # the mean loss of a run's last 10 steps, from its metrics.jsonl
  /usr/bin/python3 -c 'import json,sys; l=[json.loads(x)["loss"] for x in open(sys.argv[1])]; print("%.4f" % (sum(l[-10:])/10))' "$1"
}
run() {  # run NAME ARGS...: prints the run's mean loss of the last 10 steps
  local name=$1; shift
  (cd "$work" && "$build/bin/zhost" run "$root/examples/configs/train.toml" --nproc 2 --set steps="$steps" \
     --set zero.stage=2 --set zero.offload_optimizer.device=cpu --set run.name="$name" ${COMMON:-} "$@" \
     >"$name.log" 2>&1) ||
    { echo "run $name failed: $work/$name.log" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
  last10 "$work/runs/$name/metrics.jsonl"
}
summary="$work/summary.txt"
for model in gpt llama; do
  for seed in $(seq 1 "$seeds"); do
    base=$(run "$model-$seed-base" --set model.type=$model --set seed=$seed)
    echo "$model seed $seed: no DPU $base"
    for i in "${!settings[@]}"; do
      # shellcheck disable=SC2086
      loss=$(run "$model-$seed-$i" --set model.type=$model --set seed=$seed ${settings[$i]})
      diff=$(/usr/bin/python3 -c "print('%+.2f%%' % (100 * ($loss / $base - 1)))")
      echo "$model seed $seed: [${settings[$i]}] $loss ($diff)"
      echo "$model|$i|$base|$loss" >>"$summary"
    done
  done
done
echo "mean over seeds 1-$seeds, $steps steps${COMMON:+, $COMMON}:"
/usr/bin/python3 - "$summary" "${settings[@]}" <<'PY'
import collections, sys
rows = collections.defaultdict(list)
for line in open(sys.argv[1]):
    model, i, base, loss = line.strip().split("|")
    rows[(model, int(i))].append((float(base), float(loss)))
for (model, i), pairs in sorted(rows.items()):
    base = sum(b for b, _ in pairs) / len(pairs)
    loss = sum(l for _, l in pairs) / len(pairs)
    worst = max(100 * (l / b - 1) for b, l in pairs)
    print(f"{model} [{sys.argv[2 + i]}]: {base:.4f} -> {loss:.4f} ({100 * (loss / base - 1):+.2f}%; worst seed {worst:+.2f}%)")
PY
