#!/usr/bin/env bash
# Two kfuse binaries (a tree before and after a change) timed alternately in one call on the GPU
# machine: each case runs `kfuse bench` with binary A, then B, ROUNDS times, each binary with its
# own kernel cache, and prints the fused pipeline's median ms of every run side by side.
#
#   bash bench/ab_bench.sh KFUSE_A KFUSE_B ROUNDS CASE...
#
# A CASE is the arguments of one `kfuse bench` run, quoted as one word:
#   "examples/gemm_scale_bn_512x1024.kf --dim N=128 --mode train --precision tf32 --iters 200"
set -uo pipefail
a=${1:?usage: bash bench/ab_bench.sh KFUSE_A KFUSE_B ROUNDS CASE...}
b=${2:?usage: bash bench/ab_bench.sh KFUSE_A KFUSE_B ROUNDS CASE...}
rounds=${3:?usage: bash bench/ab_bench.sh KFUSE_A KFUSE_B ROUNDS CASE...}
shift 3
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
work=$(mktemp -d /tmp/kfuse-ab.XXXXXX)
status=0
# The fused median (ms) of one run, or the reason there is none.
fused_ms() {
  local binary=$1 cache=$2 json=$3
  shift 3
  if ! KFUSE_CACHE_DIR="$cache" "$binary" bench "$@" --json "$json" >"$json.log" 2>&1; then
    echo "failed: $(tail -1 "$json.log")"
    return 1
  fi
  python3 -c 'import json,sys; print("%.4f" % json.load(open(sys.argv[1]))["fused"]["ms"]["median"])' \
    "$json"
}
printf '%-90s %s\n' "case" "A / B fused median ms, round by round"
i=0
for c in "$@"; do
  read -r -a args <<<"$c"
  line=""
  for ((r = 0; r < rounds; ++r)); do
    i=$((i + 1))
    ma=$(fused_ms "$a" "$work/cache-a" "$work/$i.a.json" "${args[@]}") || status=1
    mb=$(fused_ms "$b" "$work/cache-b" "$work/$i.b.json" "${args[@]}") || status=1
    line+="  $ma / $mb"
  done
  printf '%-90s%s\n' "$c" "$line"
done
exit $status
