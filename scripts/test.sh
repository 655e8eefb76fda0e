#!/usr/bin/env bash
# The test command of the README and of CI. Installs the dependencies (Debian packages), then:
#   1. LibTorch 1.13 (the host's, Debian bookworm), Release: probe, core, CLI, Python module,
#      examples, benchmarks, and the whole suite with ctest (unit, end-to-end, oracle, pytest,
#      browser);
#   2. the library's code under ASan+UBSan (LeakSanitizer on; LibTorch is not instrumented):
#      every test of the core, of the probe and of the reliability drivers;
#   3. the torch-free core's readers fuzzed (clang, libFuzzer, ASan+UBSan, bounded runs);
#   4. under TSan: the core's tests that run threads (the writer's producers, compare's
#      judges), and the op capture (observer, statistics worker, writer) from several threads;
#   5. LibTorch 2.14 in a Debian sid root (scripts/test-libtorch2.sh; GCC 16, C++20, fmt 11,
#      pybind11 3, Python 3.14, torchvision 0.27), Release: the whole suite as in stage 1 but
#      the browser and flat-reading tests (no browser in the root), with a cross-version
#      compare of the example trained under 1.13 and 2.14; then the CUDA-only sources
#      compiled against 2.14's headers and CUDA 13's (scripts/cuda-compile-check.sh; skipped
#      without /usr/local/cuda). The root is made (mmdebstrap; downloads) in the background
#      while stages 1-4 compile.
# Stages 2-5 build only what they run, the core, the probe and the CLI in unity batches
# (PRECPROBE_UNITY_BUILD); every stage compiles from nothing on a fresh clone.
#   PRECPROBE_QUICK=1            only stage 1
#   PRECPROBE_LIBTORCH2=SUITES   the Debian releases of stage 5, in order (default "sid";
#                                "sid trixie" adds LibTorch 2.6; "" leaves stage 5 out: it
#                                needs root and ~2 GB of packages a release)
set -euo pipefail
cd "$(dirname "$0")/.."
start=$SECONDS
stage_names=("dependencies (apt)")
stage_starts=(0)
stage() {
  stage_names+=("$*")
  stage_starts+=("$SECONDS")
  echo "== [$(( (SECONDS - start) / 60 )) min] $*"
}
# Each stage's wall time, printed last (also when a stage fails) so CI's tail shows it.
timings() {
  local rc=$? i n=${#stage_names[@]} end
  echo "== test.sh: exit $rc after $(( SECONDS - start )) s"
  for (( i = 0; i < n; i++ )); do
    end=$(( i + 1 < n ? stage_starts[i + 1] : SECONDS ))
    printf '==   %5d s  %s\n' "$(( end - stage_starts[i] ))" "${stage_names[i]}"
  done
}
trap timings EXIT
scripts/install-deps.sh
jobs="$(nproc)"
read -r -a suites <<<"${PRECPROBE_LIBTORCH2-sid}"
[[ "${PRECPROBE_QUICK:-0}" == "1" ]] && suites=()
# The roots are made one after the other in the background (downloads) while stages 1-4
# compile.
root_pid=""
if (( ${#suites[@]} )); then
  mkdir -p build-logs
  ( for s in "${suites[@]}"; do
      scripts/debian-root.sh "$s" "/var/cache/precprobe/$s-root" || exit 1
    done ) >build-logs/debian-roots.log 2>&1 &
  root_pid=$!
fi

stage "LibTorch 1.13, Release: probe, core, CLI, Python module, examples, bench; the whole suite"
# PRECPROBE_PIC_PROBE: the probe is compiled once, for the programs and the Python module.
BUILD_DIR=build scripts/build.sh -DPRECPROBE_UNITY_BUILD=ON -DPRECPROBE_PIC_PROBE=ON
# -LE slow: the add_subdirectory consumer that compiles the probe a second time (see
# tests/consumer/tests.cmake).
(cd build && ctest --output-on-failure -j "$jobs" -LE slow)
# /dev/null must survive the suite (as root, a rename over it once made it a regular file).
[[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
[[ "${PRECPROBE_QUICK:-0}" == "1" ]] && exit 0
rm -rf build/xversion && mkdir -p build/xversion
build/bin/train_fashion_mnist --steps 30 --dump build/xversion/libtorch-1.13 \
  >build/xversion/train.log 2>&1 || { cat build/xversion/train.log; exit 1; }

# The tests of the core, of the probe and of the reliability drivers, by ctest name.
core_tests=$(cd tests/core && ls test_*.cpp | sed 's/\.cpp$//' | paste -sd '|')
probe_tests=$(cd tests/probe && ls test_*.cpp | sed 's/\.cpp$//' | grep -v '^test_stats_cuda$' |
              paste -sd '|')
probe_targets="core_tests core_thread_tests probe_tests capture_tests test_precision_reality test_reliability
  test_crash precprobe_reliability_child precprobe_repro_train precprobe_cli"

stage "ASan+UBSan: the core's, the probe's and the reliability tests (LibTorch uninstrumented)"
# The library's own code gets UBSan too, the tests ASan only (cmake/PrecprobeUtils.cmake).
# -O1 -g1, as ASan's documentation advises: line tables only (reports keep file:line); -O1
# compiles a bundle 30 % faster than -O2 (47 s against 67 s). The 10 000-step RSS bound is left to
# Release builds: ASan's quarantine holds freed memory by design (LeakSanitizer checks
# every test for leaks instead).
TARGETS="$probe_targets" BUILD_DIR=build-asan scripts/build.sh \
  -DPRECPROBE_SANITIZE=address,undefined -DPRECPROBE_UNITY_BUILD=ON \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_WITH_PYTHON=OFF \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
(cd build-asan && UBSAN_OPTIONS=print_stacktrace=1 ctest --output-on-failure -j "$jobs" \
  -R "^($core_tests|$probe_tests|test_reliability|test_crash):" -E "10 000 steps keep memory flat")

stage "the torch-free core's readers fuzzed (clang, libFuzzer, ASan+UBSan, bounded runs)"
fuzzers=$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//' | tr '\n' ' ')
CXX=clang++ TARGETS="$fuzzers" BUILD_DIR=build-fuzz scripts/build.sh -DPRECPROBE_WITH_TORCH=OFF \
  -DPRECPROBE_SANITIZE=address,undefined -DPRECPROBE_BUILD_FUZZERS=ON -DPRECPROBE_UNITY_BUILD=ON \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
(cd build-fuzz && ctest --output-on-failure -j "$jobs" -L fuzz)

stage "TSan: the writer, compare's judging threads and the op capture (observer, statistics worker, writer) from several threads"
# gcc's TSan (clang 14 crashes on LibTorch's precompiled header). LibTorch is not
# instrumented, so only races in our code and the tensor refcounts it inlines are seen.
# -O1 -g1 as for ASan.
TARGETS="core_thread_tests capture_tests test_reliability precprobe_reliability_child" \
  BUILD_DIR=build-tsan scripts/build.sh -DPRECPROBE_SANITIZE=thread \
  -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF -DPRECPROBE_BUILD_TOOLS=OFF \
  -DPRECPROBE_WITH_PYTHON=OFF -DPRECPROBE_UNITY_BUILD=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
capture_tests="debugger|debugger_values|stats_engine|arg_shapes|loader_threads|run_step"
# Forking a multi-threaded process is unsupported under TSan: the SIGKILL test forks.
# tests/sanitizers/tsan.supp: false positives from LibTorch's uninstrumented refcounts.
(cd build-tsan && TSAN_OPTIONS="suppressions=$PWD/../tests/sanitizers/tsan.supp" \
  ctest --output-on-failure -j "$jobs" \
  -R "^test_(dump_writer|name_matcher|compare_stream|$capture_tests):|^test_reliability:ops from several threads" \
  -E "killed with SIGKILL")

(( ${#suites[@]} )) || exit 0
if ! wait "$root_pid"; then
  cat build-logs/debian-roots.log >&2
  echo "test.sh: making the Debian roots failed (build-logs/debian-roots.log)" >&2
  exit 1
fi
for s in "${suites[@]}"; do
  stage "LibTorch of Debian $s (a root), Release: the whole suite, 1.13 vs $s"
  XVERSION_DUMP="$PWD/build/xversion/libtorch-1.13" SUITE="$s" scripts/test-libtorch2.sh
  # The CUDA-only sources against 2.14's headers and CUDA 13's (no GPU, no CUDA LibTorch).
  [[ "$s" != sid ]] || scripts/cuda-compile-check.sh
  [[ -c /dev/null ]] || { echo "test.sh: /dev/null is no longer a character device" >&2; exit 1; }
done
echo "== all stages passed"
