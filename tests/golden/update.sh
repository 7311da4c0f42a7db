#!/usr/bin/env bash
# Regenerates tests/golden/diagnostics/*.expected, the exact stderr of `kfuse check` on each
# malformed input. Run it after an intended change to a diagnostic and review the diff.
#
#   tests/golden/update.sh [KFUSE_BINARY]      (default: build/kfuse)
#
# Paths in the messages are relative to the repository root, as the unit test runs them.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
kfuse="$(realpath "${1:-$root/build/kfuse}")"
cd "$root"
for kf in tests/golden/diagnostics/*.kf; do
  rc=0
  "$kfuse" check "$kf" >/dev/null 2>"${kf%.kf}.expected" || rc=$?
  if [ "$rc" -ne 1 ]; then
    echo "update.sh: $kf: kfuse check exited with $rc, expected 1" >&2
    exit 1
  fi
done
echo "updated $(ls tests/golden/diagnostics/*.expected | wc -l) expected files"

# Plans (--json) and generated CUDA of the founding workloads in both modes.
mkdir -p tests/golden/plan tests/golden/codegen
for kf in examples/gemm_bn_scale_softmax.kf examples/gemm_scale_bn.kf; do
  name="$(basename "$kf" .kf)"
  for mode in train eval; do
    "$kfuse" plan "$kf" --mode "$mode" --json >"tests/golden/plan/$name.$mode.json"
    "$kfuse" emit "$kf" --mode "$mode" -o "tests/golden/codegen/$name.$mode.cu"
  done
done
echo "updated $(ls tests/golden/plan/*.json tests/golden/codegen/*.cu | wc -l) plan and codegen files"

# Every target path: plans and CUDA of the Hopper mainloop (tf32, 3xtf32, bf16 operands, bf16
# autocast) and of the mma.sync mainloop (tf32 on sm_80), named NAME.MODE.PRECISION.ARCH.
mkdir -p tests/golden/targets
while read -r name precision arch; do
  for mode in train eval; do
    stem="tests/golden/targets/$name.$mode.$precision.$arch"
    args=(--mode "$mode" --precision "$precision" --arch "$arch")
    "$kfuse" plan "examples/$name.kf" "${args[@]}" --json >"$stem.json"
    "$kfuse" emit "examples/$name.kf" "${args[@]}" -o "$stem.cu"
  done
done <tests/golden/targets.txt
echo "updated $(ls tests/golden/targets/*.json tests/golden/targets/*.cu | wc -l) target files"

# The IR after every pass, as .kf (stderr of plan --dump-after-each-pass).
mkdir -p tests/golden/passes
for name in gemm_bn_scale_softmax gemm_scale_bn bert_mlm_transform_tokens_view; do
  for mode in train eval; do
    "$kfuse" plan "examples/$name.kf" --mode "$mode" --dump-after-each-pass \
      2>"tests/golden/passes/$name.$mode.kf" >/dev/null
  done
done
echo "updated $(ls tests/golden/passes/*.kf | wc -l) per-pass files"
