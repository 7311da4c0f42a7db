#!/usr/bin/env bash
# The GPU tests, one process per test case, JOBS at a time: most of a case's time is NVRTC
# compiling its pipelines on the CPU, which one process does serially.
#
#   bash bench/gpu_tests.sh TEST_BINARY [JOBS] [LOG_DIR]
#
# Runs from the repository root (the tests read examples/). Prints one line per case (status,
# seconds, name) in the binary's order, then the failures' output; exits 1 when any case fails or
# times out (KFUSE_CASE_TIMEOUT_S, default 400, per case).
set -uo pipefail
binary=${1:?usage: bash bench/gpu_tests.sh TEST_BINARY [JOBS] [LOG_DIR]}
jobs=${2:-8}
logs=${3:-$(mktemp -d /tmp/kfuse-gpu-tests.XXXXXX)}
limit=${KFUSE_CASE_TIMEOUT_S:-400}
mkdir -p "$logs" || exit 1
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1

# doctest separates filters with commas: a comma inside a case name is escaped.
"$binary" --list-test-cases --no-version | grep -v '^\[doctest\]' | grep -v '^=*$' >"$logs/cases.txt"
# Tests that run the kfuse tool take the one beside the test binary (a carried build).
[[ -x "$(dirname "$binary")/kfuse" ]] && export KFUSE_TOOL="$(cd "$(dirname "$binary")" && pwd)/kfuse"
export binary logs limit
run_case() {
  local i=$1 name start rc
  name=$(sed -n "${i}p" "$logs/cases.txt")
  start=$SECONDS
  timeout --kill-after=10 "$limit" "$binary" --test-case="${name//,/\\,}" >"$logs/$i.log" 2>&1
  rc=$?
  grep -Eq '^\[doctest\] test cases: +1 \| +1 passed' "$logs/$i.log" || { [[ $rc -eq 0 ]] && rc=2; }
  printf '%s\t%s\t%ds\t%s\n' "$i" "$rc" $((SECONDS - start)) "$name" >"$logs/$i.status"
}
export -f run_case
seq 1 "$(wc -l <"$logs/cases.txt")" | xargs -P "$jobs" -I{} bash -c 'run_case {}'
failed=0
for status in $(ls "$logs"/*.status | sort -V); do
  IFS=$'\t' read -r i rc seconds name <"$status"
  printf '%-7s %5s  %s\n' "$([[ $rc -eq 0 ]] && echo ok || echo FAILED)" "$seconds" "$name"
  [[ $rc -ne 0 ]] && failed=1
done
for status in $(ls "$logs"/*.status | sort -V); do
  IFS=$'\t' read -r i rc seconds name <"$status"
  [[ $rc -ne 0 ]] && { echo "==== $name (exit $rc)"; grep -v '^\[doctest\] \(doctest version\|run with\)' "$logs/$i.log" | tail -60; }
done
exit $failed
