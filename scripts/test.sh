#!/usr/bin/env bash
# Builds kfuse and runs every test: unit, golden, planner proof-by-interpretation, NVRTC
# compiles of every example, the cache, a bounded parser fuzz run, and the GPU tests
# (label gpu; they report "skipped" where there is no GPU).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
ctest --test-dir build --output-on-failure -j2
