#!/usr/bin/env bash
# Builds the .kf parser fuzzer with clang in build-fuzz and runs it for SECONDS (default
# 60), seeded with the examples and the diagnostics goldens. A finding leaves a crash-*,
# timeout-* or oom-* file in build-fuzz/findings; replay it with
#   build-fuzz/kfuse_parse_fuzzer build-fuzz/findings/crash-...
#
#   tests/fuzz/run.sh [SECONDS]
#
# Needs clang++ and libFuzzer (Debian/Ubuntu: apt-get install clang-14 libclang-rt-14-dev).
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$root/build-fuzz"
cxx="${CXX:-$(command -v clang++ || command -v clang++-14)}"

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_CXX_COMPILER="$cxx" -DKFUSE_FUZZ=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C "$build" kfuse_parse_fuzzer

# libFuzzer writes new inputs into the first corpus directory: keep the seeds read-only.
corpus="$build/corpus"
seeds="$build/seeds"
findings="$build/findings"
rm -rf "$seeds"
mkdir -p "$corpus" "$seeds" "$findings"
cp "$root"/examples/*.kf "$root"/tests/golden/diagnostics/*.kf "$seeds"/

"$build/kfuse_parse_fuzzer" "$corpus" "$seeds" \
  -dict="$root/tests/fuzz/kf.dict" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
  -artifact_prefix="$findings/" -print_final_stats=1
