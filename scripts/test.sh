#!/usr/bin/env bash
# Builds kfuse and runs every test: unit, golden, planner proof-by-interpretation, NVRTC
# compiles of every example, the cache, a bounded parser fuzz run, and the GPU tests
# (label gpu; they report "skipped" where there is no GPU). Then the same unit tests under
# AddressSanitizer + UndefinedBehaviorSanitizer (build-asan, KFUSE_SANITIZE=ON) and a bounded
# run of the planner fuzzer (build-fuzz, also ASan + UBSan). CI runs this on 2 cores.
#
#   scripts/test.sh            KFUSE_PLAN_FUZZ_SECONDS (default 120) bounds the fuzz step
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
ctest --test-dir build --output-on-failure -j2

# The sanitizer build: every unit test (the GPU tests are built but skipped by label, the
# fuzzers have their own sanitized build below). Leaks are reported too.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFUSE_SANITIZE=ON
cmake --build build-asan --target kfuse kfuse_tests kfuse_gpu_tests
ctest --test-dir build-asan --output-on-failure -j2 -LE 'gpu|fuzz'

bash tests/fuzz/run.sh "${KFUSE_PLAN_FUZZ_SECONDS:-120}" plan
