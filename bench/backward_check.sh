#!/usr/bin/env bash
# Every example's training pair, in both modes, run on the GPU and compared with the fp64
# interpreter: `kfuse run --backward` runs the forward that saves, then the backward on random
# output gradients with the values that run saved, and checks every output and gradient against
# the reference (exit 1 over the precision's bound or on a non-finite value).
#
#   bash bench/backward_check.sh BUILD_DIR [LOG_DIR]
#
# JOBS (default 8) cases run at a time: the fp64 reference of each is CPU work.
#
# Runs from the repository root. PRECISION (default fp32) is passed to `kfuse run`; the dims are
# small, so the fp64 reference stays quick: N=130 (two row tiles of the 128-row GEMM tiles and
# their partials, the second partial), B=2 and T=65 for the [B, T, F] examples. An example the
# GPU path refuses (an op or layout it has no kernel for) is listed as refused with the reason.
# Prints one line per case (status, seconds, example, mode, and a failure's error), then the
# counts; exits 1 when any case fails.
set -uo pipefail
# A failure's first error or failed check, else its last line.
why() { grep -m1 'error:\|OVER BOUND\|NOT FINITE' "$1" || tail -1 "$1"; }
build=${1:?usage: bash bench/backward_check.sh BUILD_DIR [LOG_DIR]}
kfuse="$(cd "$build" && pwd)/kfuse"
logs=${2:-$(mktemp -d /tmp/kfuse-backward.XXXXXX)}
precision=${PRECISION:-fp32}
jobs=${JOBS:-8}
mkdir -p "$logs" || exit 1
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
[[ -x "$kfuse" ]] || { echo "backward_check.sh: no kfuse binary in $build" >&2; exit 1; }

# One case: example, mode; its status line goes to LOGS/NAME.MODE.status.
run_case() {
  local kf=$1 mode=$2 name dims=() start log
  name=$(basename "$kf" .kf)
  # Every dim the example declares, bound small.
  for d in $(sed -n 's/^ *dim //p' "$kf" | tr ',' ' '); do
    case "$d" in
    B) dims+=(--dim B=2) ;;
    T) dims+=(--dim T=65) ;;
    *) dims+=(--dim "$d=130") ;;
    esac
  done
  log="$logs/$name.$mode.log"
  start=$SECONDS
  if "$kfuse" run "$kf" --backward --mode "$mode" --precision "$precision" "${dims[@]}" >"$log" 2>&1; then
    printf 'ok\t%4ds\t%s\t%s\n' $((SECONDS - start)) "$name" "$mode"
  elif grep -q "not supported on the GPU\|needs the inner dim a constant multiple" "$log"; then
    printf 'refused\t%4ds\t%s\t%s\t%s\n' $((SECONDS - start)) "$name" "$mode" "$(why "$log")"
  else
    printf 'FAIL\t%4ds\t%s\t%s\t%s\n' $((SECONDS - start)) "$name" "$mode" "$(why "$log")"
  fi >"$logs/$name.$mode.status"
}
export -f run_case why
export kfuse logs precision
rm -f "$logs"/*.status # a reused LOG_DIR's earlier verdicts
for kf in examples/*.kf; do
  echo "$kf train"
  echo "$kf eval"
done | xargs -P "$jobs" -L1 bash -c 'run_case "$0" "$1"'
verdicts=$(cat "$logs"/*.status)
echo "$verdicts"
passed=$(grep -c '^ok' <<<"$verdicts")
failed=$(grep -c '^FAIL' <<<"$verdicts")
refused=$(grep -c '^refused' <<<"$verdicts")
echo "backward_check ($precision): $passed passed, $failed failed, $refused refused; logs in $logs"
[[ $failed -eq 0 ]]
