#!/usr/bin/env bash
# bench/zeropp/run.sh: ZeRO++ (the quant_zeropp plugin's qwZ, qgZ, hpZ) against plain ZeRO stage 3 where it
# is meant to pay: across nodes joined by a slow link. 2 simulated nodes x 2 ranks on this machine
# (tests/support/netns-nodes: two network namespaces joined by a veth link that tbf limits to RATE in each
# direction; the ranks of a node talk over its loopback, unlimited), `zhost run --nnodes 2 --node-rank R
# --nproc 2 --master-addr NODE0`. Per round the baseline and every variant run back to back, in an order
# that rotates between rounds, so the machine's drift hits all alike. The report (report.py, also in
# RESULTS_DIR/table.md) gives per variant:
#   - step ms: the median over rounds of the median over the measured steps (after WARMUP) of rank 0's
#     step_time_ms (metrics.jsonl, one record per step),
#   - vs baseline: the median over rounds of (variant step ms / baseline step ms in the same round), with
#     min and max,
#   - sent MB/step: rank 0's comm_bytes_sent per step (median over measured steps and rounds), and its
#     comm_inter_node_bytes_sent/received when metrics.jsonl has them ("-" otherwise),
#   - link MB/step: what went through both nodes' tbf (tc's counters, both directions, headers and
#     start-up included) over the run, divided by its steps.
#
#   bench/zeropp/run.sh [RESULTS_DIR] [NAME=ARGS]...
#
# Each NAME=ARGS is a variant: the baseline job plus ARGS (--set KEY=VALUE ..., split on spaces). Without
# any, the variants are ZeRO++'s:
#   qwz='--set zero.zero_quantized_weights=true'  qgz='--set zero.zero_quantized_gradients=true'
#   hpz='--set zero.zero_hpz_partition_size=2'     zeropp=(all three)
# e.g., to try the script on plain stage 3 alone:
#   bench/zeropp/run.sh /tmp/zpp 'bucket1m=--set zero.reduce_bucket_size=1000000' \
#     'noprefetch=--set zero.stage3_prefetch_bucket_size=0'
#
# Environment: BUILD (default: build/ of this checkout, with zhost and the stage3 and quant_zeropp plugins built), RATE (the
# inter-node link's rate per direction, tc units, default 200mbit: see below), DELAY (added latency per
# direction with netem, e.g. 1ms; default none: netem is missing from some kernels, this machine's
# included, and netns-nodes then exits 77), BASELINE (the baseline's arguments, "--set zero.stage=3"),
# ROUNDS (3), WARMUP (2 steps, not timed), MEASURED (6 steps), MICRO (micro-batch per rank, 2), SIZE ("--set"
# overrides of the model: gpt 4 x 256, seq 64), PORT (29500; each run has namespaces of its own).
# Every rank runs with OMP_NUM_THREADS=1. Needs root (network namespaces); exits 77 when it cannot make them.
#
# The rate, 200 Mbit/s: plain stage 3 of the default job sends ~20 MB per rank per step, and ~26 MB cross
# the link each way per step (tc's counters, start-up spread over 4 steps included). Measured once on this
# 2-core machine (load average ~7 from other builds; ROUNDS=1 WARMUP=1 MEASURED=3): the baseline's step
# took 0.86 s with the link at 10 Gbit/s (compute and loopback only), 0.98 s at 1 Gbit/s, 0.94 s at
# 500 Mbit/s, 1.51 s at 200 Mbit/s and 2.74 s at 100 Mbit/s. At 200 Mbit/s the link is ~45% of the step,
# more on a quieter machine: the regime of the low-bandwidth clusters ZeRO++ was made for, while a round
# of five jobs stays near a minute and a half. At 1 Gbit/s this tiny model's transfers hide in the
# compute. netem is missing here, so no delay was added; on a kernel with sch_netem, DELAY=1ms gives a
# more realistic link.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
rate=${RATE:-200mbit}
delay=${DELAY:-}
baseline=${BASELINE:-"--set zero.stage=3"}
rounds=${ROUNDS:-3}
warmup=${WARMUP:-2}
measured=${MEASURED:-6}
micro=${MICRO:-2}
size=${SIZE:-"--set model.layers=4 --set model.width=256 --set model.heads=4 --set model.seq_len=64"}
port=${PORT:-29500}
results=${1:-$(mktemp -d /tmp/zhost-zeropp.XXXXXX)}
(( $# > 0 )) && shift
zhost=$build/bin/zhost
nodes=$root/tests/support/netns-nodes
[[ -x $zhost ]] || { echo "run.sh: $zhost not built (scripts/build)" >&2; exit 2; }

names=(baseline) args=("$baseline")
if (( $# == 0 )); then
  set -- "qwz=--set zero.zero_quantized_weights=true" "qgz=--set zero.zero_quantized_gradients=true" \
    "hpz=--set zero.zero_hpz_partition_size=2" \
    "zeropp=--set zero.zero_quantized_weights=true --set zero.zero_quantized_gradients=true --set zero.zero_hpz_partition_size=2"
fi
for variant in "$@"; do
  [[ $variant =~ ^([A-Za-z0-9_.-]+)=(.*)$ ]] || { echo "run.sh: a variant is NAME=ARGS, not '$variant'" >&2; exit 2; }
  [[ ${BASH_REMATCH[1]} == baseline || " ${names[*]} " == *" ${BASH_REMATCH[1]} "* ]] \
    && { echo "run.sh: variant name '${BASH_REMATCH[1]}' given twice" >&2; exit 2; }
  names+=("${BASH_REMATCH[1]}")
  args+=("$baseline ${BASH_REMATCH[2]}")
done
mkdir -p "$results"

source "$here/../machine.sh"
{
  describe_machine "$zhost" "RATE=$rate DELAY='$delay' BASELINE='$baseline' ROUNDS=$rounds WARMUP=$warmup \
MEASURED=$measured MICRO=$micro SIZE='$size' bench/zeropp/run.sh $results $(printf "'%s' " "$@")"
  echo "nodes: 2 network namespaces x 2 ranks, inter-node link: tbf $rate per direction${delay:+, netem delay $delay}"
  for i in "${!names[@]}"; do echo "variant ${names[$i]}: ${args[$i]}"; done
} > "$results/machine.txt"

# run NAME ROUND ARGS: one 2 x 2 job; its run directory is RESULTS/roundR/NAME (node 0's; node 1 writes
# nothing of its own there), the nodes' output RESULTS/roundR/NAME.nodeN.log, tc's counters at the end
# RESULTS/roundR/NAME.qdiscN.txt.
run() {
  local name=$1 round=$2 extra=$3 dir=$results/round$2 status=0
  mkdir -p "$dir/$name.logs"
  echo "$name round $round $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/load.txt"
  local job
  # shellcheck disable=SC2016  # $NODE_RANK and $MASTER_ADDR expand in the nodes
  job="OMP_NUM_THREADS=1 $(printf %q "$zhost") --log-level warn run $(printf %q "$root/examples/configs/train.toml") \
    --nnodes 2 --node-rank \$NODE_RANK --nproc 2 --master-addr \$MASTER_ADDR --master-port $port \
    --set run.dir=$(printf %q "$dir")/node\$NODE_RANK --set run.name=$name --set run.save_final_weights=false \
    --set steps=$((warmup + measured)) --set steps_per_print=1 --set train_micro_batch_size_per_gpu=$micro \
    --set gradient_accumulation_steps=1 --set wall_clock_breakdown=true $size $extra; status=\$?; \
    tc -s qdisc show dev \$NETNS_IFNAME > $(printf %q "$dir/$name").qdisc\$NODE_RANK.txt 2>&1; exit \$status"
  "$nodes" --rate "$rate" ${delay:+--delay "$delay"} --timeout 600 --log-dir "$dir/$name.logs" -- bash -c "$job" \
    || status=$?
  # node 0's run directory is the job's (rank 0 writes it)
  [[ -d $dir/node0/$name ]] && mv "$dir/node0/$name" "$dir/$name"
  rm -rf "$dir/node0" "$dir/node1"
  if (( status == 77 )); then
    echo "run.sh: this machine cannot make the simulated nodes (netns-nodes' line above says why)" >&2
    exit 77
  fi
  (( status == 0 )) || { echo "run.sh: $name round $round failed (netns-nodes exit $status), see $dir/$name.logs" >&2; return 1; }
}

failed=0
for (( round = 1; round <= rounds; ++round )); do
  order=("${!names[@]}")
  for (( s = 0; s < round % ${#names[@]}; ++s )); do order=("${order[@]:1}" "${order[0]}"); done
  for i in "${order[@]}"; do
    echo "run.sh: round $round/$rounds ${names[$i]}" >&2
    run "${names[$i]}" "$round" "${args[$i]}" || failed=1
  done
done
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$results/machine.txt"

python3 "$here/report.py" "$results" "$rounds" "$warmup" "$((warmup + measured))" "${names[@]}" | tee "$results/table.md"
exit $failed
