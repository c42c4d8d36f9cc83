#!/usr/bin/env bash
# bench/vs_pytorch/compare_builds.sh: zhost's tokens/s with two builds of zhost (e.g. main and a change), on
# one of run.sh's gpts (sizes.sh; SIZE, default 30m), stages 0 and 3 on 1 and 2 ranks, the two builds back to back for each setting and
# round, so that the machine's drift hits both alike. Prints one line per run and, per setting, the median
# tokens/s of each build and the median over rounds of NEW / OLD; also stage 3 / stage 0 per build.
#
#   bench/vs_pytorch/compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS (4)] [RESULTS_DIR]
#
# Per run: the median tokens/s of steps 4 to 11 (metrics.jsonl; the first three warm up). Environment:
# PYTHON (/usr/bin/python3), SIZE (30m), STAGES ("0 3"), RANKS ("1 2").
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
[[ $# -ge 2 ]] || { echo "usage: compare_builds.sh OLD_BUILD NEW_BUILD [ROUNDS] [RESULTS_DIR]" >&2; exit 2; }
old=$1 new=$2 rounds=${3:-4}
results=${4:-$(mktemp -d /tmp/zhost-compare-builds.XXXXXX)}
python=${PYTHON:-/usr/bin/python3}
for build in "$old" "$new"; do
  [[ -x $build/bin/zhost ]] || { echo "compare_builds.sh: $build/bin/zhost not built" >&2; exit 2; }
done
source "$here/sizes.sh"
read -r layers width heads seq micro <<< "${sizes[${SIZE:-30m}]}"
unset OMP_NUM_THREADS
mkdir -p "$results"
lines=$results/runs.txt
: > "$lines"
for round in $(seq 1 "$rounds"); do
  for ranks in ${RANKS:-1 2}; do
    for stage in ${STAGES:-0 3}; do
      for side in old new; do
        build=$old; [[ $side == new ]] && build=$new
        dir=$results/$side-stage$stage-ranks$ranks-$round
        rm -rf "$dir" && mkdir -p "$dir"
        "$build/bin/zhost" --log-level warn run "$here/gpt.toml" --nproc "$ranks" --set "zero.stage=$stage" \
          --set "model.layers=$layers" --set "model.width=$width" --set "model.heads=$heads" \
          --set "model.seq_len=$seq" --set "train_micro_batch_size_per_gpu=$micro" --set steps=11 --set "run.dir=$dir" --set run.name=run \
          > "$dir/log" 2>&1 || { echo "compare_builds.sh: $side failed, see $dir/log" >&2; exit 1; }
        tps=$("$python" -c "import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])][3:]
print(round(statistics.median(r['tokens_per_s'] for r in rows), 1))" "$dir/run/metrics.jsonl")
        echo "$side stage$stage ranks$ranks round$round $tps" | tee -a "$lines"
      done
    done
  done
done
"$python" - "$lines" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)
for line in open(sys.argv[1]):
    side, stage, ranks, rnd, tps = line.split()
    runs[(stage, ranks, side)][rnd] = float(tps)
print("\n| setting | old tok/s | new tok/s | new / old (rounds) |\n|---|---|---|---|")
for stage, ranks in sorted({(s, r) for s, r, _ in runs}):
    old, new = runs[(stage, ranks, "old")], runs[(stage, ranks, "new")]
    ratios = [new[k] / old[k] for k in old]
    print(f"| {stage}, {ranks} | {statistics.median(old.values()):.1f} | {statistics.median(new.values()):.1f} | "
          f"{statistics.median(ratios):.3f} ({', '.join(f'{x:.2f}' for x in ratios)}) |")
print("\n| ranks | build | stage 3 / stage 0 (rounds) |\n|---|---|---|")
for ranks in sorted({r for _, r, _ in runs}):
    for side in ("old", "new"):
        zero, three = runs.get(("stage0", ranks, side)), runs.get(("stage3", ranks, side))
        if zero and three:
            ratios = [three[k] / zero[k] for k in zero]
            print(f"| {ranks} | {side} | {statistics.median(ratios):.2f} ({', '.join(f'{x:.2f}' for x in ratios)}) |")
PY
