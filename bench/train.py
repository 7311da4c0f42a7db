#!/usr/bin/env python3
"""One training step, forward and backward, of kfuse.torch.Fused against PyTorch eager and
torch.compile (default and mode="max-autotune-no-cudagraphs"), interleaved in one process.

    python3 bench/train.py [--cases gemm_bn_scale_softmax,gemm_scale_bn,transformer_mlp_block]
        [--precisions tf32,bf16] [--contenders kfuse,eager,compile,max-autotune]
        [--reps 50] [--warmup 5] [--json FILE] [--quick]

Cases, in train mode at the sizes their .kf comments document: the founding chains
(examples/gemm_bn_scale_softmax.kf and examples/gemm_scale_bn.kf, N=1024) and a transformer's
MLP block (examples/transformer_mlp_block.kf: linear, GELU, linear, residual add, LayerNorm;
N=8192 tokens). Each contender holds its own copy of the same initial parameters, as an
nn.Module: compare_torch.py's modules for the founding chains, TransformerMlpBlock here; kfuse
is Fused wrapping a copy, so every contender computes the same chain.

Precisions: tf32 (PyTorch with torch.backends.cuda.matmul.allow_tf32 = True, Fused with
precision="tf32") and bf16 (PyTorch's forward under torch.autocast("cuda", dtype=torch.bfloat16),
Fused with precision="bf16"; the parameters stay f32 master weights for all).

A timed step: the module's forward on x (which requires grad, as a layer inside a network: every
contender computes the gradient of x and of every parameter) and backward() from a fixed
random gradient of the output, between two CUDA events (host time between launches included,
as a training loop pays it), after a buffer of at least twice the L2 cache is zeroed outside them. optimizer.zero_grad() before and optimizer.step() after it
(torch.optim.SGD with momentum, a small lr) run outside the events for every contender alike, so
the parameters change from step to step as in training (Fused then binds updated bf16 weights
again, inside its timed forward) while the step's time is forward plus backward. Contenders
take turns within every rep, so clock changes at the board's power limit hit all of them alike;
the first call (compiles) and --warmup reps are not timed; the median of --reps is reported.

Memory: the peak of PyTorch's allocator over one step (torch.cuda.reset_peak_memory_stats,
max_memory_allocated) above what was allocated when the step began (activations, saved values,
gradients); for kfuse plus the workspace its saving forward and backward pipelines hold outside
PyTorch's allocator (Pipeline.workspace_size at the step's dims).

A contender that fails (kfuse refusing a backward, torch.compile erroring) has its reason in its
table cell and the JSON; the others go on, and the exit status is 1. Prints a markdown table
(for docs/PERF.md); --json FILE writes the raw numbers (every rep's time). --quick is a smoke
run: small batches, few reps, the transformer block at tf32 without max-autotune unless asked
for. Needs PyTorch, the kfuse package and a GPU.
"""

import argparse
import copy
import json
import statistics
import sys
import time
from pathlib import Path

try:
    import kfuse
except ImportError as e:
    sys.exit(f"train.py needs the kfuse package (pip install . in the repository): {e}")
try:
    import torch
    import torch.nn.functional as F
    from torch import nn
except ImportError as e:  # the CPU tests import this file for its arguments and tables
    torch = None
    TORCH_MISSING = str(e)

REPO = Path(__file__).resolve().parent.parent
SCHEMA = "kfuse-bench-train/1"

# name -> (.kf file, N at the documented size, N of --quick, the nn.Module: compare_torch's chain
# name, or transformer_mlp_block)
CASES = {
    "gemm_bn_scale_softmax": ("examples/gemm_bn_scale_softmax.kf", 1024, 128, "bn_scale_softmax"),
    "gemm_scale_bn": ("examples/gemm_scale_bn.kf", 1024, 128, "scale_bn"),
    "transformer_mlp_block": ("examples/transformer_mlp_block.kf", 8192, 512, "transformer_mlp_block"),
}
PRECISIONS = ("tf32", "bf16")
# name -> the torch.compile mode, None for no compile (kfuse, eager)
CONTENDERS = {"kfuse": None, "eager": None, "compile": "default", "max-autotune": "max-autotune-no-cudagraphs"}
MIN_REPS = 30
QUICK = {"cases": "transformer_mlp_block", "precisions": "tf32", "contenders": "kfuse,eager,compile",
         "reps": 5, "warmup": 2}
LR = 1e-4  # small: the parameters change every step, as in training, and stay near where they started


def _names(ap, option, given, known):
    names = [w.strip() for w in given.split(",") if w.strip()]
    if not names:
        ap.error(f"{option}: no names given (known: {', '.join(known)})")
    for name in names:
        if name not in known:
            ap.error(f"{option}: '{name}' is not one of {', '.join(known)}")
    if len(set(names)) != len(names):
        ap.error(f"{option}: a name is given twice in '{given}'")
    return names


def parse_args(argv=None):
    """The options, checked: lists of known names, --reps of at least MIN_REPS (but with
    --quick), --json into an existing directory. --quick fills in what was not given."""
    ap = argparse.ArgumentParser(prog="bench/train.py", description=__doc__.splitlines()[0])
    ap.add_argument("--cases", help=f"comma-separated, of {', '.join(CASES)} (default: all)")
    ap.add_argument("--precisions", help=f"comma-separated, of {', '.join(PRECISIONS)} (default: all)")
    ap.add_argument("--contenders", help=f"comma-separated, of {', '.join(CONTENDERS)} (default: all); "
                                         "kfuse is always timed, the others are compared with it")
    ap.add_argument("--reps", type=int, help=f"timed steps per contender, at least {MIN_REPS} (default 50)")
    ap.add_argument("--warmup", type=int, help="untimed steps per contender after the first call (default 5)")
    ap.add_argument("--json", metavar="FILE", help="write the raw numbers as JSON (schema " + SCHEMA + ")")
    ap.add_argument("--quick", action="store_true",
                    help=f"a smoke run: N of {', '.join(f'{case} {n}' for case, (_, _, n, _) in CASES.items())}, "
                         f"and unless given --cases {QUICK['cases']} --precisions {QUICK['precisions']} "
                         f"--contenders {QUICK['contenders']} --reps {QUICK['reps']} --warmup {QUICK['warmup']}")
    args = ap.parse_args(argv)
    defaults = QUICK if args.quick else {"cases": ",".join(CASES), "precisions": ",".join(PRECISIONS),
                                         "contenders": ",".join(CONTENDERS), "reps": 50, "warmup": 5}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    args.cases = _names(ap, "--cases", args.cases, CASES)
    args.precisions = _names(ap, "--precisions", args.precisions, PRECISIONS)
    args.contenders = _names(ap, "--contenders", args.contenders, CONTENDERS)
    if "kfuse" not in args.contenders:
        args.contenders.insert(0, "kfuse")  # the ratios are to kfuse's time
    if args.reps < 1 or (args.reps < MIN_REPS and not args.quick):
        ap.error(f"--reps {args.reps}: a median needs at least {MIN_REPS} timed steps "
                 "(--quick for a smoke run with fewer)")
    if args.warmup < 0:
        ap.error(f"--warmup {args.warmup}: must be 0 or more")
    if args.json is not None and not Path(args.json).resolve().parent.is_dir():
        ap.error(f"--json {args.json}: the directory {Path(args.json).resolve().parent} does not exist")
    return args


def case_dims(case, quick=False):
    """(N, the features of x) of a case: N as --quick or the documented size sets it, the
    features from the .kf's declaration of x."""
    kf, n, quick_n, _ = CASES[case]
    program = kfuse.program(REPO / kf)
    x = [v for v in program["values"] if v["kind"] == "input"]
    if len(x) != 1 or len(x[0]["shape"]) != 2 or not isinstance(x[0]["shape"][1], int):
        raise kfuse.Error(f"{kf}: bench/train.py takes one input x: f32[N, F], found "
                          f"{', '.join(str(v['shape']) for v in x) or 'none'}")
    return (quick_n if quick else n), x[0]["shape"][1]


# ------------------------------------------------------------------------------- the table

def _cell(text, width=160):
    """An error as one table cell: its first line, pipes escaped, at most `width` characters."""
    line = str(text).strip().splitlines()[0] if str(text).strip() else "(no message)"
    line = line.replace("|", "\\|")
    return line if len(line) <= width else line[:width - 3] + "..."


def markdown(result):
    """The table for docs/PERF.md: per case, precision and contender the median ms per step,
    the step's peak memory and the time over kfuse's (above 1: kfuse is faster)."""
    t = result["timing"]
    lines = [f"{result['device']}, torch {result['torch']}; `{result['command']}`",
             "",
             f"Median of {t['reps']} training steps (forward + backward; {t['optimizer']}), "
             "contenders interleaved step by step, L2 flushed before each; peak memory: PyTorch's over one "
             "step above what was allocated when it began, for kfuse plus its pipelines' workspace.",
             "",
             "| case | N | precision | contender | ms / step | peak MiB | time / kfuse's |",
             "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    rows = result["rows"]
    for r in rows:
        kfuse_row = next((k for k in rows if k["contender"] == "kfuse" and k["case"] == r["case"]
                          and k["precision"] == r["precision"]), None)
        head = f"| {r['case']} | {r['n']} | {r['precision']} | {r['contender']} |"
        if r.get("error"):
            lines.append(f"{head} failed: {_cell(r['error'])} | - | - |")
            continue
        ms = r["ms"]["median"]
        kfuse_ms = kfuse_row["ms"]["median"] if kfuse_row and kfuse_row.get("ms") else None
        ratio = f"{ms / kfuse_ms:.2f}x" if kfuse_ms else "-"
        peak = f"{r['peak_bytes'] / 2**20:.0f}" if r.get("peak_bytes") is not None else "-"
        lines.append(f"{head} {ms:.3f} | {peak} | {ratio} |")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- contenders

def transformer_mlp_block(features, hidden):
    """examples/transformer_mlp_block.kf as an nn.Module; its state_dict keys are the .kf's names
    with '.' for '_' (fc1.weight is fc1_weight), as Fused maps them."""

    class TransformerMlpBlock(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(features, hidden)
            self.fc2 = nn.Linear(hidden, features)
            self.ln = nn.LayerNorm(features, eps=1e-5)

        def forward(self, x):
            return self.ln(self.fc2(F.gelu(self.fc1(x))) + x)

    return TransformerMlpBlock()


class Contender:
    """One way to run the case's step: its module (a copy of the case's), its optimizer, and
    what it measured."""

    def __init__(self, name, module, step_module, autocast):
        self.name = name
        self.module = module  # whose parameters the optimizer updates
        self.step_module = step_module  # what a step calls: the module, compiled, or Fused
        self.autocast = autocast
        self.optimizer = torch.optim.SGD(module.parameters(), lr=LR, momentum=0.9)
        self.grads = {}  # output dtype -> the fixed output gradient in it
        self.runs = []
        self.error = None
        self.first_call_s = None
        self.peak_bytes = None
        self.extra = {}

    def step(self, x, grad_out):
        """Forward and backward: what the CUDA events enclose."""
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            y = self.step_module(x)
        g = self.grads.get(y.dtype)
        if g is None:
            g = self.grads[y.dtype] = grad_out.to(y.dtype)
        y.backward(g)


def make_contenders(case, precision, names, features):
    """The contenders of one case and precision, each on its own copy of one module."""
    import compare_torch  # bench/, beside this file: the founding chains' modules (needs torch)

    kf, _, _, kind = CASES[case]
    torch.manual_seed(0)
    if kind == "transformer_mlp_block":
        hidden = next(v["shape"][0] for v in kfuse.program(REPO / kf)["values"] if v["name"] == "fc1_weight")
        module, mapping = transformer_mlp_block(features, hidden), None
    else:
        module = compare_torch.make_module(kind, features)
        mapping = {name: key for name, key in compare_torch.PARAM_MAP.items() if key in module.state_dict()}
    module = module.cuda().train()
    out = []
    for name in names:
        copied = copy.deepcopy(module)
        if name == "kfuse":
            fused = kfuse.torch.Fused(copied, REPO / kf, precision=precision, mapping=mapping)
            out.append(Contender(name, copied, fused, autocast=False))
        elif CONTENDERS[name] is None:
            out.append(Contender(name, copied, copied, autocast=precision == "bf16"))
        else:
            out.append(Contender(name, copied, torch.compile(copied, mode=CONTENDERS[name]),
                                 autocast=precision == "bf16"))
    return out


def kfuse_workspace_bytes(fused, x):
    """Bytes the Fused's saving forward and backward pipelines hold outside PyTorch's allocator
    for a step on x."""
    from kfuse.torch_autograd import training_ops

    ops = training_ops(fused._ops["train"])  # the pair a recorded train-mode call runs
    return sum(op.pipeline(fused.precision, x.device).workspace_size(N=x.shape[0])
               for op in (ops.saving, ops.backward))


def _failed(c, e):
    kind = type(e).__name__ if type(e).__module__ == "builtins" else f"{type(e).__module__}.{type(e).__name__}"
    c.error = f"{kind}: {e}"
    print(f"  {c.name}: failed: {_cell(c.error, 400)}", flush=True)


class Step:
    """The step every contender times: the same x and output gradient, the L2 flush before it,
    CUDA events around forward and backward, the optimizer's step after them."""

    def __init__(self, x, grad_out, flush):
        self.x, self.grad_out, self.flush = x, grad_out, flush

    def prepare(self, c):
        c.optimizer.zero_grad()
        self.x.grad = None

    def run(self, c, timed):
        self.prepare(c)
        self.flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        c.step(self.x, self.grad_out)
        end.record()
        c.optimizer.step()
        if timed:
            c.runs.append((start, end))

    def measure_memory(self, c):
        """c.peak_bytes of one step: PyTorch's peak above what was allocated when it began, plus
        for kfuse the workspace its pipelines hold; the optimizer's step after the reading."""
        self.prepare(c)
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        c.step(self.x, self.grad_out)
        torch.cuda.synchronize()
        c.peak_bytes = torch.cuda.max_memory_allocated() - base
        c.optimizer.step()
        if c.name == "kfuse":
            c.extra["torch_peak_bytes"] = c.peak_bytes
            c.extra["kfuse_workspace_bytes"] = kfuse_workspace_bytes(c.step_module, self.x)
            c.peak_bytes += c.extra["kfuse_workspace_bytes"]
            c.extra["used_precision"] = list(c.step_module.used_precision)


def time_contenders(contenders, step, args):
    """The first call of each (it compiles: timed apart), then --warmup and --reps steps with the
    contenders taking turns, then one step each for the memory. A contender that raises keeps
    its reason and leaves; the others go on."""
    for c in contenders:
        try:
            t0 = time.monotonic()
            step.run(c, timed=False)
            torch.cuda.synchronize()
            c.first_call_s = time.monotonic() - t0
        except Exception as e:  # report it in the cell, keep the other contenders
            _failed(c, e)
    live = [c for c in contenders if c.error is None]
    for rep in range(args.warmup + args.reps):
        for c in list(live):
            try:
                step.run(c, timed=rep >= args.warmup)
            except Exception as e:
                _failed(c, e)
                live.remove(c)
    for c in live:
        try:
            step.measure_memory(c)
        except Exception as e:
            _failed(c, e)


def run_case(case, precision, args, flush):
    """Times one case at one precision: the rows of its contenders."""
    n, features = case_dims(case, args.quick)
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    print(f"[{case} N={n} {precision}]", flush=True)
    generator = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, features, device="cuda", generator=generator).requires_grad_(True)
    # The gradient of a loss averaged over the batch: the SGD steps then move the parameters little.
    grad_out = torch.randn(n, features, device="cuda", generator=generator) / n
    contenders = make_contenders(case, precision, args.contenders, features)
    time_contenders(contenders, Step(x, grad_out, flush), args)
    rows = []
    for c in contenders:
        row = {"case": case, "n": n, "features": features, "precision": precision, "contender": c.name,
               "compile_mode": CONTENDERS[c.name], "first_call_s": c.first_call_s, "error": c.error,
               "ms": None, "peak_bytes": c.peak_bytes, **c.extra}
        if c.error is None:
            runs = [s.elapsed_time(e) for s, e in c.runs]
            row["ms"] = {"median": statistics.median(runs), "min": min(runs), "max": max(runs), "runs": runs}
        rows.append(row)
    return rows


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        sys.exit(f"train.py needs PyTorch: {TORCH_MISSING}")
    if not torch.cuda.is_available():
        sys.exit("train.py needs a CUDA GPU (torch.cuda.is_available() is False)")
    import compare_torch  # bench/, beside this file: the L2 flush, Dynamo's limits, the JSON header
    import kfuse.torch  # noqa: F401 (Fused; needs torch)

    compare_torch.raise_dynamo_limits()
    timer = compare_torch.Timer(args.warmup, args.reps)
    start = time.monotonic()
    rows = []
    for case in args.cases:
        for precision in args.precisions:
            rows += run_case(case, precision, args, timer.flush)
            torch._dynamo.reset()  # the case's compiled graphs and their modules go
            torch.cuda.empty_cache()
    result = {
        **compare_torch.result_header(SCHEMA),
        "timing": {"method": "cuda-events", "statistic": "median", "reps": args.reps, "warmup": args.warmup,
                   "l2_bytes": timer.l2_bytes, "l2_flush_bytes": timer.flush_bytes,
                   "step": "forward + backward from a fixed output gradient; x requires grad",
                   "optimizer": f"SGD(lr={LR:g}, momentum=0.9) step after each, not timed"},
        "rows": rows,
        "seconds": time.monotonic() - start,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    print(markdown(result), end="")
    return 1 if any(r["error"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
