#!/usr/bin/env bash
# The test command of the README and of CI: installs the dependencies (Debian packages),
# builds everything and runs the whole test suite with ctest, then the torch-free core
# again under ASan+UBSan with the fuzz targets (clang, bounded runs), the probe's own code
# and its tests under ASan+UBSan (LibTorch itself is not instrumented), and the core under
# TSan.
#   PRECPROBE_QUICK=1   only the main build and its tests
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
jobs="$(nproc)"

echo "== main build: probe, core, CLI, examples, tests"
scripts/build.sh
(cd build && ctest --output-on-failure -j "$jobs")
[[ "${PRECPROBE_QUICK:-0}" == "1" ]] && exit 0

echo "== torch-free core under ASan+UBSan, with bounded fuzzing"
CXX=clang++ BUILD_DIR=build-asan scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=address,undefined -DPRECPROBE_BUILD_FUZZERS=ON \
  -DPRECPROBE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-asan && ctest --output-on-failure -j "$jobs")

echo "== probe under ASan+UBSan (its own code; LibTorch uninstrumented)"
BUILD_DIR=build-asan-probe scripts/build.sh -DPRECPROBE_SANITIZE=address,undefined \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
# The 10 000-step RSS test is left to the main build: ASan's quarantine holds freed memory
# by design, so RSS grows there (LeakSanitizer checks every test for leaks instead).
(cd build-asan-probe && UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs" -R "$(cat ../tests/sanitizers/probe_tests.regex)" \
  -E "10 000 steps keep memory flat")

echo "== torch-free core under TSan"
CXX=clang++ BUILD_DIR=build-tsan scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=thread -DPRECPROBE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-tsan && ctest --output-on-failure -j "$jobs")

echo "== op capture under TSan: observer, statistics worker and writer together"
# gcc's TSan (clang 14 crashes on LibTorch's precompiled header). LibTorch is not
# instrumented, so only races in our code and the tensor refcounts it inlines are seen.
TARGETS="test_debugger test_debugger_values test_reliability precprobe_reliability_child" \
  BUILD_DIR=build-tsan-probe scripts/build.sh -DPRECPROBE_SANITIZE=thread \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Forking a multi-threaded process is unsupported under TSan: the SIGKILL test forks.
# tests/sanitizers/tsan.supp: one false positive from LibTorch's uninstrumented refcounts.
(cd build-tsan-probe && TSAN_OPTIONS="suppressions=$PWD/../tests/sanitizers/tsan.supp" \
  ctest --output-on-failure -j "$jobs" \
  -R "^test_debugger:|^test_debugger_values:|^test_reliability:ops from several threads" \
  -E "killed with SIGKILL")
