#!/usr/bin/env bash
# Writes the ctest file of a test bundle (cmake/PrecprobeTestBundle.cmake): one ctest test per
# Catch2 test case, named "<file>:<case>" as when each file was a program of its own. The
# cases of each file are listed through Catch2's filename tags (-# "[#<file>]"), the files'
# listings run in parallel and without LeakSanitizer's exit scan (a listing allocates
# nothing of ours; a sanitized LibTorch program takes seconds per launch otherwise).
#   bundle_discover.sh EXE OUT WORKDIR CATCH_MAJOR FILE...
set -euo pipefail
exe="$1" out="$2" workdir="$3" catch_major="$4"
shift 4
if [[ "$catch_major" == "2" ]]; then
  list=(--list-test-names-only)
else
  list=(--list-tests --verbosity quiet)
fi
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
pids=()
for name in "$@"; do
  (cd "$workdir" && "$exe" -# "[#$name]" "${list[@]}" >"$tmp/$name" 2>"$tmp/$name.err") &
  pids+=($!)
done
# Catch2 2 exits with the number of cases listed: only a signal (or exec failure) fails.
i=0
for name in "$@"; do
  rc=0
  wait "${pids[$i]}" || rc=$?
  if [[ $rc -gt 125 ]]; then
    echo "bundle_discover: listing the cases of $name in $exe failed:" >&2
    cat "$tmp/$name.err" >&2
    exit 1
  fi
  i=$((i + 1))
done
{
  for name in "$@"; do
    n=0
    while IFS= read -r test || [[ -n "$test" ]]; do
      test="${test%$'\r'}"
      [[ -z "$test" ]] && continue
      # As Catch2's own CatchAddTests: ',', '[' and ']' are escaped in the name Catch2 runs.
      spec="${test//\\/\\\\}"
      spec="${spec//,/\\,}"
      spec="${spec//[/\\[}"
      spec="${spec//]/\\]}"
      echo "add_test([==[$name:$test]==] \"$exe\" [==[$spec]==])"
      echo "set_tests_properties([==[$name:$test]==] PROPERTIES WORKING_DIRECTORY \"$workdir\" TIMEOUT 600)"
      n=$((n + 1))
    done <"$tmp/$name"
    if [[ $n -eq 0 ]]; then
      echo "bundle_discover: no test case of $name in $exe" >&2
      exit 1
    fi
  done
} >"$tmp/out"
mv "$tmp/out" "$out"
