#!/usr/bin/env bash
# Writes the bundle that scripts/gpu-check.sh needs on the GPU machine (which has PyTorch,
# nvcc, cmake and ninja but none of precprobe's other dependencies, and no network): the
# Debian bookworm packages of fmt, nlohmann-json, zstd, xxhash, CLI11, Catch2, Google
# Benchmark, zlib and pkgconf, fetched with `apt-get download` and unpacked with `dpkg -x`
# into a relocatable prefix, plus the Fashion-MNIST idx files (dataset-fashion-mnist).
# Runs here, on the Debian bookworm CPU machine (root or not: it installs nothing).
#
#   scripts/gpu-bundle.sh [DIR]     DIR: where to write it (default .gpu-bundle in the
#                                   checkout, git-ignored; replaced when it exists)
#   scripts/gpu-bundle.sh --help
#
# What is in DIR afterwards:
#   prefix/usr/...     headers, CMake packages, pkg-config files, libraries, the dataset
#   bin/pkg-config     a wrapper around the bundled pkgconf (pkgconf/: binary and library)
#   env.sh             `source DIR/env.sh`: CMAKE_PREFIX_PATH, PKG_CONFIG_PATH, PKG_CONFIG,
#                      PATH (bin/ first), FASHION_MNIST_DIR
#   pybind11/usr/...   Debian sid's pybind11-dev (pybind11 3), for gpu-check.sh's twin stage
#   MANIFEST.txt       packages and versions, sizes, the glibc/libstdc++ symbol versions the
#                      shipped shared objects need, the checks this script made
#
# Relocatable: the .pc files find their prefix through ${pcfiledir}, the CMake packages
# through their own location, so DIR may sit anywhere (the device copies the checkout to a
# path of its own). Static libraries are used where Debian ships them (zstd, xxhash, zlib);
# the .so symlinks of those are removed so that nothing links against a shared library the
# device does not have. fmt and Google Benchmark exist only as shared libraries in bookworm:
# they are shipped (libfmt.so.9, libbenchmark.so.1debian) and found at run time through the
# RUNPATH CMake gives build-tree executables. The bundle must stay under 60 MB (the device
# takes 64 MiB per call, the checkout included); the script fails when it does not.
set -euo pipefail

usage() { sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in
  -h | --help) usage; exit 0 ;;
  -*) echo "gpu-bundle: unknown option $1 (see --help)" >&2; exit 2 ;;
esac

cd "$(dirname "$0")/.."
repo="$PWD"
out="${1:-$repo/.gpu-bundle}"
max_bytes=$((60 * 1000 * 1000))
arch_dir=usr/lib/x86_64-linux-gnu

pkgs=(libfmt-dev libfmt9 nlohmann-json3-dev libzstd-dev libxxhash-dev libcli11-dev catch2
      libbenchmark-dev libbenchmark1debian zlib1g-dev pkgconf-bin libpkgconf3
      dataset-fashion-mnist)

for tool in apt-get dpkg dpkg-deb objdump sha256sum curl xzcat; do
  command -v "$tool" >/dev/null || { echo "gpu-bundle: $tool is missing" >&2; exit 1; }
done

work="$(mktemp -d /tmp/precprobe-gpu-bundle.XXXXXX)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/debs"
# apt-get download drops privileges to _apt, which must be able to write there.
chmod 777 "$work/debs"

echo "gpu-bundle: downloading ${#pkgs[@]} packages"
if ! (cd "$work/debs" && apt-get download -q "${pkgs[@]}" >"$work/download.log" 2>&1); then
  echo "gpu-bundle: apt-get download failed; running apt-get update once" >&2
  if [[ $(id -u) -eq 0 ]]; then apt-get update -qq; else sudo apt-get update -qq; fi
  (cd "$work/debs" && apt-get download -q "${pkgs[@]}" >"$work/download.log" 2>&1) || {
    cat "$work/download.log" >&2
    exit 1
  }
fi

stage="$work/bundle"
prefix="$stage/prefix"
mkdir -p "$prefix" "$stage/bin"
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$prefix"; done

# Documentation, manual pages and lintian overrides are of no use there.
rm -rf "$prefix/usr/share/doc" "$prefix/usr/share/man" "$prefix/usr/share/lintian" \
       "$prefix/usr/share/aclocal" "$prefix/usr/share/pkgconfig/personality.d"

# Static where Debian ships the archive: drop the .so symlinks whose targets are not in the
# bundle (they are in the runtime packages; zlib1g-dev's even points at /lib of this machine)
# so that CMake and the linker take the .a.
removed_links=()
real_prefix="$(realpath "$prefix")"
while IFS= read -r -d '' link; do
  target="$(realpath -m "$link")"
  if [[ ! -e "$target" || "$target/" != "$real_prefix"/* ]]; then
    removed_links+=("${link#"$prefix"/}")
    rm -f "$link"
  fi
done < <(find "$prefix" -type l -print0)

# The remaining symlinks (libfmt.so -> libfmt.so.9 -> libfmt.so.9.1.0, ...) become copies:
# the bundle travels as plain files, whatever the carrier makes of links.
while IFS= read -r -d '' link; do
  cp --remove-destination -L "$link" "$link.copy" && mv "$link.copy" "$link"
done < <(find "$prefix" -type l -print0)

# pkg-config files: every /usr becomes ${prefix}, and prefix is ${pcfiledir}/<up to usr>, so
# the prefix is found wherever the bundle lies. libzstd.pc says libdir=${exec_prefix}/lib
# where Debian puts the library in the multiarch directory: corrected.
while IFS= read -r -d '' pc; do
  rel_dir="${pc#"$prefix"/usr/}"
  rel_dir="${rel_dir%/*}"
  up="$(echo "$rel_dir" | sed -E 's#[^/]+#..#g')"
  tmp="$pc.new"
  {
    printf 'prefix=${pcfiledir}/%s\n' "$up"
    sed -E -e '/^prefix=/d' \
      -e 's#(^[A-Za-z_]+=|[[:space:]]|-I|-L)/usr(/|$|[[:space:]])#\1${prefix}\2#g' "$pc"
  } >"$tmp"
  if [[ "${pc##*/}" == libzstd.pc ]]; then
    sed -i -E 's#^libdir=\$\{exec_prefix\}/lib$#libdir=${exec_prefix}/lib/x86_64-linux-gnu#' "$tmp"
  fi
  mv "$tmp" "$pc"
done < <(find "$prefix" -name '*.pc' -print0)

# pkgconf lives apart from the prefix: CMake looks for a pkg-config in <prefix>/bin first
# and would find a pkgconf there that cannot load its library (libpkgconf.so.3) on the device.
mkdir -p "$stage/pkgconf"
mv "$prefix/usr/bin/pkgconf" "$stage/pkgconf/pkgconf"
mv "$prefix/$arch_dir"/libpkgconf.so.3 "$stage/pkgconf/"
rm -f "$prefix/$arch_dir"/libpkgconf.so.3.*
rmdir "$prefix/usr/bin" 2>/dev/null || true
cat >"$stage/bin/pkg-config" <<'EOF'
#!/bin/sh
# The bundle's pkgconf (Debian bookworm 1.8.1) with its own libpkgconf.so.3.
d="$(cd "$(dirname "$0")/.." && pwd)"
LD_LIBRARY_PATH="$d/pkgconf${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$d/pkgconf/pkgconf" "$@"
EOF
chmod +x "$stage/bin/pkg-config"

# pybind11 3 (Debian sid's pybind11-dev: headers and CMake package, no binary), apart from
# the prefix: only gpu-check.sh's twin stage points at it (pybind11_DIR), when the device's
# Python has no pybind11 of its own. PyTorch 2.9 on is built with pybind11 3; bookworm has 2.10.
# Fetched from the mirror's pool, checked against sid's Packages index (SHA256).
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
curl -fsS -m 300 -o "$work/sid-main.xz" "$mirror/dists/sid/main/binary-amd64/Packages.xz" ||
  { echo "gpu-bundle: cannot fetch sid's Packages index from $mirror" >&2; exit 1; }
read -r pyb_file pyb_sha < <(xzcat "$work/sid-main.xz" | awk '
  /^Package: / {p = ($2 == "pybind11-dev")} p && /^Filename: / {f = $2}
  p && /^SHA256: / {print f, $2; exit}')
[[ -n "${pyb_file:-}" ]] || { echo "gpu-bundle: no pybind11-dev in sid's index" >&2; exit 1; }
curl -fsS -m 300 -o "$work/pybind11-dev.deb" "$mirror/$pyb_file"
echo "$pyb_sha  $work/pybind11-dev.deb" | sha256sum -c --quiet - ||
  { echo "gpu-bundle: $pyb_file does not match sid's index" >&2; exit 1; }
dpkg -x "$work/pybind11-dev.deb" "$stage/pybind11"
rm -rf "$stage/pybind11/usr/share/doc"
[[ -f "$stage/pybind11/usr/lib/cmake/pybind11/pybind11Config.cmake" ]] ||
  { echo "gpu-bundle: pybind11-dev has no pybind11Config.cmake" >&2; exit 1; }

cat >"$stage/env.sh" <<'EOF'
# Sourced (bash): points CMake, pkg-config and the examples at this bundle.
_ppb="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export PRECPROBE_GPU_BUNDLE="$_ppb"
export CMAKE_PREFIX_PATH="$_ppb/prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}"
export PKG_CONFIG_PATH="$_ppb/prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$_ppb/prefix/usr/share/pkgconfig:$_ppb/prefix/usr/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
export FASHION_MNIST_DIR="$_ppb/prefix/usr/share/datasets/fashion-mnist"
# The bundled pkgconf, whether or not the machine has a pkg-config: the same one everywhere.
export PATH="$_ppb/bin:$PATH"
export PKG_CONFIG="$_ppb/bin/pkg-config"
# CMake 4 refuses packages whose files ask for policies older than 3.5 (the bundled
# config files ask for 2.8.3...3.22 ranges, which it accepts; this is a safety net).
export CMAKE_POLICY_VERSION_MINIMUM=3.5
unset _ppb
EOF

# ---- checks, here, before anything travels ----------------------------------------------
fail() { echo "gpu-bundle: check failed: $*" >&2; exit 1; }

# 1. pkg-config resolves every module from the bundle alone, and every -I/-L exists in it.
pcpath="$prefix/$arch_dir/pkgconfig:$prefix/usr/share/pkgconfig"
pc_report=()
for mod in libzstd libxxhash fmt nlohmann_json catch2 CLI11 benchmark zlib; do
  flags="$(PKG_CONFIG_LIBDIR="$pcpath" PKG_CONFIG_PATH="" "$stage/bin/pkg-config" \
             --cflags --libs "$mod")" || fail "pkg-config $mod"
  ver="$(PKG_CONFIG_LIBDIR="$pcpath" PKG_CONFIG_PATH="" "$stage/bin/pkg-config" --modversion "$mod")"
  for f in $flags; do
    case "$f" in
      -I* | -L*)
        d="${f:2}"
        [[ -d "$d" ]] || fail "pkg-config $mod: $f does not exist"
        case "$(realpath "$d")/" in "$(realpath "$prefix")"/*) ;; *) fail "pkg-config $mod: $f lies outside the bundle" ;; esac
        ;;
    esac
  done
  pc_report+=("$mod $ver: ${flags//$stage/DIR}")
done

# 2. The glibc / libstdc++ symbol versions the shipped executables and shared objects need.
elf_report=()
while IFS= read -r -d '' f; do
  file_type="$(od -An -c -N4 "$f" 2>/dev/null | tr -d ' ')"
  [[ "$file_type" == *ELF* ]] || continue
  need="$(objdump -T "$f" | grep -oE '\b(GLIBC|GLIBCXX|CXXABI|GCC)_[0-9.]+' | sort -u |
          sort -t_ -k1,1 -k2,2V | awk -F_ '{m[$1]=$0} END {for (k in m) printf "%s ", m[k]}')"
  elf_report+=("${f#"$stage"/}: needs at most ${need% }")
done < <(find "$prefix" "$stage/pkgconf" -type f \( -name '*.so*' -o -name pkgconf \) -print0)

# 3. The static archives are position-independent (they link into PIE executables).
for a in "$prefix/$arch_dir"/libzstd.a "$prefix/$arch_dir"/libxxhash.a "$prefix/$arch_dir"/libz.a; do
  [[ -f "$a" ]] || fail "missing $a"
  if objdump -r "$a" | grep -qE 'R_X86_64_32S?[[:space:]]'; then
    fail "$a has absolute 32-bit relocations: not linkable into a PIE executable"
  fi
done

# 4. The dataset.
mnist="$prefix/usr/share/datasets/fashion-mnist"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz \
         t10k-labels-idx1-ubyte.gz; do
  [[ -s "$mnist/$f" ]] || fail "missing $mnist/$f"
done

# 5. CMake, from the bundle: every package found inside it (this machine has its own copies in
#    /usr, which must not be the ones found), a program using each library links and runs.
cmake_report=()
if command -v cmake >/dev/null && command -v c++ >/dev/null; then
  t="$work/cmake-check"
  mkdir -p "$t/src"
  cat >"$t/src/CMakeLists.txt" <<'CMK'
cmake_minimum_required(VERSION 3.18)
project(bundle_check LANGUAGES CXX)
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
pkg_check_modules(XXHASH REQUIRED IMPORTED_TARGET libxxhash)
find_package(fmt REQUIRED)
find_package(nlohmann_json 3 REQUIRED)
find_package(Catch2 REQUIRED)
find_package(benchmark REQUIRED)
find_package(CLI11 REQUIRED)
find_package(ZLIB REQUIRED)
add_executable(check main.cpp)
target_link_libraries(check PRIVATE fmt::fmt nlohmann_json::nlohmann_json PkgConfig::ZSTD
                      PkgConfig::XXHASH benchmark::benchmark CLI11::CLI11 ZLIB::ZLIB)
foreach(v fmt_DIR nlohmann_json_DIR Catch2_DIR benchmark_DIR CLI11_DIR ZLIB_LIBRARY
          ZLIB_INCLUDE_DIR ZSTD_LINK_LIBRARIES XXHASH_LINK_LIBRARIES PKG_CONFIG_EXECUTABLE)
  message(STATUS "found ${v}=${${v}}")
endforeach()
CMK
  cat >"$t/src/main.cpp" <<'CPP'
#include <CLI/CLI.hpp>
#include <benchmark/benchmark.h>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <xxhash.h>
#include <zlib.h>
#include <zstd.h>
int main() {
  nlohmann::json j = {{"zstd", ZSTD_versionNumber()}, {"zlib", zlibVersion()},
                      {"xxh", XXH64("x", 1, 0)}};
  CLI::App app("check");
  benchmark::DoNotOptimize(j);
  fmt::print("{}\n", j.dump());
  return 0;
}
CPP
  (
    # shellcheck disable=SC1091
    source "$stage/env.sh"
    export PKG_CONFIG_LIBDIR="$pcpath"
    export PATH="$stage/bin:$PATH" PKG_CONFIG="$stage/bin/pkg-config"
    cmake -S "$t/src" -B "$t/build" -DCMAKE_BUILD_TYPE=Release >"$t/configure.log" 2>&1 &&
      cmake --build "$t/build" >"$t/build.log" 2>&1 && "$t/build/check" >"$t/run.log" 2>&1
  ) || { cat "$t"/*.log >&2; fail "the CMake check project did not configure, build or run"; }
  while IFS= read -r line; do
    v="${line#-- found }"
    val="${v#*=}"
    for item in ${val//;/ }; do
      case "$item" in
        "$stage"/* | -* | "") ;;
        *) fail "CMake found ${v%%=*} outside the bundle: $item" ;;
      esac
    done
    cmake_report+=("${v//$stage/DIR}")
  done < <(grep -oE -- '-- found [A-Za-z0-9_]+=.*' "$t/configure.log")
  cmake_report+=("check program linked and ran: $(cat "$t/run.log")")
  cmake_report+=("its dynamic dependencies: $(objdump -p "$t/build/check" | awk '/NEEDED/ {printf "%s ", $2}')")
else
  cmake_report+=("(cmake or c++ missing here: not checked)")
fi

# 6. Size.
bytes="$(du -sb "$stage" | cut -f1)"
((bytes <= max_bytes)) || fail "bundle is $bytes bytes, over $max_bytes"

{
  echo "precprobe GPU bundle, made $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/gpu-bundle.sh"
  echo "on $(. /etc/os-release && echo "$PRETTY_NAME"), $(dpkg --print-architecture)"
  echo
  echo "## Packages (apt-get download, dpkg -x into prefix/)"
  for deb in "$work"/debs/*.deb; do
    printf '%s %s  %s bytes  sha256 %s\n' "$(dpkg-deb -f "$deb" Package)" \
      "$(dpkg-deb -f "$deb" Version)" "$(stat -c %s "$deb")" "$(sha256sum "$deb" | cut -c1-16)"
  done
  printf 'pybind11-dev %s (sid, into pybind11/, for the twin stage)  %s bytes  sha256 %s\n' \
    "$(dpkg-deb -f "$work/pybind11-dev.deb" Version)" "$(stat -c %s "$work/pybind11-dev.deb")" \
    "${pyb_sha:0:16}"
  echo
  echo "## Size: $bytes bytes ($(du -sh "$stage" | cut -f1)); largest parts"
  (cd "$stage" && du -sb prefix/usr/share/datasets prefix/usr/include prefix/usr/lib pkgconf bin env.sh |
     sort -rn)
  echo
  echo "## Removed symlinks to shared libraries not bundled (the static archive is used)"
  for l in "${removed_links[@]}"; do echo "$l"; done
  echo
  echo "## pkg-config, from the bundle alone (DIR = this folder)"
  for l in "${pc_report[@]}"; do echo "$l"; done
  echo
  echo "## CMake check: a project that finds every package with CMAKE_PREFIX_PATH=DIR/prefix/usr"
  for l in "${cmake_report[@]}"; do echo "$l"; done
  echo
  echo "## Shipped ELF files and the newest symbol versions they need"
  echo "(the device needs glibc >= the largest GLIBC_ and a libstdc++ with the GLIBCXX_ shown)"
  for l in "${elf_report[@]}"; do echo "$l"; done
  echo
  echo "## Static archives (linked into the executables there)"
  (cd "$prefix" && ls -l "$arch_dir"/*.a usr/lib/*.a 2>/dev/null | awk '{print $9, $5, "bytes"}')
} >"$stage/MANIFEST.txt"

rm -rf "$out"
mkdir -p "$(dirname "$out")"
mv "$stage" "$out"
echo "gpu-bundle: wrote $out ($(du -sh "$out" | cut -f1), $bytes bytes)"
commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "gpu-bundle: on the GPU machine: PRECPROBE_COMMIT=$commit bash scripts/gpu-check.sh \$OUT  (carry: ${out#"$repo"/})"
