#!/usr/bin/env bash
# The test command of the README and of CI: installs the dependencies (Debian packages),
# builds everything and runs the whole test suite with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure -j "$(nproc)"
