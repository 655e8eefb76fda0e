#!/usr/bin/env bash
# The main job of the README: installs the dependencies, builds, trains the Fashion-MNIST
# example with the PrecisionDebugger on, then reads the dump back with `precprobe summary`.
# Extra arguments go to the example, e.g. --steps 200 or --bf16.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --example
# Only what this job runs (the library, the CLI, the example); the tests are built by
# scripts/test.sh. A first build is a unity build (docs/testing.md, "The build"): from nothing it is
# several times faster; `cmake -DPRECPROBE_UNITY_BUILD=OFF build` turns it off for editing.
unity=()
[[ -f build/CMakeCache.txt ]] || unity=(-DPRECPROBE_UNITY_BUILD=ON)
TARGETS="${TARGETS:-precprobe_cli train_fashion_mnist}" scripts/build.sh "${unity[@]}"
dump="${PRECPROBE_DUMP:-precprobe_dump}"
build/bin/train_fashion_mnist --dump "$dump" --overwrite "$@"
build/bin/precprobe summary "$dump"
