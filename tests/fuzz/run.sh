#!/usr/bin/env bash
# Builds a fuzzer with clang in build-fuzz and runs it for SECONDS (default 60):
#   parse  the .kf front end on arbitrary bytes, seeded with the examples and the
#          diagnostics goldens;
#   plan   the planner and code generator on pipelines from the structure-aware generator.
# A finding leaves a crash-*, timeout-* or oom-* file in build-fuzz/findings-TARGET; replay it
# with  build-fuzz/kfuse_TARGET_fuzzer build-fuzz/findings-TARGET/crash-...
#   generated  the generator's pipelines by seed, as CI's unit test checks them (plan, the proof
#          with special values, CUDA generation; tests/support/generated_check.h), each in its
#          own process, built with ASan + UBSan in build-asan (as scripts/test.sh builds it, no
#          clang needed); prints the counts of pipelines, internal errors, disagreements,
#          rejections, crashes and hangs, and writes each failing pipeline to
#          build-asan/findings-generated/seed-S.kf. Further arguments go to the runner:
#          --no-column-views (leave out views of per-feature vectors), --huge-literals (+-inf
#          and +-1e30 literals too), --first-seed S.
#
#   tests/fuzz/run.sh [SECONDS] [parse|plan|generated] [runner arguments]
#
# parse and plan need clang++ and libFuzzer (Debian/Ubuntu: apt-get install clang-14 libclang-rt-14-dev).
# Warnings are not errors here: clang warns where the project's gcc build does not.
set -euo pipefail
seconds="${1:-60}"
target="${2:-parse}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-fuzz"
case "$target" in
parse | plan) ;;
generated)
  build="$root/build-asan"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFUSE_SANITIZE=ON \
    >/dev/null
  ninja -C "$build" kfuse_generated_pipelines
  exec "$build/kfuse_generated_pipelines" "$seconds" "$build/findings-generated" "${@:3}"
  ;;
*)
  echo "run.sh: the target is parse, plan or generated, got '$target'" >&2
  exit 2
  ;;
esac

cxx="${CXX:-$(command -v clang++ || command -v clang++-14)}"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DKFUSE_FUZZ=ON \
  -DKFUSE_WERROR=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" "kfuse_${target}_fuzzer"

# libFuzzer writes new inputs into the first corpus directory: keep the seeds read-only.
corpus="$build/corpus-$target"
findings="$build/findings-$target"
mkdir -p "$corpus" "$findings"
inputs=("$corpus")
extra=()
if [ "$target" = parse ]; then
  seeds="$build/seeds"
  rm -rf "$seeds"
  mkdir -p "$seeds"
  cp "$root"/examples/*.kf "$root"/tests/golden/diagnostics/*.kf "$seeds"/
  inputs+=("$seeds")
  extra+=(-dict="$root/tests/fuzz/kf.dict")
else
  # Every input is a valid pipeline and longer inputs make larger ones: no need to grow slowly.
  extra+=(-len_control=0 -max_len=1024)
fi

"$build/kfuse_${target}_fuzzer" "${inputs[@]}" "${extra[@]}" -max_total_time="$seconds" \
  -timeout=30 -rss_limit_mb=2048 -artifact_prefix="$findings/" -print_final_stats=1
