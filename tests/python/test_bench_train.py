# bench/train.py without a GPU or PyTorch: its options and their refusals, the sizes it reads
# from the .kf files, the markdown table from a made-up result, its refusal to start without
# PyTorch, and that examples/transformer_mlp_block.kf (its third case) checks and has a backward.
import importlib.util
import os
import subprocess
import sys

import pytest

import kfuse

from conftest import REPO

TOOL = os.environ.get("KFUSE_TOOL", str(REPO / "build" / "kfuse"))
SCRIPT = REPO / "bench" / "train.py"
BLOCK = REPO / "examples" / "transformer_mlp_block.kf"

spec = importlib.util.spec_from_file_location("train", SCRIPT)
train = importlib.util.module_from_spec(spec)
spec.loader.exec_module(train)


def test_defaults_are_every_case_precision_and_contender():
    args = train.parse_args([])
    assert args.cases == ["gemm_bn_scale_softmax", "gemm_scale_bn", "transformer_mlp_block"]
    assert args.precisions == ["tf32", "bf16"]
    assert args.contenders == ["kfuse", "eager", "compile", "max-autotune"]
    assert (args.reps, args.warmup, args.json, args.quick) == (50, 5, None, False)


def test_quick_fills_in_only_what_was_not_given():
    args = train.parse_args(["--quick"])
    assert (args.cases, args.precisions, args.contenders) == (["transformer_mlp_block"], ["tf32"],
                                                              ["kfuse", "eager", "compile"])
    assert (args.reps, args.warmup) == (5, 2)
    args = train.parse_args(["--quick", "--precisions", "bf16", "--reps", "3", "--contenders", "max-autotune"])
    assert args.precisions == ["bf16"] and args.reps == 3
    # kfuse is always timed: the ratios are to its time.
    assert args.contenders == ["kfuse", "max-autotune"]


@pytest.mark.parametrize("argv, message", [
    (["--cases", "gemm_scale_bn,resnet"], "--cases: 'resnet' is not one of gemm_bn_scale_softmax, gemm_scale_bn, "
                                          "transformer_mlp_block"),
    (["--cases", ","], "--cases: no names given"),
    (["--precisions", "tf32,fp32"], "--precisions: 'fp32' is not one of tf32, bf16"),
    (["--precisions", "tf32,tf32"], "--precisions: a name is given twice in 'tf32,tf32'"),
    (["--contenders", "inductor"], "--contenders: 'inductor' is not one of kfuse, eager, compile, max-autotune"),
    (["--reps", "29"], "--reps 29: a median needs at least 30 timed steps (--quick for a smoke run with fewer)"),
    (["--quick", "--reps", "0"], "--reps 0: a median needs at least 30 timed steps"),
    (["--warmup", "-1"], "--warmup -1: must be 0 or more"),
    (["--reps", "many"], "argument --reps: invalid int value: 'many'"),
    (["--json", "/nonexistent-dir/out.json"], "--json /nonexistent-dir/out.json: the directory /nonexistent-dir "
                                              "does not exist"),
])
def test_bad_arguments_are_refused_by_name(capsys, argv, message):
    with pytest.raises(SystemExit) as e:
        train.parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_sizes_come_from_the_kf_files():
    assert train.case_dims("gemm_bn_scale_softmax") == (1024, 8192)
    assert train.case_dims("gemm_scale_bn", quick=True) == (128, 8192)
    assert train.case_dims("transformer_mlp_block") == (8192, 768)
    # Every case's N is the one its .kf's comment documents.
    for case, (kf, n, _, _) in train.CASES.items():
        assert f"`--dim N={n}`" in (REPO / kf).read_text(), case


def row(case, precision, contender, ms=None, peak_mib=None, error=None):
    return {"case": case, "n": 1024, "precision": precision, "contender": contender, "error": error,
            "ms": None if ms is None else {"median": ms, "min": ms, "max": ms, "runs": [ms]},
            "peak_bytes": None if peak_mib is None else peak_mib * 2**20}


def result(rows):
    return {"schema": train.SCHEMA, "device": "NVIDIA H100 80GB HBM3", "torch": "2.11.0",
            "command": "python3 bench/train.py --cases gemm_scale_bn",
            "timing": {"reps": 50, "optimizer": "SGD(lr=0.0001, momentum=0.9) step after each, not timed"},
            "rows": rows}


def test_markdown_table_with_ratios_to_kfuse_and_failed_cells():
    text = train.markdown(result([
        row("gemm_scale_bn", "tf32", "kfuse", 2.0, 300),
        row("gemm_scale_bn", "tf32", "eager", 3.0, 420),
        row("gemm_scale_bn", "tf32", "compile", error="torch._dynamo.exc.BackendCompilerFailed: backend='inductor' "
                                                      "raised:\nRuntimeError: boom | bang"),
        row("gemm_scale_bn", "bf16", "kfuse", error="kfuse.Error: linear of bf16 operands runs on the Hopper GEMM, which needs the inner dim a constant multiple of 8"),
        row("gemm_scale_bn", "bf16", "eager", 1.5, 210),
    ]))
    lines = text.splitlines()
    assert lines[0] == "NVIDIA H100 80GB HBM3, torch 2.11.0; `python3 bench/train.py --cases gemm_scale_bn`"
    assert lines[2] == ("Median of 50 training steps (forward + backward; SGD(lr=0.0001, momentum=0.9) step after "
                        "each, not timed), contenders interleaved step by step, L2 flushed before each; peak memory: "
                        "PyTorch's over one step above what was allocated when it began, for kfuse plus its "
                        "pipelines' workspace.")
    table = lines[4:]
    assert table[:2] == ["| case | N | precision | contender | ms / step | peak MiB | time / kfuse's |",
                         "| --- | ---: | --- | --- | ---: | ---: | ---: |"]
    assert table[2:] == [
        "| gemm_scale_bn | 1024 | tf32 | kfuse | 2.000 | 300 | 1.00x |",
        "| gemm_scale_bn | 1024 | tf32 | eager | 3.000 | 420 | 1.50x |",
        # The first line of the reason, its pipe escaped: the row stays one row of the table.
        "| gemm_scale_bn | 1024 | tf32 | compile | failed: torch._dynamo.exc.BackendCompilerFailed: "
        "backend='inductor' raised: | - | - |",
        "| gemm_scale_bn | 1024 | bf16 | kfuse | failed: kfuse.Error: linear of bf16 operands runs on the Hopper GEMM, which needs the inner dim a constant multiple of 8 | - | - |",
        # No kfuse time to compare with.
        "| gemm_scale_bn | 1024 | bf16 | eager | 1.500 | 210 | - |",
    ]


def test_a_long_reason_is_cut_and_a_pipe_escaped():
    cell = train._cell("x" * 100 + " | " + "y" * 100)
    assert len(cell) == 160 and cell.endswith("...") and "\\|" in cell


def test_refuses_to_start_without_a_gpu():
    """With PyTorch but no CUDA device: one line saying so, exit status 1."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: the guard is not reached")
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True)
    assert p.returncode == 1
    assert p.stderr == "train.py needs a CUDA GPU (torch.cuda.is_available() is False)\n", p.stderr


def test_refuses_to_start_without_torch():
    """Parsing works without PyTorch; running says what is missing, exit status 1."""
    if importlib.util.find_spec("torch") is not None:
        pytest.skip("PyTorch is installed here: the guard is not reached")
    p = subprocess.run([sys.executable, str(SCRIPT), "--quick"], capture_output=True, text=True)
    assert p.returncode == 1
    assert p.stderr.startswith("train.py needs PyTorch: No module named 'torch'"), p.stderr


def test_transformer_block_checks_and_differentiates():
    program = kfuse.program(BLOCK)
    shapes = {v["name"]: v["shape"] for v in program["values"] if v["kind"] in ("input", "param")}
    assert shapes == {"x": ["N", 768], "fc1_weight": [3072, 768], "fc1_bias": [3072],
                      "fc2_weight": [768, 3072], "fc2_bias": [768], "ln_weight": [768], "ln_bias": [768]}
    assert [v["op"] for v in program["values"] if v["kind"] == "op"] == ["linear", "gelu", "linear", "add", "layernorm"]
    for mode in ("train", "eval"):
        assert sorted(kfuse.grad(BLOCK, mode=mode)["gradients"]) == sorted(shapes)


@pytest.mark.skipif(not os.path.exists(TOOL), reason=f"no kfuse tool at {TOOL} (build it or set KFUSE_TOOL)")
def test_transformer_block_with_the_command_line():
    check = subprocess.run([TOOL, "check", str(BLOCK)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    assert check.stdout.startswith("pipeline transformer_mlp_block: 7 declarations, 5 ops, 1 output")
    grad = subprocess.run([TOOL, "grad", str(BLOCK), "--mode", "train"], capture_output=True, text=True)
    assert grad.returncode == 0, grad.stderr
    assert "#   6: the gradient of param 'ln_bias' (%6)" in grad.stdout
    plan = subprocess.run([TOOL, "plan", str(BLOCK), "--backward", "--dim", "N=8192", "--precision", "tf32",
                           "--arch", "sm_90a", "--no-tuned"], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stderr
    assert "plan transformer_mlp_block_backward (mode train)" in plan.stdout
