#!/usr/bin/env python3
"""Checks kfuse's fp64 reference semantics of every pointwise op, and of the feature-group,
per-row and pooling ops, against PyTorch float64.

    python3 bench/op_parity.py BUILD_DIR [--device cuda|cpu]

For each pointwise op listed in docs/DSL.md's op reference (which a unit test keeps equal
to the op table), every expression below is evaluated by `BUILD_DIR/kfuse eval-op` (the
reference interpreter) and by PyTorch in float64 on random inputs and on edge cases (0,
-0, +-1, +-3, the softplus threshold, exp's overflow points, tiny and huge values, +-inf,
NaN). A value agrees when both are NaN, both are the same infinity, or they differ by at
most 1e-13 relative (libm and PyTorch's kernels may round the last bit differently).
groupnorm, instancenorm and the pools run row by row (ROW_CASES) on rows that are random,
offset by 1e3, constant, or hold an outlier, judged against the row's largest magnitude.
Prints one row per expression and exits 1 if any disagrees or an op has no case here.
"""
import argparse
import math
import pathlib
import re
import subprocess
import sys

import torch
import torch.nn.functional as F

EDGE = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 2.9999999, 6.0, 10.0, 19.99, 20.0, 20.01,
        -20.0, 88.7, 89.0, 709.0, 710.0, -710.0, -745.2, 1e-300, -1e-300, 1e-8, -1e-8, 1e30,
        -1e30, math.inf, -math.inf, math.nan]

# op -> [(kfuse expression over a and b, PyTorch float64 on tensors a and b)]
CASES = {
    "add": [("add(a, b)", lambda a, b: a + b)],
    "sub": [("sub(a, b)", lambda a, b: a - b)],
    "mul": [("mul(a, b)", lambda a, b: a * b)],
    "div": [("div(a, b)", lambda a, b: a / b)],
    "maximum": [("maximum(a, b)", torch.maximum)],
    "minimum": [("minimum(a, b)", torch.minimum)],
    "pow": [("pow(a, b)", torch.pow), ("pow(a, 2)", lambda a, b: torch.pow(a, 2.0)),
            ("pow(a, 0.5)", lambda a, b: torch.pow(a, 0.5))],
    "relu": [("relu(a)", lambda a, b: torch.relu(a))],
    "leaky_relu": [("leaky_relu(a)", lambda a, b: F.leaky_relu(a)),
                   ("leaky_relu(a, negative_slope=0.2)", lambda a, b: F.leaky_relu(a, 0.2))],
    "gelu": [("gelu(a)", lambda a, b: F.gelu(a)),
             ('gelu(a, approximate="tanh")', lambda a, b: F.gelu(a, approximate="tanh"))],
    "silu": [("silu(a)", lambda a, b: F.silu(a))],
    "sigmoid": [("sigmoid(a)", lambda a, b: torch.sigmoid(a))],
    "tanh": [("tanh(a)", lambda a, b: torch.tanh(a))],
    "hardtanh": [("hardtanh(a)", lambda a, b: F.hardtanh(a)),
                 ("hardtanh(a, min_val=0, max_val=6)", lambda a, b: F.hardtanh(a, 0.0, 6.0))],
    "clamp": [("clamp(a, min=-0.5, max=2)", lambda a, b: torch.clamp(a, -0.5, 2.0)),
              ("clamp(a, min=0)", lambda a, b: torch.clamp(a, min=0.0)),
              ("clamp(a, max=1)", lambda a, b: torch.clamp(a, max=1.0)),
              ("clamp(a, min=2, max=1)", lambda a, b: torch.clamp(a, 2.0, 1.0))],
    "hardsigmoid": [("hardsigmoid(a)", lambda a, b: F.hardsigmoid(a))],
    "hardswish": [("hardswish(a)", lambda a, b: F.hardswish(a))],
    "mish": [("mish(a)", lambda a, b: F.mish(a))],
    "softplus": [("softplus(a)", lambda a, b: F.softplus(a)),
                 ("softplus(a, beta=2, threshold=5)", lambda a, b: F.softplus(a, 2.0, 5.0))],
    "elu": [("elu(a)", lambda a, b: F.elu(a)), ("elu(a, alpha=0.5)", lambda a, b: F.elu(a, 0.5))],
    "selu": [("selu(a)", lambda a, b: F.selu(a))],
    "logsigmoid": [("logsigmoid(a)", lambda a, b: F.logsigmoid(a))],
    "softsign": [("softsign(a)", lambda a, b: F.softsign(a))],
    "exp": [("exp(a)", lambda a, b: torch.exp(a))],
    "log": [("log(a)", lambda a, b: torch.log(a))],
    "abs": [("abs(a)", lambda a, b: torch.abs(a))],
    "neg": [("neg(a)", lambda a, b: torch.neg(a))],
    "sqrt": [("sqrt(a)", lambda a, b: torch.sqrt(a))],
    "rsqrt": [("rsqrt(a)", lambda a, b: torch.rsqrt(a))],
    "square": [("square(a)", lambda a, b: torch.square(a))],
    "reciprocal": [("reciprocal(a)", lambda a, b: torch.reciprocal(a))],
}

RTOL = 1e-13

# Row ops (normalizations and pooling over the feature axis) on one row `a` of F values:
# op -> [(kfuse expression over a, PyTorch float64 on the row a)]. Judged norm-wise: every
# element within ROW_TOL of the row's largest magnitude (a normalized value near 0 has no
# meaningful relative error).
ROW_CASES = {
    "groupnorm": [(f"groupnorm(a, groups={g})",
                   lambda a, g=g: F.group_norm(a.view(1, -1), g).view(-1)) for g in (1, 3, 32)] +
                 [("groupnorm(a, groups=4, eps=0.5)",
                   lambda a: F.group_norm(a.view(1, -1), 4, eps=0.5).view(-1))],
    "instancenorm": [("instancenorm(a)", lambda a: F.instance_norm(a.view(1, 1, -1)).view(-1)),
                     ("instancenorm(a, eps=0.5)",
                      lambda a: F.instance_norm(a.view(1, 1, -1), eps=0.5).view(-1))],
    "max_pool1d": [("max_pool1d(a, kernel_size=3)",
                    lambda a: F.max_pool1d(a.view(1, 1, -1), 3).view(-1)),
                   ("max_pool1d(a, kernel_size=5, stride=2)",
                    lambda a: F.max_pool1d(a.view(1, 1, -1), 5, 2).view(-1))],
    "avg_pool1d": [("avg_pool1d(a, kernel_size=4)",
                    lambda a: F.avg_pool1d(a.view(1, 1, -1), 4).view(-1)),
                   ("avg_pool1d(a, kernel_size=7, stride=3)",
                    lambda a: F.avg_pool1d(a.view(1, 1, -1), 7, 3).view(-1))],
}
ROW_TOL = 1e-13
ROW_WIDTH = 96  # divisible by every group count above


def row_inputs(seed):
    """Rows of ROW_WIDTH values: standard normal, offset by 1e3 (cancellation), one constant
    row (zero variance), one with a huge outlier."""
    g = torch.Generator().manual_seed(seed)
    rows = [torch.randn(ROW_WIDTH, generator=g, dtype=torch.float64) for _ in range(4)]
    rows.append(torch.randn(ROW_WIDTH, generator=g, dtype=torch.float64) + 1e3)
    rows.append(torch.full((ROW_WIDTH,), 2.5, dtype=torch.float64))
    outlier = torch.randn(ROW_WIDTH, generator=g, dtype=torch.float64)
    outlier[7] = 1e6
    rows.append(outlier)
    return rows


def pointwise_ops(root):
    """The pointwise ops of docs/DSL.md's generated user-op table, in its order."""
    doc = (root / "docs" / "DSL.md").read_text()
    table = doc[doc.index("<!-- begin user ops -->"):doc.index("<!-- end user ops -->")]
    return re.findall(r"^\| `(\w+)\(.*?\| pointwise (?:unary|binary) \|", table, re.M)


def row_ops(root):
    """The feature-group, per-row and pooling ops of docs/DSL.md's user-op table this script
    checks row by row."""
    doc = (root / "docs" / "DSL.md").read_text()
    table = doc[doc.index("<!-- begin user ops -->"):doc.index("<!-- end user ops -->")]
    return [op for op in re.findall(r"^\| `(\w+)\(", table, re.M)
            if op in ("groupnorm", "instancenorm") or op.endswith("_pool1d")]


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    rand = torch.randn(2000, generator=g, dtype=torch.float64) * 3
    wide = (torch.rand(1000, generator=g, dtype=torch.float64) - 0.5) * 60
    a = torch.cat([torch.tensor(EDGE, dtype=torch.float64), rand, wide])
    # b: every edge value against every edge value, then random pairs.
    ea = torch.tensor(EDGE, dtype=torch.float64).repeat_interleave(len(EDGE))
    eb = torch.tensor(EDGE, dtype=torch.float64).repeat(len(EDGE))
    a = torch.cat([a, ea])
    b = torch.cat([torch.randn(len(a) - len(eb), generator=g, dtype=torch.float64) * 3, eb])
    return a, b


def kfuse_eval(kfuse, expr, a, b):
    text = "\n".join(f"{x!r} {y!r}" for x, y in zip(a.tolist(), b.tolist())) + "\n"
    r = subprocess.run([str(kfuse), "eval-op", expr], input=text, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"kfuse eval-op '{expr}' failed:\n{r.stderr}")
    return torch.tensor([float(v) for v in r.stdout.split()], dtype=torch.float64)


def compare(got, want):
    both_nan = torch.isnan(got) & torch.isnan(want)
    same_inf = torch.isinf(want) & (got == want)
    finite = torch.isfinite(want) & torch.isfinite(got)
    rel = torch.zeros_like(want)
    rel[finite] = (got[finite] - want[finite]).abs() / want[finite].abs().clamp_min(1e-300)
    exact = got == want
    ok = both_nan | same_inf | exact | (finite & (rel <= RTOL))
    max_rel = rel[finite & ~exact].max().item() if (finite & ~exact).any() else 0.0
    return ok, max_rel


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("build_dir")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    root = pathlib.Path(__file__).resolve().parent.parent
    kfuse = pathlib.Path(args.build_dir) / "kfuse"
    ops = pointwise_ops(root)
    a, b = inputs(args.seed)
    print(f"PyTorch {torch.__version__} float64 on {args.device}; {len(a)} inputs per expression "
          f"({len(EDGE)} edge values, {len(EDGE) ** 2} edge pairs)\n")
    print(f"{'op':<12} {'expression':<36} {'max rel err':>12} {'disagree':>9}  status")
    failed = 0
    for op in ops:
        if op not in CASES:
            print(f"{op:<12} {'-':<36} {'-':>12} {'-':>9}  NO CASE (add one to CASES)")
            failed += 1
            continue
        for expr, fn in CASES[op]:
            want = fn(a.to(args.device), b.to(args.device)).cpu()
            got = kfuse_eval(kfuse, expr, a, b)
            ok, max_rel = compare(got, want)
            bad = int((~ok).sum())
            print(f"{op:<12} {expr:<36} {max_rel:>12.2e} {bad:>9}  {'ok' if bad == 0 else 'DIFFERS'}")
            if bad:
                failed += 1
                for i in torch.nonzero(~ok).flatten()[:5].tolist():
                    print(f"{'':<14}a={a[i].item()!r} b={b[i].item()!r}: kfuse {got[i].item()!r}, "
                          f"torch {want[i].item()!r}")
    print(f"\n{'op':<12} {'row expression':<36} {'max err/max':>12} {'rows bad':>9}  status")
    rows = row_inputs(args.seed)
    for op in row_ops(root):
        if op not in ROW_CASES:
            print(f"{op:<12} {'-':<36} {'-':>12} {'-':>9}  NO CASE (add one to ROW_CASES)")
            failed += 1
            continue
        for expr, fn in ROW_CASES[op]:
            worst, bad = 0.0, 0
            for row in rows:
                want = fn(row.to(args.device)).cpu()
                got = kfuse_eval(kfuse, expr, row, torch.zeros_like(row))
                scale = want.abs().max().clamp_min(1e-300)
                err = ((got - want).abs().max() / scale).item() if got.shape == want.shape else 1.0
                worst = max(worst, err)
                bad += not err <= ROW_TOL
            print(f"{op:<12} {expr:<36} {worst:>12.2e} {bad:>9}  {'ok' if bad == 0 else 'DIFFERS'}")
            failed += bad != 0
    print(f"\n{'PASS' if failed == 0 else f'FAIL: {failed} expression(s)'}")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
