"""The shape sweep's tables (bench/shape_sweep.py): one markdown table per precision from its
JSON ("kfuse-shape-sweep/1", docs/FORMATS.md), rows M x N=K, and the line issue 9's target reads:
the points where kfuse's fused chain is slower than torch.compile's. Standard library only, so
tests/python/test_shape_sweep.py checks it on a made-up result anywhere.
"""


def median(ms):
    """The median of a {median, min, max} object, or a bare median; None where not measured."""
    return ms.get("median") if isinstance(ms, dict) else ms


def ratio(num, den):
    return num / den if isinstance(num, (int, float)) and isinstance(den, (int, float)) and den > 0 else None


def fmt(v, spec=".4f", suffix=""):
    return format(v, spec) + suffix if isinstance(v, (int, float)) else "-"


def config_text(bench):
    """The fused pipeline's GEMM config in short form, from kfuse bench's JSON: its tile (rows x
    columns x blocks per SM) and split-K S, e.g. "128x256x1 S=4"; "-" where none was launched."""
    fused = (bench or {}).get("fused") or {}
    if fused and "gemm_launches" not in fused:
        return "not reported (a kfuse bench without gemm_launches)"
    launches = fused.get("gemm_launches") or []
    return "; ".join(f"{g.get('tile') or 'one tile'} S={g.get('splits')}" for g in launches) or "-"


def slower_than_compile(rows):
    """The rows where both were timed and kfuse's fused median exceeds torch.compile's."""
    return [r for r in rows if ratio(median(r.get("compile_ms")), r.get("kfuse_fused_ms")) is not None
            and r["kfuse_fused_ms"] > median(r["compile_ms"])]


def summary(rows):
    """One line: kfuse slower than torch.compile at how many of the points both were timed at
    (and which), and the points without one of the two, so a gap is never read as a win."""
    compared = [r for r in rows if ratio(median(r.get("compile_ms")), r.get("kfuse_fused_ms")) is not None]
    slower = slower_than_compile(rows)
    line = f"kfuse slower than torch.compile at {len(slower)} of {len(compared)} points"
    if slower:
        line += ": " + ", ".join(f"{r['precision']} M={r['m']} N=K={r['nk']} "
                                 f"({median(r['compile_ms']) / r['kfuse_fused_ms']:.2f}x)" for r in slower)
    missing = len(rows) - len(compared)
    if missing:
        line += f"; {missing} of {len(rows)} points without both times (notes below)"
    return line


def compile_cell(r):
    if median(r.get("compile_ms")) is not None:
        return fmt(median(r["compile_ms"]))
    return "skipped" if r.get("compile_skipped") else "failed" if r.get("compile_error") else "-"


def notes(rows):
    out = []
    for r in rows:
        said = [n for n in (r.get("kfuse_error") and f"kfuse FAILED: {r['kfuse_error'][:300]}",
                            r.get("compile_skipped") and f"torch.compile skipped: {r['compile_skipped']}",
                            r.get("compile_error") and f"torch.compile failed: {r['compile_error'][:200]}",
                            r.get("eager_error") and f"eager failed: {r['eager_error'][:200]}") if n]
        if said:
            out.append(f"- {r['precision']} M={r['m']} N=K={r['nk']}: " + "; ".join(said))
    return out


def markdown(result):
    rows = result["rows"]
    timing = result["timing"]
    fewest = min((r.get("iters", timing["iters"]) for r in rows), default=timing["iters"])
    runs = f"{timing['iters']} timed runs" + (
        f", down to {fewest} where the time budget ran short" if fewest < timing["iters"] else "")
    lines = [
        f"Shape sweep of `{result['chain']}` ({result['mode']} mode) on {result['device']} (torch "
        f"{result['torch']}), `{result['command_line']}`: median ms per call (CUDA events, L2 flushed "
        f"before each run, {runs}); kfuse = `kfuse bench`'s "
        "fused pipeline, cuBLAS = the chain's GEMM alone through cuBLAS (same run), torch.compile "
        f"(`mode=\"default\"`, batch dim {timing['torch_compile_shapes']}) and eager run the PyTorch module "
        "under `torch.no_grad()`; config = the fused GEMM's tile (rows x columns x blocks per SM) and "
        "split-K S as the timed runs launched it.",
        "",
        summary(rows) + ".",
    ]
    for precision in result["grid"]["precisions"]:
        mine = sorted((r for r in rows if r["precision"] == precision), key=lambda r: (r["nk"], r["m"]))
        if not mine:
            continue
        lines += [
            "",
            f"#### {precision} ({result['precision_notes'][precision]})",
            "",
            "| M | N=K | kfuse fused ms | cuBLAS GEMM ms | torch.compile ms | eager ms | fused / cuBLAS "
            "| compile / fused | config |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in mine:
            fused = r.get("kfuse_fused_ms")
            fused_cell = "FAILED" if fused is None and r.get("kfuse_error") else fmt(fused)
            lines.append(
                f"| {r['m']} | {r['nk']} | {fused_cell} | {fmt(r.get('cublas_gemm_ms'))} | {compile_cell(r)} "
                f"| {fmt(median(r.get('eager_ms')))} | {fmt(ratio(fused, r.get('cublas_gemm_ms')), '.2f', 'x')} "
                f"| {fmt(ratio(median(r.get('compile_ms')), fused), '.2f', 'x')} | {r.get('config', '-')} |")
    said = notes(rows)
    return "\n".join(lines + ([""] + said if said else [])) + "\n"
