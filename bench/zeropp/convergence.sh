#!/usr/bin/env bash
# bench/zeropp/convergence.sh: does ZeRO++ train like plain stage 3? 200 steps of a small gpt and llama, fp32
# and bf16, each with plain stage 3, qwZ alone, qgZ alone, both, and qgZ and both with LoCo, on one node of 2
# ranks (NODES=1), or on 2 nodes (NODES=2) of PER_NODE ranks each (two launchers on loopback), where qgZ's
# gradients are quantized in both hops (Note [qgZ's two hops]); with PER_NODE > 1 the second hop requantizes
# a node's sum. Same seed, data and order everywhere; convergence_report.py prints per model and type the
# final loss (mean of the last 20 steps, and the last step's) of every variant and its relative difference to
# plain stage 3, and plots the loss curves.
#
#   bench/zeropp/convergence.sh [RESULTS_DIR]
#
# Environment: BUILD (default build/), NODES (1), PER_NODE (2 with NODES=1, else 1), STEPS (200), MODELS
# ("gpt llama"), TYPES ("fp32 bf16"), VARIANTS ("plain qwz qgz both qgz_loco both_loco"), SETS (more `--set
# key=value` options for every run, e.g. "--set seed=12"). Each rank runs with OMP_NUM_THREADS=1.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
steps=${STEPS:-200}
nodes=${NODES:-1}
if [[ $nodes == 1 ]]; then per_node=${PER_NODE:-2}; else per_node=${PER_NODE:-1}; fi
models=${MODELS:-"gpt llama"}
types=${TYPES:-"fp32 bf16"}
variants=${VARIANTS:-"plain qwz qgz both qgz_loco both_loco"}
read -r -a extra_sets <<< "${SETS:-}"
results=${1:-$(mktemp -d /tmp/zhost-zeropp-convergence.XXXXXX)}
zhost=$build/bin/zhost
[[ -x $zhost ]] || { echo "convergence.sh: $zhost not built (scripts/build)" >&2; exit 2; }
mkdir -p "$results"

config=$results/job.toml
cat > "$config" <<TOML
seed = 11
train_micro_batch_size_per_gpu = 4
gradient_clipping = 1.0
steps_per_print = 10
[model]
layers = 4
width = 128
heads = 4
vocab = 256
seq_len = 64
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 1e-3
weight_decay = 0.01
[zero]
stage = 3
stage3_param_persistence_threshold = 0
TOML

variant_sets() {
  case $1 in
    plain) echo "" ;;
    qwz) echo "--set zero.zero_quantized_weights=true" ;;
    qgz) echo "--set zero.zero_quantized_gradients=true" ;;
    both) echo "--set zero.zero_quantized_weights=true --set zero.zero_quantized_gradients=true" ;;
    qgz_loco) echo "--set zero.zero_quantized_gradients=true --set zero.zeropp_loco_param.enabled=true" ;;
    both_loco) echo "$(variant_sets both) --set zero.zeropp_loco_param.enabled=true" ;;
  esac
}

# A port nobody listens on now, for each two-launcher run's rendezvous.
free_port() { /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
for model in $models; do
  for type in $types; do
    for variant in $variants; do
      name=$model-$type-$variant
      bf16=false; [[ $type == bf16 ]] && bf16=true
      # shellcheck disable=SC2046
      sets=(--set steps=$steps --set model.type=\"$model\" --set bf16.enabled=$bf16
            --set run.dir=\"$results/runs\" --set run.name=\"$name\" $(variant_sets "$variant") ${extra_sets[@]+"${extra_sets[@]}"})
      start=$(date +%s)
      if [[ $nodes == 1 ]]; then
        OMP_NUM_THREADS=1 "$zhost" run "$config" --nproc "$per_node" "${sets[@]}" > "$results/$name.log" 2>&1 || echo "$name failed"
      else
        port=$(free_port)
        two=(run "$config" --nproc "$per_node" --nnodes 2 --master-addr 127.0.0.1 --master-port "$port" "${sets[@]}")
        OMP_NUM_THREADS=1 "$zhost" "${two[@]}" --node-rank 1 > "$results/$name.node1.log" 2>&1 &
        node1=$!
        OMP_NUM_THREADS=1 "$zhost" "${two[@]}" --node-rank 0 > "$results/$name.log" 2>&1 || echo "$name failed"
        wait $node1 || echo "$name (node 1) failed"
      fi
      echo "$name: $(( $(date +%s) - start )) s"
    done
  done
done
/usr/bin/python3 "$here/convergence_report.py" "$results" "$models" "$types" "$variants"
