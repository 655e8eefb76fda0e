#!/usr/bin/env bash
# Installs everything precprobe needs from Debian bookworm's packages. Idempotent: packages
# already present are not downloaded again. Needs root (or sudo).
#   --core     only what the torch-free core, the CLI and their tests need
#   --example  only what scripts/run-example.sh needs: the library, the CLI and the example
#              built with LibTorch (no clang, browser, Python or trixie-root packages)
#   LIBTORCH=/path/to/libtorch  your own LibTorch (pytorch.org's zip, or a PyTorch wheel's
#            `python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'`): Debian's
#            libtorch-dev and libgloo-dev are not installed; scripts/build.sh uses this one.
set -euo pipefail

core_pkgs=(build-essential clang libclang-rt-14-dev cmake ninja-build pkg-config ccache git zstd zlib1g-dev
           libfmt-dev nlohmann-json3-dev libzstd-dev libxxhash-dev catch2 libcli11-dev
           libbenchmark-dev chromium fonts-dejavu-core
           python3 python3-pandas python3-zstandard)
# python3-pandas, python3-zstandard: the pandas recipe of docs/dump-format.md (tests/flat);
# its DuckDB query runs with @duckdb/node-api from npm (tests/flat/package-lock.json).
torch_pkgs=(libtorch-dev libgloo-dev libopenblas0-pthread dataset-fashion-mnist
            python3-torch python3-torchvision pybind11-dev python3-dev python3-pytest)
# python3-torch (the same LibTorch as libtorch-dev), python3-torchvision (the Python sides of
# tests/ports), pybind11-dev, python3-dev: the precprobe
# Python module (src/python/); python3-pytest: its tests (tests/python/).
# The trixie root for the LibTorch 2.6 stage of scripts/test.sh.
core_pkgs+=(mmdebstrap)

if [[ "${1:-}" == "--example" ]]; then
  core_pkgs=(build-essential cmake ninja-build pkg-config ccache zlib1g-dev libfmt-dev
             nlohmann-json3-dev libzstd-dev libxxhash-dev catch2 libcli11-dev libbenchmark-dev)
  torch_pkgs=(libtorch-dev libgloo-dev libopenblas0-pthread dataset-fashion-mnist)
fi
pkgs=("${core_pkgs[@]}")
# The report's browser test runs node (playwright-core from npm) against Debian's chromium.
# A node that is already there (e.g. a newer one with its own npm) is kept.
if [[ "${1:-}" != "--example" ]]; then
  command -v node >/dev/null 2>&1 || pkgs+=(nodejs)
  command -v npm >/dev/null 2>&1 || pkgs+=(npm)
fi
if [[ -n "${LIBTORCH:-}" ]]; then
  torch_pkgs=(libopenblas0-pthread dataset-fashion-mnist)
  echo "install-deps: LIBTORCH=$LIBTORCH given: Debian's libtorch-dev is not installed"
fi
[[ "${1:-}" == "--core" ]] || pkgs+=("${torch_pkgs[@]}")

missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#pkgs[@]} packages present"
  exit 0
fi
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
