#!/usr/bin/env bash
# The reference MLP's cost on two LibTorch versions in one sitting: the host's (Debian
# bookworm, 1.13) and a Debian root's (scripts/debian-root.sh; sid: 2.14), alternating, so
# that the machine's drift hits both alike. Each round runs, on each version, bench_debugger in
# both threadings and then the Python loop (bench/python/bench_python_l1.py --model mlp, with
# the C++ loop of the same version beside it). Needs root (the Debian root is entered with
# chroot), the host's Release build in build/ and the root's in BUILD_DIR below: it builds
# bench_debugger, the CLI and the Python module there when they are missing.
#   bench/libtorch_versions.sh [ROUNDS]      default 1
#   SUITE=sid  ROOT=/var/cache/precprobe/SUITE-root  BUILD_DIR=build-SUITE-bench
#   ONLY="..." bench_debugger's variants (default: L1, its floors, overflow_check, on_anomaly)
set -euo pipefail
cd "$(dirname "$0")/.."
repo="$PWD"
rounds="${1:-1}"
suite="${SUITE:-sid}"
root="${ROOT:-/var/cache/precprobe/$suite-root}"
build_dir="${BUILD_DIR:-build-$suite-bench}"
only="${ONLY:-L1 statistics (async),floor: kernel inline,floor: kernel on worker,L1 overflow_check,floor: NaN/Inf test inline,on_anomaly (healthy steps)}"
[[ -x build/bin/bench_debugger ]] || { echo "libtorch_versions: build the host's bench first (scripts/build.sh)" >&2; exit 2; }

scripts/debian-root.sh "$suite" "$root"
trap 'scripts/debian-root.sh --umount "$root"' EXIT
scripts/debian-root.sh --mount "$root" "$repo"
in_root() {
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
    bash -c "cd /src/precprobe && $1"
}
if [[ ! -x "$build_dir/bin/bench_debugger" ]]; then
  in_root "TARGETS='bench_debugger precprobe_python' BUILD_DIR=$build_dir scripts/build.sh \
    -DPRECPROBE_UNITY_BUILD=ON -DPRECPROBE_PIC_PROBE=ON >/dev/null"
fi

bench() {  # VERSION-LABEL BIN-DIR PYTHONPATH RUNNER
  local label="$1" bin="$2" py="$3" run="$4" t
  for t in free-core default; do
    echo "== $label, bench_debugger --threads $t"
    $run "$bin/bench_debugger --h 256,1024 --steps 20 --rounds 3 --warmup 5 --threads $t --only '$only'"
  done
  echo "== $label, Python loop (bench_python_l1.py --model mlp) beside bench_debugger"
  $run "PYTHONPATH=$py taskset -c 1 /usr/bin/python3 bench/python/bench_python_l1.py --model mlp \
    --cpp $bin/bench_debugger --steps 30 --rounds 5"
}
on_host() { bash -c "$1"; }
echo "== $(date -u '+%Y-%m-%d %H:%M') UTC, $(git rev-parse --short HEAD), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
echo "== host: libtorch-dev $(dpkg-query -W -f='${Version}' libtorch-dev); root: $(in_root "dpkg-query -W -f='\${Version}' libtorch-dev")"
for (( r = 1; r <= rounds; r++ )); do
  bench "LibTorch 1.13 (host)" build/bin build/python on_host
  bench "LibTorch of $suite (root)" "$build_dir/bin" "$build_dir/python" in_root
done
