#!/usr/bin/env bash
# bench/hf_load/run.sh [OUT_DIR]: peak RSS per rank of one ZeRO stage 3 step of a 155 M-parameter
# Hugging Face Llama read from its safetensors (model.type = "hf") on 4, 2 and 1 ranks, of zhost's built-in
# llama of the same shapes on 4 ranks (nothing read: the reference), and of the tests' tiny Llama (the
# runtime's own footprint). Each rank logs its peak RSS (VmHWM) at the end ("peak resident memory of this
# rank"); ZeRO's formula gives 16 Ψ / N of model states (fp32 + AdamW). PARTS picks the runs (default
# "hf4 builtin4 hf2 hf1 tiny4"). See RESULTS.md.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${ZHOST_BUILD_DIR:-$root/build}
source "$root/scripts/lib/env.sh"  # hf_models.py runs on the venv's torch
out=${1:-/tmp/zhost-hf-load}
mkdir -p "$out"
# 155 M parameters (620 MB of F32 safetensors in 4 shards): 8 layers x 1024, 16 heads, 4 key/value heads.
big='{"num_hidden_layers": 8, "hidden_size": 1024, "intermediate_size": 2816, "num_attention_heads": 16,
      "num_key_value_heads": 4, "vocab_size": 32000, "max_position_embeddings": 256}'
if [ ! -f "$out/big/config.json" ]; then
  mkdir -p "$out/big" "$out/tiny"
  "$ZHOST_VENV/bin/python" "$root/tests/hf/hf_models.py" make llama "$out/big" --shards 4 --config "$big"
  "$ZHOST_VENV/bin/python" "$root/tests/hf/hf_models.py" make llama "$out/tiny"
fi
cat >"$out/job.toml" <<TOML
steps = 1
train_micro_batch_size_per_gpu = 1
gradient_accumulation_steps = 1
[model]
seq_len = 32
[optimizer]
type = "AdamW"
lr = 0.0001
[run]
device = "cpu"
dir = "$out/runs"
[zero]
stage = 3
stage3_param_persistence_threshold = 1000
stage3_max_reuse_distance = 0
stage3_prefetch_bucket_size = 0
TOML
run() {  # NAME NPROC --set ...: prints each rank's peak RSS
  local name=$1 nproc=$2
  shift 2
  OMP_NUM_THREADS=1 "$build/bin/zhost" run "$out/job.toml" --nproc "$nproc" --set run.name="$name" "$@" \
    >"$out/$name.log" 2>&1 || { echo "  $name failed: see $out/$name.log"; return; }
  grep -o "rank [0-9]*\].*peak resident memory of this rank: [0-9]* MB" "$out/$name.log" |
    sed -E "s/^rank ([0-9]+)\].*: ([0-9]+) MB/  $name rank \1: \2 MB/" | sort
}
hf() { echo --set model.type=hf --set model.path="$out/$1"; }
# The built-in llama of the same shapes (155 M parameters, random init, nothing read from a file).
builtin="--set model.type=llama --set model.layers=8 --set model.width=1024 --set model.ffn_width=2816
         --set model.heads=16 --set model.kv_heads=4 --set model.vocab=32000"
du -b "$out"/big/*.safetensors | awk '{s += $1} END {printf "big model: %.0f MB of safetensors\n", s / 1e6}'
parts=${PARTS:-"hf4 builtin4 hf2 hf1 tiny4"}
for part in $parts; do
  case $part in
    hf*) run "stage3-hf-n${part#hf}" "${part#hf}" $(hf big) ;;
    builtin*) run "stage3-builtin-n${part#builtin}" "${part#builtin}" $builtin ;;
    tiny*) run "stage3-tiny-n${part#tiny}" "${part#tiny}" $(hf tiny) ;;
  esac
done
