#!/usr/bin/env python3
"""kfuse from Python against PyTorch, on one GPU: eager, torch.compile and kfuse.torch.Fused on
the same module and data (GPU time per call), and the host cost of one call (kfuse.Pipeline
and Fused, back to back without synchronising). Prints docs/PERF.md-ready markdown.

    pip install --no-build-isolation . && python3 bench/python_timing.py [--n 1024] [--quick]

fp32 (PyTorch without TF32, kfuse's exact fp32 GEMM) and 3xtf32 for kfuse; forward passes
under torch.no_grad(); the timing method is bench/compare_torch.py's (CUDA events, warm-up, L2
flushed before each run, median).
"""

import argparse
import copy
import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

import kfuse
import kfuse.torch

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("compare_torch", REPO / "bench" / "compare_torch.py")
compare_torch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_torch)

# The host-bound case: gemm_bn_scale_softmax at 64 -> 64 features, N = 8.
SMALL_KF = (REPO / "examples" / "gemm_bn_scale_softmax.kf").read_text().replace("8192", "64")


def host_us_per_call(fn, calls=200):
    """Median over 5 rounds of `calls` back-to-back calls, host wall time per call (µs)."""
    rounds = []
    for _ in range(5):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        rounds.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return statistics.median(rounds)


def gpu_rows(args, timer):
    rows = []
    for case, (kf, features, n_bench, chain) in compare_torch.CASES.items():
        n = args.n or n_bench
        for mode in ("train", "eval"):
            torch.backends.cuda.matmul.allow_tf32 = False
            torch.manual_seed(0)
            module = compare_torch.make_module(chain, features).cuda().train(mode == "train")
            x = torch.randn(n, features, device="cuda")
            row = {"case": case, "n": n, "mode": mode}
            with torch.no_grad():
                row["eager"] = timer.time(lambda: module(x))["median"]
                if not args.quick:
                    compiled = torch.compile(copy.deepcopy(module), mode="default")
                    row["compile"] = timer.time(lambda: compiled(x))["median"]
                for precision in ("fp32", "3xtf32"):
                    fused = kfuse.torch.Fused(copy.deepcopy(module), REPO / kf, precision=precision,
                                              mapping=compare_torch.PARAM_MAP)
                    row[precision] = timer.time(lambda: fused(x))["median"]
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    return rows


def host_rows(tmp):
    kf = Path(tmp) / "gemm_bn_scale_softmax_64.kf"
    kf.write_text(SMALL_KF)
    rows = []
    for mode in ("train", "eval"):
        module = compare_torch.make_module("bn_scale_softmax", 64).cuda().train(mode == "train")
        fused = kfuse.torch.Fused(module, kf, mapping=compare_torch.PARAM_MAP)
        x = torch.randn(8, 64, device="cuda")
        out = torch.empty(8, 64, device="cuda")
        with torch.no_grad():
            fused(x)
            p = fused.pipeline(x)
            rows.append({"mode": mode, "kernels": len(p.report["kernels"]),
                         "pipeline_out": host_us_per_call(lambda: p(x, out=out)),
                         "pipeline_alloc": host_us_per_call(lambda: p(x)),
                         "fused": host_us_per_call(lambda: fused(x)),
                         "eager": host_us_per_call(lambda: module(x))})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=0, help="rows (default: each case's benchmark N)")
    ap.add_argument("--quick", action="store_true", help="skip torch.compile")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host = host_rows(tmp)
    timer = compare_torch.Timer(args.warmup, args.iters)
    rows = gpu_rows(args, timer)

    ms = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
    print("### From Python: eager, torch.compile, kfuse.torch.Fused\n")
    print(f"Command: `python3 bench/python_timing.py{' --quick' if args.quick else ''}`; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}; median ms per forward "
          "(CUDA events, L2 flushed), PyTorch fp32 without TF32\n")
    print("| case | N | mode | eager ms | torch.compile ms | Fused fp32 ms | Fused 3xtf32 ms |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['case']} | {r['n']} | {r['mode']} | {ms(r['eager'])} | {ms(r.get('compile'))} "
              f"| {ms(r['fp32'])} | {ms(r['3xtf32'])} |")
    print("\n### Host cost of one call from Python (gemm_bn_scale_softmax, 64 -> 64, N = 8)\n")
    print("Median µs per call over 200 back-to-back calls (no synchronisation between calls)\n")
    print("| mode | kernels | Pipeline p(x, out=y) µs | Pipeline p(x) µs | Fused µs | PyTorch eager µs |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in host:
        print(f"| {r['mode']} | {r['kernels']} | {r['pipeline_out']:.1f} | {r['pipeline_alloc']:.1f} "
              f"| {r['fused']:.1f} | {r['eager']:.1f} |")


if __name__ == "__main__":
    main()
