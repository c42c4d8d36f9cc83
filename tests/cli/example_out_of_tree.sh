#!/usr/bin/env bash
# Installs the SDK from this build into a scratch prefix, builds examples/plugins/hello_tier against it
# with find_package(zhost) as a third party would, then checks that zhost loads it and lists it, that
# `config check` refuses it as the optimizer's tier (it only stores) and accepts it as the storage under the
# CPU tier, listing each plugin's role, that a real 2-rank training job trains with it, and that it passes the
# SDK's conformance kit, as installed with the SDK (zhost-conformance).
set -euo pipefail
build_dir=$1 source_dir=$2 zhost=$3 dlpack_include=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $1"; shift; for f in "$@"; do cat "$f"; done; exit 1; }
cmake --install "$build_dir" --component sdk --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/examples/plugins/hello_tier" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DZHOST_DLPACK_INCLUDE="$dlpack_include" >/dev/null
cmake --build "$work/build" >/dev/null
plugin=$work/build/zhost_hello_tier.so
test -f "$plugin" || fail "plugin not built"
"$zhost" plugins --json --plugin-path "$work/build" > "$work/plugins.json"
grep -q '"name": "hello_tier"' "$work/plugins.json" || fail "hello_tier not listed" "$work/plugins.json"
grep -q '"hot_swappable": true' "$work/plugins.json" || fail "flags not read" "$work/plugins.json"

# As the optimizer's tier: refused by config check, naming the tier and the role, before any rank starts.
printf 'steps = 1\n[zero]\nstage = 1\n' > "$work/check.toml"
if "$zhost" config check "$work/check.toml" --plugin-path "$work/build" --set zero.offload_optimizer.device=hello \
  > "$work/refused.out" 2> "$work/refused.err"; then
  fail "config check accepted hello_tier as the optimizer's tier" "$work/refused.out"
fi
grep -q "asks plugin 'hello_tier' .* to run the optimizer (role optimizer-compute), but it declares only storing" \
  "$work/refused.err" || fail "refusal does not name the tier and the role" "$work/refused.err"

# As the storage under the CPU tier: accepted, each plugin listed with its role.
"$zhost" config check "$work/check.toml" --plugin-path "$work/build" --set zero.offload_optimizer.device=cpu \
  --set zero.offload_optimizer.storage=hello --set hello_tier.capacity_mb=64 > "$work/check.txt"
grep -q 'capacity_mb = 64  # --set (hello_tier)' "$work/check.txt" || fail "plugin key not resolved" "$work/check.txt"
grep -q 'hello_tier 0.1.0 .* as optimizer-storage for zero.offload_optimizer.storage = "hello"' "$work/check.txt" \
  || fail "hello_tier not chosen as the optimizer's storage" "$work/check.txt"
grep -q 'offload_cpu .* as optimizer-compute for zero.offload_optimizer.device = "cpu"' "$work/check.txt" \
  || fail "offload_cpu not chosen as the optimizer's computing tier" "$work/check.txt"

# Its own config check: with the world size known, states that cannot fit hello_tier.capacity_mb are
# refused at config check, as one config error line at that key.
if "$zhost" config check "$work/check.toml" --nproc 2 --plugin-path "$work/build" \
  --set zero.offload_optimizer.device=cpu --set zero.offload_optimizer.storage=hello --set hello_tier.capacity_mb=1 \
  > "$work/small.out" 2> "$work/small.err"; then
  fail "config check accepted states larger than hello_tier.capacity_mb" "$work/small.out"
fi
grep -q "zhost: error: --set hello_tier.capacity_mb=1: hello_tier.capacity_mb = 1 holds less than the .* MiB each rank would keep in hello_tier (zero.offload_optimizer.storage = \"hello\"); set it to at least" \
  "$work/small.err" || fail "the tier's refusal is not one config line at its key" "$work/small.err"

# A real job: 2 ranks, ZeRO stage 2, Adam states in hello_tier, stepped by the CPU tier.
cat > "$work/train.toml" <<'TOML'
steps = 4
seed = 7
[model]
type = "gpt"
layers = 2
heads = 2
width = 32
vocab = 256
seq_len = 16
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 0.01
[run]
device = "cpu"
[zero]
stage = 2
[zero.offload_optimizer]
device = "cpu"
storage = "hello"
TOML
(cd "$work" && "$zhost" run "$work/train.toml" --nproc 2 --plugin-path "$work/build" --set run.dir="$work/runs" \
  --set offload_cpu.storage_chunk_elements=4096 > "$work/run.out" 2> "$work/run.err") \
  || fail "the training job with hello_tier failed" "$work/run.err"
grep -q "optimizer states kept in storage tier 'hello_tier'" "$work/run.out" "$work/run.err" \
  || fail "the job did not keep its states in hello_tier" "$work/run.err"
grep -q "done: 4 steps applied" "$work/run.out" "$work/run.err" || fail "the job did not train 4 steps" "$work/run.err"

# The conformance kit installed with the SDK.
"$work/prefix/bin/zhost-conformance" "$plugin" > "$work/conformance.txt" \
  || fail "hello_tier fails the conformance kit" "$work/conformance.txt"
echo "PASS: hello_tier built out of tree, refused as optimizer, trained a 2-rank job as storage, conformant"
