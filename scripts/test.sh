#!/usr/bin/env bash
# Builds kfuse and runs every test: unit, golden, planner proof-by-interpretation, NVRTC
# compiles of every example, the cache, the install test, a bounded parser fuzz run, and the
# GPU tests (label gpu; they report "skipped" where there is no GPU); then builds the Python
# package with pip into a virtual environment (build/venv), with PyTorch, and runs its tests
# (tests/python; the GPU ones skip without a GPU). Then the same unit tests under AddressSanitizer +
# UndefinedBehaviorSanitizer (build-asan, KFUSE_SANITIZE=ON) and a bounded run of the planner
# fuzzer (build-fuzz, also ASan + UBSan). CI runs this on 2 cores.
#
#   scripts/test.sh            KFUSE_PLAN_FUZZ_SECONDS (default 120) bounds the fuzz step
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install_deps.sh
# pip builds the C++ libraries again in build-python/: with paths relative to this checkout
# and the build directory left out of the hash, ccache serves them from the build below.
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build
ctest --test-dir build --output-on-failure -j2

[ -x build/venv/bin/python ] || python3 -m venv build/venv
build/venv/bin/pip install -q --disable-pip-version-check nanobind scikit-build-core numpy pytest torch
build/venv/bin/pip install -q --disable-pip-version-check --no-build-isolation .
build/venv/bin/python -m pytest -q tests/python

# The sanitizer build: every unit test (the GPU tests are built but skipped by label, the
# fuzzers have their own sanitized build below, and the install test, which builds a program
# against the installed libraries as a user would, runs on the plain build above: sanitized
# static libraries need the sanitizer runtime at link time). Leaks are reported too.
# "nvrtc: every example compiles" runs on the plain build only: its subject is the registers
# ptxas gives every example's kernels, and inside a sanitized process ptxas now and then
# allocates a kernel at its register cap differently (a 4-20 byte spill in about 1 of 100
# compiles of gemm_bn_scale_softmax's eval SIMT GEMM; none in 560 compiles outside one).
# "plan time: ..." likewise: its subject is the planner's growth with the chain's length, a CPU
# time bound set from the plain build; the sanitizers multiply every op's cost by about eight,
# which puts the 50,000-op chain at the bound.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKFUSE_SANITIZE=ON
cmake --build build-asan --target kfuse kfuse_tests kfuse_gpu_tests
ctest --test-dir build-asan --output-on-failure -j2 -LE 'gpu|fuzz|install' \
  -E 'nvrtc: every example compiles|plan time: '

bash tests/fuzz/run.sh "${KFUSE_PLAN_FUZZ_SECONDS:-120}" plan
