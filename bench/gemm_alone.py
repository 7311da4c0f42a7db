#!/usr/bin/env python3
"""Issue 8's GEMM-alone sweep as users get it: `linear(x, weight)` with nothing after it (the
kernel's plain store), compiled and launched by kfuse's runtime, so each point runs the tile,
variant and split-K S that kfuse picks for its shape, against cuBLAS's GEMM on the same operands
(`kfuse bench`: CUDA events, L2 flushed, median, the two interleaved run by run).

    python3 bench/gemm_alone.py --kfuse build/kfuse [--markdown F.md] [--json F.json]
        [--m 1024,4096,16384] [--nk 1024,4096,8192] [--precisions tf32,bf16] [--iters 50]

tf32: f32 tensors with --precision tf32 (cuBLAS with CUBLAS_COMPUTE_32F_FAST_TF32); bf16: bf16
tensors (a bf16 result, as PyTorch's), cuBLAS on the same bf16 operands. bench/gemm_sweep.cu
times the mainloop alone with one fixed tile; this sweep times what a pipeline runs. Exits 1
when any point failed (the row says how).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TIMEOUT_S = 240


def sizes(text, multiple=1):
    """A comma list of positive integers, each a multiple of `multiple` (argparse type)."""
    out = []
    for word in text.split(","):
        if not word.strip().isdigit() or int(word) <= 0:
            raise argparse.ArgumentTypeError(f"'{word.strip()}' is not a positive integer")
        if int(word) % multiple:
            raise argparse.ArgumentTypeError(f"{int(word)} is not a multiple of {multiple} (the "
                                             "Hopper mainloop's TMA rows: 16 bytes)")
        out.append(int(word))
    return out


def source(precision, nk):
    dtype = "f32" if precision == "tf32" else precision
    return (f"# linear alone: the GEMM with a plain store, {nk} -> {nk} features.\n"
            f"pipeline gemm_alone_{nk} {{\n"
            f"  dim N\n"
            f"  input  x: {dtype}[N, {nk}]\n"
            f"  param  weight: {dtype}[{nk}, {nk}]\n"
            f"  return linear(x, weight)\n"
            f"}}\n")


def point(kfuse, path, precision, m, iters, env):
    out = path.with_suffix(f".{m}.json")
    cmd = [kfuse, "bench", str(path), "--dim", f"N={m}", "--mode", "eval", "--iters", str(iters),
           "--json", str(out)]
    if precision == "tf32":
        cmd += ["--precision", "tf32"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, env=env)
    if r.returncode != 0:
        lines = (r.stderr or r.stdout).strip().splitlines()
        return {"error": f"exit {r.returncode}: {lines[-1] if lines else 'no output'}"}
    j = json.loads(out.read_text())
    fused, blas = j["fused"], j["cublas_gemm"]
    launch = fused["gemm_launches"][0]
    return {"kfuse_ms": fused["ms"]["median"], "cublas_ms": blas["ms"]["median"],
            "kfuse_tflops": fused["tflops"], "cublas_tflops": blas["tflops"],
            "ratio": blas["ms"]["median"] / fused["ms"]["median"],
            "kernel": launch["kernel"], "tile": launch["tile"], "splits": launch["splits"],
            "device": j["device"]["name"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kfuse", required=True)
    ap.add_argument("--m", type=sizes, default="1024,4096,16384")
    ap.add_argument("--nk", type=lambda t: sizes(t, 8), default="1024,4096,8192")
    ap.add_argument("--precisions", type=lambda t: t.split(","), default="tf32,bf16")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--markdown")
    ap.add_argument("--json")
    args = ap.parse_args()
    kfuse = os.path.abspath(args.kfuse)
    work = Path(tempfile.mkdtemp(prefix="kfuse-gemm-alone."))
    env = dict(os.environ, KFUSE_CACHE_DIR=str(work / "cache"))  # no tuned config applies
    rows, failed = [], False
    for precision in args.precisions:
        if precision not in ("tf32", "bf16", "f16"):
            ap.error(f"--precisions: '{precision}' is not tf32, bf16 or f16")
    for precision in args.precisions:
        for nk in args.nk:
            path = work / f"gemm_alone_{precision}_{nk}.kf"
            path.write_text(source(precision, nk))
            for m in args.m:
                r = point(kfuse, path, precision, m, args.iters, env)
                r.update(precision=precision, m=m, nk=nk)
                failed = failed or "error" in r
                rows.append(r)
                print(json.dumps(r), flush=True)
    lines = ["| precision | M | N=K | kfuse kernel (tile, S) | kfuse ms | cuBLAS ms | "
             "kfuse TFLOP/s | cuBLAS / kfuse time |", "| --- | ---: | ---: | --- | ---: | ---: | "
             "---: | ---: |"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['precision']} | {r['m']} | {r['nk']} | failed: {r['error']} "
                         "| | | | |")
            continue
        lines.append(f"| {r['precision']} | {r['m']} | {r['nk']} | {r['kernel']} ({r['tile']}, "
                     f"S={r['splits']}) | {r['kfuse_ms']:.4f} | {r['cublas_ms']:.4f} | "
                     f"{r['kfuse_tflops']:.0f} | {r['ratio']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": "kfuse-gemm-alone/1", "rows": rows},
                                              indent=1) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
