#!/usr/bin/env bash
# A multi-node job for real on one machine: examples/configs/train.toml at ZeRO stage 3, 3 steps, as
# 2 nodes x 2 ranks (`zhost run --nnodes 2 --node-rank R --nproc 2 --master-addr NODE0`) in two network
# namespaces joined by a veth link limited to 100 Mbit/s per direction by tbf (tests/support/netns-nodes),
# against the same 4-rank job on loopback in one namespace. Checks that
#   (a) both nodes' launchers exit 0 and the job's run.log says completed,
#   (b) the final weights (weights.bin) are equal byte for byte, and every step's loss and gradient norm
#       in metrics.jsonl are equal as printed (round-trip digits): the ranks run the same collectives, so
#       the bits must not depend on where the ranks are,
#   (c) the traffic crossed the shaped link (bytes through each node's tbf), and the namespaces are gone
#       once the harness has returned.
# Usage: two_nodes_test.sh ZHOST SOURCE_DIR. Exit 77 (skip) when this machine cannot make namespaces.
set -uo pipefail
zhost=$1 source_dir=$2
nodes=$source_dir/tests/support/netns-nodes
scratch=$(mktemp -d /tmp/zhost-multinode.XXXXXX)
trap 'rm -rf "$scratch"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run_job NAME NETNS-NODES-OPTIONS -- ZHOST-RUN-ARGS: runs the job in the harness; its harness's PID goes to
# $scratch/NAME.pid, the harness's exit status is returned. Every node runs the same command; run.dir is
# per node, although the job writes its run directory (rank 0's) on node 0 only.
run_job() {
  local name=$1 harness_args=() status
  shift
  while [[ $1 != -- ]]; do harness_args+=("$1"); shift; done
  shift
  local job
  # Without GLOO_SOCKET_IFNAME (the harness sets it): zhost finds the interface that routes to the master.
  job="env -u GLOO_SOCKET_IFNAME OMP_NUM_THREADS=1 $(printf '%q ' "$zhost") --log-level warn run $(printf '%q ' "$source_dir/examples/configs/train.toml") \
    --set zero.stage=3 --set steps=3 --set steps_per_print=1 --set seed=1234 --set scheduler.type=WarmupLR \
    --set scheduler.warmup_num_steps=1 --set scheduler.warmup_min_lr=0.003 \
    --set run.save_final_weights=true --set comm.timeout_s=30 \
    --set run.dir=$scratch/$name/node\$NODE_RANK --set run.name=job $* && \
    { tc -s qdisc show dev \${NETNS_IFNAME} > $scratch/$name/qdisc\$NODE_RANK.txt 2>&1 || true; }"
  mkdir -p "$scratch/$name"
  "$nodes" "${harness_args[@]}" --timeout 50 --log-dir "$scratch/$name" -- bash -c "$job" &
  echo $! > "$scratch/$name.pid"
  wait $!
  status=$?
  if (( status != 0 )); then
    for log in "$scratch/$name"/node*.log; do [[ -f $log ]] && { echo "--- $log"; tail -20 "$log"; }; done
  fi
  return $status
}

start=$SECONDS
run_job loopback --nodes 1 -- --nproc 4 --master-port 29500
status=$?
(( status == 77 )) && exit 77
(( status == 0 )) || fail "the 4-rank job on loopback failed (netns-nodes exit $status)"
run_job twonodes --nodes 2 --rate 100mbit -- --nnodes 2 --node-rank \$NODE_RANK --nproc 2 \
  --master-addr \$MASTER_ADDR --master-port 29500
status=$?
(( status == 0 )) || fail "the 2 x 2-rank job failed (netns-nodes exit $status)"
echo "both jobs ran in $((SECONDS - start)) s"

a=$scratch/loopback/node0/job b=$scratch/twonodes/node0/job
# (a) both launchers exited 0 (netns-nodes' status above), the job says completed, 3 steps printed
grep -q "status: completed" "$b/run.log" || fail "the two-node job's run.log does not say completed: $(tail -2 "$b/run.log")"
fields() { grep -o '"\(loss\|grad_norm\|step\)":[^,}]*' "$1/metrics.jsonl"; }
[[ $(fields "$b" | grep -c '"loss"') == 3 ]] || fail "the two-node job printed $(fields "$b" | grep -c '"loss"') losses, not 3"
# (b) bitwise equal
[[ $(fields "$a") == "$(fields "$b")" ]] || fail "losses or gradient norms differ:
$(diff <(fields "$a") <(fields "$b"))"
cmp -s "$a/weights.json" "$b/weights.json" || fail "weights.json differ"
cmp "$a/weights.bin" "$b/weights.bin" || fail "the final weights differ"
# Every step updated the weights (WarmupLR from 0.003 to 0.003: lr 0.003 from step 1), so the losses of
# steps 2 and 3 depend on the updates.
[[ $(grep -o '"lr":[^,}]*' "$b/metrics.jsonl" | grep -c '"lr":0.003$') == 3 ]] \
  || fail "the learning rate was not 0.003 in every step: $(grep -o '"lr":[^,}]*' "$b/metrics.jsonl" | tr '\n' ' ')"
# (c) the collectives went through the shaped link: at least 1 MB through each node's tbf
for node in 0 1; do
  sent=$(grep -A1 '^qdisc tbf' "$scratch/twonodes/qdisc$node.txt" | grep -o 'Sent [0-9]*' | grep -o '[0-9]*')
  [[ -n $sent ]] || fail "node $node has no tbf qdisc on its link: $(cat "$scratch/twonodes/qdisc$node.txt")"
  (( sent > 1000000 )) || fail "only $sent bytes went through node $node's tbf"
  echo "node $node sent $sent bytes through tbf 100mbit"
done
for name in loopback twonodes; do
  left=$(ip netns list | grep "^zhost-nn-$(cat "$scratch/$name.pid")-")
  [[ -z $left ]] || fail "the $name harness left namespaces behind: $left"
done
echo "PASS: 2 nodes x 2 ranks over a 100 Mbit/s link equal the 4-rank job on loopback bit for bit ($((SECONDS - start)) s)"
