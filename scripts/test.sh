#!/usr/bin/env bash
# The test command of the README and of CI: installs the dependencies (Debian packages),
# builds everything and runs the whole test suite with ctest against the host's LibTorch
# (Debian bookworm: 1.13), then the torch-free core again under ASan+UBSan with the fuzz
# targets (clang, bounded runs), the probe's own code and its tests under ASan+UBSan
# (LibTorch itself is not instrumented), the core and the op capture under TSan, and last
# the whole suite again against LibTorch 2.6 in a Debian trixie root (scripts/test-trixie.sh),
# with a cross-version compare of the example trained under both.
#   PRECPROBE_QUICK=1   only the main build and its tests
#   PRECPROBE_SKIP_TRIXIE=1  no LibTorch 2.6 stage (it needs root and ~2 GB of packages)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { echo "== [$(( (SECONDS - start) / 60 )) min] $*"; }
scripts/install-deps.sh
jobs="$(nproc)"

stage "main build: probe, core, CLI, examples, tests"
scripts/build.sh
# -LE slow: the add_subdirectory consumer that compiles the probe a second time (see
# tests/consumer/tests.cmake); everything else runs.
(cd build && ctest --output-on-failure -j "$jobs" -LE slow)
# /dev/null must survive the suite (as root, a rename over it once made it a regular file).
[[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
[[ "${PRECPROBE_QUICK:-0}" == "1" ]] && exit 0

stage "the example under LibTorch 1.13, 30 steps: the dump the 2.6 stage compares with"
rm -rf build/xversion && mkdir -p build/xversion
build/bin/train_fashion_mnist --steps 30 --dump build/xversion/libtorch-1.13 \
  >build/xversion/train.log 2>&1 || { cat build/xversion/train.log; exit 1; }

stage "torch-free core under ASan+UBSan, with bounded fuzzing"
CXX=clang++ BUILD_DIR=build-asan scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=address,undefined -DPRECPROBE_BUILD_FUZZERS=ON \
  -DPRECPROBE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-asan && ctest --output-on-failure -j "$jobs")

# The probe's ASan build compiles LibTorch's headers in every TU: line tables only (-g1;
# reports keep file:line) instead of full debug info cut its build time. (TSan keeps -g:
# tsan.supp matches an inlined frame.)
probe_san_flags="-O2 -g1 -DNDEBUG"
stage "probe under ASan+UBSan (its own code; LibTorch uninstrumented)"
# Only the executables its tests run (the core's tests ran under ASan above).
TARGETS="test_stats test_stats_engine test_stats_range test_debugger test_debugger_values test_dropout test_seed
  test_grad_monitor test_grad_watchpoints test_grad_scaler test_grad_scaler_state test_grad_scaler_multi
  test_multi_model test_scaler_debugger test_checklist_probe test_replay test_replay_overlap
  test_reuse_across_steps test_run_step test_reliability test_crash test_state_file test_arg_shapes test_loader_threads
  precprobe_reliability_child" \
  BUILD_DIR=build-asan-probe scripts/build.sh -DPRECPROBE_SANITIZE=address,undefined \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$probe_san_flags"
# The 10 000-step RSS test is left to the main build: ASan's quarantine holds freed memory
# by design, so RSS grows there (LeakSanitizer checks every test for leaks instead).
(cd build-asan-probe && UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs" -R "$(cat ../tests/sanitizers/probe_tests.regex)" \
  -E "10 000 steps keep memory flat")

stage "torch-free core under TSan"
CXX=clang++ BUILD_DIR=build-tsan scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=thread -DPRECPROBE_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-tsan && ctest --output-on-failure -j "$jobs")

stage "op capture under TSan: observer, statistics worker and writer together"
# gcc's TSan (clang 14 crashes on LibTorch's precompiled header). LibTorch is not
# instrumented, so only races in our code and the tensor refcounts it inlines are seen.
TARGETS="test_debugger test_debugger_values test_stats_engine test_reliability
  precprobe_reliability_child" \
  BUILD_DIR=build-tsan-probe scripts/build.sh -DPRECPROBE_SANITIZE=thread \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
# Forking a multi-threaded process is unsupported under TSan: the SIGKILL test forks.
# tests/sanitizers/tsan.supp: one false positive from LibTorch's uninstrumented refcounts.
(cd build-tsan-probe && TSAN_OPTIONS="suppressions=$PWD/../tests/sanitizers/tsan.supp" \
  ctest --output-on-failure -j "$jobs" \
  -R "^test_debugger:|^test_debugger_values:|^test_stats_engine:|^test_reliability:ops from several threads" \
  -E "killed with SIGKILL")

[[ "${PRECPROBE_SKIP_TRIXIE:-0}" == "1" ]] && exit 0
stage "LibTorch 2.6 (Debian trixie root): the whole suite again, and 1.13 vs 2.6"
XVERSION_DUMP="$PWD/build/xversion/libtorch-1.13" scripts/test-trixie.sh
[[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
stage "all stages passed"
