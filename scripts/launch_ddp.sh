#!/usr/bin/env bash
# Launches N ranks of a c10d program on this machine, as torchrun would: RANK, WORLD_SIZE,
# MASTER_ADDR=127.0.0.1 and a free MASTER_PORT in the environment of each.
#   scripts/launch_ddp.sh N [--bin PATH] [program flags...]
# Exits with the first non-zero exit status of any rank (0 when all succeed).
set -uo pipefail
n="${1:?usage: launch_ddp.sh N [--bin PATH] [flags...]}"
shift
bin="$(dirname "$0")/../build/bin/ddp_fashion_mnist"
if [[ "${1:-}" == "--bin" ]]; then bin="$2"; shift 2; fi
port="${MASTER_PORT:-$(( 20000 + RANDOM % 20000 ))}"
pids=()
for ((r = 0; r < n; r++)); do
  RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port "$bin" "$@" &
  pids+=($!)
done
status=0
for p in "${pids[@]}"; do
  wait "$p" || { s=$?; [[ $status -eq 0 ]] && status=$s; }
done
exit $status
