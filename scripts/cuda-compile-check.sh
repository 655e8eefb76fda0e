#!/usr/bin/env bash
# Compiles the CUDA-only code with the LibTorch and the CUDA of the GPU machine's generation,
# without a GPU and without a CUDA LibTorch: the sources built only with PRECPROBE_WITH_CUDA
# (src/probe/cuda, the statistics engine's CUDA branch, tests/cuda, tests/probe/test_stats_cuda,
# bench/cuda) against LibTorch 2.14's headers in the sid root (GCC 16, C++20), with CUDA 13's
# runtime headers from this machine's toolkit; and the kernel (src/probe/cuda/stats_kernel.cu)
# with this machine's nvcc for sm_80 and sm_90. Debian has no CUDA LibTorch newer than 2.6
# (scripts/gpu-check-trixie.sh builds and links against that one); the GPU machine's PyTorch
# (2.11, nvcc 13) compiles as C++20 like 2.14 (docs/cuda.md, "What was compiled where").
# Syntax and templates only (-fsyntax-only): nothing is linked or run. Warnings are printed,
# not failed on (a newer sid GCC may add some; the CUDA dry run builds with the project's
# warnings too). Needs root.
#
#   scripts/cuda-compile-check.sh
#   ROOT=dir       the sid root (default /var/cache/precprobe/sid-root; made when missing)
#   BUILD_DIR=dir  a build directory of that root holding generated/ (default build-sid;
#                  configured there when missing)
#   CUDA=dir       the CUDA toolkit (default /usr/local/cuda); without one this prints why
#                  and exits 0 (the test command calls it where a toolkit may be missing)
set -euo pipefail
case "${1:-}" in
  -h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  ?*) echo "cuda-compile-check: no arguments (see --help)" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
repo="$PWD"
root="${ROOT:-/var/cache/precprobe/sid-root}"
build_dir="${BUILD_DIR:-build-sid}"
cuda="${CUDA:-/usr/local/cuda}"
if [[ ! -f "$cuda/include/cuda_runtime.h" || ! -x "$cuda/bin/nvcc" ]]; then
  echo "cuda-compile-check: no CUDA toolkit at $cuda (include/cuda_runtime.h, bin/nvcc): skipped"
  exit 0
fi

# The kernel, here: it includes no LibTorch header. C++17 as src/probe/CMakeLists.txt sets.
work="$(mktemp -d /tmp/precprobe-cuda-check.XXXXXX)"
trap 'rm -rf "$work"' EXIT
echo "cuda-compile-check: $("$cuda/bin/nvcc" --version | tail -1)"
"$cuda/bin/nvcc" -std=c++17 -gencode arch=compute_80,code=sm_80 \
  -gencode arch=compute_90,code=sm_90 -Isrc/probe -Xcompiler -Wall,-Wextra \
  -c src/probe/cuda/stats_kernel.cu -o "$work/stats_kernel.o"
echo "ok   src/probe/cuda/stats_kernel.cu (nvcc, sm_80 sm_90)"

scripts/debian-root.sh sid "$root"
# CUDA's headers inside the root, and the one header a CUDA build of PyTorch generates
# (c10/cuda/impl/cuda_cmake_macros.h, from cuda_cmake_macros.h.in): a CPU LibTorch ships
# c10/cuda without it.
inc="$root/opt/precprobe-cuda"
rm -rf "$inc"
mkdir -p "$inc/gen/c10/cuda/impl"
cp -r "$cuda/include" "$inc/include"
printf '#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n' \
  >"$inc/gen/c10/cuda/impl/cuda_cmake_macros.h"
trap 'rm -rf "$work" "$inc"; scripts/debian-root.sh --umount "$root"' EXIT
scripts/debian-root.sh --mount "$root" "$repo"

mapfile -t sources < <(
  { git ls-files 'src/probe/*.cpp' 'tests/*.cpp' 'bench/*.cpp' |
      xargs grep -lE 'PRECPROBE_WITH_CUDA|<c10/cuda/|<cuda_runtime' || true
    git ls-files 'tests/cuda/*.cpp' 'bench/cuda/*.cpp'; } | sort -u)
echo "cuda-compile-check: ${#sources[@]} sources"
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -euo pipefail -c '
    cd /src/precprobe
    build_dir="$1"; shift
    if [[ ! -f "$build_dir/generated/precprobe/version.h" ]]; then
      cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    fi
    echo "cuda-compile-check: $(g++ --version | head -1), libtorch-dev $(dpkg-query -W -f="\${Version}" libtorch-dev)"
    check() {
      g++ -std=c++20 -fsyntax-only -Wall -Wextra -Wshadow -Wno-unused-parameter \
        -DPRECPROBE_WITH_CUDA=1 -DPRECPROBE_BINARY_DIR=\"/x\" -DPRECPROBE_SOURCE_DIR=\"/x\" \
        -DPRECPROBE_TEST_DATA_DIR=\"/x\" -DUSE_C10D_GLOO -DUSE_DISTRIBUTED \
        -Itests -Ibench -Isrc/core -Isrc/probe -Iinclude -I"$build_dir/generated" \
        -isystem /usr/include/torch/csrc/api/include -isystem /opt/precprobe-cuda/include \
        -isystem /opt/precprobe-cuda/gen "$1" 2>"/tmp/cuda-check.$$.$2" &&
        { echo "ok   $1"; grep -A3 "warning:" "/tmp/cuda-check.$$.$2" | head -12 || true; } ||
        { echo "FAIL $1"; head -30 "/tmp/cuda-check.$$.$2"; return 1; }
    }
    fails=0 i=0 pids=()
    for f in "$@"; do  # two at a time
      check "$f" $((i % 2)) & pids+=($!); i=$((i + 1))
      if (( ${#pids[@]} == 2 )); then
        for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done; pids=()
      fi
    done
    for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
    rm -f /tmp/cuda-check.$$.*
    if (( fails )); then echo "cuda-compile-check: $fails sources failed" >&2; exit 1; fi
    echo "cuda-compile-check: every CUDA source compiles (C++20, LibTorch 2.14, CUDA 13 headers)"
  ' _ "$build_dir" "${sources[@]}"
