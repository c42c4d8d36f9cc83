#!/usr/bin/env bash
# bench/gpu/bundle.sh: gpu-bundle/, what scripts/gpu-check runs on a GPU machine that has torch but no network,
# no apt and no build of zhost; made here from build/ (scripts/gpu-check --prepare and --dry-run call it).
#
#   bundle.sh prepare BUILD_DIR BUNDLE_DIR TORCH_LIB_DIRS   copy, strip and list what the check runs
#   bundle.sh verify BUNDLE_DIR TORCH_LIB_DIRS              every library of every bundled file resolves from the
#                                                           bundle, torch's folders or the base system alone
#
# The bundle mirrors build/'s layout (bin/zhost, lib/zhost/plugins/*.so, tests/<area>/<binary>), so that zhost
# finds its plugins beside itself and the test binaries' compiled-in paths (ZHOST_EXE=<build>/bin/zhost, ...)
# work once <build> is linked to the bundle. Beside that layout:
#   lib/*.so*      the libraries they need that a GPU machine lacks (the ldd closure minus the base system and
#                  minus torch's and NVIDIA's libraries, which come from the GPU machine's own torch);
#   fallback-lib/  this machine's libstdc++ and libgcc_s, used there only when its own are too old;
#   data/          the text the example config trains on (/usr/share/common-licenses here);
#   MANIFEST       where the build was made (its paths are compiled into the tests), the newest glibc and
#                  libstdc++ symbol versions the files need, and every file with its size.
# Debug information is stripped from the copies (--strip-debug). TORCH_LIB_DIRS: torch/lib and the nvidia/*/lib
# folders of the torch wheel, ':'-separated.
set -uo pipefail

# Libraries every x86-64 Linux has (glibc, and GCC's runtime; fallback-lib covers an old libstdc++).
base_system='linux-vdso.so.1 ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1
libutil.so.1 libresolv.so.2 libstdc++.so.6 libgcc_s.so.1'
# torch's, CUDA's and the driver's libraries: the GPU machine's torch brings them (the driver its own).
from_gpu_machine='^(libtorch|libc10|libcaffe2|libshm|libgomp|libcuda\.|libcudart|libcublas|libcudnn|libnccl|libcufft|libcurand|libcusparse|libcusolver|libnvrtc|libnvJitLink|libcufile|libnvshmem|libcupti|libnvToolsExt|libnvidia)'
# Only the driver may be missing here (this machine has no GPU).
driver_only='^(libcuda\.so|libnvidia)'

# What the check runs, relative to the build folder; lib/zhost (plugins, SentencePiece shim) is copied whole.
items=(
  bin/zhost
  tests/zeropp/quant_cuda_check                   # ZeRO++ CUDA kernels bit for bit against the CPU ones
  tests/services/test_job_services                # copy services, pinned buffers
  tests/optim/test_optim                          # optimizers, gradient norm, clipping on CUDA
  tests/model/zhost_model_tests                   # the models on CUDA against the CPU
  tests/comm/test_comm                            # CUDA tensors over Gloo, NCCL
  tests/zeropp/test_zeropp_packed_chunks          # quant_zeropp's device operations
  tests/training/test_training                    # fp16 loss scaling on CUDA, no CUDA before fork
  tests/training/libzhost_cuda_probe_recorder.so  # ... which it preloads
  tests/zero/test_zero_training                   # CPU offload from a GPU, pinned staging
)
max_bundle_mib=56

die() {
  echo "bundle.sh: $*" >&2
  exit 1
}

is_elf() { [[ $(head -c 4 "$1" 2>/dev/null | od -An -c | tr -d ' ') == '177ELF' ]]; }

# "NAME PATH" for each library ldd resolves for FILE (PATH "not-found" when it does not), given LD_LIBRARY_PATH.
resolved_libraries() {
  ldd "$1" 2>/dev/null | awk '
    $2 == "=>" && $3 == "not" { print $1, "not-found"; next }
    $2 == "=>" { print $1, $3; next }
    $1 ~ /^\// { n = split($1, parts, "/"); print parts[n], $1 }
    $1 ~ /^linux-vdso/ { print $1, "vdso" }'
}

in_dirs() {  # in_dirs PATH DIRS: whether PATH (resolved) lies in one of the ':'-separated DIRS
  local path dir
  path=$(realpath -m "$1")
  IFS=: read -ra dirs <<<"$2"
  for dir in "${dirs[@]}"; do
    [[ -n $dir && $path == "$(realpath -m "$dir")"/* ]] && return 0
  done
  return 1
}

is_base_system() { [[ " ${base_system//$'\n'/ } " == *" $1 "* ]]; }

bundled_elf_files() {  # every ELF file of the bundle but the fallback libraries
  find "$1" -path "$1/fallback-lib" -prune -o -type f -print | sort | while read -r f; do
    is_elf "$f" && echo "$f"
  done
}

newest_version() {  # newest_version PREFIX FILES...: e.g. 2.34 for GLIBC_, over the files' needed versions
  local prefix=$1
  shift
  readelf -V --wide "$@" 2>/dev/null | grep -o "Name: ${prefix}[0-9.]*" | sed "s/Name: ${prefix}//" | sort -V | tail -1
}

prepare() {
  local build=$1 bundle=$2 torch_libs=$3 item
  [[ -x $build/bin/zhost ]] || die "$build/bin/zhost is not built (scripts/build)"
  build=$(realpath "$build")
  rm -rf "$bundle"
  mkdir -p "$bundle/lib" "$bundle/fallback-lib" "$bundle/data"
  for item in "${items[@]}"; do
    [[ -e $build/$item ]] || die "$build/$item is not built"
    mkdir -p "$bundle/$(dirname "$item")"
    cp -L "$build/$item" "$bundle/$item"
  done
  [[ -d $build/lib/zhost/plugins ]] || die "$build/lib/zhost/plugins is not built"
  cp -rL "$build/lib/zhost" "$bundle/lib/zhost"

  # The libraries the GPU machine lacks: ldd's closure of every file, minus the base system and torch's.
  local file name path missing=0
  while read -r file; do
    while read -r name path; do
      if [[ $path == not-found ]]; then
        [[ $name =~ $driver_only ]] || { echo "bundle.sh: $file needs $name, which is not found here" >&2; missing=1; }
      elif [[ $path == vdso ]] || is_base_system "$name" || [[ $name =~ $from_gpu_machine ]] ||
           in_dirs "$path" "$torch_libs"; then
        :
      elif [[ ! -e $bundle/lib/$name ]]; then
        cp -L "$path" "$bundle/lib/$name"
      fi
    done < <(LD_LIBRARY_PATH=$torch_libs resolved_libraries "$file")
  done < <(bundled_elf_files "$bundle")
  (( missing == 0 )) || die "libraries are missing here; nothing to bundle them from"
  while read -r name path; do
    [[ $name == libstdc++.so.6 || $name == libgcc_s.so.1 ]] && cp -L "$path" "$bundle/fallback-lib/$name"
  done < <(LD_LIBRARY_PATH=$torch_libs resolved_libraries "$bundle/bin/zhost")

  cp -rL /usr/share/common-licenses "$bundle/data/common-licenses" || die "cannot copy /usr/share/common-licenses"
  while read -r file; do
    chmod u+w "$file"
    strip --strip-debug "$file" || die "strip --strip-debug $file failed"
  done < <(find "$bundle" -type f | while read -r f; do is_elf "$f" && echo "$f"; done)

  local source commit
  source=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")
  commit=$(git -C "$source" rev-parse HEAD 2>/dev/null || echo unknown)
  git -C "$source" diff --quiet HEAD 2>/dev/null || commit="$commit+uncommitted changes"
  mapfile -t elves < <(bundled_elf_files "$bundle")
  {
    echo "# gpu-bundle: made by bench/gpu/bundle.sh on $(hostname) at $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "source_dir=$source"
    echo "build_dir=$build"
    echo "commit=$commit"
    echo "glibc_needed=$(newest_version GLIBC_ "${elves[@]}")"
    echo "glibcxx_needed=$(newest_version GLIBCXX_ "${elves[@]}")"
    echo "cxxabi_needed=$(newest_version CXXABI_ "${elves[@]}")"
    (cd "$bundle" && find . -type f ! -name MANIFEST -printf 'file %s %P\n' | sort -k3)
  } >"$bundle/MANIFEST"

  local bytes
  bytes=$(du -sb "$bundle" | cut -f1)
  printf 'bundle.sh: %s: %.1f MiB (%d files; limit %d MiB); needs glibc %s, GLIBCXX %s\n' "$bundle" \
    "$(awk -v b="$bytes" 'BEGIN { print b / 1048576 }')" "$(grep -c '^file ' "$bundle/MANIFEST")" "$max_bundle_mib" \
    "$(sed -n 's/^glibc_needed=//p' "$bundle/MANIFEST")" "$(sed -n 's/^glibcxx_needed=//p' "$bundle/MANIFEST")"
  (( bytes <= max_bundle_mib * 1048576 )) || die "the bundle is over ${max_bundle_mib} MiB"
}

verify() {
  local bundle=$1 torch_libs=$2 file name path bad=0 checked=0
  [[ -f $bundle/MANIFEST ]] || die "$bundle is not a bundle (no MANIFEST): scripts/gpu-check --prepare"
  bundle=$(realpath "$bundle")
  declare -A origins=()
  while read -r file; do
    checked=$((checked + 1))
    while read -r name path; do
      if [[ $path == not-found ]]; then
        if [[ $name =~ $driver_only ]]; then
          origins[driver]+=" $name"
        else
          echo "verify: ${file#"$bundle"/}: $name not found" >&2
          bad=1
        fi
      elif [[ $path == vdso ]]; then
        :
      elif in_dirs "$path" "$bundle"; then
        origins[bundle]+=" $name"
      elif in_dirs "$path" "$torch_libs"; then
        origins[torch]+=" $name"
      elif is_base_system "$name"; then
        origins[base]+=" $name"
      else
        echo "verify: ${file#"$bundle"/}: $name comes from $path, which a GPU machine may not have" >&2
        bad=1
      fi
    done < <(LD_LIBRARY_PATH=$bundle/lib:$torch_libs resolved_libraries "$file")
  done < <(bundled_elf_files "$bundle")
  local origin
  for origin in bundle torch base driver; do
    printf 'verify: from %-6s %s\n' "$origin:" "$(tr ' ' '\n' <<<"${origins[$origin]:-}" | sort -u | paste -sd' ')"
  done
  echo "verify: $checked files checked: $([[ $bad == 0 ]] && echo 'every library resolves' || echo FAILED)"
  return "$bad"
}

case "${1:-}" in
  prepare) (( $# == 4 )) || die "usage: bundle.sh prepare BUILD_DIR BUNDLE_DIR TORCH_LIB_DIRS"; prepare "$2" "$3" "$4" ;;
  verify) (( $# == 3 )) || die "usage: bundle.sh verify BUNDLE_DIR TORCH_LIB_DIRS"; verify "$2" "$3" ;;
  *) die "usage: bundle.sh prepare BUILD_DIR BUNDLE_DIR TORCH_LIB_DIRS | verify BUNDLE_DIR TORCH_LIB_DIRS" ;;
esac
