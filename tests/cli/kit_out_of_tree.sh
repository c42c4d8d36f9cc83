#!/usr/bin/env bash
# Installs the SDK from this build into a scratch prefix and builds tests/cli/kit_out_of_tree against it
# with find_package(zhost COMPONENTS kit zero), as a third party would: the kit's optimizer step is checked
# against its closed form, the ZeRO library's reduction ranges against hand-worked counts, and the plugin
# linking the kit loads in zhost and exports only its entry.
set -euo pipefail
build_dir=$1 source_dir=$2 zhost=$3 dlpack_include=$4 torch_dir=$5
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build_dir" --component sdk --prefix "$work/prefix" >/dev/null
test -f "$work/prefix/include/zhost/kit/optimizer.hpp" || { echo "FAIL: the kit's headers were not installed"; exit 1; }
test -f "$work/prefix/include/zhost/zero/gradient_reducer.hpp" || { echo "FAIL: the ZeRO library's headers were not installed"; exit 1; }
cmake -S "$source_dir/tests/cli/kit_out_of_tree" -B "$work/build" -DCMAKE_PREFIX_PATH="$work/prefix;$torch_dir" \
  -DZHOST_DLPACK_INCLUDE="$dlpack_include" -DCMAKE_BUILD_TYPE=RelWithDebInfo >"$work/configure.log" 2>&1 \
  || { echo "FAIL: configure"; cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" -j 2 >"$work/build.log" 2>&1 || { echo "FAIL: build"; tail -30 "$work/build.log"; exit 1; }
"$work/build/kit_step_check"
"$work/build/zero_ranges_check"
"$zhost" plugins --json --plugin-path "$work/build/plugins" > "$work/plugins.json"
grep -q '"name": "kit_tier"' "$work/plugins.json" || { echo "FAIL: kit_tier not listed"; cat "$work/plugins.json"; exit 1; }
"$source_dir/tests/plugin_host/plugin_symbols_test.sh" "$work/build/plugins" kit_tier
echo "PASS: the plugin kit and the ZeRO library build and link out of tree"
