#!/usr/bin/env bash
# Note [Plugins see the SDK only], checked on the built shared objects: every plugin .so in the given
# folder exports only its negotiation entry, and needs no symbol of the host (zhost::, spdlog, fmt) from
# whoever loads it. Usage: plugin_symbols_test.sh PLUGIN_DIR [EXPECTED_PLUGIN_NAME...]
set -euo pipefail
dir=$1; shift
status=0
shopt -s nullglob
plugins=("$dir"/zhost_*.so)
[ ${#plugins[@]} -gt 0 ] || { echo "FAIL: no plugin .so in $dir"; exit 1; }
for expected in "$@"; do
  [ -f "$dir/zhost_$expected.so" ] || { echo "FAIL: zhost_$expected.so was not built in $dir"; status=1; }
done
for so in "${plugins[@]}"; do
  exported=$(nm -D --defined-only "$so" | awk '{print $3}' | grep -v -E '^(_init|_fini|_edata|_end|__bss_start)$' || true)
  if [ "$exported" != "zhost_plugin_v1" ]; then
    echo "FAIL: $(basename "$so") exports more than its entry: $(echo "$exported" | c++filt | head -5 | tr '\n' ' ')"
    status=1
  fi
  from_host=$(nm -D --undefined-only "$so" | awk '{print $2}' | c++filt | grep -E '^(zhost::|spdlog::|fmt::)' || true)
  if [ -n "$from_host" ]; then
    echo "FAIL: $(basename "$so") needs symbols of the host: $(echo "$from_host" | head -5 | tr '\n' ' ')"
    status=1
  fi
  needed=$(readelf -d "$so" | grep NEEDED | grep -E -o 'lib(spdlog|fmt)[^]]*' || true)
  if [ -n "$needed" ]; then
    echo "FAIL: $(basename "$so") links the host's logging libraries: $needed"
    status=1
  fi
done
[ $status -eq 0 ] && echo "PASS: ${#plugins[@]} plugins export only zhost_plugin_v1 and need nothing of the host"
exit $status
