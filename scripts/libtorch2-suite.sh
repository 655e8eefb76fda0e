#!/usr/bin/env bash
# Runs inside a Debian root (scripts/test-libtorch2.sh): builds against that release's LibTorch
# and runs the tests whose outcome depends on LibTorch's version: the probe's tests (bundles and
# programs), the reliability drivers, the consumers (precprobe installed and found with
# find_package: C++20 reaches them), the program `precprobe repro` writes (built against this
# LibTorch), the Python module's pytest (its bounded OpInfo sweep
# included) and the port pairs when the root's python3 imports torch, and the cross-version
# compare when XVERSION_DUMP names a 1.13 dump. The torch-free core's tests, the browser and
# flat-reading tests and the end-to-end runs of the examples are the host stage's
# (scripts/test.sh): the same code, the same outcome.
#   libtorch2-suite.sh BUILD_DIR [XVERSION_DUMP]
#   FULL=1   build everything and run the whole suite (but the slow, epoch, browser and flat
#            tests: the root has no browser)
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$1"
xversion=()
[[ -n "${2:-}" ]] && xversion=(-DPRECPROBE_XVERSION_DUMP="$2")
jobs="$(nproc)"
echo "== libtorch-dev $(dpkg-query -W -f='${Version}' libtorch-dev)," \
     "catch2 $(dpkg-query -W -f='${Version}' catch2), fmt $(dpkg-query -W -f='${Version}' libfmt-dev)," \
     "$(g++ --version | head -1)"
if [[ "${FULL:-0}" == "1" ]]; then
  BUILD_DIR="$build_dir" scripts/build.sh -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_PIC_PROBE=ON \
    -DPRECPROBE_UNITY_BUILD=ON "${xversion[@]}"
  cd "$build_dir" && exec ctest --output-on-failure -j "$jobs" -LE 'slow|epoch' \
    -E '^(browser|flat)\.'
fi
targets="probe_tests capture_tests test_precision_reality test_reliability test_crash
  precprobe_reliability_child precprobe_repro_train precprobe_cli train_fashion_mnist
  precprobe_make_anomaly_dump"
run="^($(cd tests/probe && ls test_*.cpp | sed 's/\.cpp$//' | grep -v '^test_stats_cuda$' |
         paste -sd '|')|test_reliability|test_crash):|^xversion\.|^consumer\.(install|find_package)|^repro_e2e$"
if python3 -c "import torch" 2>/dev/null; then
  targets+=" precprobe_python precprobe_pytest_tool port_cnn port_lstm port_transformer port_vae"
  run+="|^python:|^ports\\."
fi
TARGETS="$targets" BUILD_DIR="$build_dir" scripts/build.sh -DPRECPROBE_BUILD_BENCH=OFF \
  -DPRECPROBE_PIC_PROBE=ON -DPRECPROBE_UNITY_BUILD=ON "${xversion[@]}"
cd "$build_dir" && ctest --output-on-failure -j "$jobs" -R "$run"
