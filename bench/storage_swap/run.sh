#!/usr/bin/env bash
# bench/storage_swap/run.sh BUILD_DIR NVME_PATH [WIDTH]: hot swaps of the optimizer's storage (Note [Storage
# swap]) against the bound bytes / min(source, destination bandwidth), measured in one run on one machine:
#   1. fio writes then reads 2 GiB in NVME_PATH (O_DIRECT, 1 MiB blocks, depth 8, io_uring): the disk's bandwidth;
#   2. numpy copies a 1 GiB array 5 times: host memory's copy bandwidth (bytes copied per second);
#   3. a 1-rank stage 1 llama (32 layers of WIDTH, default 512: 101M parameters, 1.2 GB of fp32 master and Adam
#      states) with CPU offload swaps after steps 2 to 7: cpu -> nvme -> cpu -> hello -> cpu -> hello -> cpu.
# Prints each swap's seconds and its bound (cpu -> nvme: fio write; nvme -> cpu: fio read; to or from hello_tier,
# both in host memory: the copy bandwidth into memory touched before), their ratio, and the RSS and peak RSS
# before and after each swap. The first copy into memory this machine never touched is also printed: on a VM
# it can be far slower than the copy bandwidth, and a tier's new buffers are such memory.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR NVME_PATH [WIDTH]}" && pwd)
dir=${2:?usage: run.sh BUILD_DIR NVME_PATH [WIDTH]}
width=${3:-512}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../machine.sh"
work=$(mktemp -d "$dir/bench-swap-XXXXXX")
trap 'rm -rf "$work"' EXIT
describe_machine "$build/bin/zhost" "bench/storage_swap/run.sh $*"

for rw in write read; do
  fio --name=fio --directory="$work" --filename=fio.bin --rw=$rw --bs=1M --iodepth=8 --direct=1 \
    --ioengine=io_uring --size=2G --numjobs=1 --output-format=json >"$work/fio.$rw.json"
done
rm -f "$work/fio.bin"
/usr/bin/python3 -c "
import numpy as np, time
a = np.ones(1 << 28, dtype=np.float32); b = np.empty_like(a); best = 0
t = time.perf_counter(); np.copyto(b, a); first = a.nbytes / (time.perf_counter() - t)
for _ in range(5):
    t = time.perf_counter(); np.copyto(b, a); best = max(best, a.nbytes / (time.perf_counter() - t))
print('%.3f %.3f' % (best / 1e9, first / 1e9))" >"$work/memcpy.txt"

cat >"$work/job.toml" <<TOML
steps = 8
seed = 1
train_micro_batch_size_per_gpu = 1
steps_per_print = 1
[model]
type = "llama"
layers = 32
heads = 8
width = $width
vocab = 256
seq_len = 64
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 3e-4
[zero]
stage = 1
offload_optimizer.device = "cpu"
offload_optimizer.nvme_path = "$work"
offload_optimizer.pipeline_read = true
offload_optimizer.pipeline_write = true
offload_optimizer.swap_schedule = ["2:nvme", "3:cpu", "4:hello", "5:cpu", "6:hello", "7:cpu"]
[hello_tier]
capacity_mb = 8192
[offload_cpu]
storage_chunk_elements = 4194304
[run]
dir = "$work/runs"
name = "swap"
TOML
"$build/bin/zhost" run "$work/job.toml" --plugin-path "$build/test_plugins/hello_tier" >"$work/job.log" 2>&1 ||
  { cat "$work/job.log"; exit 1; }

/usr/bin/python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
disk = {rw: json.load(open(f"{work}/fio.{rw}.json"))["jobs"][0][rw]["bw_bytes"] / 1e9 for rw in ("write", "read")}
memcpy, first_touch = map(float, open(f"{work}/memcpy.txt").read().split())
print(f"fio write {disk['write']:.3f} GB/s, fio read {disk['read']:.3f} GB/s, host memory copy {memcpy:.3f} GB/s "
      f"(into memory touched for the first time: {first_touch:.3f} GB/s)")
steps = [json.loads(l) for l in open(f"{work}/runs/swap/metrics.jsonl")]
peak = {s["step"]: s["peak_rss_mb"] for s in steps}
rss = {s["step"]: s["rss_mb"] for s in steps}
for s in (json.loads(l) for l in open(f"{work}/runs/swap/swaps.jsonl")):
    a, b = s["from"], s["to"]
    bw = disk["write"] if b == "nvme" else disk["read"] if a == "nvme" else memcpy
    bound = s["bytes"] / 1e9 / bw
    k = s["after_step"]
    print(f"{a:>5} -> {b:<5} after step {k}: {s['bytes'] / 1e9:.3f} GB in {s['seconds']:.3f} s, bound {bound:.3f} s "
          f"({bw:.3f} GB/s): {s['seconds'] / bound:.2f}x the bound; RSS {rss[k]:.0f} MB before, "
          f"{rss[k + 1]:.0f} MB after; peak RSS {peak[k]:.0f} MB before, {peak[k + 1]:.0f} MB after")
for s in steps:
    print(f"step {s['step']}: {s['optimizer_storage']:>5}  {s['step_time_ms']:.0f} ms  rss {s['rss_mb']:.0f} MB")
PY
