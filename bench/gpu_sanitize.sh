#!/usr/bin/env bash
# compute-sanitizer over the GPU tests, on a GPU machine:
#   memcheck                        every GPU test case, one process per case
#   racecheck, synccheck, initcheck the cases that together instantiate every template:
#     founding chains (gemm_simt.cuh, col_stats.cuh, row_softmax.cuh, elementwise.cuh),
#     tensor-core GEMMs (gemm_tc.cuh), random op chains (col_partials over stored values)
# Any sanitizer error fails the case (--error-exitcode); the script exits 1 when a case failed
# and prints one line per run with the command that reproduces it. Logs go to OUT (default
# BUILD/sanitize-logs).
#
#   bench/gpu_sanitize.sh BUILD [OUT]     BUILD holds kfuse_gpu_tests (ninja -C BUILD kfuse_gpu_tests)
set -uo pipefail
if [[ $# -lt 1 || $# -gt 2 ]]; then
  echo "usage: bench/gpu_sanitize.sh BUILD_DIR [LOG_DIR]" >&2
  exit 2
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$1" && pwd)" || exit 2
out="${2:-$build/sanitize-logs}"
tests="$build/kfuse_gpu_tests"
if [[ ! -x "$tests" ]]; then
  echo "gpu_sanitize.sh: $tests missing (ninja -C $1 kfuse_gpu_tests)" >&2
  exit 2
fi
if ! command -v compute-sanitizer >/dev/null; then
  echo "gpu_sanitize.sh: compute-sanitizer not on PATH (it ships in CUDA's bin/)" >&2
  exit 2
fi
mkdir -p "$out"
cd "$root" # the tests read examples/ relative to the source tree

mapfile -t cases < <("$tests" --list-test-cases --no-version 2>/dev/null | grep '^gpu: ')
if [[ ${#cases[@]} -eq 0 ]]; then
  echo "gpu_sanitize.sh: $tests lists no 'gpu: ' test cases" >&2
  exit 2
fi
subset=("gpu: founding chains with odd sizes, N from 1 to 64"
        "gpu: tensor-core GEMMs (tf32, 3xtf32) within their precision's bound"
        "gpu: random op chains match the reference")
for c in "${subset[@]}"; do
  printf '%s\n' "${cases[@]}" | grep -qxF "$c" || {
    echo "gpu_sanitize.sh: the subset names '$c', which $tests does not have: update the subset" >&2
    exit 2
  }
done

failed=0
run() { # TOOL CASE
  local tool="$1" name="$2" log rc
  log="$out/$tool.$(echo "$name" | tr -c 'A-Za-z0-9' '_').log"
  # doctest treats , and * in filters specially: escape the commas, match the name exactly.
  local filter="${name//,/\\,}"
  local start=$SECONDS
  compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 50 \
    "$tests" --test-case="$filter" --no-version >"$log" 2>&1
  rc=$?
  if [[ $rc -eq 0 ]]; then
    printf 'ok    %-10s %4ds  %s\n' "$tool" $((SECONDS - start)) "$name"
  else
    failed=1
    printf 'FAIL  %-10s %4ds  %s (exit %d, log %s)\n' "$tool" $((SECONDS - start)) "$name" "$rc" "$log"
    printf '      compute-sanitizer --tool %s --error-exitcode 99 %s --test-case="%s"\n' \
      "$tool" "$tests" "$filter"
  fi
}

for c in "${cases[@]}"; do
  run memcheck "$c"
done
for tool in racecheck synccheck initcheck; do
  for c in "${subset[@]}"; do
    run "$tool" "$c"
  done
done
exit "$failed"
