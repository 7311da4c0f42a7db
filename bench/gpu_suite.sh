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
#              an fp64 reference, then timed against cuBLAS (tf32, bf16, 3xtf32); gemm_sweep.log
#   python     pip install . and pytest tests/python (kfuse.torch.Fused vs PyTorch, CUDA graphs)
#   sanitizer  compute-sanitizer memcheck over a small GPU test filter (the full sanitizer run,
#              every GPU test under memcheck and racecheck/synccheck/initcheck over the cases
#              that instantiate every template, is bench/gpu_sanitize.sh BUILD: a second call,
#              as the two do not fit one 10-minute command together)
#   bench      kfuse bench for every founding case, train and eval, fp32, 3xtf32 and tf32
#   compile    kfuse compile with an empty KFUSE_CACHE_DIR (cold NVRTC), then again (warm)
#   host       the host cost of one run of a 1-, 2- and 3-kernel pipeline: bench/host_overhead.cpp
#              (C++, built beside kfuse) and bench/python_timing.py --host-only (Python, needs
#              the python phase's install); host_overhead.md
#   torch      bench/compare_torch.py: PyTorch eager and torch.compile vs kfuse, output check
# and writes $OUT/perf_tables.md (docs/PERF.md-ready tables, the command beside each) and
# $OUT/results.json (every number), plus suite.log, tests.log and sanitizer.log. Where $OUT is
# not set (not on the GPU machine) the files go to bench/results/<date>/ in the tree.
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
# KFUSE_CHECK_N (default 0: the PyTorch output check runs at each case's benchmark N).
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
  cmd="nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -Itemplates bench/gemm_sweep.cu -o gemm_sweep -lcuda -lcublas && ./gemm_sweep all"
  say "gemm: $cmd"
  run_logged "$OUT/gemm_sweep.log" 240 bash -c "nvcc -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a -I'$ROOT/templates' '$ROOT/bench/gemm_sweep.cu' -o '$WORK/gemm_sweep' -lcuda -lcublas && '$WORK/gemm_sweep' all"
  status gemm $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ the Python package
# pip builds kfuse._kfuse here (nanobind and scikit-build-core are installed; no network), then
# tests/python runs: kfuse.torch.Fused against PyTorch for every example, CUDA graph replay.
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
  status bench "$worst" $((SECONDS - start)) \
    "kfuse bench examples/CASE.kf --dim N=... --mode M --precision P --iters $ITERS --warmup $WARMUP --json FILE"
fi

# ------------------------------------------------------------------ compile time
if ! skipped compile; then
  start=$SECONDS
  worst=0
  : >"$WORK/compile.tsv"
  for entry in "${CASES[@]}"; do
    read -r name n <<<"$entry"
    for mode in train eval; do
      cache=$(mktemp -d /tmp/kfuse-cache.XXXXXX)
      for phase in cold warm; do
        t0=$(date +%s.%N)
        KFUSE_CACHE_DIR="$cache" timeout 120 "$KFUSE" compile "examples/$name.kf" --mode "$mode" \
          >"$WORK/compile.out" 2>&1
        rc=$?
        t1=$(date +%s.%N)
        cat "$WORK/compile.out" >>"$LOG"
        [[ $rc -ne 0 ]] && worst=$rc
        printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$name" "$mode" "$phase" "$rc" \
          "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')" \
          "$(head -1 "$WORK/compile.out")" >>"$WORK/compile.tsv"
      done
      rm -rf "$cache"
    done
  done
  say "compile: $(wc -l <"$WORK/compile.tsv") measurements"
  status compile "$worst" $((SECONDS - start)) \
    "KFUSE_CACHE_DIR=\$(mktemp -d) kfuse compile examples/CASE.kf --mode M   # twice: cold, warm"
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
  limit=$((left - 25))
  budget=$((limit - 90)) # what is left for torch.compile once eager, checks and reuse are paid
  ((limit < 60)) && limit=60
  ((budget < 30)) && budget=30
  cmd="python3 bench/compare_torch.py --kfuse $KFUSE --bench-dir BENCH_DIR --reuse-bench --check-n $CHECK_N --iters $ITERS --warmup $WARMUP --budget-s $budget --out torch.json"
  say "torch: $cmd (time limit ${limit}s)"
  run_logged "$LOG" "$limit" python3 bench/compare_torch.py --kfuse "$KFUSE" --bench-dir "$WORK/bench" \
    --reuse-bench --check-n "$CHECK_N" --iters "$ITERS" --warmup "$WARMUP" --budget-s "$budget" \
    --out "$WORK/torch.json"
  status torch $? $((SECONDS - start)) "$cmd"
fi

# ------------------------------------------------------------------ report
say "writing $OUT/results.json and $OUT/perf_tables.md"
cat >"$WORK/report.py" <<'PY'
"""Merges the suite's pieces into results.json and perf_tables.md; `summary` prints the
short table the suite ends with. Standard library only."""
import glob, json, os, sys

what, work, out = sys.argv[1], sys.argv[2], sys.argv[3]
CASES = [("gemm_bn_scale_softmax", 1024), ("gemm_scale_bn", 1024), ("gemm_scale_bn_4096", 16384)]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def ms(x):
    return f"{x:.3f}" if isinstance(x, (int, float)) else "-"


def num(x, spec):
    return format(x, spec) if isinstance(x, (int, float)) else "-"


def median(contender):
    return ((contender or {}).get("ms") or {}).get("median")


def merge():
    env = {}
    for line in open(os.path.join(work, "environment.txt")):
        key, _, value = line.partition(": ")
        env.setdefault(key.strip(), value.strip())
    phases = []
    path = os.path.join(work, "status", "phases.tsv")
    if os.path.exists(path):
        for line in open(path):
            name, rc, secs, cmd = line.rstrip("\n").split("\t", 3)
            phases.append({"phase": name, "rc": int(rc), "seconds": int(secs), "command": cmd})
    benches = [b for b in (load(p) for p in sorted(glob.glob(os.path.join(work, "bench", "*.json")))) if b]
    compile_rows = []
    path = os.path.join(work, "compile.tsv")
    if os.path.exists(path):
        for line in open(path):
            case, mode, phase, rc, wall, first = line.rstrip("\n").split("\t", 5)
            kfuse_ms = None
            if " ms (" in first:
                try:
                    kfuse_ms = float(first.rsplit(" ms (", 1)[0].rsplit(" ", 1)[1])
                except ValueError:
                    pass
            compile_rows.append({"case": case, "mode": mode, "phase": phase, "rc": int(rc),
                                 "wall_s": float(wall) if wall else None, "kfuse_ms": kfuse_ms,
                                 "output": first})
    torch_result = load(os.path.join(work, "torch.json"))
    results = {"schema": "kfuse-gpu-suite/1", "environment": env, "phases": phases,
               "bench": benches, "compile": compile_rows, "torch": torch_result}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "perf_tables.md"), "w") as f:
        f.write(tables(results))
        host = os.path.join(work, "host_overhead.md")
        if os.path.exists(host):
            f.write("\n" + open(host).read())


def bench_for(results, case, mode, precision):
    for b in results["bench"]:
        if b.get("pipeline") == case and b.get("mode") == mode and b.get("precision") == precision:
            return b
    return None


def tables(r):
    env = r["environment"]
    t = []
    t.append("<!-- generated by bench/gpu_suite.sh; paste into docs/PERF.md -->\n")
    t.append(f"- device: {env.get('gpu', 'unknown')} (name, driver, memory, max SM clock)")
    t.append(f"- date: {env.get('date', '?')}; commit: {env.get('commit', '?')}")
    t.append(f"- toolkit: {env.get('nvcc', '?')}; {env.get('python', '?')}")
    t.append("- suite: `bash bench/gpu_suite.sh [BUILD_DIR]`\n")

    t.append("### kfuse bench: fused vs unfused vs cuBLAS's GEMM alone\n")
    t.append("Command: `kfuse bench examples/CASE.kf --dim N=... --mode M --precision P "
             "--iters 100 --warmup 10 --json FILE` (median ms; CUDA events; L2 flushed before each run)\n")
    t.append("| case | N | mode | precision | fused ms | unfused ms | cuBLAS GEMM ms | fused TFLOP/s "
             "| fused % peak | fused / cuBLAS | fused / unfused | fused bytes / min |")
    t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    peaks = set()
    for precision in ("fp32", "3xtf32", "tf32"):
        for case, n in CASES:
            for mode in ("train", "eval"):
                b = bench_for(r, case, mode, precision)
                if not b:
                    t.append(f"| {case} | {n} | {mode} | {precision} | not run | | | | | | | |")
                    continue
                f = b.get("fused") or {}
                fused = ms(median(f)) if f.get("supported", True) else "not supported"
                if f.get("supported", True) and median(f) is None and f.get("error"):
                    fused = "failed"
                ratios = b.get("ratios") or {}
                moved, minimum = f.get("bytes_moved"), (b.get("bytes") or {}).get("minimum")
                bytes_ratio = f"{moved / minimum:.2f}x" if moved and minimum and f.get("supported", True) else "-"
                peaks.add(f"{precision}: {(b.get('peak') or {}).get('assumed')}")
                t.append(f"| {case} | {b['dims'].get('N')} | {mode} | {precision} | {fused} "
                         f"| {ms(median(b.get('unfused')))} | {ms(median(b.get('cublas_gemm')))} "
                         f"| {num(f.get('tflops'), '.1f')} | {num(f.get('percent_of_peak'), '.1f')} "
                         f"| {num(ratios.get('fused_over_cublas_gemm'), '.2f')} "
                         f"| {num(ratios.get('fused_over_unfused'), '.2f')} | {bytes_ratio} |")
    t.append("")
    for p in sorted(peaks):
        t.append(f"- peak assumed, {p}")
    notes = sorted({(b["fused"] or {}).get("reason") for b in r["bench"]
                    if not (b.get("fused") or {}).get("supported", True)} - {None})
    for n in notes:
        t.append(f"- fused not supported: {' '.join(n.split())}")
    t.append("")

    tr = r.get("torch")
    t.append("### kfuse vs PyTorch (eager, torch.compile)\n")
    if not tr:
        t.append("Not run (see suite.log).\n")
    else:
        t.append(f"Command: `{tr.get('command')}`; torch {tr.get('torch')}, forward under "
                 "torch.no_grad(), torch.compile mode=\"default\"; median ms; speedup = PyTorch ms / kfuse fused ms\n")
        t.append("| case | N | mode | precision | eager ms | torch.compile ms | kfuse fused ms | speedup vs eager | speedup vs compile | note |")
        t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in tr.get("rows", []):
            note = " ".join(str(x) for x in (row.get("kfuse_note"), row.get("compile_skipped"),
                                              row.get("compile_error"), row.get("eager_error")) if x)
            t.append(f"| {row['case']} | {row['n']} | {row['mode']} | {row['precision']} "
                     f"| {ms((row.get('eager_ms') or {}).get('median'))} "
                     f"| {ms((row.get('compile_ms') or {}).get('median'))} | {ms(row.get('kfuse_fused_ms'))} "
                     f"| {num(row.get('speedup_vs_eager'), '.2f')} | {num(row.get('speedup_vs_compile'), '.2f')} "
                     f"| {' '.join(note.split())[:200]} |")
        t.append("")
        t.append("### kfuse output vs PyTorch on the same data\n")
        t.append("Command: `kfuse run examples/CASE.kf --dim N=... --mode M --seed 1 --steps K --save DIR`, "
                 "then PyTorch on the saved tensors (bench/compare_torch.py); reference: PyTorch float64\n")
        t.append("| case | N | mode | precision | steps | tensor | kfuse rel err | kfuse max abs | torch fp32 rel err | bound | verdict |")
        t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for c in tr.get("checks", []):
            head = f"| {c['case']} | {c['n']} | {c['mode']} | {c['precision']} | {c['steps']} "
            if "tensors" not in c:
                why = c.get("reason") or c.get("error")
                t.append(head + f"| - | - | - | - | {c['bound']:.0e} | {'not supported' if not c.get('supported', True) else 'failed'}: {' '.join(str(why).split())[:120]} |")
                continue
            for name, e in c["tensors"].items():
                k, p = e["kfuse_vs_torch64"], e["torch32_vs_torch64"]
                t.append(head + f"| {name} | {num(k.get('rel'), '.2e')} | {num(k.get('max_abs'), '.2e')} "
                         f"| {num(p.get('rel'), '.2e')} | {c['bound']:.0e} | {'PASS' if c.get('pass') else 'FAIL'} |")
        t.append("")

    t.append("### Compile time (NVRTC cold vs disk cache warm)\n")
    t.append("Command: `KFUSE_CACHE_DIR=$(mktemp -d) kfuse compile examples/CASE.kf --mode M`, run twice "
             "(kfuse's own figure; wall = the whole process)\n")
    t.append("| case | mode | cold ms | warm ms | cold wall s | warm wall s |")
    t.append("| --- | --- | --- | --- | --- | --- |")
    by = {}
    for c in r["compile"]:
        by.setdefault((c["case"], c["mode"]), {})[c["phase"]] = c
    for (case, mode), d in by.items():
        cold, warm = d.get("cold", {}), d.get("warm", {})
        t.append(f"| {case} | {mode} | {num(cold.get('kfuse_ms'), '.1f')} | {num(warm.get('kfuse_ms'), '.1f')} "
                 f"| {num(cold.get('wall_s'), '.2f')} | {num(warm.get('wall_s'), '.2f')} |")
    t.append("")

    t.append("### Floors\n")
    bw = ((tr or {}).get("bandwidth") or {}).get("bytes_per_s")
    t.append("GEMM FLOPs at the assumed peak; minimum bytes (each input/param/state read once, each "
             "output/state written once) at the measured copy bandwidth"
             + (f" ({bw / 1e12:.2f} TB/s, {(tr or {}).get('bandwidth', {}).get('method')})" if bw else " (not measured)")
             + "; the floor is the larger.\n")
    t.append("| case | N | mode | GFLOP | fp32 GEMM at peak ms | tf32 GEMM at peak ms | minimum MiB | bytes at bandwidth ms |")
    t.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, n in CASES:
        for mode in ("train", "eval"):
            b32, b_tf = bench_for(r, case, mode, "fp32"), bench_for(r, case, mode, "tf32")
            if not b32 and not b_tf:
                continue
            b = b32 or b_tf
            minimum = (b.get("bytes") or {}).get("minimum")
            t.append(f"| {case} | {b['dims'].get('N')} | {mode} | {num((b.get('gemm') or {}).get('flop', 0) / 1e9, '.1f')} "
                     f"| {ms(((b32 or {}).get('peak') or {}).get('gemm_at_peak_ms'))} "
                     f"| {ms(((b_tf or {}).get('peak') or {}).get('gemm_at_peak_ms'))} "
                     f"| {num(minimum / 2**20 if minimum else None, '.1f')} "
                     f"| {ms(minimum / bw * 1e3 if minimum and bw else None)} |")
    t.append("")

    t.append("### Suite phases\n")
    t.append("| phase | exit status | seconds | command |")
    t.append("| --- | --- | --- | --- |")
    for p in r["phases"]:
        t.append(f"| {p['phase']} | {p['rc']} | {p['seconds']} | `{p['command']}` |")
    return "\n".join(t) + "\n"


def summary():
    r = load(os.path.join(out, "results.json")) or {"phases": [], "bench": [], "torch": None}
    torch_rows = {(x["case"], x["mode"], x["precision"]): x for x in ((r.get("torch") or {}).get("rows") or [])}
    print("\n=== kfuse GPU suite summary ===")
    print("phases: " + ", ".join(f"{p['phase']} {'ok' if p['rc'] == 0 else 'rc=' + str(p['rc'])} ({p['seconds']}s)"
                                 for p in r["phases"]))
    print(f"{'case':<24} {'mode':<5} {'prec':<4} {'fused':>8} {'unfused':>8} {'cuBLAS':>8} "
          f"{'f/cuBLAS':>8} {'eager':>8} {'compile':>8}  (median ms)")
    for precision in ("fp32", "3xtf32", "tf32"):
        for case, _ in CASES:
            for mode in ("train", "eval"):
                b = bench_for(r, case, mode, precision) or {}
                f = b.get("fused") or {}
                fused = ms(median(f)) if f.get("supported", True) else "n/s"
                tr = torch_rows.get((case, mode, precision)) or {}
                print(f"{case:<24} {mode:<5} {precision:<4} {fused:>8} {ms(median(b.get('unfused'))):>8} "
                      f"{ms(median(b.get('cublas_gemm'))):>8} "
                      f"{num((b.get('ratios') or {}).get('fused_over_cublas_gemm'), '.2f'):>8} "
                      f"{ms((tr.get('eager_ms') or {}).get('median')):>8} "
                      f"{ms((tr.get('compile_ms') or {}).get('median')):>8}")
    checks = (r.get("torch") or {}).get("checks") or []
    if checks:
        verdicts = [f"{c['case']}/{c['mode']}/{c['precision']}: "
                    + ("n/s" if not c.get("supported", True) else "PASS" if c.get("pass") else "FAIL")
                    for c in checks]
        print("output vs PyTorch f64: " + ", ".join(verdicts))


merge() if what == "merge" else summary()
PY
python3 "$WORK/report.py" merge "$WORK" "$OUT" 2>&1 | tee -a "$LOG"
if [[ $ON_DEVICE -eq 0 ]]; then
  dest="$ROOT/bench/results/$(date -u +%Y%m%d-%H%M%S)"
  mkdir -p "$dest" && cp "$OUT"/*.json "$OUT"/*.md "$dest"/ 2>/dev/null
  say "copied results.json and perf_tables.md to $dest"
fi
say "done in ${SECONDS}s"
python3 "$WORK/report.py" summary "$WORK" "$OUT" 2>&1 | tee -a "$LOG"
[[ -f "$OUT/gemm_sweep.log" ]] && grep -E '^(sweep|epilogue)|PASS$|FAIL$' "$OUT/gemm_sweep.log" |
  grep -vE ' PASS$' | tee -a "$LOG"
# The exit status says whether every phase that ran succeeded (an unsupported precision is
# not a failure: kfuse bench exits 0 for it).
awk -F'\t' '$2 != 0 { bad = 1 } END { exit bad }' "$WORK/status/phases.tsv"
