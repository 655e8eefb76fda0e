#!/usr/bin/env bash
# Configures and builds precprobe into ./build (Release, Ninja when present, ccache when
# present). Extra arguments go to cmake's configure step, e.g. -DPRECPROBE_WITH_TORCH=OFF.
#   BUILD_DIR=dir   another build directory
#   TARGETS="a b"   build only these targets (default: all)
#   LIBTORCH=dir    your own LibTorch: pytorch.org's unzipped libtorch/, or a PyTorch wheel's
#                   torch.utils.cmake_prefix_path (added to CMAKE_PREFIX_PATH)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="${BUILD_DIR:-build}"
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)
export CCACHE_BASEDIR="$PWD"
# Translation units built with the shared <torch/torch.h> PCH are cacheable only with these.
export CCACHE_SLOPPINESS="${CCACHE_SLOPPINESS:-pch_defines,time_macros,include_file_mtime,include_file_ctime}"
prefix=()
if [[ -n "${LIBTORCH:-}" ]]; then
  if ! find "$LIBTORCH" -maxdepth 6 -name TorchConfig.cmake 2>/dev/null | grep -q .; then
    echo "build.sh: LIBTORCH=$LIBTORCH holds no TorchConfig.cmake; give pytorch.org's unzipped" \
         "libtorch/ directory or a wheel's \$(python3 -c 'import torch;" \
         "print(torch.utils.cmake_prefix_path)')" >&2
    exit 2
  fi
  prefix=(-DCMAKE_PREFIX_PATH="$LIBTORCH")
fi
if [[ ! -f "$build_dir/CMakeCache.txt" ]]; then
  cmake -S . -B "$build_dir" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release "${prefix[@]}" "$@"
else
  cmake -S . -B "$build_dir" "${prefix[@]}" "$@"
fi
targets=()
[[ -n "${TARGETS:-}" ]] && targets=(--target ${TARGETS})
cmake --build "$build_dir" -j "$(nproc)" "${targets[@]}"
