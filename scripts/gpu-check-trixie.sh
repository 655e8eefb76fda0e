#!/usr/bin/env bash
# Dry run of scripts/gpu-check.sh on a machine without a GPU: runs it inside the CUDA trixie
# root of scripts/build-cuda-trixie.sh (Debian's libtorch-cuda-dev 2.6, nvcc 12.4) with
# LIBTORCH set to the root's LibTorch and the bundle of scripts/gpu-bundle.sh, so that it
# configures and builds every target with PRECPROBE_WITH_CUDA=ON (the CUDA tests, the GPU
# benchmark, the GradScaler program and the sync counter included) and then stops where a
# GPU is needed. Success is exit status 3 with gpu-check's "no GPU here" message. Needs root.
#
#   scripts/gpu-check-trixie.sh [OUTDIR]    OUTDIR default: build-gpu-trixie/out
#   scripts/gpu-check-trixie.sh --help
#   ROOT=dir      the CUDA root (default /var/cache/precprobe/trixie-cuda-root; made when missing)
#   JOBS=N        build jobs (default 2)
#   BUILD_DIR=dir build directory inside the checkout (default build-gpu-trixie)
#
# The root has no cuDNN (build-cuda-trixie.sh installs a placeholder package), and
# libtorch_cuda.so needs libcudnn.so.9 to link an executable and to load (CMake runs every
# test executable after linking it to list its test cases). A stub libcudnn.so.9 is made in
# the build directory from the cudnn* symbols libtorch_cuda.so and libtorch_python.so import,
# each a function that traps, with the version node they ask for; nothing calls cuDNN here.
# It lies in LD_LIBRARY_PATH for this run only, never on the GPU machine.
# nvcc 12.4's host compiler in the root is GCC 13, the C++ compiler GCC 14 (Debian's LibTorch
# and fmt are built with it). Every executable that links CUDA objects gets nvcc's implicit
# link directories, GCC 13's among them, which holds a libstdc++.so of its own (Debian's
# libstdc++-13-dev) lacking GCC 14's __cxa_call_terminate: -L GCC 14's directory comes first
# here (GPU_CHECK_CMAKE_ARGS). On the GPU machine nvcc and the C++ compiler are one GCC.
# Then the twin stage's build (GPU_CHECK_TWIN_BUILD_ONLY=1): the Python module configured and
# built against the root's CUDA LibTorch with contrib's python3-torch-cuda (installed into the
# root here when missing, with python3-dev and python3-pybind11, whose pybind11 2.13 is the one
# Debian's torch 2.6 was built with). Not imported here: Debian built torch._C with GCC 13, the
# module is GCC 14's, and precprobe's own guard refuses the differing pybind11 ABI (torch 2.9
# on exports no such key; the run part was dry-run in the sid root, docs/cuda.md).
# Success: exit status 3 from gpu-check.sh and 0 from the twin stage.
set -euo pipefail
case "${1:-}" in
  -h | --help) sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  -*) echo "gpu-check-trixie: unknown option $1" >&2; exit 2 ;;
esac
cd "$(dirname "$0")/.."
repo="$PWD"
root="${ROOT:-/var/cache/precprobe/trixie-cuda-root}"
build_dir="${BUILD_DIR:-build-gpu-trixie}"
out="${1:-$build_dir/out}"
jobs="${JOBS:-2}"
case "$out" in
  /*) case "$out/" in "$repo"/*) out="${out#"$repo"/}" ;; *) echo "gpu-check-trixie: OUTDIR must lie inside the checkout" >&2; exit 2 ;; esac ;;
esac
[[ -f .gpu-bundle/env.sh ]] || scripts/gpu-bundle.sh
ROOT="$root" ROOT_ONLY=1 scripts/build-cuda-trixie.sh

trap 'scripts/debian-root.sh --umount "$root"' EXIT
scripts/debian-root.sh --mount "$root" "$repo"

commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD 2>/dev/null || commit+=" (with local changes)"
rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  PRECPROBE_COMMIT="$commit" bash -euo pipefail -c "
    cd /src/precprobe
    if ! dpkg -s python3-torch-cuda python3-dev python3-pybind11 >/dev/null 2>&1; then
      apt-get update -qq
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        python3-torch-cuda python3-dev python3-pybind11 >/dev/null
    fi
    stub=$build_dir/cudnn-stub
    mkdir -p \$stub
    libs='/usr/lib/x86_64-linux-gnu/libtorch_cuda.so /usr/lib/x86_64-linux-gnu/libtorch_python.so'
    nm -D --undefined-only \$libs | awk '\$2 ~ /@libcudnn[.]so[.]9\$/ {sub(/@.*/, \"\", \$2); print \$2}' |
      sort -u >\$stub/symbols
    { echo 'libcudnn.so.9 { global:'; sed 's/\$/;/' \$stub/symbols; echo 'local: *; };'; } >\$stub/version.map
    sed 's/.*/void &(void) { __builtin_trap(); }/' \$stub/symbols >\$stub/stub.c
    gcc -shared -fPIC -o \$stub/libcudnn.so.9 -Wl,-soname,libcudnn.so.9 \
      -Wl,--version-script=\$stub/version.map \$stub/stub.c
    echo \"gpu-check-trixie: stub libcudnn.so.9 with \$(wc -l <\$stub/symbols) functions\"
    echo \"gpu-check-trixie: libtorch-cuda-dev \$(dpkg-query -W -f='\${Version}' libtorch-cuda-dev), \$(nvcc --version | tail -1)\"
    export LD_LIBRARY_PATH=/src/precprobe/\$stub
    gcc14=/usr/lib/gcc/x86_64-linux-gnu/14
    export GPU_CHECK_CMAKE_ARGS=\"-DCMAKE_EXE_LINKER_FLAGS=-L\$gcc14 -DCMAKE_SHARED_LINKER_FLAGS=-L\$gcc14\"
    LIBTORCH=/usr/lib/x86_64-linux-gnu/cmake/Torch BUILD_DIR=$build_dir JOBS=$jobs \
      GPU_CHECK_BUDGET=30000 GPU_CHECK_BUILD_TIMEOUT=28000 PYTHON=python3 \
      bash scripts/gpu-check.sh $out
  " || rc=$?
echo "gpu-check-trixie: gpu-check.sh exit status $rc (3: built, stopped for want of a GPU)"
tail -n 25 "$out/results.md" 2>/dev/null || true

twin_rc=0
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -euo pipefail -c "
    cd /src/precprobe
    source .gpu-bundle/env.sh
    export LD_LIBRARY_PATH=/src/precprobe/$build_dir/cudnn-stub
    export PP_BUILD=/src/precprobe/$build_dir PP_BUNDLE=/src/precprobe/.gpu-bundle
    export PP_LOGS=/src/precprobe/$build_dir/gpu-check-logs PP_PYTHON=python3 PP_JOBS=$jobs
    GPU_CHECK_TWIN_BUILD_ONLY=1 bash scripts/gpu-check.sh __stage twin >\$PP_LOGS/twin.log 2>&1
  " || twin_rc=$?
grep -E '^(== pybind11|precprobe: (Python|no Python)|RESULT|trained)' "$build_dir/gpu-check-logs/twin.log" || true
(( twin_rc == 0 )) || tail -n 40 "$build_dir/gpu-check-logs/twin.log"
echo "gpu-check-trixie: twin stage (build only), exit status $twin_rc"
[[ $rc -eq 3 && $twin_rc -eq 0 ]]
