#!/usr/bin/env python3
"""The founding chains timed against PyTorch in one process, contender after contender within
each round (as `kfuse bench` interleaves its own): kfuse's pipeline through the Python package,
PyTorch eager, torch.compile, and PyTorch's GEMM alone (F.linear without bias, the chain's GEMM
as PyTorch runs it). At a board's power limit the clocks move within a second, so contenders
timed block after block, or in separate processes (bench/compare_torch.py against `kfuse
bench`), are not timed at the same clocks; here every round sees the same.

    python3 bench/torch_interleaved.py [--cases gemm_scale_bn,...] [--precisions tf32,bf16]
        [--modes eval,train] [--iters 100] [--warmup 10]

Each run: the L2 flush buffer (compare_torch.Timer's) zeroed, then CUDA events around the call
(kfuse: Pipeline with its tensors bound and its output given; PyTorch: the module's forward under
torch.no_grad()). Prints the medians (ms) and kfuse's speedups; train mode updates each
contender's own running statistics. Needs PyTorch, the kfuse package and a GPU.
"""

import argparse
import statistics
from pathlib import Path

import torch
import torch.nn.functional as F

import compare_torch  # bench/, beside this file: the cases, modules, precisions and L2 flush
import kfuse

REPO = Path(__file__).resolve().parent.parent


def contenders(case, precision, mode):
    path, features, n, chain, dtype = compare_torch.CASES[case]
    compare_torch.set_precision(precision)
    torch.manual_seed(1)
    ref = compare_torch.cast_module(compare_torch.make_module(chain, features), dtype).cuda()
    ref.train(mode == "train")
    x = torch.randn(n, features, device="cuda", dtype=compare_torch.torch_dtype(dtype))
    compiled_module = compare_torch.cast_module(compare_torch.make_module(chain, features), dtype)
    compiled_module.load_state_dict(ref.state_dict())
    compiled_module = compiled_module.cuda().train(mode == "train")
    compiled = torch.compile(compiled_module)
    state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    p = kfuse.Pipeline(REPO / path, mode=mode, precision=compare_torch.kfuse_precision(precision))
    p.bind(**{name: state[key] for name, key in compare_torch.PARAM_MAP.items() if key in state})
    out = torch.empty(n, features, device="cuda", dtype=x.dtype)
    weight = ref.linear.weight.detach()
    return {
        "kfuse": lambda: p(x, out=out),
        "eager": lambda: ref(x),
        "torch.compile": lambda: compiled(x),
        "PyTorch GEMM alone": lambda: F.linear(x, weight),
    }


def interleaved(fns, flush, warmup, iters):
    for _ in range(warmup):
        for f in fns.values():
            flush.zero_()
            f()
    events = {k: [] for k in fns}
    for _ in range(iters):
        for k, f in fns.items():
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            flush.zero_()
            s.record()
            f()
            e.record()
            events[k].append((s, e))
    torch.cuda.synchronize()
    return {k: statistics.median(s.elapsed_time(e) for s, e in v) for k, v in events.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gemm_bn_scale_softmax,gemm_scale_bn,gemm_scale_bn_4096")
    ap.add_argument("--precisions", default="tf32")
    ap.add_argument("--modes", default="eval,train")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=10)
    args = ap.parse_args()
    for name, given, known in (("--cases", args.cases, compare_torch.CASES),
                               ("--precisions", args.precisions, compare_torch.PRECISIONS),
                               ("--modes", args.modes, compare_torch.MODES)):
        for word in given.split(","):
            if word not in known:
                ap.error(f"{name}: '{word}' is not one of {', '.join(known)}")
    if args.iters < 1 or args.warmup < 0:
        ap.error("--iters must be at least 1 and --warmup at least 0")
    flush = compare_torch.Timer(args.warmup, args.iters).flush
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}; median ms, contenders "
          f"interleaved run by run, L2 flushed before each")
    print("| case | precision | mode | kfuse | eager | torch.compile | PyTorch GEMM alone | "
          "eager / kfuse | compile / kfuse | kfuse / GEMM alone |")
    print("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for case in args.cases.split(","):
        for precision in compare_torch.case_precisions(case, args.precisions.split(",")):
            for mode in args.modes.split(","):
                with torch.no_grad():
                    t = interleaved(contenders(case, precision, mode), flush, args.warmup,
                                    args.iters)
                k = t["kfuse"]
                print(f"| {case} | {precision} | {mode} | {k:.3f} | {t['eager']:.3f} | "
                      f"{t['torch.compile']:.3f} | {t['PyTorch GEMM alone']:.3f} | "
                      f"{t['eager'] / k:.2f} | {t['torch.compile'] / k:.2f} | "
                      f"{k / t['PyTorch GEMM alone']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
