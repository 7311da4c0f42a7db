# bench/gemm_alone.py without a GPU: the .kf it writes for every precision and width is valid for
# `kfuse check` and plans one GEMM kernel; bad sizes and precisions are refused by name; a point
# kfuse bench cannot time is a failed row and exit status 1, not a crash.
import importlib.util
import os
import subprocess
import sys

import pytest

from conftest import REPO

TOOL = os.environ.get("KFUSE_TOOL", str(REPO / "build" / "kfuse"))
SCRIPT = REPO / "bench" / "gemm_alone.py"

spec = importlib.util.spec_from_file_location("gemm_alone", SCRIPT)
gemm_alone = importlib.util.module_from_spec(spec)
spec.loader.exec_module(gemm_alone)


@pytest.mark.parametrize("precision", ["tf32", "bf16", "f16"])
@pytest.mark.parametrize("nk", [1024, 8192])
def test_source_plans_one_gemm(tmp_path, precision, nk):
    kf = tmp_path / "g.kf"
    kf.write_text(gemm_alone.source(precision, nk))
    p = subprocess.run([TOOL, "plan", str(kf), "--mode", "eval"], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"plan gemm_alone_{nk} (mode eval): 1 kernel")
    dtype = "f32" if precision == "tf32" else precision
    assert f"reads    x {dtype}[N, {nk}], weight {dtype}[{nk}, {nk}]" in p.stdout


@pytest.mark.parametrize("args, message", [
    (["--nk", "1004"], "argument --nk: 1004 is not a multiple of 8"),
    (["--m", "16,0"], "argument --m: '0' is not a positive integer"),
    (["--m", "x"], "argument --m: 'x' is not a positive integer"),
    (["--precisions", "tf32,fp8"], "--precisions: 'fp8' is not tf32, bf16 or f16"),
])
def test_bad_arguments_are_refused(args, message):
    p = subprocess.run([sys.executable, str(SCRIPT), "--kfuse", TOOL] + args,
                       capture_output=True, text=True)
    assert p.returncode == 2
    assert message in p.stderr, p.stderr


def test_a_point_that_cannot_run_is_a_failed_row(tmp_path):
    probe = subprocess.run([TOOL, "bench", str(REPO / "examples" / "snn_selu.kf"), "--dim", "N=4",
                            "--iters", "1", "--warmup", "0"], capture_output=True, text=True)
    if probe.returncode == 0:
        pytest.skip("a GPU is here: kfuse bench runs")
    p = subprocess.run([sys.executable, str(SCRIPT), "--kfuse", TOOL, "--m", "4", "--nk", "64",
                        "--precisions", "bf16", "--markdown", str(tmp_path / "t.md")],
                       capture_output=True, text=True)
    assert p.returncode == 1
    table = (tmp_path / "t.md").read_text()
    assert "| bf16 | 4 | 64 | failed: exit 1: kfuse bench: error: kfuse bench needs a GPU" in table
