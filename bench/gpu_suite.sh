#!/usr/bin/env bash
# The GPU suite: one command, sized for one 10-minute call on the GPU machine.
#
#   bash bench/gpu_suite.sh [BUILD_DIR]
#
# BUILD_DIR: a build made elsewhere and carried along (it must hold kfuse and, for the tests,
# kfuse_gpu_tests); without it, or when its kfuse does not start, kfuse is built here into
# build-gpu with cmake + ninja. Then, in this order, each phase timed and logged:
#   tests      the GPU tests, a process per test case (bench/gpu_tests.sh)
#   gemm       bench/gemm_sweep.cu built with nvcc: the sm90 mainloop alone on odd shapes against
#              an fp64 reference, then timed against cuBLAS (tf32, bf16, 3xtf32); then
#              bench/simt_sweep.cu, the same for the fp32 SIMT mainloop against SGEMM; then
#              bench/gemm_alone.py, `linear` alone as kfuse's runtime configures it (tile, variant,
#              split-K) against cuBLAS, tf32 and bf16; gemm_sweep.log
#   python     pip install . and pytest tests/python (kfuse.torch.Fused vs PyTorch, CUDA graphs)
#   sanitizer  compute-sanitizer memcheck over a small GPU test filter (the full sanitizer run,
#              every GPU test under memcheck and racecheck/synccheck/initcheck over the cases
#              that instantiate every template, is bench/gpu_sanitize.sh BUILD: a second call,
#              as the two do not fit one 10-minute command together)
#   bench      kfuse bench for every founding case, train and eval, fp32, 3xtf32 and tf32; then
#              the bf16 founding cases (examples/*_bf16.kf) once each, train and eval
#   compile    kfuse compile with an empty KFUSE_CACHE_DIR (cold NVRTC), then again (warm)
#   host       the host cost of one run of a 1-, 2- and 3-kernel pipeline: bench/host_overhead.cpp
#              (C++, built beside kfuse) and bench/python_timing.py --host-only (Python, needs
#              the python phase's install); host_overhead.md
#   torch      bench/compare_torch.py: PyTorch eager and torch.compile vs kfuse, output check
#              (f32 cases at fp32, 3xtf32 and tf32; bf16 cases in bf16); then
#              bench/torch_interleaved.py: the tf32 and bf16 founding cases with kfuse (the Python
#              package, installed here where the python phase did not), eager, torch.compile and
#              PyTorch's GEMM alone interleaved run by run in one process (compare_torch.py times
#              PyTorch in blocks, in a process of its own); its table goes to suite.log
#   examples   bench/examples_torch.py: every example, train and eval, at its documented size:
#              PyTorch eager and torch.compile (kfuse.torch.Reference), kfuse.torch.Fused, kfuse
#              bench's fused and unfused; kernels per call; error vs float64 (examples.md). It
#              needs about 6 minutes: run it in a call of its own,
#              KFUSE_SUITE_SKIP=tests,gemm,python,sanitizer,bench,compile,host,torch,sweep (it
#              installs the Python package itself when the python phase did not)
#   sweep      bench/shape_sweep.py: issue 9's shape sweep of gemm_bn_scale_softmax, M x N=K, tf32
#              and bf16: kfuse fused vs cuBLAS's GEMM alone vs torch.compile and eager, with the
#              GEMM config chosen (sweep.md). It needs about 6 minutes (--budget-s 360): run it
#              in a call of its own,
#              KFUSE_SUITE_SKIP=tests,gemm,python,sanitizer,bench,compile,host,torch,examples
#              (it needs the kfuse binary and PyTorch, not the Python package); with less
#              than KFUSE_SWEEP_MIN_S (default 240) seconds left it does not start
# and, through bench/suite_report.py, writes $OUT/perf_tables.md (the run's tables, the command
# beside each), $OUT/results.json (every number) and $OUT/kfuse-results.json (the figures as flat
# rows, the format of bench/results/<date>-<card>.json that docs/PERF.md's tables come from;
# docs/FORMATS.md), plus suite.log, tests.log and sanitizer.log. Where $OUT is not set (not on
# the GPU machine) the files go to bench/results/<date>-<time>/ in the tree.
# A short summary table is printed last.
#
# To carry a build made on a machine without a GPU (the working tree travels, ignored build
# folders only when carried, 64 MiB in all), pack its two binaries, stripped, first:
#   bash bench/gpu_suite.sh --pack build build-carry     # then carry build-carry and run
#   bash bench/gpu_suite.sh build-carry                  # on the GPU machine
# A packed build has no ctest files, so the GPU test binary is run directly.
#
# Knobs (environment): KFUSE_SUITE_DEADLINE_S (default 560: seconds the suite plans to end
# by), KFUSE_SUITE_SKIP (comma list of phases to skip), KFUSE_SANITIZER_TESTS (doctest
# --test-case filter), KFUSE_TESTS_TIMEOUT_S (default 300), KFUSE_BENCH_ITERS (default 100), KFUSE_BENCH_WARMUP (default 10),
# KFUSE_CHECK_N (default 0: the PyTorch output check runs at each case's benchmark N),
# KFUSE_BF16_BENCH_RESERVE_S (default 200: seconds before the deadline the bf16 benches stop),
# KFUSE_INTERLEAVED_RESERVE_S (default 120: seconds the torch phase keeps for torch_interleaved.py),
# KFUSE_SWEEP_MIN_S (default 240: the least time left in which the sweep phase starts).
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1

if [[ "${1:-}" == "--pack" ]]; then
  from=${2:?usage: bash bench/gpu_suite.sh --pack BUILD_DIR [DEST_DIR]}
  dest=${3:-build-carry}
  mkdir -p "$dest" || exit 1
  for binary in kfuse kfuse_gpu_tests host_overhead; do
    if [[ -x "$from/$binary" ]]; then
      strip -o "$dest/$binary" "$from/$binary" || exit 1
    else
      echo "gpu_suite.sh --pack: $from/$binary missing (ninja -C $from kfuse kfuse_gpu_tests host_overhead)" >&2
    fi
  done
  du -sh "$dest"
  exit 0
fi

ON_DEVICE=0
if [[ -n "${OUT:-}" ]]; then
  ON_DEVICE=1
else
  OUT=$(mktemp -d /tmp/kfuse-suite-out.XXXXXX)
fi
mkdir -p "$OUT"
WORK=$(mktemp -d /tmp/kfuse-suite.XXXXXX)
mkdir -p "$WORK/bench" "$WORK/status"
LOG="$OUT/suite.log"
: >"$LOG"

DEADLINE=${KFUSE_SUITE_DEADLINE_S:-560}
SKIP=",${KFUSE_SUITE_SKIP:-},"
# Small pipelines with odd sizes: every tile has a tail, where out-of-bounds accesses live.
SANITIZER_TESTS=${KFUSE_SANITIZER_TESTS:-"gpu: founding chains with odd sizes*"}
TESTS_TIMEOUT=${KFUSE_TESTS_TIMEOUT_S:-300}
ITERS=${KFUSE_BENCH_ITERS:-100}
WARMUP=${KFUSE_BENCH_WARMUP:-10}
CHECK_N=${KFUSE_CHECK_N:-0}
# The build is made on a machine without a GPU; here libnvrtc and libcublas come from the
# toolkit (kfuse dlopens libcublas.so.13, NVRTC is linked).
export LD_LIBRARY_PATH="/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$PATH:/usr/local/cuda/bin"
export PYTHONUNBUFFERED=1

say() { echo "[suite $(printf '%4d' "$SECONDS")s] $*" | tee -a "$LOG"; }
skipped() { [[ "$SKIP" == *",$1,"* ]]; }
remaining() { echo $((DEADLINE - SECONDS)); }
# status PHASE RC SECONDS COMMAND: one line per phase, read by the report below.
status() { printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$WORK/status/phases.tsv"; }
# run_logged LOGFILE TIMEOUT_S COMMAND...: runs with a time limit, output to the console, the
# suite log and LOGFILE; returns the command's status (124: timed out).
run_logged() {
  local file=$1 limit=$2
  shift 2
  if [[ "$file" == "$LOG" ]]; then
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$LOG"
  else
    timeout --kill-after=10 "$limit" "$@" 2>&1 | tee -a "$file" "$LOG"
  fi
  return "${PIPESTATUS[0]}"
}

say "kfuse GPU suite in $ROOT; output in $OUT; plans to end by ${DEADLINE}s"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1 |
    sed 's/^/gpu: /'
  echo "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
  echo "python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>&1 | tail -1)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)"
} | tee "$WORK/environment.txt" | tee -a "$LOG"

# ------------------------------------------------------------------ the build
BUILD=""
if [[ $# -ge 1 && -x "$1/kfuse" ]]; then
  if "$1/kfuse" --help >/dev/null 2>&1; then
    BUILD=$(cd "$1" && pwd)
    say "using the carried build $BUILD"
  else
    say "the carried build $1 does not start here: $("$1/kfuse" --help 2>&1 | head -2)"
  fi
fi
if [[ -z "$BUILD" ]]; then
  BUILD="$ROOT/build-gpu"
  say "building kfuse into $BUILD"
  start=$SECONDS
  run_logged "$LOG" 400 bash -c "cmake -S '$ROOT' -B '$BUILD' -G Ninja -DKFUSE_WERROR=OFF >/dev/null && ninja -C '$BUILD' kfuse kfuse_gpu_tests host_overhead"
  rc=$?
  status build "$rc" $((SECONDS - start)) "cmake -S . -B build-gpu -G Ninja && ninja -C build-gpu kfuse kfuse_gpu_tests host_overhead"
  if [[ $rc -ne 0 && ! -x "$BUILD/kfuse" ]]; then
    say "FATAL: no kfuse to run (build failed with $rc); carry a build: bash bench/gpu_suite.sh BUILD_DIR"
    exit 1
  fi
else
  status build 0 0 "carried build $BUILD"
fi
KFUSE="$BUILD/kfuse"

# A carried build names its source tree by absolute path (ctest's working directory, the
# tests' KFUSE_SOURCE_DIR). Where this checkout lives elsewhere, point that path here.
SRC=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$BUILD/CMakeCache.txt" 2>/dev/null)
if [[ -n "$SRC" && "$SRC" != "$ROOT" && ! -e "$SRC" ]]; then
  mkdir -p "$(dirname "$SRC")" && ln -s "$ROOT" "$SRC" && say "linked $SRC -> $ROOT for the carried build"
fi

# ------------------------------------------------------------------ GPU tests
# One process per test case, 12 at a time (bench/gpu_tests.sh): NVRTC compiles on the CPU.
if ! skipped tests; then
  start=$SECONDS
  cmd="bash bench/gpu_tests.sh BUILD/kfuse_gpu_tests 12"
  if [[ ! -x "$BUILD/kfuse_gpu_tests" ]]; then
    say "tests: $BUILD/kfuse_gpu_tests missing (is tests/gpu/ empty, or the build partial?)"
    false
  else
    say "tests: $cmd"
    run_logged "$OUT/tests.log" "$TESTS_TIMEOUT" bash "$ROOT/bench/gpu_tests.sh" "$BUILD/kfuse_gpu_tests" 12 "$WORK/tests"
  fi
  status tests $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ the GEMM mainloop alone
if ! skipped gemm; then
  start=$SECONDS
  nvcc_sm90="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a"
  cmd="$nvcc_sm90 -Itemplates bench/gemm_sweep.cu -o gemm_sweep -lcuda -lcublas && ./gemm_sweep all && $nvcc_sm90 -Itemplates bench/simt_sweep.cu -o simt_sweep -lcublas && ./simt_sweep all && python3 bench/gemm_alone.py --kfuse BUILD/kfuse"
  say "gemm: $cmd"
  run_logged "$OUT/gemm_sweep.log" 420 bash -c "$nvcc_sm90 -I'$ROOT/templates' '$ROOT/bench/gemm_sweep.cu' -o '$WORK/gemm_sweep' -lcuda -lcublas && '$WORK/gemm_sweep' all && $nvcc_sm90 -I'$ROOT/templates' '$ROOT/bench/simt_sweep.cu' -o '$WORK/simt_sweep' -lcublas && '$WORK/simt_sweep' all && python3 '$ROOT/bench/gemm_alone.py' --kfuse '$KFUSE'"
  status gemm $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ the Python package
# pip builds kfuse._kfuse here (nanobind and scikit-build-core are installed; no network), then
# tests/python runs: kfuse.torch.Fused against PyTorch for every example, CUDA graph replay
# (about 3 minutes of the phase).
if ! skipped python; then
  start=$SECONDS
  cmd="python3 -m pip install --no-build-isolation --no-deps . && KFUSE_TOOL=BUILD/kfuse python3 -m pytest -q tests/python"
  say "python: $cmd"
  run_logged "$OUT/python.log" 300 bash -c "python3 -m pip install -q --no-build-isolation --no-deps '$ROOT' && KFUSE_TOOL='$KFUSE' python3 -m pytest -q -rs '$ROOT/tests/python'"
  status python $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ compute-sanitizer
if ! skipped sanitizer; then
  start=$SECONDS
  if command -v compute-sanitizer >/dev/null && [[ -x "$BUILD/kfuse_gpu_tests" ]]; then
    say "sanitizer: compute-sanitizer --tool memcheck $BUILD/kfuse_gpu_tests --test-case=\"$SANITIZER_TESTS\""
    run_logged "$OUT/sanitizer.log" 120 compute-sanitizer --tool memcheck --error-exitcode 99 \
      "$BUILD/kfuse_gpu_tests" --test-case="$SANITIZER_TESTS"
    rc=$?
  else
    say "sanitizer: compute-sanitizer or kfuse_gpu_tests missing"
    rc=127
  fi
  status sanitizer "$rc" $((SECONDS - start)) \
    "compute-sanitizer --tool memcheck --error-exitcode 99 BUILD/kfuse_gpu_tests --test-case=\"$SANITIZER_TESTS\""
fi

# ------------------------------------------------------------------ kfuse bench
CASES=("gemm_bn_scale_softmax 1024" "gemm_scale_bn 1024" "gemm_scale_bn_4096 16384")
BF16_CASES=("gemm_bn_scale_softmax_bf16 1024" "gemm_scale_bn_bf16 1024" "gemm_scale_bn_4096_bf16 16384")
# Seconds the bf16 benches leave for the phases after them (compile, host, torch).
BF16_BENCH_RESERVE_S=${KFUSE_BF16_BENCH_RESERVE_S:-200}
INTERLEAVED_RESERVE_S=${KFUSE_INTERLEAVED_RESERVE_S:-120}
if ! skipped bench; then
  start=$SECONDS
  worst=0
  for precision in fp32 3xtf32 tf32; do
    for entry in "${CASES[@]}"; do
      read -r name n <<<"$entry"
      for mode in train eval; do
        json="$WORK/bench/$name.$mode.$precision.json"
        say "bench: kfuse bench examples/$name.kf --dim N=$n --mode $mode --precision $precision --iters $ITERS --warmup $WARMUP"
        run_logged "$LOG" 120 "$KFUSE" bench "examples/$name.kf" --dim "N=$n" --mode "$mode" \
          --precision "$precision" --iters "$ITERS" --warmup "$WARMUP" --json "$json"
        rc=$?
        [[ $rc -ne 0 ]] && worst=$rc
      done
    done
  done
  # The bf16 founding cases once each: bf16 operands have one precision (fp32 accumulation).
  # Their JSON is named .bf16 for compare_torch.py's bf16 rows to reuse. A case the deadline
  # leaves no room for is skipped with a line saying so (compare_torch.py then runs it).
  for entry in "${BF16_CASES[@]}"; do
    read -r name n <<<"$entry"
    for mode in train eval; do
      if (($(remaining) < BF16_BENCH_RESERVE_S)); then
        say "bench: SKIPPED kfuse bench examples/$name.kf --mode $mode: $(remaining)s left, ${BF16_BENCH_RESERVE_S}s kept for the phases after"
        continue
      fi
      json="$WORK/bench/$name.$mode.bf16.json"
      say "bench: kfuse bench examples/$name.kf --dim N=$n --mode $mode --iters $ITERS --warmup $WARMUP"
      run_logged "$LOG" 120 "$KFUSE" bench "examples/$name.kf" --dim "N=$n" --mode "$mode" \
        --iters "$ITERS" --warmup "$WARMUP" --json "$json"
      rc=$?
      [[ $rc -ne 0 ]] && worst=$rc
    done
  done
  status bench "$worst" $((SECONDS - start)) \
    "kfuse bench examples/CASE.kf --dim N=... --mode M [--precision P] --iters $ITERS --warmup $WARMUP --json FILE"
fi

# ------------------------------------------------------------------ compile time
if ! skipped compile; then
  start=$SECONDS
  worst=0
  : >"$WORK/compile.tsv"
  # Every precision of the founding workloads: fp32, 3xtf32 and tf32 of the f32 cases, the bf16
  # cases at theirs.
  entries=()
  for entry in "${CASES[@]}"; do
    for precision in fp32 3xtf32 tf32; do entries+=("${entry%% *} $precision"); done
  done
  for entry in "${BF16_CASES[@]}"; do entries+=("${entry%% *} bf16"); done
  for entry in "${entries[@]}"; do
    read -r name precision <<<"$entry"
    option=()
    [[ $precision != bf16 ]] && option=(--precision "$precision")
    for mode in train eval; do
      cache=$(mktemp -d /tmp/kfuse-cache.XXXXXX)
      for phase in cold warm; do
        t0=$(date +%s.%N)
        KFUSE_CACHE_DIR="$cache" timeout 120 "$KFUSE" compile "examples/$name.kf" --mode "$mode" \
          "${option[@]}" >"$WORK/compile.out" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        cat "$WORK/compile.out" >>"$LOG"
        [[ $rc -ne 0 ]] && worst=$rc
        printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$precision" "$mode" "$phase" "$rc" \
          "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
          "$(head -1 "$WORK/compile.out")" >>"$WORK/compile.tsv"
      done
      rm -rf "$cache"
    done
  done
  say "compile: $(wc -l <"$WORK/compile.tsv") measurements"
  status compile "$worst" $((SECONDS - start)) \
    "KFUSE_CACHE_DIR=\$(mktemp -d) kfuse compile examples/CASE.kf --mode M [--precision P]   # twice: cold, warm"
fi

# ------------------------------------------------------------------ host cost of a run
if ! skipped host; then
  start=$SECONDS
  : >"$WORK/host_overhead.md"
  if [[ -x "$BUILD/host_overhead" ]]; then
    say "host: $BUILD/host_overhead 200 5"
    run_logged "$LOG" 60 "$BUILD/host_overhead" 200 5 >"$WORK/host_cpp.md"
    rc=$?
    cat "$WORK/host_cpp.md" >>"$WORK/host_overhead.md"
  else
    say "host: $BUILD/host_overhead missing (ninja -C BUILD host_overhead)"
    rc=127
  fi
  say "host: python3 bench/python_timing.py --host-only"
  run_logged "$LOG" 120 python3 "$ROOT/bench/python_timing.py" --host-only >"$WORK/host_python.md"
  py_rc=$?
  sed -n '/^### /,$p' "$WORK/host_python.md" >>"$WORK/host_overhead.md"
  [[ $rc -eq 0 ]] && rc=$py_rc
  cp "$WORK/host_overhead.md" "$OUT/host_overhead.md"
  status host "$rc" $((SECONDS - start)) "BUILD/host_overhead 200 5 && python3 bench/python_timing.py --host-only"
fi

# ------------------------------------------------------------------ PyTorch comparison
if ! skipped torch; then
  start=$SECONDS
  left=$(remaining)
  limit=$((left - 25 - INTERLEAVED_RESERVE_S)) # torch_interleaved.py runs after compare_torch.py
  budget=$((limit - 90)) # what is left for torch.compile once eager, checks and reuse are paid
  ((limit < 60)) && limit=60
  ((budget < 30)) && budget=30
  # --deadline-s: nothing new starts 30 s before the time limit, so the JSON is always written.
  stop=$((limit - 30))
  ((stop < 30)) && stop=30
  cmd="python3 bench/compare_torch.py --kfuse $KFUSE --bench-dir BENCH_DIR --reuse-bench --check-n $CHECK_N --iters $ITERS --warmup $WARMUP --budget-s $budget --deadline-s $stop --out torch.json"
  say "torch: $cmd (time limit ${limit}s)"
  run_logged "$LOG" "$limit" python3 bench/compare_torch.py --kfuse "$KFUSE" --bench-dir "$WORK/bench" \
    --reuse-bench --check-n "$CHECK_N" --iters "$ITERS" --warmup "$WARMUP" --budget-s "$budget" \
    --deadline-s "$stop" --out "$WORK/torch.json"
  rc=$?
  cmd+=" && python3 bench/torch_interleaved.py --cases ... --precisions tf32 --iters $ITERS"
  if ! python3 -c 'import kfuse' 2>/dev/null; then
    say "torch: pip install . (the python phase did not install kfuse)"
    run_logged "$LOG" 300 python3 -m pip install -q --no-build-isolation --no-deps "$ROOT"
  fi
  limit=$(($(remaining) - 20))
  ((limit < 60)) && limit=60
  say "torch: python3 bench/torch_interleaved.py (time limit ${limit}s)"
  run_logged "$LOG" "$limit" python3 "$ROOT/bench/torch_interleaved.py" --cases \
    gemm_bn_scale_softmax,gemm_scale_bn,gemm_scale_bn_4096,gemm_bn_scale_softmax_bf16,gemm_scale_bn_bf16,gemm_scale_bn_4096_bf16 \
    --precisions tf32 --iters "$ITERS" --warmup "$WARMUP" || rc=1
  status torch $rc $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ every example vs PyTorch
if ! skipped examples; then
  start=$SECONDS
  limit=$(($(remaining) - 25))
  ((limit < 60)) && limit=60
  budget=$((limit - 45)) # the JSON and the table are written after the budget
  ((budget < 30)) && budget=30
  ((budget > 330)) && budget=330 # all examples, both modes, in under 6 minutes
  cmd="python3 bench/examples_torch.py --kfuse $KFUSE --budget-s $budget --out examples.json --markdown examples.md"
  say "examples: $cmd (time limit ${limit}s)"
  if ! python3 -c 'import kfuse.torch' 2>/dev/null; then
    say "examples: pip install . (the python phase did not install kfuse)"
    run_logged "$LOG" 300 python3 -m pip install -q --no-build-isolation --no-deps "$ROOT"
  fi
  run_logged "$OUT/examples.log" "$limit" python3 bench/examples_torch.py --kfuse "$KFUSE" \
    --budget-s "$budget" --out "$WORK/examples.json" --markdown "$WORK/examples.md"
  status examples $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ the shape sweep
# Its kfuse and eager points alone take about 2 minutes: with less time left than
# SWEEP_MIN_S it does not start (a line says so) rather than be cut off before its JSON.
SWEEP_MIN_S=${KFUSE_SWEEP_MIN_S:-240}
if ! skipped sweep; then
  start=$SECONDS
  limit=$(($(remaining) - 25))
  budget=$((limit - 40)) # the JSON and the tables are written after the budget
  ((budget > 360)) && budget=360
  cmd="python3 bench/shape_sweep.py --kfuse $KFUSE --budget-s $budget --out sweep.json --markdown sweep.md"
  if ((limit < SWEEP_MIN_S)); then
    say "sweep: SKIPPED $cmd: ${limit}s left, it needs ${SWEEP_MIN_S}s; run it in a call of its own (KFUSE_SUITE_SKIP=tests,gemm,python,sanitizer,bench,compile,host,torch,examples)"
  else
    say "sweep: $cmd (time limit ${limit}s)"
    run_logged "$OUT/sweep.log" "$limit" python3 bench/shape_sweep.py --kfuse "$KFUSE" \
      --budget-s "$budget" --out "$WORK/sweep.json" --markdown "$WORK/sweep.md"
    status sweep $? $((SECONDS - start)) "$cmd"
  fi
fi

# ------------------------------------------------------------------ report
say "writing $OUT/results.json, $OUT/kfuse-results.json and $OUT/perf_tables.md"
python3 "$ROOT/bench/suite_report.py" merge "$WORK" "$OUT" 2>&1 | tee -a "$LOG"
if [[ $ON_DEVICE -eq 0 ]]; then
  dest="$ROOT/bench/results/$(date -u +%Y%m%d-%H%M%S)"
  mkdir -p "$dest" && cp "$OUT"/*.json "$OUT"/*.md "$dest"/ 2>/dev/null
  say "copied results.json, kfuse-results.json and perf_tables.md to $dest"
fi
say "done in ${SECONDS}s"
python3 "$ROOT/bench/suite_report.py" summary "$WORK" "$OUT" 2>&1 | tee -a "$LOG"
[[ -f "$OUT/gemm_sweep.log" ]] && grep -E '^(sweep|epilogue)|PASS$|FAIL$' "$OUT/gemm_sweep.log" |
  grep -vE ' PASS$' | tee -a "$LOG"
# The exit status says whether every phase that ran succeeded (an unsupported precision is
# not a failure: kfuse bench exits 0 for it).
awk -F'\t' '$2 != 0 { bad = 1 } END { exit bad }' "$WORK/status/phases.tsv"
