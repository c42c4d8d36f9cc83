#!/usr/bin/env bash
# bench/checkpoint/run.sh BUILD_DIR DIR [WIDTH] [LAYERS] [RANKS]: checkpoint files against fio, in one run, on the
# same folder: fio writes then reads a file of the checkpoint's size (buffered, fsync at the end, page cache
# dropped before reading: what the checkpoint writer and reader do), then bench_checkpoint writes a synthetic
# gpt checkpoint (fp32 masters only) of that shape and reads it back (checksum pass, then load pass, cache
# dropped before each), then `zhost export` writes it as Hugging Face GPT-2 safetensors while /usr/bin/time
# records its peak RSS. Dropping the page cache needs root; without it the read figures are the cache's.
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR DIR [WIDTH] [LAYERS] [RANKS]}
dir=${2:?usage: run.sh BUILD_DIR DIR [WIDTH] [LAYERS] [RANKS]}
width=${3:-1024}
layers=${4:-4}
ranks=${5:-2}
work=$(mktemp -d "$dir/bench-checkpoint-XXXXXX")
trap 'rm -rf "$work"' EXIT
drop() { sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || echo "(cannot drop the page cache: not root)"; }
bytes=$("$build/bin/bench_checkpoint" size --width "$width" --layers "$layers")
mkdir -p "$work/ckpt"
mb=$((bytes / 1000000))
for rw in write read; do
  [ $rw = read ] && drop
  fio --name=fio --directory="$work" --filename=fio.bin --rw=$rw --bs=1M --size=${mb}M --end_fsync=1 \
    --ioengine=psync --output-format=json >"$work/fio.json"
  /usr/bin/python3 -c "import json; j=json.load(open('$work/fio.json'))['jobs'][0]['$rw']; print('fio $rw %.3f GB/s' % (j['bw_bytes']/1e9))"
done
rm -f "$work/fio.bin"
drop
"$build/bin/bench_checkpoint" write "$work/ckpt" --width "$width" --layers "$layers" --ranks "$ranks"
drop
"$build/bin/bench_checkpoint" read "$work/ckpt"
drop
/usr/bin/time -f "export peak RSS %M KB, %e s" "$build/bin/zhost" export "$work/ckpt" "$work/hf"
du -sb "$work/hf" | awk '{printf "exported %.3f GB\n", $1/1e9}'
free -b | awk '/Mem:/ {printf "machine memory %.1f GB\n", $2/1e9}'
