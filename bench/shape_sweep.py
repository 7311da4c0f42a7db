#!/usr/bin/env python3
"""Issue 9's shape sweep: the founding chain gemm_bn_scale_softmax (linear -> batchnorm -> * s ->
softmax(dim=1)) at batch M x layer width N=K, tf32 and bf16: kfuse's fused pipeline vs cuBLAS's
GEMM alone vs PyTorch torch.compile and eager, with the GEMM config kfuse chose at each point.

    python3 bench/shape_sweep.py --kfuse build/kfuse [--out F.json] [--markdown F.md]
        [--budget-s 360] [--quick | --full] [--m 1,16,...] [--nk 512,2048,8192]
        [--precisions tf32,bf16] [--mode eval|train] [--compile-shapes dynamic|static]

Each (precision, N=K) gets a .kf made from the example's text with its width replaced
(bench/sweep_grid.py), written to a temp dir and checked with `kfuse check` first. kfuse's
numbers come from one `kfuse bench --json` per point (fused, unfused and cuBLAS's GEMM alone in
one process; the fused GEMM's tile and split-K S in its JSON), all sharing one KFUSE_CACHE_DIR
(a fresh one unless --cache-dir: each .kf compiles once, and no tuned config applies). PyTorch
runs bench/compare_torch.py's module, Timer and precision setting: TF32 on for the tf32 rows,
the bf16 rows as compare_torch.py runs its bf16 cases (module in bf16, BatchNorm1d in f32).
torch.compile (mode "default") marks the batch dim dynamic, so one compile serves every M of
a width (M = 1 is specialised by Dynamo: a second compile); --compile-shapes static compiles
once per M instead. Each row records the seconds its first compiled call took.

--budget-s bounds the run: kfuse and eager for every point first (the timed runs per
measurement halved, down to 10, while the points fall behind the budget's pace), then
torch.compile width by width while the budget leaves room for one more (a row it leaves out
says so). --out writes "kfuse-shape-sweep/1" (docs/FORMATS.md), --markdown one table per
precision and the line: points where kfuse is slower than torch.compile. Exits 1 when a kfuse
command failed at any point (the row says how), after writing both.
"""

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    import torch
except ImportError as e:  # the GPU machine has it; say so plainly elsewhere
    sys.exit(f"shape_sweep.py needs PyTorch: {e}")

import compare_torch  # bench/, beside this file: the module, the timer, the precision setting
import sweep_grid
import sweep_report

MODES = ("eval", "train")
MIN_ITERS = 10
# What a width's torch.compile is assumed to take before one has been measured (a dynamic
# compile, M = 1's specialised one and the timed runs).
FIRST_COMPILE_GUESS_S = 30.0
KFUSE_TIMEOUT_S = 180
PRECISION_NOTES = {
    "tf32": "f32 tensors; kfuse --precision tf32, PyTorch allow_tf32",
    "bf16": "bf16 activations and weights, batchnorm f32; kfuse --precision fp32 on bf16 operands, "
            "PyTorch's module in bf16 with BatchNorm1d f32",
}


def run_kfuse(cmd, env):
    """A kfuse command: (exit status, stdout, stderr); a time-out is status None."""
    cmd = [str(c) for c in cmd]
    print("[kfuse] " + " ".join(cmd), flush=True)
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=KFUSE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return None, "", f"timed out after {KFUSE_TIMEOUT_S} s"
    return p.returncode, p.stdout, p.stderr


def check_kf_files(args, env, paths):
    """`kfuse check` on every generated .kf: a bad one stops the sweep before the GPU work."""
    for (precision, nk), path in paths.items():
        rc, _, err = run_kfuse([args.kfuse, "check", path], env)
        if rc != 0:
            sys.exit(f"shape_sweep.py: the generated {path} ({precision}, N=K={nk}) is not valid "
                     f"(kfuse check exit {rc}): {err.strip()[-800:]}")


def bench_errors(bench):
    """What kfuse bench's JSON says went wrong: a contender that failed or is not supported."""
    said = []
    for key in ("fused", "unfused", "cublas_gemm"):
        c = bench.get(key) or {}
        if not c.get("supported", True):
            said.append(f"{key} not supported: {c.get('reason')}")
        elif c.get("error"):
            said.append(f"{key} failed: {c['error']}")
        elif sweep_report.median(c.get("ms") or {}) is None:
            said.append(f"{key} not timed")
    return said


def kfuse_point(args, env, row, path, work):
    """kfuse bench at one point: fused, unfused and cuBLAS's GEMM alone, and the fused config.
    Anything kfuse reports wrong goes to row["kfuse_error"]."""
    out = Path(work) / f"{path.stem}.{row['m']}.json"
    cmd = [args.kfuse, "bench", path, "--dim", f"N={row['m']}", "--mode", args.mode, "--precision",
           sweep_grid.KFUSE_PRECISION[row["precision"]], "--iters", row["iters"], "--warmup",
           row["warmup"], "--json", out]
    row["kfuse_command"] = " ".join(str(c) for c in cmd)
    rc, stdout, stderr = run_kfuse(cmd, env)
    sys.stdout.write(stdout + stderr)
    if not out.exists():
        row["kfuse_error"] = f"kfuse bench exit {rc} without JSON: {stderr.strip()[-800:]}"
        return
    bench = json.loads(out.read_text())
    row["kfuse_bench"] = bench
    row["kfuse_fused_ms"] = sweep_report.median((bench.get("fused") or {}).get("ms") or {})
    row["kfuse_unfused_ms"] = sweep_report.median((bench.get("unfused") or {}).get("ms") or {})
    row["cublas_gemm_ms"] = sweep_report.median((bench.get("cublas_gemm") or {}).get("ms") or {})
    row["config"] = sweep_report.config_text(bench)
    said = bench_errors(bench)
    if rc != 0 or said:
        row["kfuse_error"] = f"kfuse bench exit {rc}: " + ("; ".join(said) or stderr.strip()[-800:])


def make_group(precision, nk, m_max):
    """compare_torch.py's module at width `nk` in the precision's types (default init: the
    values do not change the time) and one input of the grid's largest M, sliced per point."""
    torch.manual_seed(0)
    activation = "bf16" if precision == "bf16" else "f32"
    module = compare_torch.cast_module(compare_torch.make_module("bn_scale_softmax", nk).cuda(), activation)
    x = torch.randn(m_max, nk, device="cuda", dtype=compare_torch.torch_dtype(activation))
    return {"module": module, "x": x, "compiled": None}


def use_pace(timer, row):
    timer.iters, timer.warmup = row["iters"], row["warmup"]


def time_eager(args, timer, group, row):
    compare_torch.set_precision(row["precision"])
    group["module"].train(args.mode == "train")
    x = group["x"][: row["m"]]
    use_pace(timer, row)
    with torch.no_grad():
        try:
            row["eager_ms"] = timer.time(lambda: group["module"](x))
        except Exception as e:  # reported in the row, the others still run
            row["eager_error"] = repr(e)


def time_compiled(args, timer, group, row):
    """torch.compile at one point: the first call (which compiles where no graph fits this M)
    timed apart, then the timed runs."""
    if group["compiled"] is None:
        # Every width compiles the same forward(): with Dynamo's caches emptied of the widths
        # done, no recompile limit can turn a later width silently eager.
        torch._dynamo.reset()
        group["compiled"] = torch.compile(group["module"], mode="default",
                                          dynamic=False if args.compile_shapes == "static" else None)
    compare_torch.set_precision(row["precision"])
    group["module"].train(args.mode == "train")
    x = group["x"][: row["m"]]
    if args.compile_shapes == "dynamic" and row["m"] > 1:  # Dynamo specialises sizes 0 and 1
        torch._dynamo.mark_dynamic(x, 0)
    use_pace(timer, row)
    with torch.no_grad():
        try:
            t0 = time.monotonic()
            group["compiled"](x)
            torch.cuda.synchronize()
            row["compile_first_call_s"] = time.monotonic() - t0
            row["compile_ms"] = timer.time(lambda: group["compiled"](x))
        except Exception as e:  # reported in the row, the others still run
            row["compile_error"] = repr(e)


def slow_down(pace, spent_s, allowed_s):
    """Halves the timed runs (down to MIN_ITERS) while the points run behind their pace."""
    if spent_s > allowed_s and pace["iters"] > MIN_ITERS:
        pace["iters"] = max(MIN_ITERS, pace["iters"] // 2)
        pace["warmup"] = max(1, min(pace["warmup"], pace["iters"] // 2))


def compile_skip_reason(args, left, estimate, measured):
    """Why a width's torch.compile is not run, or None."""
    if not args.compile:
        return "--no-compile"
    if left < estimate:
        return (f"{max(left, 0):.0f} s of the {args.budget_s:g} s budget left, and a width's compiles "
                f"{'took' if measured else 'are assumed to take'} up to {estimate:.0f} s")
    return None


def sweep(args, env, paths, work):
    start = time.monotonic()
    budget = args.budget_s if args.budget_s > 0 else math.inf

    def left():
        return budget - (time.monotonic() - start)

    groups = [(p, nk) for nk in args.nk for p in args.precisions]
    rows = [{"precision": p, "m": m, "nk": nk} for p, nk in groups for m in args.m]
    pace = {"iters": args.iters, "warmup": args.warmup}
    bound = f"a budget of {args.budget_s:g} s" if args.budget_s > 0 else "no time budget"
    print(f"[sweep] {len(rows)} points ({len(groups)} widths x precisions), {args.mode} mode, {bound}: "
          "kfuse bench for each, then eager, then torch.compile per width", flush=True)
    # kfuse's points in 35% of the budget, eager's (as many timed runs) in less; torch.compile
    # gets the rest.
    share = 0.35 * budget / max(1, len(rows))
    for done, row in enumerate(rows, 1):
        row.update(pace)
        kfuse_point(args, env, row, paths[(row["precision"], row["nk"])], work)
        if row.get("kfuse_error"):
            print(f"[kfuse] FAILED {row['precision']} M={row['m']} N=K={row['nk']}: {row['kfuse_error']}",
                  flush=True)
        slow_down(pace, time.monotonic() - start, done * share)

    compare_torch.raise_dynamo_limits()
    state = {g: make_group(*g, max(args.m)) for g in groups}
    timer = compare_torch.Timer(args.warmup, args.iters)
    for row in rows:
        print(f"[eager] {row['precision']} M={row['m']} N=K={row['nk']}", flush=True)
        time_eager(args, timer, state[(row["precision"], row["nk"])], row)

    estimate, measured = FIRST_COMPILE_GUESS_S, False
    for group in groups:
        reason = compile_skip_reason(args, left(), estimate, measured)
        t0 = time.monotonic()
        # The largest M first: its call makes the dynamic graph the others reuse; M = 1 last.
        for row in sorted((r for r in rows if (r["precision"], r["nk"]) == group), key=lambda r: -r["m"]):
            if reason is None and left() <= 0:
                reason = f"the budget's {args.budget_s:g} s spent during this width"
            if reason:
                row["compile_skipped"] = reason
                continue
            print(f"[compile] {row['precision']} M={row['m']} N=K={row['nk']}", flush=True)
            time_compiled(args, timer, state[group], row)
        if reason is None:
            took = time.monotonic() - t0
            estimate, measured = (max(estimate, took) if measured else took), True
        state[group].clear()
        torch.cuda.empty_cache()
    compare_torch.set_precision("fp32")
    return rows, timer


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kfuse", required=True, help="the kfuse binary")
    ap.add_argument("--out", help="write every number as JSON here")
    ap.add_argument("--markdown", help="write the tables here")
    ap.add_argument("--m", help="batch sizes, comma-separated (default: "
                    f"{','.join(map(str, sweep_grid.DEFAULT_M))}; --full: issue 9's)")
    ap.add_argument("--nk", help="layer widths N=K, comma-separated, multiples of "
                    f"{sweep_grid.NK_MULTIPLE} (default: {','.join(map(str, sweep_grid.DEFAULT_NK))})")
    ap.add_argument("--full", action="store_true", help="issue 9's grid: M "
                    f"{','.join(map(str, sweep_grid.FULL_M))} x N=K {','.join(map(str, sweep_grid.FULL_NK))}")
    ap.add_argument("--precisions", default=",".join(sweep_grid.PRECISIONS))
    ap.add_argument("--mode", default="eval", choices=MODES,
                    help="train: the grids start at M = 2 (batchnorm's batch statistics need two rows)")
    ap.add_argument("--iters", type=int, default=100, help="timed runs per measurement (median)")
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=360, help="seconds the whole run should take (0: no bound)")
    ap.add_argument("--quick", action="store_true", help="smoke run: M 1,128 x N=K 512, 10 timed runs, 2 warm-up")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile")
    ap.add_argument("--compile-shapes", default="dynamic", choices=("dynamic", "static"),
                    help="torch.compile's batch dim: marked dynamic (one compile per width) or "
                         "static (one per point)")
    ap.add_argument("--cache-dir", help="KFUSE_CACHE_DIR for every kfuse command (default: a fresh one)")
    args = ap.parse_args()
    try:
        args.m, args.nk = sweep_grid.choose(args.m, args.nk, args.full, args.quick, args.mode)
    except ValueError as e:
        ap.error(str(e))
    args.precisions = [p for p in args.precisions.split(",") if p]
    unknown = [p for p in args.precisions if p not in sweep_grid.PRECISIONS]
    if unknown or not args.precisions:
        ap.error(f"--precisions: {', '.join(unknown) or 'none given'}; known: {', '.join(sweep_grid.PRECISIONS)}")
    if args.quick:
        args.iters, args.warmup = min(args.iters, 10), min(args.warmup, 2)
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be at least 1 and --warmup at least 0")
    return args


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("shape_sweep.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    if not os.access(args.kfuse, os.X_OK):
        sys.exit(f"--kfuse {args.kfuse}: not an executable")
    start = time.monotonic()
    work = tempfile.mkdtemp(prefix="kfuse-sweep-")  # the .kf files, kfuse bench's JSON, the cache
    env = compare_torch.kfuse_env()
    env["KFUSE_CACHE_DIR"] = args.cache_dir or str(Path(work) / "cache")
    paths = sweep_grid.write_kf_files(work, args.precisions, args.nk)
    check_kf_files(args, env, paths)
    rows, timer = sweep(args, env, paths, work)
    result = {
        **compare_torch.result_header("kfuse-shape-sweep/1"),
        "command_line": (f"python3 bench/shape_sweep.py --kfuse build/kfuse --mode {args.mode} "
                         f"--m {','.join(map(str, args.m))} --nk {','.join(map(str, args.nk))} "
                         f"--precisions {','.join(args.precisions)} --compile-shapes {args.compile_shapes}"),
        "chain": sweep_grid.CHAIN, "mode": args.mode,
        "grid": {"m": args.m, "nk": args.nk, "precisions": args.precisions},
        "precision_notes": {p: PRECISION_NOTES[p] for p in args.precisions},
        "timing": {"method": "cuda-events", "statistic": "median", "iters": args.iters,
                   "warmup": args.warmup, "l2_flush_bytes": timer.flush_bytes, "no_grad": True,
                   "torch_compile_mode": "default", "torch_compile_shapes": args.compile_shapes},
        "budget_s": args.budget_s,
        "kfuse_cache_dir": args.cache_dir,  # null: a fresh one, removed after the run
        "rows": rows,
        "summary": sweep_report.summary(rows),
        "seconds": time.monotonic() - start,
    }
    shutil.rmtree(work, ignore_errors=True)  # kfuse bench's JSON is embedded in the rows
    compare_torch.write_outputs(result, sweep_report.markdown(result), args.out, args.markdown)
    failed = [r for r in rows if r.get("kfuse_error")]
    for r in failed:
        print(f"FAILED: {r['precision']} M={r['m']} N=K={r['nk']}: {r['kfuse_error']}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
