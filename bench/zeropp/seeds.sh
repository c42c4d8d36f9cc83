#!/usr/bin/env bash
# bench/zeropp/seeds.sh: convergence.sh over several seeds, because on this small 200-step job one seed's final
# loss moves by about 1-2% between runs that differ only in rounding: the difference to plain stage 3 is then
# read as its mean over the seeds (seeds_report.py: per model, type and variant, each seed's relative
# difference of the final loss, their mean and their spread; plain stage 3 of the same seed is the base).
#
#   bench/zeropp/seeds.sh [RESULTS_DIR]
#
# Environment: SEEDS ("11 12 13 14 15"), and convergence.sh's (MODELS, TYPES, VARIANTS, NODES, PER_NODE, SETS:
# SETS is added to every seed's own --set seed=N).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
seeds=${SEEDS:-"11 12 13 14 15"}
results=${1:-$(mktemp -d /tmp/zhost-zeropp-seeds.XXXXXX)}
mkdir -p "$results"
for seed in $seeds; do
  SETS="--set seed=$seed ${SETS:-}" "$here/convergence.sh" "$results/seed-$seed" > "$results/seed-$seed.log" 2>&1 ||
    echo "seed $seed: convergence.sh failed (see $results/seed-$seed.log)"
  echo "seed $seed done"
done
/usr/bin/python3 "$here/seeds_report.py" "$results" "$seeds" "${MODELS:-gpt llama}" "${TYPES:-fp32 bf16}" \
  "${VARIANTS:-plain qwz qgz both qgz_loco both_loco}"
