#!/usr/bin/env bash
# Evidence that the founding pipelines' GEMMs run on the Hopper mainloop, on the GPU machine:
# the SASS of each generated GEMM kernel (HGMMA count: wgmma; HMMA: mma.sync; FFMA: SIMT) and
# ncu's tensor-pipe utilisation and duration of that kernel at the founding size.
#
#   bash bench/sm90_evidence.sh KFUSE_BINARY
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
kfuse=${1:?usage: bash bench/sm90_evidence.sh KFUSE_BINARY}
work=$(mktemp -d /tmp/kfuse-evidence.XXXXXX)
printf '%-24s %-6s %-7s %7s %6s %6s\n' case mode prec HGMMA HMMA FFMA
for precision in tf32 3xtf32 fp32; do
  for name in gemm_bn_scale_softmax gemm_scale_bn; do
    for mode in train eval; do
      src="$work/$name.$mode.$precision.cu"
      "$kfuse" emit "examples/$name.kf" --mode "$mode" --precision "$precision" --arch sm_90a \
        --standalone -o "$src" || exit 1
      nvcc -cubin -std=c++17 -gencode=arch=compute_90a,code=sm_90a "$src" -o "${src%.cu}.cubin" \
        2>/dev/null || { echo "nvcc failed on $src"; exit 1; }
      sass=$(cuobjdump -sass -fun k0_gemm "${src%.cu}.cubin")
      printf '%-24s %-6s %-7s %7d %6d %6d\n' "$name" "$mode" "$precision" \
        "$(grep -c HGMMA <<<"$sass")" "$(grep -c ' HMMA' <<<"$sass")" "$(grep -c FFMA <<<"$sass")"
    done
  done
done
metrics=sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,gpu__time_duration.sum
for precision in tf32 3xtf32; do
  for name in gemm_bn_scale_softmax gemm_scale_bn; do
    echo "ncu: $name train $precision, N=1024, kernel k0_gemm"
    ncu --clock-control none --kernel-name k0_gemm --launch-count 1 --metrics "$metrics" \
      "$kfuse" run "examples/$name.kf" --dim N=1024 --mode train --precision "$precision" \
      --no-reference 2>&1 | grep -E "sm__pipe|gpu__time" | sed 's/^ */  /'
  done
done
rm -rf "$work"
