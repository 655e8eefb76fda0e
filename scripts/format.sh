#!/usr/bin/env bash
# Formats every C++ file of the repository in place (clang-format, config in .clang-format).
# With --check, changes nothing and exits 1 when a file is not formatted.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=(-i)
[[ "${1:-}" == "--check" ]] && mode=(--dry-run -Werror)
git ls-files '*.h' '*.cpp' '*.hpp' '*.cc' | xargs -r clang-format "${mode[@]}"
