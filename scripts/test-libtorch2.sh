#!/usr/bin/env bash
# The LibTorch 2.x stage of the test command: builds against another Debian release's LibTorch
# in a root made by mmdebstrap (scripts/debian-root.sh), no container engine needed, and runs
# the whole suite there but the slow, whole-epoch, browser and flat-reading tests
# (scripts/libtorch2-suite.sh says why; QUICK=1: only the tests whose outcome depends on
# LibTorch's version). Needs root.
#   SUITE=sid         sid: LibTorch 2.14, GCC 16, Python 3.14, torchvision 0.27 (default);
#                     trixie: LibTorch 2.6, GCC 14
#   ROOT=dir          the root (default /var/cache/precprobe/SUITE-root, outside the checkout
#                     so nothing that walks the checkout meets its /proc, /dev or the checkout
#                     mounted inside it; reused when complete)
#   BUILD_DIR=dir     the build directory inside the checkout (default build-SUITE)
#   XVERSION_DUMP=dir a dump of `train_fashion_mnist --steps 30` made with the host's
#                     LibTorch 1.13: the cross-version test compares a run on this LibTorch
#                     against it
# The whole-epoch no-false-alarm run (label epoch) is left to the host stage.
# The checkout is bind-mounted at /src/precprobe inside the root; build outputs land in the
# checkout as with the host build. /proc, /dev and the checkout are unmounted on exit.
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
suite="${SUITE:-sid}"
root="${ROOT:-/var/cache/precprobe/$suite-root}"
case "$root/" in
  "$repo"/*) echo "test-libtorch2: ROOT must lie outside the checkout" >&2; exit 2 ;;
esac
build_dir="${BUILD_DIR:-build-$suite}"

scripts/debian-root.sh "$suite" "$root"
trap 'scripts/debian-root.sh --umount "$root"' EXIT
scripts/debian-root.sh --mount "$root" "$repo"

xversion_dump=""
if [[ -n "${XVERSION_DUMP:-}" ]]; then
  case "$XVERSION_DUMP" in
    "$repo"/*) xversion_dump="/src/precprobe/${XVERSION_DUMP#"$repo"/}" ;;
    *) echo "test-libtorch2: XVERSION_DUMP must lie inside the checkout ($repo)" >&2; exit 2 ;;
  esac
fi

# The host's CA bundle, beside the root's own: it may hold a CA that Debian's package lacks
# (a proxy's, on machines that reach the npm registry only through one).
host_ca=()
if [[ -f /etc/ssl/certs/ca-certificates.crt ]]; then
  mkdir -p "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/host-ca-certificates.crt"
  host_ca=(NODE_EXTRA_CA_CERTS=/etc/ssl/certs/host-ca-certificates.crt)
fi

# A clean environment inside: the host's PATH and compiler settings mean nothing there.
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  CI="${CI:-}" QUICK="${QUICK:-0}" "${host_ca[@]}" \
  bash /src/precprobe/scripts/libtorch2-suite.sh "$build_dir" "${xversion_dump:-}"
