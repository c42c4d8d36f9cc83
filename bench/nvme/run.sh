#!/usr/bin/env bash
# bench/nvme/run.sh BUILD_DIR NVME_PATH [GIB] [BLOCK] [DEPTH]: the NVMe tier against fio, in one run, on the
# same folder with the same block size, queue depth, O_DIRECT and io_uring: fio writes then reads GIB GiB
# sequentially, then bench_nvme stores and loads GIB GiB through the tier (checksums on and off), 3 rounds
# each, interleaved. Prints every figure and the medians' ratios (see RESULTS.md).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR NVME_PATH [GIB] [BLOCK] [DEPTH]}
dir=${2:?usage: run.sh BUILD_DIR NVME_PATH [GIB] [BLOCK] [DEPTH]}
gib=${3:-1}
block=${4:-1048576}
depth=${5:-8}
work=$(mktemp -d "$dir/bench-nvme-XXXXXX")
trap 'rm -rf "$work"' EXIT
out=$work/figures.txt
for round in 1 2 3; do
  for rw in write read; do
    fio --name=fio --directory="$work" --filename=fio.bin --rw=$rw --bs=$block --iodepth=$depth --direct=1 \
      --ioengine=io_uring --size=${gib}G --numjobs=1 --output-format=json >"$work/fio.json"
    /usr/bin/python3 -c "import json,sys; j=json.load(open('$work/fio.json'))['jobs'][0]['$rw']; print('fio round $round $rw %.3f GB/s' % (j['bw_bytes']/1e9))" | tee -a "$out"
  done
  rm -f "$work/fio.bin"
  "$build/bin/bench_nvme" "$build/lib/zhost/plugins/zhost_offload_nvme.so" "$work" --gib "$gib" --rounds 1 \
    --set aio.block_size=$block --set aio.queue_depth=$depth --set offload_nvme.io_engine=io_uring |
    sed "s/^round 0/tier round $round/" | tee -a "$out"
done
/usr/bin/python3 - "$out" <<'PY'
import re, statistics, sys
fio = {"write": [], "read": []}
tier = {("true", "write"): [], ("true", "read"): [], ("false", "write"): [], ("false", "read"): []}
for line in open(sys.argv[1]):
    m = re.match(r"fio round \d+ (write|read) ([\d.]+)", line)
    if m: fio[m[1]].append(float(m[2]))
    m = re.match(r"tier round \d+ checksums (\w+)\s+write ([\d.]+) GB/s read ([\d.]+)", line)
    if m:
        tier[(m[1], "write")].append(float(m[2])); tier[(m[1], "read")].append(float(m[3]))
med = statistics.median
for rw in ("write", "read"):
    f = med(fio[rw])
    for verify in ("true", "false"):
        t = med(tier[(verify, rw)])
        print(f"{rw}: tier (checksums {verify}) {t:.3f} GB/s, fio {f:.3f} GB/s, tier/fio {t / f:.2f}")
    on, off = med(tier[("true", rw)]), med(tier[("false", rw)])
    print(f"{rw}: checksum cost {100 * (off - on) / off:.1f}% of the tier's throughput")
PY
