#!/usr/bin/env bash
# bench/gpu/check.sh: zhost's check on one GPU, from gpu-bundle/ (scripts/gpu-check --part N runs it; what each
# row means: bench/gpu/RESULTS.md). Part 1: environment, CUDA unit tests, training at stages 0-3 in fp32 and
# bf16 and their equalities (stages, CPU, offload to CPU and NVMe, 2 ranks on the GPU over Gloo, NCCL for one
# rank). Part 2: speed and memory of a GPT-2-124M-shaped model against PyTorch eager, and the slower CUDA tests.
#
# Each step runs under `timeout`, clipped to what is left of the part's --budget, so that one hang cannot eat
# the window; a failed step is a FAIL row and the check goes on. Results go into $OUT as they come:
# summary-partN.txt (the rows, then the table), log-partN.txt (every step's command and output) and, at the
# end, runs-partN.tar.gz (logs and run folders, without weights). The table is the output's last lines.
#
# --device cpu runs the same steps on the CPU with fewer steps and a tiny speed model (scripts/gpu-check
# --dry-run): rows that need a GPU are SKIP there, every other row must PASS.
# usage: check.sh --part 1|2|all [--device cuda|cpu] [--budget SECONDS]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
bundle=$root/gpu-bundle
zhost=$bundle/bin/zhost
config=$root/examples/configs/train.toml

part=all device=cuda budget=
while (( $# )); do
  case $1 in
    --part) part=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --budget) budget=$2; shift 2 ;;
    *) echo "usage: check.sh --part 1|2|all [--device cuda|cpu] [--budget SECONDS]" >&2; exit 2 ;;
  esac
done
[[ $part =~ ^(1|2|all)$ && $device =~ ^(cuda|cpu)$ ]] || { echo "check.sh: bad --part or --device" >&2; exit 2; }
# Seconds per part: each fits one device call of at most 10 minutes, both together a 15-minute window.
case $part in 1) budget=${budget:-400} ;; 2) budget=${budget:-270} ;; all) budget=${budget:-560} ;; esac
[[ -f $bundle/MANIFEST ]] || { echo "check.sh: $bundle is missing: run scripts/gpu-check --prepare first" >&2; exit 2; }

out=${OUT:-/tmp/zhost-gpu-check/out}
work=/tmp/zhost-gpu-check/work-part$part
logs=$work/logs runs=$work/runs
summary=$out/summary-part$part.txt steplog=$out/log-part$part.txt
rm -rf "$work"
mkdir -p "$out" "$logs" "$runs"
: >"$summary"
: >"$steplog"
cd "$work" || exit 2
deadline=$((SECONDS + budget))
reserve=15  # seconds kept for the archive and the table

# ---- the environment: python with torch, the libraries, the compiled-in paths ---------------------------------
source "$root/scripts/lib/env.sh"  # ZHOST_VENV: the dry run's torch
python=
for candidate in python3 python python3.12 "$ZHOST_VENV/bin/python"; do
  if "$candidate" -c 'import torch' 2>/dev/null; then python=$candidate; break; fi
done
[[ -n $python ]] || { echo "check.sh: no python here imports torch" >&2; exit 2; }
torch_libs=$("$python" "$here/torch_lib_dirs.py")
export LD_LIBRARY_PATH=$bundle/lib:$torch_libs
manifest() { sed -n "s/^$1=//p" "$bundle/MANIFEST"; }
# The test binaries name <build>/bin/zhost and friends by the build's path here: make that path the bundle.
compiled_build=$(manifest build_dir)
if [[ ! -e $compiled_build ]]; then
  mkdir -p "$(dirname "$compiled_build")" 2>/dev/null && ln -s "$bundle" "$compiled_build" 2>/dev/null
fi
compiled_paths="the test binaries' $compiled_build is $(realpath "$compiled_build" 2>/dev/null || echo missing)"
# ... and the small job of tests/training trains on /usr/share/common-licenses.
if [[ ! -d /usr/share/common-licenses ]]; then
  cp -r "$bundle/data/common-licenses" /usr/share/common-licenses 2>/dev/null
fi

# ---- rows and steps -------------------------------------------------------------------------------------------
rows=()
record() {  # record RESULT NAME FIGURE: a row of the table, kept in $summary as it comes
  rows+=("$1|$2|$3")
  printf '%-5s %-30s %s\n' "$1" "$2" "$3" | tee -a "$summary"
}

# run_step NAME LIMIT CMD...: CMD for at most LIMIT seconds (less when the budget is short), its output in
# $logs/NAME.log and in $steplog; returns CMD's exit code, 124 when it timed out, 200 when there was no time.
run_step() {
  local name=$1 limit=$2 start=$SECONDS left
  shift 2
  step_log=$logs/${name//[^A-Za-z0-9._-]/-}.log
  left=$((deadline - SECONDS - reserve))
  (( limit > left )) && limit=$left
  if (( limit < 10 )); then
    echo "not started: the part's time budget is spent" >"$step_log"
    return 200
  fi
  echo "\$ $*" >"$step_log"
  timeout -k 10 "$limit" "$@" >>"$step_log" 2>&1
  local rc=$?
  echo "[exit $rc after $((SECONDS - start)) s, limit $limit s]" >>"$step_log"
  {
    echo "=== $name"
    if (( $(wc -c <"$step_log") > 200000 )); then head -50 "$step_log"; echo "[...]"; tail -400 "$step_log"; else cat "$step_log"; fi
  } >>"$steplog"
  return $rc
}

figure_of() { sed -n 's/^figure: //p' "$1" | tail -1; }

why() {  # why RC LOG: a failed step in a few words
  case $1 in
    124 | 137) echo "timed out" ;;
    200) echo "no time left in the part's budget" ;;
    *) echo "exit $1: $(grep -E -i 'error|fail|abort|what\(\)' "$2" | grep -v '^\$ ' | tail -1 | cut -c1-110)" ;;
  esac
}

# check NAME LIMIT CMD...: a row from a command that prints "figure: ..." and exits 0 when it holds.
check() {
  local name=$1 limit=$2 rc
  shift 2
  run_step "$name" "$limit" "$@"
  rc=$?
  if (( rc == 0 )); then record PASS "$name" "$(figure_of "$step_log")"
  elif (( rc == 200 )); then record SKIP "$name" "$(why $rc "$step_log")"
  else record FAIL "$name" "$(why $rc "$step_log"); $(figure_of "$step_log")"
  fi
}

# gtest NAME LIMIT BINARY FILTER: a row from a GoogleTest binary of the bundle run with a filter. A filter that
# matches no test fails (a renamed test must not pass unseen); every test skipped is SKIP on the CPU, FAIL on a GPU.
gtest() {
  local name=$1 limit=$2 binary=$bundle/$3 filter=$4 rc ran passed skipped failed
  run_step "$name" "$limit" "$binary" --gtest_filter="$filter" --gtest_color=no
  rc=$?
  ran=$(sed -n 's/^\[==========\] \([0-9]*\) tests\{0,1\} from.*ran.*/\1/p' "$step_log" | tail -1)
  passed=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$step_log" | tail -1)
  skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$step_log" | tail -1)
  failed=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$step_log" | tail -1)
  local figure="${ran:-0} run: ${passed:-0} passed, ${skipped:-0} skipped, ${failed:-0} failed"
  if (( rc == 200 )); then record SKIP "$name" "$(why $rc "$step_log")"
  elif (( rc != 0 )); then record FAIL "$name" "$(why $rc "$step_log"); $figure"
  elif [[ ${ran:-0} == 0 ]]; then record FAIL "$name" "the filter $filter matched no test"
  elif [[ ${skipped:-0} == "$ran" && $device == cuda ]]; then record FAIL "$name" "$figure: no CUDA device seen"
  elif [[ ${skipped:-0} == "$ran" ]]; then record SKIP "$name" "$figure (no GPU)"
  else record PASS "$name" "$figure"
  fi
}

declare -A run_status=()
# zrun NAME LIMIT ARGS...: `zhost run` of examples/configs/train.toml as run NAME (folder $runs/NAME).
zrun() {
  local name=$1 limit=$2
  shift 2
  run_step "run-$name" "$limit" "$zhost" run "$config" --set run.dir="$runs" --set run.name="$name" \
    --set checkpoint.dir="$work/checkpoints/$name" "$@"
  local rc=$?
  run_status[$name]=$( (( rc == 0 )) && echo ok || why $rc "$step_log")
}

run_failed() {  # run_failed ROW RUN...: a FAIL row (SKIP if it never started) when a run it needs did not succeed
  local row=$1 r
  shift
  for r in "$@"; do
    if [[ ${run_status[$r]:-not run} != ok ]]; then
      record "$([[ ${run_status[$r]:-} == "$(why 200)" ]] && echo SKIP || echo FAIL)" "$row" \
        "run $r: ${run_status[$r]:-not run}"
      return 0
    fi
  done
  return 1
}

# compare ROW RUN_A RUN_B EXPECTATIONS...: a row from bench/gpu/compare_runs.py.
compare() {
  local row=$1 a=$2 b=$3
  shift 3
  run_failed "$row" "$a" "$b" && return 1
  check "$row" 120 "$python" "$here/compare_runs.py" "$runs/$a" "$runs/$b" "$@"
  [[ ${rows[-1]} == PASS* ]]
}

# trains ROW RUN: the run's loss went down.
trains() {
  run_failed "$1" "$2" && return
  check "$1" 60 "$python" "$here/run_stats.py" "$runs/$2" --warmup 0 --expect-decrease
}

needs_gpu() {  # needs_gpu ROW [WHAT]: on the CPU, a SKIP row instead of the step
  [[ $device == cuda ]] && return 1
  record SKIP "$1" "needs a GPU${2:+; $2}"
}

# ---- steps ----------------------------------------------------------------------------------------------------
environment() {
  check env 60 bash -c '
    nvidia-smi -L; nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv
    "$0" -c "import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"device\",
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else None)"
    g++ --version | head -1; nvcc --version | tail -2; ldd --version | head -1; uname -srm; nproc; free -g
    df -h /tmp; findmnt -T /tmp -o FSTYPE -n
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    echo "figure: ${gpu:-no GPU}, $("$0" -c "import torch; print(\"torch\", torch.__version__)"), $(ldd --version | head -1 | grep -o "[0-9.]*$" | sed "s/^/glibc /")"
    [[ -n $gpu || $1 == cpu ]]' "$python" "$device"
}

# zhost itself starts with these libraries; if this machine's libstdc++ is older than the build's, the bundle's.
zhost_starts() {
  local needs="needs glibc $(manifest glibc_needed), GLIBCXX $(manifest glibcxx_needed)" rc
  run_step zhost-version 60 "$zhost" version
  rc=$?
  if (( rc != 0 )) && grep -q -E "GLIBCXX|CXXABI|GCC_[0-9]" "$step_log"; then
    export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$bundle/fallback-lib
    needs+="; this machine's libstdc++ is too old: the bundle's is used"
    run_step zhost-version-fallback 60 "$zhost" version
    rc=$?
  fi
  if (( rc == 0 )); then
    record PASS "zhost starts" "$(sed -n 2p "$step_log"), $(sed -n 's/^training engine: //p' "$step_log"); $needs"
  else
    record FAIL "zhost starts" "$(why $rc "$step_log"); $needs; system glibc $(ldd --version | head -1 | grep -o '[0-9.]*$')"
  fi
}

unit_tests_fast() {
  local rc last
  run_step quant_cuda_check 120 "$bundle/tests/zeropp/quant_cuda_check"
  rc=$?
  last=$(grep -v '^\[exit' "$step_log" | tail -1 | cut -c1-100)
  case $rc in
    0) record PASS "unit: zeropp quant CUDA" "$last" ;;
    77) record "$([[ $device == cuda ]] && echo FAIL || echo SKIP)" "unit: zeropp quant CUDA" "$last" ;;
    200) record SKIP "unit: zeropp quant CUDA" "$(why $rc "$step_log")" ;;
    *) record FAIL "unit: zeropp quant CUDA" "$(why $rc "$step_log"); $last" ;;
  esac
  gtest "unit: device copies" 120 tests/services/test_job_services 'DeviceCopies.*'
  gtest "unit: optimizers, norms (CUDA)" 120 tests/optim/test_optim '*_cuda:*/cuda:TensorNumerics.*'
  gtest "unit: models on CUDA" 120 tests/model/zhost_model_tests '*OnCuda*'
  gtest "unit: comm CUDA, NCCL" 180 tests/comm/test_comm 'GlooCudaTest.*:NcclTest.*'
  gtest "unit: zeropp device ops" 60 tests/zeropp/test_zeropp_packed_chunks '*'
}

unit_tests_slow() {
  gtest "unit: fp16 scaling, launcher" 240 tests/training/test_training \
    'Precision.Fp16OverflowSkipsStepsAndLowersTheScaleOnCuda:Launch.LauncherNeverCallsCuda'
  gtest "unit: offload staging (CUDA)" 300 tests/zero/test_zero_training '*OffloadOnCuda*'
}

# A folder where O_DIRECT works, which the NVMe tier needs (tmpfs before Linux 6.6 and some overlays refuse it);
# nothing when there is none.
nvme_folder() {
  local dir
  for dir in /tmp /var/tmp "$root" "${HOME:-/root}" /dev/shm; do
    mkdir -p "$dir/zhost-gpu-check-nvme" 2>/dev/null || continue
    if dd if=/dev/zero of="$dir/zhost-gpu-check-nvme/probe" bs=4096 count=1 oflag=direct status=none 2>/dev/null; then
      rm -f "$dir/zhost-gpu-check-nvme/probe"
      echo "$dir/zhost-gpu-check-nvme"
      return
    fi
    rm -rf "$dir/zhost-gpu-check-nvme"
  done
}

# Part 1's training. The job: examples/configs/train.toml (2 layers, width 128, AdamW, clipping, warmup and
# cosine schedule) as a llama, on the license texts, micro-batches of 4, 2 accumulated, 20 steps (4 on the CPU),
# buckets of 50000 elements; stage 0 reduces each micro-batch (debug.reduce_each_micro_batch, the summation order
# of stages 2 and 3: docs/architecture.md, "One summation order"). A llama, as tests/zero's offload tests: the
# gpt's attention key biases have a true gradient of zero, so runs that round differently drift apart there by
# what Adam makes of rounding noise (tests/training/equivalence_test.cpp), which the tolerances below would mistake
# for a difference of arithmetic. The speed part trains the gpt.
equalities() {
  local steps=20 s
  [[ $device == cpu ]] && steps=4
  local job=(--set model.type=llama --set run.device="$device" --set steps=$steps --set train_micro_batch_size_per_gpu=4
    --set gradient_accumulation_steps=2 --set zero.reduce_bucket_size=50000 --set run.save_final_weights=true
    --set data.path="$bundle/data/common-licenses" --set comm.timeout_s=120 --set steps_per_print=5)
  local each=(--set debug.reduce_each_micro_batch=true) one=(--nproc 1)
  # What "equal" means on this device: bit for bit if stage 0 itself repeats bit for bit; else within 1e-5 (fp32)
  # and 1e-2 (bf16, whose rounding step is 2^-8), weights per tensor and losses.
  local exact=(--bitwise) exact_bf16=(--bitwise) exact_text="bitwise"

  zrun fp32-s0 120 "${one[@]}" "${job[@]}" --set zero.stage=0 "${each[@]}"
  trains "fp32 stage 0 trains" fp32-s0
  zrun fp32-s0-again 120 "${one[@]}" "${job[@]}" --set zero.stage=0 "${each[@]}"
  if ! compare "fp32 stage 0 repeats bitwise" fp32-s0-again fp32-s0 --bitwise; then
    exact=(--weights-rel 1e-5 --loss-rel 1e-5) exact_bf16=(--weights-rel 1e-2 --loss-rel 1e-2)
    exact_text="within 1e-5 in fp32, 1e-2 in bf16 (stage 0 does not repeat bit for bit)"
  fi
  echo "stage equalities: $exact_text" >>"$summary"
  for s in 1 2 3; do
    zrun fp32-s$s 120 "${one[@]}" "${job[@]}" --set zero.stage=$s
    compare "fp32 stage $s = stage 0" fp32-s$s fp32-s0 "${exact[@]}"
  done
  # The same job on the CPU: losses within 1e-3 relative at every step (the weights' distance is printed).
  zrun fp32-s0-cpu 180 "${one[@]}" "${job[@]}" --set zero.stage=0 "${each[@]}" --set run.device=cpu
  compare "fp32 GPU ~ CPU (loss 1e-3)" fp32-s0 fp32-s0-cpu --loss-rel 1e-3

  zrun bf16-s0 120 "${one[@]}" "${job[@]}" --set bf16.enabled=true --set zero.stage=0 "${each[@]}"
  trains "bf16 stage 0 trains" bf16-s0
  for s in 1 2 3; do
    zrun bf16-s$s 120 "${one[@]}" "${job[@]}" --set bf16.enabled=true --set zero.stage=$s
    compare "bf16 stage $s = stage 0" bf16-s$s bf16-s0 "${exact_bf16[@]}"
  done

  # Offload: the CPU tier's fused kernel against the device's ATen AdamW, which round differently (docs/
  # architecture.md): within 1e-5 as tests/zero's OffloadOnCuda. NVMe keeps the same tier's states: equal to it.
  for s in 1 2 3; do
    zrun off-s$s 150 "${one[@]}" "${job[@]}" --set zero.stage=$s --set zero.offload_optimizer.device=cpu \
      --set zero.offload_optimizer.pin_memory=true
    compare "offload cpu stage $s ~ none" off-s$s fp32-s$s --weights-rel 1e-5 --loss-rel 1e-5
  done
  local nvme
  nvme=$(nvme_folder)
  if [[ -n $nvme ]]; then
    mkdir -p "$nvme/optimizer" "$nvme/param"
    zrun nvme-s3 180 "${one[@]}" "${job[@]}" --set zero.stage=3 --set zero.offload_optimizer.device=nvme \
      --set zero.offload_optimizer.nvme_path="$nvme/optimizer" --set zero.offload_param.device=nvme \
      --set zero.offload_param.nvme_path="$nvme/param"
    compare "nvme stage 3 = offload cpu" nvme-s3 off-s3 "${exact[@]}"
    echo "nvme folder: $nvme ($(findmnt -T "$nvme" -o FSTYPE -n 2>/dev/null))" >>"$summary"
    rm -rf "$nvme"
  else
    record SKIP "nvme stage 3 = offload cpu" "no folder here takes O_DIRECT (/tmp, /var/tmp, the checkout, HOME, /dev/shm)"
  fi

  # Two ranks on the one GPU over Gloo (debug.share_cuda_device), micro-batches of 2: the same global batch. Against
  # the 1-rank job within the CPU tests' tolerance (tests/training/equivalence_test.cpp: 2e-5 of each tensor's
  # largest weight + 5e-6, losses 2e-5); stages 2 and 3 against stage 0 on the same 2 ranks as above.
  local two=(--nproc 2 --set train_micro_batch_size_per_gpu=2 --set debug.share_cuda_device=true --set comm.backend=gloo)
  zrun gloo2-s0 180 "${job[@]}" "${two[@]}" --set zero.stage=0 "${each[@]}"
  compare "2 ranks gloo ~ 1 rank" gloo2-s0 fp32-s0 --weights-tol 2e-5:5e-6 --loss-rel 2e-5
  for s in 2 3; do
    zrun gloo2-s$s 180 "${job[@]}" "${two[@]}" --set zero.stage=$s
    compare "2 ranks gloo stage $s = stage 0" gloo2-s$s gloo2-s0 "${exact[@]}"
  done

  # One rank through NCCL (debug.nccl_single_rank) gives the local result: equal to the job without.
  for s in 2 3; do
    local nccl=(--set zero.stage=$s --set comm.backend=nccl --set debug.nccl_single_rank=true)
    if [[ $device == cpu ]]; then  # NCCL needs a GPU: here only its keys are checked
      if run_step "config-nccl-s$s" 60 "$zhost" config check "$config" "${job[@]}" "${nccl[@]}"; then
        needs_gpu "nccl 1 rank stage $s = local" "its config checks"
      else
        record FAIL "nccl 1 rank stage $s = local" "config check: $(why $? "$step_log")"
      fi
      continue
    fi
    zrun nccl-s$s 150 "${one[@]}" "${job[@]}" "${nccl[@]}"
    compare "nccl 1 rank stage $s = local" nccl-s$s fp32-s$s "${exact[@]}"
  done
}

# Part 2's speed: a GPT-2-124M-shaped gpt (12 layers, width 768, 12 heads, seq 1024, vocab 50257) in bf16 on
# random tokens, micro-batches of 8, 40 steps of which the first 10 are left out; MFU against the bf16 matmul
# rate measured first. On the CPU: a tiny model, only to run the commands.
speed() {
  local model=(12 768 12 1024 50257) batch=8 steps=40 warmup=10 size=8192 s peak=0
  [[ $device == cpu ]] && model=(2 64 2 64 512) batch=2 steps=4 warmup=1 size=256
  local rc
  run_step matmul-peak 90 "$python" "$here/matmul_peak.py" --device "$device" --size $size
  rc=$?
  if (( rc == 0 )); then
    peak=$("$python" -c 'import json, sys; print(round(json.loads(sys.argv[1])["bf16_tflops"], 3))' \
      "$(grep '^{' "$step_log" | tail -1)")
    record PASS "bf16 matmul peak" "$peak TFLOP/s (${size}^3, torch $device)"
  else
    record FAIL "bf16 matmul peak" "$(why $rc "$step_log"); zhost measures its own peak"
  fi
  local job=(--nproc 1 --set run.device="$device" --set data.type=synthetic --set data.path= --set model.type=gpt
    --set model.layers=${model[0]} --set model.width=${model[1]} --set model.heads=${model[2]}
    --set model.seq_len=${model[3]} --set model.vocab=${model[4]} --set bf16.enabled=true
    --set train_micro_batch_size_per_gpu=$batch --set gradient_accumulation_steps=1 --set steps=$steps
    --set steps_per_print=10 --set wall_clock_breakdown=false --set run.peak_tflops=$peak)
  for s in 0 1 2 3; do
    zrun speed-s$s 240 "${job[@]}" --set zero.stage=$s
    run_failed "zhost speed stage $s" speed-s$s ||
      check "zhost speed stage $s" 60 "$python" "$here/run_stats.py" "$runs/speed-s$s" --warmup $warmup
  done
  # The same job with model.attention = "eager" (the explicit softmax zhost ran before sdpa became the default).
  zrun speed-s0-eager 240 "${job[@]}" --set zero.stage=0 --set model.attention=eager
  run_failed "zhost speed stage 0, eager attention" speed-s0-eager ||
    check "zhost speed stage 0, eager attention" 60 "$python" "$here/run_stats.py" "$runs/speed-s0-eager" \
      --warmup $warmup
  check "pytorch eager bf16" 300 "$python" "$here/pytorch_gpt.py" --layers ${model[0]} --width ${model[1]} \
    --heads ${model[2]} --seq-len ${model[3]} --vocab ${model[4]} --micro-batch $batch --steps $steps \
    --warmup $warmup --device "$device" --bf16 --attention math sdpa --peak-tflops "$peak"
  local pytorch_log=$step_log
  if [[ ${rows[-1]} == SKIP* ]]; then
    record SKIP "zhost s0 / pytorch eager" "$(why 200)"
  elif [[ ${run_status[speed-s0]:-} == ok && ${rows[-1]} == PASS* ]]; then
    check "zhost s0 / pytorch eager" 60 "$python" -c 'import json, os, statistics, sys
zhost = [json.loads(l) for l in open(os.path.join(sys.argv[1], "metrics.jsonl"))]
zhost = statistics.median(r["tokens_per_s"] for r in zhost if r["step"] > int(sys.argv[3]))
torch = {r["attention"]: r["tokens_per_s"] for r in map(json.loads, (l for l in open(sys.argv[2]) if l.startswith("{")))}
print("figure: " + ", ".join(f"{zhost / t:.2f}x {a}" for a, t in torch.items()))' \
      "$runs/speed-s0" "$pytorch_log" $warmup
  else
    record FAIL "zhost s0 / pytorch eager" "a run failed"
  fi
}

# Memory at N = 2 (two ranks sharing the GPU over Gloo): rank 0's model states against ZeRO's formula, where the
# stages differ (at N = 1 every stage's formula is the same). A few steps of the speed model.
memory_two_ranks() {
  local model=(12 768 12 1024 50257) s
  [[ $device == cpu ]] && model=(2 64 2 64 512)
  for s in 1 2 3; do
    zrun mem2-s$s 150 --nproc 2 --set run.device="$device" --set debug.share_cuda_device=true --set comm.backend=gloo \
      --set data.type=synthetic --set data.path= --set model.layers=${model[0]} --set model.width=${model[1]} \
      --set model.heads=${model[2]} --set model.seq_len=${model[3]} --set model.vocab=${model[4]} \
      --set bf16.enabled=true --set train_micro_batch_size_per_gpu=2 --set steps=3 --set zero.stage=$s
    run_failed "memory 2 ranks stage $s" mem2-s$s ||
      check "memory 2 ranks stage $s" 60 "$python" "$here/run_stats.py" "$runs/mem2-s$s" --memory
  done
}

# ---- the parts ------------------------------------------------------------------------------------------------
echo "gpu-check part $part on $device: budget $budget s; bundle $(manifest commit); results in $out" | tee -a "$summary"
echo "$compiled_paths; python $python; LD_LIBRARY_PATH=$LD_LIBRARY_PATH" | tee -a "$summary"
environment
zhost_starts
if [[ $part == 1 || $part == all ]]; then
  unit_tests_fast
  equalities
fi
if [[ $part == 2 || $part == all ]]; then
  speed
  unit_tests_slow
  memory_two_ranks
fi

# ---- results --------------------------------------------------------------------------------------------------
tar -czf "$out/runs-part$part.tar.gz" -C "$work" --exclude='weights.bin' --exclude='checkpoints' \
  --exclude='zhost-gpu-check-nvme' logs runs 2>/dev/null
if (( $(stat -c %s "$out/runs-part$part.tar.gz") > 15 * 1048576 )); then  # what comes back: 16 MiB a file
  tar -czf "$out/runs-part$part.tar.gz" -C "$work" logs
fi
declare -A count=([PASS]=0 [FAIL]=0 [SKIP]=0)
for row in "${rows[@]}"; do count[${row%%|*}]=$((count[${row%%|*}] + 1)); done
{
  echo
  echo "== gpu-check part $part ($device, $(manifest commit | cut -c1-12)): ${#rows[@]} checks, ${count[PASS]} PASS," \
    "${count[FAIL]} FAIL, ${count[SKIP]} SKIP, in ${SECONDS} s of $budget"
  for row in "${rows[@]}"; do
    IFS='|' read -r result name figure <<<"$row"
    printf '%-5s %-30s %s\n' "$result" "$name" "$figure"
  done
} | tee -a "$summary"
(( count[FAIL] == 0 ))
