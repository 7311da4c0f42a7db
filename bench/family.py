#!/usr/bin/env python3
"""A family of GEMM chains as users write them, kfuse against PyTorch eager, torch.compile and
the chain's GEMMs alone, interleaved in one process.

    python3 bench/family.py [--chains a,b] [--precisions tf32,bf16,autocast] [--modes eval,train]
        [--iters 30] [--warmup 5] [--compile-jobs 8] [--json FILE] [--markdown FILE] [--list]

The chains (CHAINS below, each a .kf written out by `kf_text`): a linear followed by light and
transcendental-heavy pointwise epilogues, group / instance / layer / rms norms at several group
sizes, row reductions to [N, 1] followed by more ops, softmax / log_softmax over odd widths,
residual adds, dropout, batchnorm, and chains of two GEMMs; batch 128 to 32768, features 768 to
30522.

Precisions: tf32 (f32 tensors; PyTorch with allow_tf32, kfuse precision="tf32"), bf16 (the same
chain with bf16 tensors; kfuse's default precision for bf16 tensors) and autocast (f32 tensors;
PyTorch under torch.autocast(bfloat16), kfuse precision="bf16"). Modes: eval for every chain, and
train for the chains with batchnorm or dropout (forward only, running statistics updated).

Each case: kfuse.Pipeline (params bound, output given), the .kf's chain in PyTorch
(kfuse.torch.Reference) eager and under torch.compile (default mode), and the chain's GEMMs alone
(F.linear of each GEMM's operands, no bias, as PyTorch runs them at that precision), timed
contender after contender within every rep (CUDA events, a buffer twice the L2 zeroed before each
run, median of --iters after --warmup). Before any timing, --compile-jobs processes run
torch.compile on every case once so the timed process loads Inductor's kernels from the on-disk
caches. Each case is also checked once: kfuse's and PyTorch's outputs against PyTorch float64 on
the same inputs and parameters (relative Frobenius error); `acc` is kfuse's error over PyTorch's
(train-mode dropout is not checked: the draws differ).

Prints a markdown table (per case: the times, kfuse / GEMMs alone, torch.compile / kfuse,
eager / kfuse, the error ratio) and per precision the geomeans; --json writes every number.
A case that fails (kfuse refusing it, torch.compile erroring) has its reason in the table, the
others go on, and the exit status is 1. Needs PyTorch, the kfuse package and a GPU.
"""

import argparse
import concurrent.futures
import copy
import json
import math
import multiprocessing
import sys
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import torch
    import torch.nn.functional as F
except ImportError:  # the CPU tests import this file for its chains and .kf texts
    torch = None

SCHEMA = "kfuse-bench-family/1"
PRECISIONS = ("tf32", "bf16", "autocast")
MODES = ("eval", "train")
MIN_ITERS = 10


@dataclass(frozen=True)
class Chain:
    """x: [N, K] -> linear(x, w1, b1): [N, F] -> `body` (statements on h, returning `returns`).
    `params` declares the chain's other params/inputs as (kind, name, shape) with shapes in
    N, K and F."""

    name: str
    kind: str  # the class of chain, as the table groups them
    n: int
    k: int
    f: int
    body: tuple
    params: tuple = ()
    returns: str = "h"
    prologue: tuple = ()  # statements on x before the first linear, which then reads `operand`
    operand: str = "x"

    def modes(self):
        train = any(op in line for line in self.body for op in ("batchnorm(", "dropout("))
        return MODES if train else ("eval",)


def _bn(name="bn"):
    return (("param", f"{name}_weight", "[F]"), ("param", f"{name}_bias", "[F]"),
            ("state", f"{name}_mean", "[F]"), ("state", f"{name}_var", "[F]"))


def _norm_affine(name):
    return (("param", f"{name}_weight", "[F]"), ("param", f"{name}_bias", "[F]"))


def _bn_call(name="bn"):
    return f"h = batchnorm(h, {name}_weight, {name}_bias, {name}_mean, {name}_var, eps=1e-5, momentum=0.1)"


CHAINS = [
    # light epilogues
    Chain("small_relu", "light", 128, 1024, 512, ("h = relu(h)",)),
    Chain("relu", "light", 4096, 4096, 4096, ("h = relu(h)",)),
    Chain("gelu", "light", 8192, 1024, 4096, ("h = gelu(h)",)),
    Chain("leaky_relu_scale", "light", 8192, 2048, 2048, ("h = leaky_relu(h, negative_slope=0.2)", "h = mul(h, 0.5)")),
    Chain("residual_add", "light", 8192, 1024, 1024, ("h = add(h, r)",), (("input", "r", "[N, F]"),)),
    Chain("dropout_residual", "light", 8192, 768, 768, ("h = dropout(h, p=0.1)", "h = add(h, r)"),
          (("input", "r", "[N, F]"),)),
    Chain("hardswish", "light", 16384, 960, 1280, ("h = hardswish(h)",)),
    # transcendental-heavy epilogues
    Chain("mish_mish", "heavy", 8192, 1024, 4096, ("h = mish(h)", "h = mish(h)")),
    Chain("swish_tanh_gelu_hardtanh", "heavy", 8192, 1024, 4096,
          ("h = silu(h)", "h = tanh(h)", "h = gelu(h)", "h = hardtanh(h)")),
    Chain("swish_div_clamp_tanh_clamp", "heavy", 8192, 1024, 4096,
          ("h = silu(h)", "h = div(h, 2.0)", "h = clamp(h, min=-1.0, max=1.0)", "h = tanh(h)",
           "h = clamp(h, min=-0.5, max=0.5)")),
    Chain("gelu_tanh", "heavy", 8192, 1024, 4096, ('h = gelu(h, approximate="tanh")',)),
    Chain("softplus_tanh_mul", "heavy", 8192, 2048, 2048, ("t = tanh(softplus(h))", "h = mul(h, t)")),
    Chain("elu_selu", "heavy", 8192, 2048, 2048, ("h = elu(h)", "h = selu(h)")),
    Chain("sigmoid_gate", "heavy", 8192, 2048, 2048, ("h = mul(h, sigmoid(h))",)),
    # normalizations after the linear
    Chain("groupnorm_16ch", "norm", 8192, 1024, 1024, ("h = groupnorm(h, gn_weight, gn_bias, groups=64)",),
          _norm_affine("gn")),
    Chain("groupnorm_32ch", "norm", 8192, 1024, 2048, ("h = groupnorm(h, gn_weight, gn_bias, groups=64)",),
          _norm_affine("gn")),
    Chain("groupnorm_64ch_silu", "norm", 8192, 1024, 4096,
          ("h = groupnorm(h, gn_weight, gn_bias, groups=64)", "h = silu(h)"), _norm_affine("gn")),
    Chain("groupnorm_32ch_wide_batch", "norm", 32768, 1024, 4096,
          ("h = groupnorm(h, gn_weight, gn_bias, groups=128)",), _norm_affine("gn")),
    Chain("instancenorm", "norm", 4096, 1024, 1024, ("h = instancenorm(h)",)),
    Chain("residual_layernorm", "norm", 8192, 768, 768,
          ("h = add(h, r)", "h = layernorm(h, ln_weight, ln_bias)"),
          (("input", "r", "[N, F]"),) + _norm_affine("ln")),
    Chain("gelu_layernorm_4096", "norm", 4096, 4096, 4096, ("h = gelu(h)", "h = layernorm(h, ln_weight, ln_bias)"),
          _norm_affine("ln")),
    Chain("residual_rmsnorm", "norm", 4096, 4096, 4096, ("h = add(h, r)", "h = rmsnorm(h, rms_weight)"),
          (("input", "r", "[N, F]"), ("param", "rms_weight", "[F]"))),
    Chain("rmsnorm_16384", "norm", 2048, 2048, 16384, ("h = rmsnorm(h, rms_weight)",),
          (("param", "rms_weight", "[F]"),)),
    # reductions to [N, 1], and ops after them
    Chain("sum", "reduce", 8192, 1024, 4096, ("h = sum(h, dim=1, keepdim=true)",)),
    Chain("sum_max_mean_lse_lse", "reduce", 8192, 1024, 4096,
          ("h = sum(h, dim=1, keepdim=true)", "h = max(h, dim=1, keepdim=true)", "h = mean(h, dim=1, keepdim=true)",
           "h = logsumexp(h, dim=1, keepdim=true)", "h = logsumexp(h, dim=1, keepdim=true)")),
    Chain("sigmoid_linear_lse", "reduce", 8192, 1024, 4096, ("h = logsumexp(h, dim=1, keepdim=true)",),
          prologue=("a = sigmoid(x)",), operand="a"),
    Chain("div_sum", "reduce", 16384, 1024, 2048, ("h = div(h, 2.0)", "h = sum(h, dim=1, keepdim=true)")),
    Chain("energy_neg_lse", "reduce", 4096, 2048, 1000, ("h = neg(logsumexp(h, dim=1, keepdim=true))",)),
    Chain("mean_relu_then_scale", "reduce", 8192, 2048, 2048,
          ("m = mean(relu(h), dim=1, keepdim=true)", "h = mul(sigmoid(m), 2.0)")),
    Chain("standardize_rows", "reduce", 4096, 2048, 2048,
          ("m = mean(h, dim=1, keepdim=true)", "s = std(h, dim=1, keepdim=true)", "h = div(sub(h, m), s)")),
    # softmax / log_softmax over the features
    Chain("softmax_30522", "softmax", 2048, 768, 30522, ("h = softmax(h, dim=1)",)),
    Chain("log_softmax_50257", "softmax", 1024, 768, 50257, ("h = log_softmax(h, dim=1)",)),
    Chain("scaled_softmax_4096", "softmax", 4096, 4096, 4096, ("h = softmax(mul(h, 0.125), dim=1)",)),
    Chain("classifier_log_softmax", "softmax", 8192, 1024, 1000, ("h = log_softmax(h, dim=1)",)),
    # batchnorm (train: batch statistics; eval: folded)
    Chain("bn_relu", "batchnorm", 8192, 1024, 1024, (_bn_call(), "h = relu(h)"), _bn()),
    Chain("bn_scale_softmax", "batchnorm", 4096, 2048, 2048,
          (_bn_call(), "h = mul(h, scale)", "h = softmax(h, dim=1)"), _bn() + (("param", "scale", "[1]"),)),
    # two GEMMs
    Chain("mlp_block", "two_gemms", 8192, 768, 3072,
          ("h = gelu(h)", "h = linear(h, w2, b2)", "h = add(h, x)", "h = layernorm(h, ln_weight, ln_bias)"),
          (("param", "w2", "[K, F]"), ("param", "b2", "[K]"), ("param", "ln_weight", "[K]"),
           ("param", "ln_bias", "[K]"))),
    Chain("relu_linear", "two_gemms", 4096, 1024, 4096, ("h = relu(h)", "h = linear(h, w2, b2)"),
          (("param", "w2", "[K, F]"), ("param", "b2", "[K]"))),
    Chain("swiglu", "two_gemms", 4096, 2048, 5632, ("g = linear(x, w3)", "h = mul(silu(h), g)"),
          (("param", "w3", "[F, K]"),)),
]


def kf_text(chain, dtype):
    """The chain as a .kf pipeline with tensors of `dtype` ("f32" or "bf16"), N a dim name."""
    def shape(s):
        return s.replace("K", str(chain.k)).replace("F", str(chain.f))

    lines = [f"pipeline {chain.name} {{", "  dim N", f"  input x: {dtype}[N, {chain.k}]"]
    lines += [f"  input {name}: {dtype}{shape(s)}" for kind, name, s in chain.params if kind == "input"]
    lines += [f"  param w1: {dtype}[{chain.f}, {chain.k}]", f"  param b1: {dtype}[{chain.f}]"]
    lines += [f"  {kind} {name}: {dtype}{shape(s)}" for kind, name, s in chain.params if kind != "input"]
    lines += [f"  {s}" for s in chain.prologue]
    lines += [f"  h = linear({chain.operand}, w1, b1)"] + [f"  {s}" for s in chain.body]
    lines += [f"  return {chain.returns}", "}"]
    return "\n".join(lines) + "\n"


def chain_dtype(precision):
    return "bf16" if precision == "bf16" else "f32"


def kfuse_precision(precision):
    return {"tf32": "tf32", "bf16": "bf16", "autocast": "bf16"}[precision]


def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="bench/family.py", description=__doc__.splitlines()[0])
    ap.add_argument("--chains", help="comma-separated chain names (default: all; --list names them)")
    ap.add_argument("--precisions", default="tf32,bf16", help=f"comma-separated, of {', '.join(PRECISIONS)}")
    ap.add_argument("--modes", default="eval,train", help="comma-separated, of eval, train")
    ap.add_argument("--iters", type=int, default=30, help=f"timed runs per contender, at least {MIN_ITERS}")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--compile-jobs", type=int, default=8, help="processes warming torch.compile's caches; 0: none")
    ap.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--markdown", metavar="FILE")
    ap.add_argument("--list", action="store_true", help="print the chains and exit")
    args = ap.parse_args(argv)
    known = {c.name: c for c in CHAINS}
    names = [w for w in (args.chains or ",".join(known)).split(",") if w]
    for name in names:
        if name not in known:
            ap.error(f"--chains: '{name}' is not a chain of the family (--list names them)")
    args.chains = [known[n] for n in names]
    for option, given, allowed in (("--precisions", args.precisions, PRECISIONS), ("--modes", args.modes, MODES)):
        words = [w for w in given.split(",") if w]
        if not words or any(w not in allowed for w in words):
            ap.error(f"{option}: '{given}' must be comma-separated names of {', '.join(allowed)}")
        setattr(args, option[2:], words)
    if args.iters < MIN_ITERS:
        ap.error(f"--iters {args.iters}: a median needs at least {MIN_ITERS} runs")
    if args.warmup < 0 or args.compile_jobs < 0:
        ap.error("--warmup and --compile-jobs must be at least 0")
    return args


def cases(args):
    return [(c, p, m) for c in args.chains for p in args.precisions for m in c.modes() if m in args.modes]


# ------------------------------------------------------------------------------------------ GPU

def torch_settings(precision):
    import compare_torch  # bench/, beside this file; it needs PyTorch

    compare_torch.set_precision(precision)
    compare_torch.raise_dynamo_limits()


def autocast(precision):
    import contextlib

    if precision == "autocast":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def case_state(chain, precision, mode):
    """The chain in PyTorch with fixed parameters and inputs: the same in every process."""
    import kfuse.torch

    ref = kfuse.torch.Reference(text=kf_text(chain, chain_dtype(precision)), file_name=f"{chain.name}.kf",
                                device="cuda")
    ref.reset_parameters(torch.Generator(device="cuda").manual_seed(0))
    ref.train(mode == "train")
    generator = torch.Generator(device="cuda").manual_seed(1)
    return ref, ref.random_inputs({"N": chain.n}, generator, "cuda")


def warm_compile(jobs):
    """A worker process: torch.compile each (chain, precision, mode) and call it once."""
    failures = []
    for chain, precision, mode in jobs:
        try:
            torch_settings(precision)
            ref, inputs = case_state(chain, precision, mode)
            compiled = torch.compile(ref)
            with torch.no_grad(), autocast(precision):
                compiled(*inputs)
            torch.cuda.synchronize()
        except Exception as e:  # the timed process compiles it again and reports it
            failures.append(f"{chain.name} {precision} {mode}: {e!r}"[:300])
    return failures


def warm_compile_all(runs, jobs):
    """warm_compile on `jobs` processes, the cases dealt round-robin among them."""
    shares = [runs[i::jobs] for i in range(jobs) if runs[i::jobs]]
    context = multiprocessing.get_context("spawn")  # CUDA cannot be forked
    with concurrent.futures.ProcessPoolExecutor(len(shares), mp_context=context) as pool:
        for failures in pool.map(warm_compile, shares):
            for failure in failures:
                print(f"[warm] failed: {failure}", flush=True)


def gemms_alone(ref, inputs, precision):
    """F.linear of each linear op's operands (no bias), in the chain's order, as one call."""
    values = ref.program["values"]
    dtype = inputs[0].dtype
    operands = []
    for v in values:
        if v["kind"] == "op" and v["op"] == "linear":
            a_shape, w = values[v["args"][0]]["shape"], getattr(ref, values[v["args"][1]]["name"])
            rows = inputs[0].shape[0]
            a = torch.randn(rows, a_shape[1], device="cuda", dtype=dtype)
            operands.append((a, w.detach()))

    def run():
        with autocast(precision):
            for a, w in operands:
                F.linear(a, w)
    return run


def error(candidate, reference):
    a, b = candidate.double(), reference.double()
    if not torch.isfinite(a).all():
        return math.inf
    nb = b.norm().item()
    return (a - b).norm().item() / (nb if nb > 0 else 1.0)


def check(chain, precision, mode, ref, inputs, pipeline):
    """kfuse's and PyTorch's output against PyTorch float64, from the same state."""
    if mode == "train" and any("dropout(" in s for s in chain.body):
        return None
    torch_m, exact = copy.deepcopy(ref), copy.deepcopy(ref).double()
    state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    pipeline.bind(**state)
    with torch.no_grad(), autocast(precision):
        got = pipeline(*inputs)
        mine = torch_m(*inputs)
    with torch.no_grad():
        want = exact(*(t.double() if t.is_floating_point() else t for t in inputs))
    k_err, t_err = error(got, want), error(mine, want)
    return {"kfuse": k_err, "torch": t_err, "ratio": k_err / t_err if t_err > 0 else (1.0 if k_err == 0 else math.inf)}


def contenders(chain, precision, mode, compiled_ok):
    import kfuse

    ref, inputs = case_state(chain, precision, mode)
    started = time.perf_counter()
    p = kfuse.Pipeline(text=kf_text(chain, chain_dtype(precision)), file_name=f"{chain.name}.kf", mode=mode,
                       precision=kfuse_precision(precision))
    row = {"kfuse_compile_s": time.perf_counter() - started}
    row["check"] = check(chain, precision, mode, ref, inputs, p)
    state = {k: v.detach().clone() for k, v in ref.state_dict().items()}
    p.bind(**state)
    out = p(*inputs)
    row["kernels"] = sum(not k["variant"] for k in p.report["kernels"])
    fns = {"kfuse": lambda: p(*inputs, out=out), "eager": lambda: ref(*inputs)}
    if compiled_ok:
        compiled = torch.compile(copy.deepcopy(ref))
        started = time.perf_counter()
        with torch.no_grad(), autocast(precision):
            compiled(*inputs)
        torch.cuda.synchronize()
        row["compile_first_call_s"] = time.perf_counter() - started
        fns["compile"] = lambda: compiled(*inputs)
    fns["gemms"] = gemms_alone(ref, inputs, precision)
    return fns, row


def interleaved(fns, flush, precision, warmup, iters):
    """torch_interleaved.py's timing, under no_grad, each call under the precision's autocast."""
    import torch_interleaved  # bench/, beside this file; it needs PyTorch and kfuse

    def under(f):
        def call():
            with autocast(precision):
                f()
        return call

    with torch.no_grad():
        return torch_interleaved.interleaved({k: under(f) for k, f in fns.items()}, flush, warmup, iters)


def measure(args, chain, precision, mode, flush):
    row = {"chain": chain.name, "class": chain.kind, "precision": precision, "mode": mode,
           "shape": f"{chain.n} x {chain.k} -> {chain.f}"}
    try:
        torch_settings(precision)
        fns, more = contenders(chain, precision, mode, not args.no_compile)
        row.update(more)
        row["ms"] = interleaved(fns, flush, precision, args.warmup, args.iters)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {e}".splitlines()[0][:200]
    return row


# --------------------------------------------------------------------------------------- report

def ratio(num, den):
    return num / den if num and den else None


def geomean(values):
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fmt(v, spec=".2f"):
    return "–" if v is None else format(v, spec)


def markdown(rows):
    out = ["| chain | class | shape | precision | mode | kfuse ms | eager | compile | GEMMs alone | "
           "kfuse / GEMMs | compile / kfuse | eager / kfuse | kfuse kernels | error / PyTorch's |",
           "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        head = f"| {r['chain']} | {r['class']} | {r['shape']} | {r['precision']} | {r['mode']} |"
        if "error" in r:
            reason = r["error"].replace("|", "\\|")
            out.append(f"{head} failed: {reason} |" + " – |" * 8)
            continue
        t = r["ms"]
        acc = r["check"]["ratio"] if r.get("check") else None
        out.append(f"{head} {t['kfuse']:.3f} | {t['eager']:.3f} | {fmt(t.get('compile'), '.3f')} | "
                   f"{t['gemms']:.3f} | {fmt(ratio(t['kfuse'], t['gemms']))} | "
                   f"{fmt(ratio(t.get('compile'), t['kfuse']))} | {fmt(ratio(t['eager'], t['kfuse']))} | "
                   f"{r['kernels']} | {fmt(acc)} |")
    out += ["", "| precision | cases | kfuse / GEMMs (geomean, worst) | compile / kfuse (geomean, worst) | "
            "eager / kfuse (geomean) | error / PyTorch's (worst) |", "| --- | ---: | --- | --- | ---: | ---: |"]
    for precision in dict.fromkeys(r["precision"] for r in rows):
        done = [r for r in rows if r["precision"] == precision and "ms" in r]
        over_gemm = [ratio(r["ms"]["kfuse"], r["ms"]["gemms"]) for r in done]
        vs_compile = [ratio(r["ms"].get("compile"), r["ms"]["kfuse"]) for r in done]
        vs_eager = [ratio(r["ms"]["eager"], r["ms"]["kfuse"]) for r in done]
        accs = [r["check"]["ratio"] for r in done if r.get("check")]
        worst_compile = min((v for v in vs_compile if v), default=None)
        out.append(f"| {precision} | {len(done)} | {fmt(geomean(over_gemm))}, {fmt(max(over_gemm, default=None))} | "
                   f"{fmt(geomean(vs_compile))}, {fmt(worst_compile)} | {fmt(geomean(vs_eager))} | "
                   f"{fmt(max(accs, default=None))} |")
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if args.list:
        for c in CHAINS:
            print(f"{c.name:28} {c.kind:10} {c.n} x {c.k} -> {c.f}  modes {','.join(c.modes())}")
        return 0
    if torch is None or not torch.cuda.is_available():
        sys.exit("bench/family.py needs PyTorch with a CUDA GPU")
    runs = cases(args)
    if not args.no_compile and args.compile_jobs > 0:
        started = time.perf_counter()
        warm_compile_all(runs, args.compile_jobs)
        print(f"[warm] torch.compile of {len(runs)} cases on {args.compile_jobs} processes: "
              f"{time.perf_counter() - started:.0f} s", flush=True)
    props = torch.cuda.get_device_properties(0)
    flush = torch.empty(max(2 * int(getattr(props, "L2_cache_size", 0) or 0), 64 << 20) // 4, device="cuda")
    rows = []
    for chain, precision, mode in runs:
        row = measure(args, chain, precision, mode, flush)
        rows.append(row)
        t = row.get("ms", {})
        print(f"[{len(rows)}/{len(runs)}] {chain.name} {precision} {mode}: "
              + (row["error"] if "error" in row else
                 " ".join(f"{k} {v:.3f}" for k, v in t.items())), flush=True)
        torch.cuda.empty_cache()
    table = markdown(rows)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}; median ms of {args.iters}, "
          "contenders interleaved run by run, L2 flushed before each\n")
    print(table)
    if args.markdown:
        Path(args.markdown).write_text(table + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"schema": SCHEMA, "device": torch.cuda.get_device_name(),
                                               "torch": torch.__version__, "iters": args.iters, "rows": rows},
                                              indent=1))
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
