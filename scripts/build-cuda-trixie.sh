#!/usr/bin/env bash
# Compiles precprobe against a CUDA LibTorch: Debian trixie contrib's libtorch-cuda-dev 2.6 with
# non-free's CUDA 12.4 toolkit, in a root made by mmdebstrap (no GPU needed, none used). Not part
# of scripts/test.sh: it downloads about 3 GB more than the CPU stage. Needs root.
#   ROOT=dir       the root (default /var/cache/precprobe/trixie-cuda-root; reused when complete)
#   BUILD_DIR=dir  build directory inside the checkout (default build-cuda)
#   ROOT_ONLY=1    make (or check) the root and stop (scripts/gpu-check-trixie.sh uses it)
#
# libtorch-cuda-2.6 depends on nvidia-cudnn, an installer package that downloads cuDNN from
# NVIDIA's servers while it installs; these machines reach Debian's mirror only. A placeholder
# package of that name stands in for it, so the root has every header and library but
# cuDNN's: enough to configure and compile (no test links against cuDNN here).
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
root="${ROOT:-/var/cache/precprobe/trixie-cuda-root}"
build_dir="${BUILD_DIR:-build-cuda}"
case "$root/" in
  "$repo"/*) echo "build-cuda-trixie: ROOT must lie outside the checkout" >&2; exit 2 ;;
esac

pkgs=(build-essential cmake ninja-build git pkg-config ccache ca-certificates
      libtorch-cuda-dev nvidia-cuda-toolkit libgloo-cuda-dev
      libfmt-dev nlohmann-json3-dev libzstd-dev libxxhash-dev libcli11-dev zlib1g-dev)
marker="$root/.precprobe-root-complete"
want="$(printf '%s\n' "${pkgs[@]}")"
if [[ ! -f "$marker" ]] || [[ "$(cat "$marker")" != "$want" ]]; then
  scripts/debian-root.sh --remove "$root"
  # The placeholder sits at the same path outside and inside the root: apt links to it from
  # inside the chroot when it hands it to dpkg.
  placeholder=/var/cache/precprobe/placeholder
  rm -rf "$placeholder"
  mkdir -p "$placeholder/pkg/DEBIAN"
  cat >"$placeholder/pkg/DEBIAN/control" <<'EOF'
Package: nvidia-cudnn
Version: 9.99.0~precprobe.placeholder
Architecture: all
Maintainer: precprobe <precprobe@localhost>
Description: placeholder for NVIDIA's cuDNN download script (compile-only root)
EOF
  dpkg-deb --build "$placeholder/pkg" "$placeholder/nvidia-cudnn.deb" >/dev/null
  mkdir -p "$(dirname "$root")"
  list="$(IFS=,; echo "${pkgs[*]}"),$placeholder/nvidia-cudnn.deb"
  mmdebstrap --variant=apt --components=main,contrib,non-free --include="$list" \
    --setup-hook="mkdir -p \"\$1$placeholder\" && cp $placeholder/nvidia-cudnn.deb \"\$1$placeholder/\"" \
    trixie "$root"
  rm -rf "$placeholder" "$root$placeholder"
  printf '%s\n' "$want" >"$marker"
fi

if [[ "${ROOT_ONLY:-}" == 1 ]]; then
  echo "build-cuda-trixie: $root is complete"
  exit 0
fi

trap 'scripts/debian-root.sh --umount "$root"' EXIT
scripts/debian-root.sh --mount "$root" "$repo"

# The probe library and the CLI: the library is every translation unit that includes LibTorch;
# executables linking libtorch_cuda.so are not built (cuDNN, one of its dependencies, is absent).
chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
  bash -euo pipefail -c "
    cd /src/precprobe
    echo \"== libtorch-cuda-dev \$(dpkg-query -W -f='\${Version}' libtorch-cuda-dev), nvcc \$(nvcc --version | tail -1)\"
    BUILD_DIR=$build_dir TARGETS='precprobe precprobe_cli' scripts/build.sh \
      -DPRECPROBE_BUILD_TESTS=OFF -DPRECPROBE_BUILD_BENCH=OFF -DPRECPROBE_BUILD_EXAMPLES=OFF
    grep -E '^(CUDA_VERSION|CUDA_TOOLKIT_ROOT_DIR|TORCH_LIBRARIES):' $build_dir/CMakeCache.txt || true
  "
