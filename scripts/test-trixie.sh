#!/usr/bin/env bash
# The LibTorch 2.x stage of the test command: builds against Debian trixie's LibTorch 2.6
# (Catch2 3, fmt 10, CLI11 2.4, GCC 14) in a root made by mmdebstrap (scripts/trixie-root.sh),
# no container engine needed, and runs the tests whose outcome depends on LibTorch's version
# (scripts/trixie-suite.sh says which; FULL=1: the whole suite). Needs root.
#   ROOT=dir          the trixie root (default /var/cache/precprobe/trixie-root, outside the
#                     checkout so nothing that walks the checkout meets its /proc, /dev or
#                     the checkout mounted inside it; reused when complete)
#   BUILD_DIR=dir     the build directory inside the checkout (default build-libtorch2)
#   XVERSION_DUMP=dir a dump of `train_fashion_mnist --steps 30` made with the host's
#                     LibTorch 1.13: the cross-version test compares a 2.6 run against it
# The whole-epoch no-false-alarm run (label epoch) is left to the host stage: Debian's 2.6
# trains the CPU example several times slower.
# The checkout is bind-mounted at /src/precprobe inside the root; build outputs land in the
# checkout as with the host build. /proc, /dev and the checkout are unmounted on exit. The
# benchmarks are left out here (CI time); they build against 2.6 too (bench_debugger needed
# <unistd.h> for GCC 14).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
root="${ROOT:-/var/cache/precprobe/trixie-root}"
case "$root/" in
  "$repo"/*) echo "test-trixie: ROOT must lie outside the checkout" >&2; exit 2 ;;
esac
build_dir="${BUILD_DIR:-build-libtorch2}"
jobs="$(nproc)"

scripts/trixie-root.sh "$root"
trap 'scripts/trixie-root.sh --umount "$root"' EXIT
scripts/trixie-root.sh --mount "$root" "$repo"

xversion_dump=""
if [[ -n "${XVERSION_DUMP:-}" ]]; then
  case "$XVERSION_DUMP" in
    "$repo"/*) xversion_dump="/src/precprobe/${XVERSION_DUMP#"$repo"/}" ;;
    *) echo "test-trixie: XVERSION_DUMP must lie inside the checkout ($repo)" >&2; exit 2 ;;
  esac
fi

# The host's CA bundle, beside the root's own: it may hold a CA that Debian's package lacks
# (a proxy's, on machines that reach the npm registry only through one), which npm inside the
# root then needs for the browser and flat tests' `npm ci`.
host_ca=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/host-ca-certificates.crt"
  host_ca=(NODE_EXTRA_CA_CERTS=/etc/ssl/certs/host-ca-certificates.crt)
fi

# A clean environment inside: the host's PATH and compiler settings mean nothing there.
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  CI="${CI:-}" FULL="${FULL:-0}" "${host_ca[@]}" \
  bash /src/precprobe/scripts/trixie-suite.sh "$build_dir" "${xversion_dump:-}"
