#!/usr/bin/env bash
# Installs the SDK from this build into a scratch prefix, builds examples/plugins/hello_tier against it
# with find_package(zhost) as a third party would, then checks that zhost loads it, lists it, and
# selects it for a config that asks for its tier.
set -euo pipefail
build_dir=$1 source_dir=$2 zhost=$3 dlpack_include=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --component sdk --prefix "$work/prefix" >/dev/null
cmake -S "$source_dir/examples/plugins/hello_tier" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix" \
  -DZHOST_DLPACK_INCLUDE="$dlpack_include" >/dev/null
cmake --build "$work/build" >/dev/null
test -f "$work/build/zhost_hello_tier.so" || { echo "FAIL: plugin not built"; exit 1; }
"$zhost" plugins --json --plugin-path "$work/build" > "$work/plugins.json"
grep -q '"name": "hello_tier"' "$work/plugins.json" || { echo "FAIL: hello_tier not listed"; cat "$work/plugins.json"; exit 1; }
grep -q '"hot_swappable": true' "$work/plugins.json" || { echo "FAIL: flags not read"; exit 1; }
printf "steps = 1\n[zero]\nstage = 1\n" > "$work/train.toml"
"$zhost" config check "$work/train.toml" --plugin-path "$work/build" --set zero.offload_optimizer.device=hello \
  --set hello_tier.capacity_mb=64 > "$work/check.txt"
grep -q 'capacity_mb = 64  # --set (hello_tier)' "$work/check.txt" || { echo "FAIL: plugin key not resolved"; cat "$work/check.txt"; exit 1; }
grep -q 'hello_tier 0.1.0 .* for zero.offload_optimizer.device = "hello"' "$work/check.txt" \
  || { echo "FAIL: hello_tier not chosen"; cat "$work/check.txt"; exit 1; }
echo "PASS: hello_tier built out of tree, loaded and selected"
