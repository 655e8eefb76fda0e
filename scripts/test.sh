#!/usr/bin/env bash
# The test command of the README and of CI. Installs the dependencies (Debian packages), then:
#   1. LibTorch 1.13 (the host's, Debian bookworm), everything built once under ASan+UBSan
#      (gcc; LibTorch itself is not instrumented): probe, core, CLI, Python module, examples,
#      bench, and the whole suite with ctest;
#   2. the torch-free core and CLI in Release: the report's browser test, flat reading (pandas,
#      DuckDB), which the sanitizer builds leave out;
#   3. the torch-free core's readers fuzzed (clang, libFuzzer, bounded runs);
#   4. the torch-free core and the op capture (observer, statistics worker, writer) under TSan;
#   5. the whole suite again, Release, against LibTorch 2.6 in a Debian trixie root
#      (scripts/test-trixie.sh), but the browser and flat-reading tests of stage 2, with a
#      cross-version compare of the example trained under both.
# The suite in a plain Release build is `scripts/build.sh && (cd build && ctest -LE slow)`.
#   PRECPROBE_QUICK=1        only stage 1
#   PRECPROBE_SKIP_TRIXIE=1  no LibTorch 2.6 stage (it needs root and ~2 GB of packages)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage() { echo "== [$(( (SECONDS - start) / 60 )) min] $*"; }
scripts/install-deps.sh
jobs="$(nproc)"

# Builds that compile LibTorch's headers in every TU: line tables only (-g1; reports keep
# file:line). -O2 as in Release, so the statistics kernels take the same code paths.
san_flags="-O2 -g1 -DNDEBUG"

stage "LibTorch 1.13 under ASan+UBSan: probe, core, CLI, Python module, examples, the whole suite"
# PRECPROBE_PIC_PROBE: the probe is compiled once, for the programs and the Python module;
# PRECPROBE_UNITY_BUILD: the core, the probe and the CLI in batches (CMakeLists.txt). The
# benchmarks are built in the 2.6 stage.
BUILD_DIR=build-asan scripts/build.sh -DPRECPROBE_SANITIZE=address,undefined \
  -DPRECPROBE_PIC_PROBE=ON -DPRECPROBE_UNITY_BUILD=ON -DPRECPROBE_BUILD_BENCH=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=$san_flags"
# -LE slow: the add_subdirectory consumer that compiles the probe a second time (see
# tests/consumer/tests.cmake). The 10 000-step RSS test is left to Release builds (the 2.6
# stage): ASan's quarantine holds freed memory by design (LeakSanitizer checks every test
# for leaks instead).
(cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --output-on-failure -j "$jobs" -LE slow -E "10 000 steps keep memory flat")
# /dev/null must survive the suite (as root, a rename over it once made it a regular file).
[[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
[[ "${PRECPROBE_QUICK:-0}" == "1" ]] && exit 0

stage "the example under LibTorch 1.13, 30 steps: the dump the 2.6 stage compares with"
rm -rf build-asan/xversion && mkdir -p build-asan/xversion
build-asan/bin/train_fashion_mnist --steps 30 --dump build-asan/xversion/libtorch-1.13 \
  >build-asan/xversion/train.log 2>&1 || { cat build-asan/xversion/train.log; exit 1; }

stage "the torch-free core and CLI in Release: the HTML report in a browser, flat reading"
# Torch-free, so LibTorch's version does not matter: run once, here (the 2.6 root has no
# browser, Node.js or pandas).
TARGETS="precprobe_cli precprobe_make_dump precprobe_make_anomaly_dump precprobe_rewrite_dump" \
  BUILD_DIR=build-core scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF -DPRECPROBE_UNITY_BUILD=ON \
  -DPRECPROBE_BUILD_BENCH=OFF
(cd build-core && ctest --output-on-failure -j "$jobs" -R '^(browser|flat)\.')

stage "the torch-free core's readers fuzzed (clang, libFuzzer, ASan+UBSan, bounded runs)"
fuzzers=$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
CXX=clang++ TARGETS="$fuzzers" BUILD_DIR=build-fuzz scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=address,undefined -DPRECPROBE_BUILD_FUZZERS=ON -DPRECPROBE_UNITY_BUILD=ON \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)

stage "TSan: the torch-free core's tests, and the op capture (observer, statistics worker, writer)"
# gcc's TSan (clang 14 crashes on LibTorch's precompiled header). LibTorch is not
# instrumented, so only races in our code and the tensor refcounts it inlines are seen.
TARGETS="core_tests capture_tests test_reliability precprobe_reliability_child" \
  BUILD_DIR=build-tsan scripts/build.sh -DPRECPROBE_SANITIZE=thread \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DPRECPROBE_WITH_PYTHON=OFF -DPRECPROBE_UNITY_BUILD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g -DNDEBUG"
core_tests=$(cd tests/core && ls test_*.cpp | sed 's/\.cpp$//' | paste -sd '|')
capture_tests="debugger|debugger_values|stats_engine|arg_shapes|loader_threads|run_step"
# Forking a multi-threaded process is unsupported under TSan: the SIGKILL test forks.
# tests/sanitizers/tsan.supp: false positives from LibTorch's uninstrumented refcounts.
(cd build-tsan && TSAN_OPTIONS="suppressions=$PWD/../tests/sanitizers/tsan.supp" \
  ctest --output-on-failure -j "$jobs" \
  -R "^($core_tests|test_($capture_tests)):|^test_reliability:ops from several threads" \
  -E "killed with SIGKILL")

[[ "${PRECPROBE_SKIP_TRIXIE:-0}" == "1" ]] && exit 0
stage "LibTorch 2.6 (Debian trixie root), Release: the whole suite again, and 1.13 vs 2.6"
XVERSION_DUMP="$PWD/build-asan/xversion/libtorch-1.13" scripts/test-trixie.sh
[[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
stage "all stages passed"
