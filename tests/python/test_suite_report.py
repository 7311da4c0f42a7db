# bench/suite_report.py on canned results, no GPU: the bf16 table puts kfuse bench's fused and
# cuBLAS bf16 numbers beside PyTorch's bf16 rows, with the ratios, and says why a cell is empty;
# kfuse-results.json holds the same figures as flat rows.
import importlib.util
import json
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]

spec = importlib.util.spec_from_file_location("suite_report", REPO / "bench" / "suite_report.py")
suite_report = importlib.util.module_from_spec(spec)
spec.loader.exec_module(suite_report)


def bench(pipeline, mode, fused_ms, cublas_ms, unfused_ms=None, precision="fp32", n=1024):
    def contender(ms):
        if ms is None:
            return {"supported": False, "reason": "a reason", "ms": None}
        return {"supported": True, "ms": {"median": ms}, "percent_of_peak": 70.0}

    return {"schema": "kfuse-bench/1", "pipeline": pipeline, "mode": mode, "precision": precision,
            "dims": {"N": n}, "gemm": {"flop": 2 * n * 8192 * 8192, "operands": "bf16"},
            "peak": {"tflops": 989.4, "assumed": "bf16 tensor core, H100/H200 SXM dense, datasheet",
                     "gemm_at_peak_ms": 0.139},
            "bytes": {"minimum": 1 << 27},
            "fused": contender(fused_ms), "unfused": contender(unfused_ms),
            "cublas_gemm": contender(cublas_ms),
            "ratios": {"fused_over_cublas_gemm": fused_ms / cublas_ms if fused_ms and cublas_ms else None}}


@pytest.fixture
def work(tmp_path):
    w = tmp_path / "work"
    (w / "bench").mkdir(parents=True)
    (w / "status").mkdir()
    (w / "environment.txt").write_text("date: 2026-01-01T00:00:00Z\ngpu: NVIDIA H100 80GB HBM3\n")
    (w / "status" / "phases.tsv").write_text("bench\t0\t12\tkfuse bench ...\n")
    benches = [bench("gemm_scale_bn_bf16", "train", 0.21, 0.20, 0.45),
               bench("gemm_scale_bn_bf16", "eval", 0.19, 0.20, 0.30)]
    for b in benches:
        (w / "bench" / f"{b['pipeline']}.{b['mode']}.bf16.json").write_text(json.dumps(b))
    torch_rows = [{"case": "gemm_scale_bn_bf16", "n": 1024, "mode": "train", "precision": "bf16",
                   "eager_ms": {"median": 0.30}, "compile_ms": {"median": 0.29},
                   "kfuse_fused_ms": 0.21, "speedup_vs_eager": 0.30 / 0.21,
                   "speedup_vs_compile": 0.29 / 0.21}]
    checks = [{"case": "gemm_scale_bn_bf16", "n": 1024, "mode": "train", "precision": "bf16",
               "steps": 3, "bound": 2e-2, "supported": True, "pass": False, "within_bound": True,
               "within_torch_factor": False, "worst_over_torch": 1.8, "torch_error_factor": 1.5,
               "tensors": {"out0": {"kfuse_vs_torch64": {"rel": 3e-3, "max_abs": 1e-2},
                                    "torch_vs_torch64": {"rel": 2e-3, "max_abs": 1e-2}}}},
              {"case": "gemm_scale_bn_bf16", "n": 1024, "mode": "eval", "precision": "bf16",
               "steps": 0, "bound": 2e-2, "supported": True, "pass": None,
               "skipped": "--deadline-s 300 passed before this check ran"}]
    (w / "torch.json").write_text(json.dumps({"command": "compare_torch.py", "torch": "2.x",
                                              "rows": torch_rows, "checks": checks}))
    return w


def section(text, title):
    """The lines of the table under the heading that starts with `title`."""
    body = text.split("\n" + title, 1)[1]
    return body.split("\n###", 1)[0]


def row(text, start):
    lines = [line for line in text.splitlines() if line.startswith(start)]
    assert len(lines) == 1, (start, lines)
    return [cell.strip() for cell in lines[0].strip("|").split("|")]


def test_bf16_table_ratios_and_empty_cells(work, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    suite_report.merge(str(work), str(out))
    text = (out / "perf_tables.md").read_text()
    bf16 = section(text, "### bf16: kfuse fused vs cuBLAS's bf16 GEMM alone vs PyTorch bf16")
    # case | N | mode | fused | cuBLAS | unfused | eager | compile | f/cuBLAS | vs eager | vs compile | % peak
    assert row(bf16, "| gemm_scale_bn_bf16 | 1024 | train |") == [
        "gemm_scale_bn_bf16", "1024", "train", "0.210", "0.200", "0.450", "0.300", "0.290",
        "1.05", "1.43", "1.38", "70.0"]
    assert row(bf16, "| gemm_scale_bn_bf16 | 1024 | eval |")[3:9] == [
        "0.190", "0.200", "0.300", "-", "-", "0.95"]
    # A case the suite did not bench says so.
    assert row(bf16, "| gemm_bn_scale_softmax_bf16 | 1024 | train |")[3] == "not run"
    assert "- peak assumed: bf16 tensor core, H100/H200 SXM dense, datasheet" in bf16
    # The output check: the factor over PyTorch's own error fails a bf16 row within its bound.
    assert "FAIL: 1.80x PyTorch's error (at most 1.5x)" in text
    assert "skipped: --deadline-s 300 passed before this check ran" in text
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == "kfuse-gpu-suite/1"
    assert len(results["bench"]) == 2


def test_the_figures_as_flat_rows(work, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (work / "environment.txt").write_text("date: 2026-01-01T00:00:00Z\n"
                                          "gpu: NVIDIA H100 80GB HBM3, 580.159.04, 81559 MiB, 1980 MHz\n"
                                          "commit: 0123456789abcdef\n")
    (work / "compile.tsv").write_text("gemm_scale_bn\ttf32\teval\tcold\t0\t1.2\tcompiled in 823.0 ms (NVRTC)\n"
                                      "gemm_scale_bn\ttf32\teval\twarm\t0\t0.3\tcompiled in 0.9 ms (cache)\n")
    suite_report.merge(str(work), str(out))
    flat = json.loads((out / "kfuse-results.json").read_text())
    assert (flat["schema"], flat["card"], flat["driver"], flat["date"]) == (
        "kfuse-results/1", "NVIDIA H100 80GB HBM3", "580.159.04", "2026-01-01")
    by = {(x["table"], x["case"], x["mode"]): x for x in flat["rows"]}
    train = by[("founding", "gemm_scale_bn_bf16", "train")]
    assert (train["precision"], train["dims"], train["kfuse_ms"], train["baseline"], train["baseline_ms"]) == (
        "bf16", {"N": 1024}, 0.21, "cublas_gemm", 0.20)
    assert train["ratio"] == pytest.approx(1.05) and train["ratio_of"] == "kfuse_ms / baseline_ms"
    assert train["others_ms"] == {"unfused": 0.45, "eager": 0.30, "torch_compile": 0.29}
    assert (train["command"], train["tree"], train["card"]) == ("kfuse bench ...", "0123456", "NVIDIA H100 80GB HBM3")
    assert by[("founding", "gemm_scale_bn_bf16", "eval")]["others_ms"]["eager"] is None
    cold = by[("cold_compile", "gemm_scale_bn", "eval")]
    assert (cold["precision"], cold["kfuse_ms"], cold["ratio"]) == ("tf32", 823.0, None)
    assert len(flat["rows"]) == 3  # the warm compile is not a row


def test_summary_lists_bf16_rows(work, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    suite_report.merge(str(work), str(out))
    suite_report.summary(str(out))
    printed = capsys.readouterr().out
    assert any(line.startswith("gemm_scale_bn_bf16") and " bf16 " in line and "0.210" in line
               for line in printed.splitlines())
    assert "gemm_scale_bn_bf16/eval/bf16: skipped" in printed


def test_usage_is_refused():
    with pytest.raises(SystemExit, match="usage: suite_report.py merge|summary WORK OUT"):
        suite_report.main(["suite_report.py", "bogus"])


@pytest.mark.parametrize("phase, schema, table", [
    ("examples", "kfuse-examples-torch/1", "| example | dims |\n| --- | --- |\n| snn_selu | N=512 |\n"),
    ("sweep", "kfuse-shape-sweep/1", "| M | N=K |\n| ---: | ---: |\n| 128 | 2048 |\n"),
])
def test_the_examples_and_sweep_tables_and_json_join_the_report(work, tmp_path, phase, schema, table):
    out = tmp_path / "out"
    out.mkdir()
    (work / f"{phase}.md").write_text(table)
    (work / f"{phase}.json").write_text(json.dumps({"schema": schema, "rows": []}))
    suite_report.merge(str(work), str(out))
    assert (out / "perf_tables.md").read_text().endswith(table)
    assert json.loads((out / "results.json").read_text())[phase]["schema"] == schema


def test_summary_ends_with_the_sweeps_line(work, tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    line = "kfuse slower than torch.compile at 0 of 36 points"
    (work / "sweep.json").write_text(json.dumps({"schema": "kfuse-shape-sweep/1", "rows": [], "summary": line}))
    suite_report.merge(str(work), str(out))
    suite_report.summary(str(out))
    assert capsys.readouterr().out.rstrip().endswith("shape sweep: " + line)
