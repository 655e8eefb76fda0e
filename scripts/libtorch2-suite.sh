#!/usr/bin/env bash
# Runs inside a Debian root (scripts/test-libtorch2.sh): builds everything but the benchmarks
# against that release's LibTorch, compilers and libraries, and runs the whole suite but the
# slow tests, the whole-epoch runs and the browser and flat-reading tests (the root has no
# browser and no node): the probe's and the core's tests, the CLI's and the docs' (fmt's
# output), the examples end to end, the oracle, the consumers (find_package from an installed
# prefix: C++20 reaches them; add_subdirectory; a Debug build against the Release one), the
# program `precprobe repro` writes, the Python module's pytest with its bounded OpInfo sweep,
# the port pairs, and the cross-version compare when XVERSION_DUMP names a 1.13 dump.
#   libtorch2-suite.sh BUILD_DIR [XVERSION_DUMP]
#   QUICK=1   only the tests whose outcome depends on LibTorch's version (the probe's tests,
#             the reliability drivers, the find_package consumer, repro, pytest, the port
#             pairs, the Transformers of tests/transformers, the cross-version compare),
#             building only what they need
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir="$1"
xversion=()
[[ -n "${2:-}" ]] && xversion=(-DPRECPROBE_XVERSION_DUMP="$2")
jobs="$(nproc)"
echo "== libtorch-dev $(dpkg-query -W -f='${Version}' libtorch-dev)," \
     "catch2 $(dpkg-query -W -f='${Version}' catch2), fmt $(dpkg-query -W -f='${Version}' libfmt-dev)," \
     "$(g++ --version | head -1)"
if [[ "${QUICK:-0}" != "1" ]]; then
  BUILD_DIR="$build_dir" scripts/build.sh -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_PIC_PROBE=ON \
    -DPRECPROBE_UNITY_BUILD=ON "${xversion[@]}"
  cd "$build_dir" && exec ctest --output-on-failure -j "$jobs" -LE 'slow|epoch' \
    -E '^(browser|flat)\.'
fi
targets="probe_tests capture_tests test_precision_reality test_reliability test_crash
  precprobe_reliability_child precprobe_repro_train precprobe_cli train_fashion_mnist
  precprobe_make_anomaly_dump tfm_gpt tfm_encoder"
run="^($(cd tests/probe && ls test_*.cpp | sed 's/\.cpp$//' | grep -v '^test_stats_cuda$' |
         paste -sd '|')|test_reliability|test_crash):|^xversion\.|^consumer\.(install|find_package)|^repro_e2e$|^transformers\\.cpp$"
if python3 -c "import torch" 2>/dev/null; then
  targets+=" precprobe_python precprobe_pytest_tool port_cnn port_lstm port_transformer port_vae port_gan port_lm"
  run+="|^python:|^ports\.|^transformers\.python$"
fi
TARGETS="$targets" BUILD_DIR="$build_dir" scripts/build.sh -DPRECPROBE_BUILD_BENCH=OFF \
  -DPRECPROBE_PIC_PROBE=ON -DPRECPROBE_UNITY_BUILD=ON "${xversion[@]}"
cd "$build_dir" && ctest --output-on-failure -j "$jobs" -R "$run"
