#!/usr/bin/env bash
# Makes (or reuses) a Debian root of another release, for building and testing precprobe
# against that release's LibTorch without a container engine:
#   sid     LibTorch 2.14, GCC 16, Catch2 3, fmt 11, pybind11 3, Python 3.14 (the test command)
#   trixie  LibTorch 2.6, GCC 14, Catch2 3, fmt 10 (and contrib's CUDA build of it)
#   scripts/debian-root.sh SUITE ROOT     create ROOT unless it is already complete
#   scripts/debian-root.sh --mount ROOT [CHECKOUT]  bind /proc, /dev and, when given, a
#                                         checkout at ROOT/src/precprobe (idempotent)
#   scripts/debian-root.sh --umount ROOT  undo --mount
#   scripts/debian-root.sh --remove ROOT  unmount and delete ROOT (never through a mount)
# A root is complete when ROOT/.precprobe-root-complete holds its suite and this script's
# package list: a root from an interrupted run (or an older list) is deleted and made again.
# Needs root and mmdebstrap (scripts/install-deps.sh installs it).
set -euo pipefail

pkgs=(build-essential cmake ninja-build git zstd pkg-config ccache ca-certificates
      libtorch-dev libgloo-dev libopenblas0-pthread dataset-fashion-mnist
      libfmt-dev nlohmann-json3-dev libzstd-dev libxxhash-dev catch2 libcli11-dev libbenchmark-dev
      python3 python3-zstandard python3-torch python3-torchvision pybind11-dev python3-dev
      python3-pytest
      python3-setuptools)

mount_root() {
  local root="$1" checkout="${2:-}" d
  for d in proc dev; do
    mkdir -p "$root/$d"
    mountpoint -q "$root/$d" || mount --bind "/$d" "$root/$d"
  done
  if [[ -n "$checkout" ]]; then
    mkdir -p "$root/src/precprobe"
    mountpoint -q "$root/src/precprobe" || mount --bind "$checkout" "$root/src/precprobe"
  fi
}

umount_root() {
  local root="$1" d
  for d in src/precprobe dev proc; do
    if mountpoint -q "$root/$d"; then umount "$root/$d" || umount -l "$root/$d"; fi
  done
}

# Anything still mounted below the root (a checkout bind-mounted by scripts/test-libtorch2.sh)?
mounted_below() {
  local real
  real="$(realpath -m "$1")"
  awk -v r="$real/" 'index($2 "/", r) == 1 && $2 != r' /proc/mounts | grep -q .
}

# Deletes a root: unmounted first, and refused while anything is still mounted below it.
remove_root() {
  local root="$1"
  [[ -e "$root" ]] || return 0
  umount_root "$root"
  if mounted_below "$root"; then
    echo "debian-root: something is still mounted below $root (see /proc/mounts);" \
         "unmount it first" >&2
    exit 1
  fi
  rm -rf --one-file-system "$root"
}

case "${1:-}" in
  --mount) mount_root "$2" "${3:-}"; exit 0 ;;
  --umount) umount_root "$2"; exit 0 ;;
  --remove) remove_root "$2"; exit 0 ;;
  "" | -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
esac

suite="$1"
root="${2:?usage: scripts/debian-root.sh SUITE ROOT}"
mmdebstrap_opts=()
case "$suite" in
  trixie) mmdebstrap_opts=(--components=main,contrib) ;;
  # sid's Release file carries a Valid-Until that a machine's clock may have passed.
  sid | forky) mmdebstrap_opts=(--components=main --aptopt='Acquire::Check-Valid-Until "false"') ;;
  *) echo "debian-root: unknown suite '$suite' (sid, forky or trixie)" >&2; exit 2 ;;
esac
marker="$root/.precprobe-root-complete"
want="$(printf '%s\n' "suite $suite" "${pkgs[@]}")"
if [[ -f "$marker" ]] && [[ "$(cat "$marker")" == "$want" ]]; then
  echo "debian-root: $root is complete, reused"
  exit 0
fi
if [[ -e "$root" ]]; then
  echo "debian-root: $root is incomplete or older: making it again"
  remove_root "$root"
fi
if [[ ! -c /dev/null ]]; then
  echo "debian-root: /dev/null is not a character device; apt cannot verify signatures." >&2
  echo "  repair it: rm /dev/null && mknod -m 666 /dev/null c 1 3" >&2
  exit 1
fi
command -v mmdebstrap >/dev/null || {
  echo "debian-root: mmdebstrap is missing: apt-get install mmdebstrap" >&2
  exit 1
}
mkdir -p "$(dirname "$root")"
list="$(IFS=,; echo "${pkgs[*]}")"
mmdebstrap --variant=apt "${mmdebstrap_opts[@]}" --include="$list" "$suite" "$root"
printf '%s\n' "$want" >"$marker"
echo "debian-root: $root made"
