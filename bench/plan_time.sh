#!/usr/bin/env bash
# How `kfuse plan` (the passes, the partition, the validator and the CUDA its GEMM configs come
# from) scales with a chain's length: generated chains of n `h = mul(h, w)` (one per-feature
# scale, folded into one map), of n `h = add(h, p<i>)` over n params and of n narrow layers
# (linear, relu, softmax: n kernels), planned in train mode.
# Prints wall and processor seconds and peak memory per length; the time per op should stay
# about flat as n grows. No GPU needed.
#
#   bash bench/plan_time.sh [KFUSE_BINARY] [LENGTH...]     (default: build/kfuse, 1000 to 50000)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
kfuse=$(realpath "${1:-build/kfuse}")
shift || true
lengths=("$@")
[ ${#lengths[@]} -gt 0 ] || lengths=(1000 2000 4000 10000 20000 50000)
if [ ! -x /usr/bin/time ]; then
  echo "plan_time.sh: needs /usr/bin/time (apt-get install time)" >&2
  exit 1
fi
work=$(mktemp -d /tmp/kfuse-plan-time.XXXXXX)
trap 'rm -rf "$work"' EXIT

scale_chain() { # n
  printf 'pipeline scale_chain {\n  dim N\n  input x: f32[N, 16]\n  param w: f32[16]\n'
  printf '  h = mul(x, w)\n'
  for ((i = 1; i < $1; ++i)); do printf '  h = mul(h, w)\n'; done
  printf '  return h\n}\n'
}
param_chain() { # n
  printf 'pipeline param_chain {\n  dim N\n  input x: f32[N, 16]\n'
  for ((i = 0; i < $1; ++i)); do printf '  param p%d: f32[16]\n' "$i"; done
  printf '  h = add(x, p0)\n'
  for ((i = 1; i < $1; ++i)); do printf '  h = add(h, p%d)\n' "$i"; done
  printf '  return h\n}\n'
}

layer_chain() { # n narrow layers, a GEMM kernel each with its softmax in the epilogue
  printf 'pipeline layer_chain {\n  dim N\n  input x: f32[N, 16]\n  param W: f32[16, 16]\n  h = x\n'
  for ((i = 0; i < $1; ++i)); do printf '  h = softmax(relu(linear(h, W)), dim=-1)\n'; done
  printf '  return h\n}\n'
}

printf '%-12s %8s %9s %9s %10s %9s\n' chain n wall_s cpu_s us_per_op peak_MB
for chain in scale_chain param_chain layer_chain; do
  for n in "${lengths[@]}"; do
    kf="$work/$chain.$n.kf"
    "$chain" "$n" >"$kf"
    /usr/bin/time -f '%e %U %S %M' -o "$work/time" "$kfuse" plan "$kf" >/dev/null
    read -r wall user sys kb <"$work/time"
    python3 -c 'import sys
chain, n, wall, user, sys_s, kb = sys.argv[1], int(sys.argv[2]), *map(float, sys.argv[3:])
cpu = user + sys_s
print("%-12s %8d %9.2f %9.2f %10.1f %9.0f" % (chain, n, wall, cpu, cpu / n * 1e6, kb / 1024))' \
      "$chain" "$n" "$wall" "$user" "$sys" "$kb"
  done
done
