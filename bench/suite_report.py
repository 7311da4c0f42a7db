#!/usr/bin/env python3
"""The GPU suite's report (bench/gpu_suite.sh): merges the pieces a run left in WORK into
OUT/results.json, OUT/kfuse-results.json and OUT/perf_tables.md, or prints the short summary
table the suite ends with. kfuse-results.json holds the run's figures as flat rows
("kfuse-results/1", docs/FORMATS.md), the format of bench/results/<date>-<card>.json from which
docs/PERF.md's tables are made.
Standard library only, so it runs (and tests/python/test_suite_report.py tests it) anywhere.

    python3 bench/suite_report.py merge|summary WORK OUT

WORK holds environment.txt, status/phases.tsv, bench/<case>.<mode>.<precision>.json (kfuse
bench --json), compile.tsv, torch.json (compare_torch.py --out), host_overhead.md,
examples.json and examples.md (examples_torch.py --out, --markdown), and sweep.json and
sweep.md (shape_sweep.py --out, --markdown).
"""
import glob
import json
import os
import sys

CASES = [("gemm_bn_scale_softmax", 1024), ("gemm_scale_bn", 1024), ("gemm_scale_bn_4096", 16384)]
# The bf16 founding cases: the f32 case's name + "_bf16", benched once at kfuse's --precision
# fp32 (bf16 operands have no other), compared with PyTorch's "bf16" rows.
BF16_CASES = [(case + "_bf16", n) for case, n in CASES]


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


def merge(work, out):
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
            case, precision, mode, phase, rc, wall, first = line.rstrip("\n").split("\t", 6)
            kfuse_ms = None
            if " ms (" in first:
                try:
                    kfuse_ms = float(first.rsplit(" ms (", 1)[0].rsplit(" ", 1)[1])
                except ValueError:
                    pass
            compile_rows.append({"case": case, "precision": precision, "mode": mode, "phase": phase, "rc": int(rc),
                                 "wall_s": float(wall) if wall else None, "kfuse_ms": kfuse_ms,
                                 "output": first})
    torch_result = load(os.path.join(work, "torch.json"))
    results = {"schema": "kfuse-gpu-suite/1", "environment": env, "phases": phases,
               "bench": benches, "compile": compile_rows, "torch": torch_result,
               "examples": load(os.path.join(work, "examples.json")),
               "sweep": load(os.path.join(work, "sweep.json"))}
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out, "kfuse-results.json"), "w") as f:
        json.dump(flat_results(results), f, indent=1)
    with open(os.path.join(out, "perf_tables.md"), "w") as f:
        f.write(tables(results))
        for extra in ("host_overhead.md", "examples.md", "sweep.md"):
            path = os.path.join(work, extra)
            if os.path.exists(path):
                f.write("\n" + open(path).read())


def flat_results(r):
    """The run's figures as "kfuse-results/1": one row per case, precision, mode and dims, each
    with its baseline, the ratio, and what produced it (the phase's command, tree, card, date)."""
    env = r["environment"]
    gpu = [part.strip() for part in env.get("gpu", "").split(",")]
    card, date, tree = gpu[0] or None, env.get("date", "")[:10] or None, env.get("commit", "")[:7] or None
    commands = {p["phase"]: p["command"] for p in r["phases"]}

    def row(table, case, precision, mode, dims, kfuse_ms, baseline, baseline_ms, ratio_of, **more):
        ratio = None
        timed = [x for x in (kfuse_ms, baseline_ms) if isinstance(x, (int, float)) and x > 0]
        if len(timed) == 2:
            ratio = kfuse_ms / baseline_ms if ratio_of == "kfuse_ms / baseline_ms" else baseline_ms / kfuse_ms
        return {"table": table, "case": case, "precision": precision, "mode": mode, "dims": dims,
                "kfuse_ms": kfuse_ms, "baseline": baseline, "baseline_ms": baseline_ms, "ratio": ratio,
                "ratio_of": ratio_of if ratio is not None else None, **more,
                "command": commands.get({"founding": "bench", "cold_compile": "compile"}.get(table, table)),
                "tree": tree, "card": card, "date": date}

    torch_rows = {(x["case"], x["mode"], x["precision"]): x for x in ((r.get("torch") or {}).get("rows") or [])}
    rows = []
    for b in r["bench"]:
        case = b.get("pipeline") or ""
        precision = "bf16" if case.endswith("_bf16") else b.get("precision")
        tr = torch_rows.get((case, b.get("mode"), precision)) or {}
        others = {"unfused": median(b.get("unfused")), "eager": (tr.get("eager_ms") or {}).get("median"),
                  "torch_compile": (tr.get("compile_ms") or {}).get("median")}
        rows.append(row("founding", case, precision, b.get("mode"), b.get("dims"), median(b.get("fused")),
                        "cublas_gemm", median(b.get("cublas_gemm")), "kfuse_ms / baseline_ms", others_ms=others))
    for c in r["compile"]:
        if c["phase"] == "cold":
            rows.append(row("cold_compile", c["case"], c["precision"], c["mode"], {}, c["kfuse_ms"],
                            None, None, None))
    for x in (r.get("examples") or {}).get("rows") or []:
        name = x.get("example", "")
        precision = "bf16" if name.endswith("_bf16") else "f16" if name.endswith("_f16") else "fp32"
        rows.append(row("examples", name, precision, x.get("mode"), x.get("dims"), x.get("kfuse_fused_ms"),
                        "torch_compile", (x.get("compile_ms") or {}).get("median"), "baseline_ms / kfuse_ms",
                        others_ms={"eager": (x.get("eager_ms") or {}).get("median"),
                                   "kfuse_torch_fused": (x.get("kfuse_python_ms") or {}).get("median"),
                                   "unfused": x.get("kfuse_unfused_ms")},
                        check="PASS" if (x.get("check") or {}).get("pass") else "FAIL"))
    sweep = r.get("sweep") or {}
    for x in sweep.get("rows") or []:
        case = sweep.get("chain", "gemm_bn_scale_softmax") + ("_bf16" if x.get("precision") == "bf16" else "")
        rows.append(row("shape_sweep", case, x.get("precision"), sweep.get("mode"), {"M": x.get("m"), "N=K": x.get("nk")},
                        x.get("kfuse_fused_ms"), "cublas_gemm", x.get("cublas_gemm_ms"), "kfuse_ms / baseline_ms",
                        others_ms={"torch_compile": (x.get("compile_ms") or {}).get("median"),
                                   "eager": (x.get("eager_ms") or {}).get("median")},
                        config=x.get("config")))
    return {"schema": "kfuse-results/1", "date": date, "card": card,
            "driver": gpu[1] if len(gpu) > 1 and gpu[1] else None, "rows": rows}


def bench_for(results, case, mode, precision):
    for b in results["bench"]:
        if b.get("pipeline") == case and b.get("mode") == mode and b.get("precision") == precision:
            return b
    return None


def tables(r):
    env = r["environment"]
    t = []
    t.append("<!-- generated by bench/gpu_suite.sh: the run's tables; docs/PERF.md's come from "
             "kfuse-results.json -->\n")
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

    t.extend(bf16_table(r))

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
        t.append("PyTorch rel err: PyTorch at the row's precision (fp32, tf32 or bf16) against float64. "
                 "A bf16 row passes within its bound and within 1.5x of PyTorch bf16's own error.\n")
        t.append("| case | N | mode | precision | steps | tensor | kfuse rel err | kfuse max abs | PyTorch rel err | bound | verdict |")
        t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for c in tr.get("checks", []):
            head = f"| {c['case']} | {c['n']} | {c['mode']} | {c['precision']} | {c['steps']} "
            if c.get("skipped"):
                t.append(head + f"| - | - | - | - | {c['bound']:.0e} | skipped: {c['skipped']} |")
                continue
            if "tensors" not in c:
                why = c.get("reason") or c.get("error")
                t.append(head + f"| - | - | - | - | {c['bound']:.0e} | {'not supported' if not c.get('supported', True) else 'failed'}: {' '.join(str(why).split())[:120]} |")
                continue
            for name, e in c["tensors"].items():
                k, p = e["kfuse_vs_torch64"], e["torch_vs_torch64"]
                t.append(head + f"| {name} | {num(k.get('rel'), '.2e')} | {num(k.get('max_abs'), '.2e')} "
                         f"| {num(p.get('rel'), '.2e')} | {c['bound']:.0e} | {check_verdict(c)} |")
        t.append("")

    t.append("### Compile time (NVRTC cold vs disk cache warm)\n")
    t.append("Command: `KFUSE_CACHE_DIR=$(mktemp -d) kfuse compile examples/CASE.kf --mode M [--precision P]`, "
             "run twice (kfuse's own figure; wall = the whole process)\n")
    t.append("| case | precision | mode | cold ms | warm ms | cold wall s | warm wall s |")
    t.append("| --- | --- | --- | --- | --- | --- | --- |")
    by = {}
    for c in r["compile"]:
        by.setdefault((c["case"], c["precision"], c["mode"]), {})[c["phase"]] = c
    for (case, precision, mode), d in by.items():
        cold, warm = d.get("cold", {}), d.get("warm", {})
        t.append(f"| {case} | {precision} | {mode} | {num(cold.get('kfuse_ms'), '.1f')} | {num(warm.get('kfuse_ms'), '.1f')} "
                 f"| {num(cold.get('wall_s'), '.2f')} | {num(warm.get('wall_s'), '.2f')} |")
    t.append("")

    t.append("### Floors\n")
    bw = ((tr or {}).get("bandwidth") or {}).get("bytes_per_s")
    t.append("GEMM FLOPs at the assumed peak; minimum bytes (each input/param/state read once, each "
             "output/state written once) at the measured copy bandwidth"
             + (f" ({bw / 1e12:.2f} TB/s, {(tr or {}).get('bandwidth', {}).get('method')})" if bw else " (not measured)")
             + "; the floor is the larger.\n")
    t.append("The bf16 columns are the bf16 case's (bf16 activations and weight: half the bytes).\n")
    t.append("| case | N | mode | GFLOP | fp32 GEMM at peak ms | tf32 GEMM at peak ms | bf16 GEMM at peak ms "
             "| minimum MiB | bytes at bandwidth ms | bf16 minimum MiB | bf16 bytes at bandwidth ms |")
    t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for case, n in CASES:
        for mode in ("train", "eval"):
            b32, b_tf = bench_for(r, case, mode, "fp32"), bench_for(r, case, mode, "tf32")
            b16 = bench_for(r, case + "_bf16", mode, "fp32")
            if not b32 and not b_tf and not b16:
                continue
            b = b32 or b_tf or b16
            minimum = (b32 or b_tf or {}).get("bytes", {}).get("minimum")
            min16 = ((b16 or {}).get("bytes") or {}).get("minimum")
            t.append(f"| {case} | {b['dims'].get('N')} | {mode} | {num((b.get('gemm') or {}).get('flop', 0) / 1e9, '.1f')} "
                     f"| {ms(((b32 or {}).get('peak') or {}).get('gemm_at_peak_ms'))} "
                     f"| {ms(((b_tf or {}).get('peak') or {}).get('gemm_at_peak_ms'))} "
                     f"| {ms(((b16 or {}).get('peak') or {}).get('gemm_at_peak_ms'))} "
                     f"| {num(minimum / 2**20 if minimum else None, '.1f')} "
                     f"| {ms(minimum / bw * 1e3 if minimum and bw else None)} "
                     f"| {num(min16 / 2**20 if min16 else None, '.1f')} "
                     f"| {ms(min16 / bw * 1e3 if min16 and bw else None)} |")
    t.append("")

    t.append("### Suite phases\n")
    t.append("| phase | exit status | seconds | command |")
    t.append("| --- | --- | --- | --- |")
    for p in r["phases"]:
        t.append(f"| {p['phase']} | {p['rc']} | {p['seconds']} | `{p['command']}` |")
    return "\n".join(t) + "\n"


def fused_cell(b):
    """The fused contender's median, or why there is none."""
    f = (b or {}).get("fused") or {}
    if not b:
        return "not run"
    if not f.get("supported", True):
        return "not supported"
    if median(f) is None:
        return "failed" if f.get("error") else "-"
    return ms(median(f))


def check_verdict(c):
    if c.get("pass"):
        return "PASS"
    why = []
    if c.get("within_bound") is False:
        why.append("over the bound")
    if c.get("within_torch_factor") is False:
        why.append(f"{num(c.get('worst_over_torch'), '.2f')}x PyTorch's error (at most "
                   f"{c.get('torch_error_factor')}x)")
    return "FAIL" + (f": {'; '.join(why)}" if why else "")


def bf16_table(r):
    """The bf16 founding cases: kfuse fused vs cuBLAS's bf16 GEMM alone (one kfuse bench run)
    vs PyTorch bf16 eager and torch.compile (compare_torch.py's "bf16" rows)."""
    torch_rows = {(x["case"], x["mode"]): x for x in ((r.get("torch") or {}).get("rows") or [])
                  if x.get("precision") == "bf16"}
    t = ["### bf16: kfuse fused vs cuBLAS's bf16 GEMM alone vs PyTorch bf16\n"]
    t.append("Commands: `kfuse bench examples/CASE_bf16.kf --dim N=... --mode M --iters 100 --warmup 10 "
             "--json FILE` (bf16 operands, fp32 accumulation; cuBLAS: cublasGemmEx on bf16 A and B, "
             "CUBLAS_COMPUTE_32F, bf16 C) and `bench/compare_torch.py` (PyTorch: the module in bf16 with "
             "BatchNorm1d in f32, as the .kf declares). Median ms; fused / cuBLAS < 1: faster than the GEMM "
             "alone; speedup = PyTorch ms / kfuse fused ms. Targets: fused / cuBLAS <= 1.05, speedup vs "
             "torch.compile >= 1.3.\n")
    t.append("| case | N | mode | fused ms | cuBLAS bf16 GEMM ms | unfused ms | eager ms | torch.compile ms "
             "| fused / cuBLAS | speedup vs eager | speedup vs compile | fused % peak |")
    t.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    peaks, notes = set(), set()
    for case, n in BF16_CASES:
        for mode in ("train", "eval"):
            b = bench_for(r, case, mode, "fp32")
            tr = torch_rows.get((case, mode)) or {}
            if b:
                peaks.add((b.get("peak") or {}).get("assumed"))
                for key in ("fused", "unfused", "cublas_gemm"):
                    c = b.get(key) or {}
                    if not c.get("supported", True) or c.get("error"):
                        notes.add(f"{case} {mode} {key}: "
                                  + " ".join(str(c.get("reason") or c.get("error")).split())[:200])
            f = (b or {}).get("fused") or {}
            t.append(f"| {case} | {(b or {}).get('dims', {}).get('N', n)} | {mode} | {fused_cell(b)} "
                     f"| {ms(median((b or {}).get('cublas_gemm')))} | {ms(median((b or {}).get('unfused')))} "
                     f"| {ms((tr.get('eager_ms') or {}).get('median'))} "
                     f"| {ms((tr.get('compile_ms') or {}).get('median'))} "
                     f"| {num(((b or {}).get('ratios') or {}).get('fused_over_cublas_gemm'), '.2f')} "
                     f"| {num(tr.get('speedup_vs_eager'), '.2f')} | {num(tr.get('speedup_vs_compile'), '.2f')} "
                     f"| {num(f.get('percent_of_peak'), '.1f')} |")
    t.append("")
    for p in sorted(x for x in peaks if x):
        t.append(f"- peak assumed: {p}")
    for note in sorted(notes):
        t.append(f"- {note}")
    t.append("")
    return t


def summary(out):
    r = load(os.path.join(out, "results.json")) or {"phases": [], "bench": [], "torch": None}
    torch_rows = {(x["case"], x["mode"], x["precision"]): x for x in ((r.get("torch") or {}).get("rows") or [])}
    print("\n=== kfuse GPU suite summary ===")
    print("phases: " + ", ".join(f"{p['phase']} {'ok' if p['rc'] == 0 else 'rc=' + str(p['rc'])} ({p['seconds']}s)"
                                 for p in r["phases"]))
    print(f"{'case':<28} {'mode':<5} {'prec':<6} {'fused':>8} {'unfused':>8} {'cuBLAS':>8} "
          f"{'f/cuBLAS':>8} {'eager':>8} {'compile':>8}  (median ms)")
    rows = [(case, precision, precision) for precision in ("fp32", "3xtf32", "tf32") for case, _ in CASES]
    rows += [(case, "fp32", "bf16") for case, _ in BF16_CASES]
    for case, precision, label in rows:
        for mode in ("train", "eval"):
            b = bench_for(r, case, mode, precision) or {}
            f = b.get("fused") or {}
            fused = ms(median(f)) if f.get("supported", True) else "n/s"
            tr = torch_rows.get((case, mode, label)) or {}
            print(f"{case:<28} {mode:<5} {label:<6} {fused:>8} {ms(median(b.get('unfused'))):>8} "
                  f"{ms(median(b.get('cublas_gemm'))):>8} "
                  f"{num((b.get('ratios') or {}).get('fused_over_cublas_gemm'), '.2f'):>8} "
                  f"{ms((tr.get('eager_ms') or {}).get('median')):>8} "
                  f"{ms((tr.get('compile_ms') or {}).get('median')):>8}")
    checks = (r.get("torch") or {}).get("checks") or []
    if checks:
        verdicts = [f"{c['case']}/{c['mode']}/{c['precision']}: "
                    + ("n/s" if not c.get("supported", True) else "skipped" if c.get("skipped")
                       else "PASS" if c.get("pass") else "FAIL")
                    for c in checks]
        print("output vs PyTorch f64: " + ", ".join(verdicts))
    if r.get("sweep"):
        print("shape sweep: " + r["sweep"].get("summary", "no summary"))


def main(argv):
    if len(argv) != 4 or argv[1] not in ("merge", "summary"):
        sys.exit("usage: suite_report.py merge|summary WORK OUT")
    _, what, work, out = argv
    if what == "merge":
        merge(work, out)
    else:
        summary(out)


if __name__ == "__main__":
    main(sys.argv)
