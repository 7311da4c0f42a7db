#!/usr/bin/env python3
"""kfuse from Python against PyTorch, on one GPU: eager, torch.compile and kfuse.torch.Fused on
the same module and data (GPU time per call), and the host cost of one call (kfuse.Pipeline
and Fused, back to back without synchronising) for the 1-, 2- and 3-kernel pipelines that
bench/host_overhead.cpp times from C++. Prints markdown tables.

    pip install --no-build-isolation . && python3 bench/python_timing.py [--n 1024] [--quick] [--host-only]

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

# The host-bound cases, as bench/host_overhead.cpp runs them: 64 -> 64 features, N = 8;
# (example, module, mode): 1, 2 and 3 kernels.
HOST_CASES = (("gemm_scale_bn", "scale_bn", "eval"), ("gemm_bn_scale_softmax", "bn_scale_softmax", "eval"),
              ("gemm_bn_scale_softmax", "bn_scale_softmax", "train"))
HOST_ROWS = 8


def host_us_per_call(fn, calls=200):
    """Median over 5 rounds of `calls` back-to-back calls: (host wall µs per call, GPU µs per
    call from CUDA events around the same loop)."""
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    host, gpu = [], []
    for _ in range(5):
        torch.cuda.synchronize()
        start.record()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - t0) / calls * 1e6)
        stop.record()
        torch.cuda.synchronize()
        gpu.append(start.elapsed_time(stop) * 1e3 / calls)
    return statistics.median(host), statistics.median(gpu)


def gpu_rows(args, timer):
    rows = []
    for case, (kf, features, n_bench, chain, activation) in compare_torch.CASES.items():
        if activation != "f32":  # the bf16 cases: compare_torch.py times them
            continue
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
    rows = []
    for case, chain, mode in HOST_CASES:
        kf = Path(tmp) / f"{case}_64.kf"
        kf.write_text((REPO / "examples" / f"{case}.kf").read_text().replace("8192", "64"))
        module = compare_torch.make_module(chain, 64).cuda().train(mode == "train")
        fused = kfuse.torch.Fused(module, kf, mapping=compare_torch.PARAM_MAP)
        x = torch.randn(HOST_ROWS, 64, device="cuda")
        out = torch.empty(HOST_ROWS, 64, device="cuda")
        # The Fused op inside a torch.compile(fullgraph=True) graph: its host cost against the
        # eager call's.
        compiled = torch.compile(fused, fullgraph=True)
        with torch.no_grad():
            for _ in range(20):  # compile, first-run checks, workspace: not timed
                fused(x)
                compiled(x)
            p = fused.pipeline(x)
            p(x, out=out)
            rows.append({"case": case, "mode": mode, "kernels": sum(not k["variant"] for k in p.report["kernels"]),
                         "pipeline_out": host_us_per_call(lambda: p(x, out=out)),
                         "pipeline_alloc": host_us_per_call(lambda: p(x)),
                         "fused": host_us_per_call(lambda: fused(x)),
                         "fused_compiled": host_us_per_call(lambda: compiled(x)),
                         "eager": host_us_per_call(lambda: module(x))})
        print(rows[-1], file=sys.stderr, flush=True)
    return rows


def print_host(host):
    us = lambda t: f"{t[0]:.1f} / {t[1]:.1f}"  # noqa: E731
    print(f"\n### Host cost of one call from Python (64 -> 64 features, N = {HOST_ROWS})\n")
    print("Command: `python3 bench/python_timing.py --host-only`; median of 5 rounds of 200 back-to-back "
          "calls (no synchronisation between calls); host µs per call (wall time of the loop) / GPU µs "
          "per call (CUDA events around it)\n")
    print("| case | mode | kernels | Pipeline p(x, out=y) | Pipeline p(x) | Fused | Fused in torch.compile "
          "(fullgraph) | PyTorch eager |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in host:
        print(f"| {r['case']} | {r['mode']} | {r['kernels']} | {us(r['pipeline_out'])} | {us(r['pipeline_alloc'])} "
              f"| {us(r['fused'])} | {us(r['fused_compiled'])} | {us(r['eager'])} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=0, help="rows (default: each case's benchmark N)")
    ap.add_argument("--quick", action="store_true", help="skip torch.compile")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--host-only", action="store_true", help="only the host cost of one call")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        host = host_rows(tmp)
    if args.host_only:
        print_host(host)
        return
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
    print_host(host)


if __name__ == "__main__":
    main()
