#!/usr/bin/env python3
"""Every example (examples/*.kf) against PyTorch, train and eval, at the example's documented size.

For each example x mode: the GPU time of one call of PyTorch eager and torch.compile (default
mode) running kfuse.torch.Reference (the .kf's chain with PyTorch's ops, in the .kf's dtypes),
of kfuse.torch.Fused from Python, and of kfuse's fused pipeline and its unfused baseline (one
kernel per op, cuBLAS GEMMs) from `kfuse bench --json`; the CUDA kernels each launches per call
(torch.profiler for eager and torch.compile, kfuse's plan for kfuse); and the error of kfuse's
and PyTorch's outputs and running statistics against PyTorch float64 on the same data (pass:
kfuse's error within the precision's bound or 1.5x PyTorch's own, whichever is larger;
train-mode dropout draws kfuse's masks in the reference). Timing is bench/compare_torch.py's
(CUDA events, L2 flushed before each run, median). Prints a markdown table
last; --out writes every number as JSON ("kfuse-examples-torch/1"), --markdown the table.

    python3 bench/examples_torch.py --kfuse build/kfuse [--out F.json] [--markdown F.md]
                                    [--budget-s 330] [--quick] [--examples a,b] [--modes train,eval]
                                    [--compile-jobs 8]

Sizes: the `--dim N=...` an example's comment documents (every example has one). --budget-s
bounds the run: the timed runs per measurement are halved (down to 5) while the rows run
behind the budget's pace, and torch.compile, measured after every other column, is skipped for
the examples the budget leaves no room for (their rows say so). Exits 1 if a check fails.

torch.compile's first call of an example compiles it (Dynamo, Inductor, Triton: seconds each,
on the CPU). Before any timing, --compile-jobs worker processes compile every example in both
modes once, in parallel, filling Inductor's and Triton's on-disk caches; the timed process's own
compiles then load what they produce from there (its rows give the first call's seconds). The
workers have exited before the first timed run.
"""

import argparse
import concurrent.futures
import copy
import json
import math
import multiprocessing
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import compare_torch  # bench/, beside this file: the timer, the error measure, kfuse's env
import torch

import kfuse
import kfuse.torch

REPO = Path(__file__).resolve().parent.parent
MODES = ("train", "eval")
BOUNDS = {"f32": 1e-5, "half": 2e-2}
TORCH_ERROR_FACTOR = 1.5


def documented_dims(kf):
    """The dims the example's comment gives as `--dim N=...`."""
    found = re.search(r"`--dim ([^`]+)`", kf.read_text())
    if not found:
        sys.exit(f"{kf}: no `--dim NAME=VALUE` in its comment: say its size")
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}


def torch_settings():
    """The PyTorch settings of every process that compiles or times: fp32 math, and Dynamo's
    limits raised (the on-disk caches are keyed on the settings, so the warm-up must match)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    compare_torch.raise_dynamo_limits()


def example_state(kf):
    """An example's PyTorch chain (kfuse.torch.Reference) with fixed parameters, at its documented
    size, and random inputs for it: the same in every process."""
    dims = documented_dims(kf)
    generator = torch.Generator(device="cuda").manual_seed(0)
    ref = kfuse.torch.Reference(kf, device="cuda")
    ref.reset_parameters(torch.Generator(device="cuda").manual_seed(0))
    return {"ref": ref, "inputs": ref.random_inputs(dims, generator, "cuda"), "dims": dims}


def warm_compile(kfs, modes):
    """A worker process: torch.compile each example and call it once per mode. Returns what
    failed."""
    torch_settings()
    failures = []
    for kf in kfs:
        try:
            state = example_state(kf)
            compiled = torch.compile(state["ref"], mode="default")
            for mode in modes:
                state["ref"].train(mode == "train")
                with torch.no_grad():
                    compiled(*state["inputs"])
            torch.cuda.synchronize()
        except Exception as e:  # the timed process compiles it again and reports it in its rows
            failures.append(f"{kf.stem}: {e!r}"[:300])
    return failures


def warm_compile_all(examples, modes, jobs):
    """warm_compile on `jobs` processes, the examples dealt round-robin among them."""
    shares = [examples[i::jobs] for i in range(jobs) if examples[i::jobs]]
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with concurrent.futures.ProcessPoolExecutor(len(shares), mp_context=context) as pool:
        for failures in pool.map(warm_compile, shares, [modes] * len(shares)):
            for failure in failures:
                print(f"[warm] failed: {failure}", flush=True)


def as_tuple(y):
    return y if isinstance(y, tuple) else (y,)


def count_kernels(fn):
    """CUDA kernels one call launches, as torch.profiler (CUPTI) sees them (memcpy/memset apart)."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    names = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    return len([n for n in names if not n.startswith(("Memcpy", "Memset"))])


def check(ref, kf, mode, inputs):
    """One call of PyTorch (the .kf's dtypes), PyTorch float64 and kfuse.torch.Fused from the same
    parameters and state: each tensor's error vs float64, and the verdict."""
    torch_m = copy.deepcopy(ref)
    exact = copy.deepcopy(ref).double()
    fused = kfuse.torch.Fused(copy.deepcopy(ref), kf).train(mode == "train")
    if mode == "train" and any(v.get("op") == "dropout" for v in ref.program["values"]):
        torch_m.kfuse_rng = exact.kfuse_rng = fused.pipeline(inputs[0]).rng_state
    got = as_tuple(fused(*inputs))
    mine = as_tuple(torch_m(*inputs))
    want = as_tuple(exact(*(t.double() if t.is_floating_point() else t for t in inputs)))
    tensors = {f"out{i}": (g, t, w) for i, (g, t, w) in enumerate(zip(got, mine, want))}
    for name, _ in ref.named_buffers():
        tensors[name] = (getattr(fused.module, name), getattr(torch_m, name), getattr(exact, name))
    half = any(v["dtype"] != "f32" for v in ref.program["values"])
    bound = BOUNDS["half" if half else "f32"]
    result = {"bound": bound, "tensors": {}}
    ok = True
    for name, (g, t, w) in tensors.items():
        k_err, t_err = compare_torch.error(g, w), compare_torch.error(t, w)
        result["tensors"][name] = {"kfuse_vs_torch64": k_err, "torch_vs_torch64": t_err}
        if k_err["rel"] is None or t_err["rel"] is None:
            ok = ok and k_err["rel"] is not None
            continue
        ok = ok and k_err["rel"] <= max(bound, TORCH_ERROR_FACTOR * t_err["rel"])
    result["pass"] = ok
    kernels = sum(not k["variant"] for k in fused.pipeline(inputs[0]).report["kernels"])
    return result, fused, kernels


def kfuse_bench(args, kf, dims, mode, iters, warmup, work):
    if not args.kfuse:
        return {"error": "no --kfuse: kfuse bench not run"}
    path = Path(work) / f"{kf.stem}.{mode}.json"
    cmd = [args.kfuse, "bench", str(kf), "--mode", mode, "--json", str(path), "--iters", str(iters),
           "--warmup", str(warmup)]
    for name, value in dims.items():
        cmd += ["--dim", f"{name}={value}"]
    print("[kfuse] " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, env=compare_torch.kfuse_env())
    if not path.exists():
        return {"error": f"kfuse bench exited {p.returncode} without JSON: {p.stderr.strip()[-500:]}"}
    return json.loads(path.read_text())


def median_ms(contender):
    return ((contender or {}).get("ms") or {}).get("median")


def measure(args, kf, mode, state, pace):
    """Every column of one row but torch.compile's."""
    ref, inputs, dims = state["ref"], state["inputs"], state["dims"]
    row = {"example": kf.stem, "dims": dims, "mode": mode, "iters": pace["iters"]}
    ref.train(mode == "train")
    timer = compare_torch.Timer(pace["warmup"], pace["iters"])
    with torch.no_grad():
        row["check"], fused, row["kfuse_kernels"] = check(ref, kf, mode, inputs)
        row["eager_ms"] = timer.time(lambda: ref(*inputs))
        row["eager_kernels"] = count_kernels(lambda: ref(*inputs))
        row["kfuse_python_ms"] = timer.time(lambda: fused(*inputs))
    torch.cuda.empty_cache()  # the check's float64 copies: kfuse bench's process gets the memory
    bench = kfuse_bench(args, kf, dims, mode, pace["iters"], pace["warmup"], state["work"])
    row["kfuse_bench"] = bench
    row["kfuse_fused_ms"] = median_ms(bench.get("fused"))
    row["kfuse_unfused_ms"] = median_ms(bench.get("unfused"))
    row["kfuse_unfused_kernels"] = (bench.get("unfused") or {}).get("kernels")
    return row


def measure_compile(ref, inputs, rows, pace):
    """torch.compile (default mode) of the example's Reference, in each mode its rows have."""
    compiled = torch.compile(ref, mode="default")
    timer = compare_torch.Timer(pace["warmup"], pace["iters"])
    for row in rows:
        ref.train(row["mode"] == "train")
        with torch.no_grad():
            try:
                t0 = time.monotonic()
                compiled(*inputs)
                torch.cuda.synchronize()
                row["compile_first_call_s"] = time.monotonic() - t0
                row["compile_ms"] = timer.time(lambda: compiled(*inputs))
                row["compile_kernels"] = count_kernels(lambda: compiled(*inputs))
            except Exception as e:  # reported in the row, the others still run
                row["compile_error"] = repr(e)


def ratio(num, den):
    return num / den if isinstance(num, (int, float)) and isinstance(den, (int, float)) and den > 0 else None


def finite_or_inf(rel):
    """A tensor's relative error, or inf where its output was not finite (None); 0 is an error."""
    return math.inf if rel is None else rel


def fmt(v, spec=".3f", suffix=""):
    return format(v, spec) + suffix if isinstance(v, (int, float)) else "-"


def markdown(result):
    lines = [
        f"Every example against PyTorch on {result['device']} (torch {result['torch']}), "
        "`python3 bench/examples_torch.py --kfuse build/kfuse`: median ms per call (CUDA events, L2 "
        "flushed), fp32 math (TF32 off) and bf16/f16 as the .kf declares; kfuse = `kfuse bench`'s fused "
        "pipeline, Fused = kfuse.torch.Fused from Python, unfused = kfuse's one kernel per op with cuBLAS "
        "GEMMs; kernels per call: eager / torch.compile / kfuse (torch.profiler; kfuse's plan); error: "
        "the largest ||x - x64|| / ||x64|| over outputs and running statistics (x64: PyTorch "
        "float64), of kfuse / of PyTorch.",
        "",
        "| example | dims | mode | eager ms | compile ms | kfuse ms | Fused ms | unfused ms | eager / kfuse "
        "| compile / kfuse | unfused / kfuse | kernels | error kfuse / torch | check |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | --- |",
    ]
    for r in result["rows"]:
        eager = (r.get("eager_ms") or {}).get("median")
        comp = (r.get("compile_ms") or {}).get("median")
        kf = r.get("kfuse_fused_ms") or (r.get("kfuse_python_ms") or {}).get("median")
        errors = r["check"]["tensors"].values()
        k_err = max((finite_or_inf(e["kfuse_vs_torch64"]["rel"]) for e in errors), default=None)
        t_err = max((finite_or_inf(e["torch_vs_torch64"]["rel"]) for e in errors), default=None)
        compile_cell = fmt(comp) if comp else ("skipped" if r.get("compile_skipped") else
                                               "failed" if r.get("compile_error") else "-")
        kernels = f"{fmt(r.get('eager_kernels'), 'd')} / {fmt(r.get('compile_kernels'), 'd')} / " \
                  f"{fmt(r.get('kfuse_kernels'), 'd')}"
        dims = ", ".join(f"{k}={v}" for k, v in r["dims"].items())
        lines.append(
            f"| {r['example']} | {dims} | {r['mode']} | {fmt(eager)} | {compile_cell} | {fmt(kf)} | "
            f"{fmt((r.get('kfuse_python_ms') or {}).get('median'))} | {fmt(r.get('kfuse_unfused_ms'))} | "
            f"{fmt(ratio(eager, kf), '.2f', 'x')} | {fmt(ratio(comp, kf), '.2f', 'x')} | "
            f"{fmt(ratio(r.get('kfuse_unfused_ms'), kf), '.2f', 'x')} | {kernels} | "
            f"{fmt(k_err, '.1e')} / {fmt(t_err, '.1e')} | {'PASS' if r['check']['pass'] else 'FAIL'} |")
    notes = [f"- {r['example']} {r['mode']}: " + "; ".join(
        n for n in (r.get("compile_skipped") and f"torch.compile skipped: {r['compile_skipped']}",
                    r.get("compile_error") and f"torch.compile failed: {r['compile_error'][:200]}",
                    r["kfuse_bench"].get("error")) if n)
             for r in result["rows"]
             if r.get("compile_skipped") or r.get("compile_error") or r["kfuse_bench"].get("error")]
    return "\n".join(lines + ([""] + notes if notes else [])) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kfuse", help="the kfuse binary, for kfuse bench's fused and unfused times")
    ap.add_argument("--out", help="write every number as JSON here")
    ap.add_argument("--markdown", help="write the table here")
    ap.add_argument("--examples", default="", help="comma-separated example names (default: all)")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--iters", type=int, default=50, help="timed runs per measurement (median)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--budget-s", type=float, default=0, help="seconds the whole run should take (0: no bound)")
    ap.add_argument("--quick", action="store_true", help="smoke run: 10 timed runs, 2 warm-up")
    ap.add_argument("--no-compile", dest="compile", action="store_false", help="skip torch.compile")
    ap.add_argument("--compile-jobs", type=int, default=8,
                    help="processes compiling the examples with torch.compile before the timing (0: none)")
    args = ap.parse_args()
    if args.quick:
        args.iters, args.warmup = min(args.iters, 10), min(args.warmup, 2)
    if not torch.cuda.is_available():
        sys.exit("examples_torch.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    examples = sorted((REPO / "examples").glob("*.kf"))
    if args.examples:
        wanted = args.examples.split(",")
        unknown = [w for w in wanted if w not in {e.stem for e in examples}]
        if unknown:
            ap.error(f"unknown example(s) {', '.join(unknown)}")
        examples = [e for e in examples if e.stem in wanted]
    modes = [m for m in args.modes.split(",") if m]
    start = time.monotonic()
    budget = args.budget_s if args.budget_s > 0 else math.inf
    torch_settings()
    work = tempfile.mkdtemp(prefix="kfuse-examples-")
    pace = {"iters": args.iters, "warmup": args.warmup}
    print(f"[compile] {len(examples) * len(modes)} kfuse pipelines, in parallel", flush=True)
    kfuse.compile_many(examples, modes)  # a failure shows in its row's check
    if args.compile and args.compile_jobs > 0:
        print(f"[warm] torch.compile of {len(examples)} examples on {args.compile_jobs} processes",
              flush=True)
        t0 = time.monotonic()
        warm_compile_all(examples, modes, args.compile_jobs)
        print(f"[warm] {time.monotonic() - t0:.0f} s", flush=True)
    # Every column but torch.compile's first, in 60% of the budget left at most.
    row_share = 0.6 * (budget - (time.monotonic() - start)) / max(1, len(examples) * len(modes))
    states, rows = {}, []
    for kf in examples:
        state = {**example_state(kf), "work": work}
        dims = state["dims"]
        states[kf] = state
        for mode in modes:
            t0 = time.monotonic()
            print(f"[row] {kf.stem} {dims} {mode} ({pace['iters']} timed runs)", flush=True)
            rows.append(measure(args, kf, mode, state, pace))
            if time.monotonic() - t0 > row_share and pace["iters"] > 5:
                pace["iters"] = max(5, pace["iters"] // 2)
                pace["warmup"] = max(1, min(pace["warmup"], pace["iters"] // 2))
    slowest_compile = 0.0
    for kf, state in states.items():
        mine = [r for r in rows if r["example"] == kf.stem]
        left = budget - (time.monotonic() - start)
        if not args.compile:
            reason = "--no-compile"
        elif left < max(slowest_compile, 5.0):
            reason = f"the budget's {args.budget_s:g} s spent ({left:.0f} s left)"
        else:
            reason = None
        if reason:
            for r in mine:
                r["compile_skipped"] = reason
            continue
        print(f"[compile] {kf.stem}", flush=True)
        t0 = time.monotonic()
        measure_compile(state["ref"], state["inputs"], mine, pace)
        slowest_compile = max(slowest_compile, time.monotonic() - t0)
        state.clear()
        torch.cuda.empty_cache()
    shutil.rmtree(work, ignore_errors=True)  # kfuse bench's JSON is embedded in the rows
    result = {
        **compare_torch.result_header("kfuse-examples-torch/1"),
        "timing": {"method": "cuda-events", "statistic": "median", "l2_flushed": True, "no_grad": True,
                   "torch_compile_mode": "default", "allow_tf32": False},
        "rows": rows,
        "seconds": time.monotonic() - start,
    }
    table = markdown(result)
    compare_torch.write_outputs(result, table, args.out, args.markdown)
    return 1 if any(not r["check"]["pass"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
