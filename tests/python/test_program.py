"""kfuse.program, kfuse.interpret, kfuse.dropout_keep and kfuse.grad without a GPU or torch: the
parsed .kf as Python sees it, the fp64 reference interpreter on the CPU, dropout's keep rule and
reverse mode."""
import struct

import pytest

import kfuse


def by_name(program):
    return {v["name"]: v for v in program["values"] if v["name"]}


def test_a_founding_example_as_parsed_before_any_rewrite(examples):
    p = kfuse.program(examples / "gemm_bn_scale_softmax.kf")
    assert p["name"] == "gemm_bn_scale_softmax" and p["dims"] == ["N"]
    values = p["values"]
    assert [v["id"] for v in values] == list(range(len(values)))
    declared = [(v["kind"], v["name"], v["dtype"], v["shape"]) for v in values if v["kind"] != "op"]
    assert declared == [("input", "x", "f32", ["N", 8192]), ("param", "weight", "f32", [8192, 8192]),
                        ("param", "bias", "f32", [8192]), ("param", "bn_weight", "f32", [8192]),
                        ("param", "bn_bias", "f32", [8192]), ("state", "running_mean", "f32", [8192]),
                        ("state", "running_var", "f32", [8192]), ("param", "scale", "f32", [1])]
    ops = [v for v in values if v["kind"] == "op"]
    # The user's four ops, batchnorm not yet lowered into column statistics.
    assert [v["op"] for v in ops] == ["linear", "batchnorm", "mul", "softmax"]
    bn = ops[1]
    assert bn["class"] == "batch normalization" and bn["line"] == 14
    assert [values[a]["name"] for a in bn["args"]] == ["h", "bn_weight", "bn_bias", "running_mean", "running_var"]
    assert bn["attrs"] == {"eps": 1e-5, "momentum": 0.1}
    assert ops[3]["attrs"] == {"dim": 1} and isinstance(ops[3]["attrs"]["dim"], int)
    assert p["outputs"] == [ops[3]["id"]] and ops[3]["shape"] == ["N", 8192]


def test_attributes_defaults_literals_and_rank_3(examples):
    p = kfuse.program(examples / "distill_log_softmax_by_hand.kf")
    ops = [v for v in p["values"] if v["kind"] == "op"]
    literal = next(v for v in ops if v["op"] == "constant")  # div(..., 4.0)
    assert literal["attrs"] == {"value": 4.0, "dtype": "f32"} and literal["shape"] == [1]
    m = by_name(p)["m"]
    assert m["op"] == "max" and m["attrs"] == {"dim": 1, "keepdim": True} and m["shape"] == ["N", 1]
    assert len(p["outputs"]) == 2
    clamp = next(v for v in kfuse.program(examples / "tabular_elu_clamp.kf")["values"] if v.get("op") == "clamp")
    assert clamp["attrs"] == {"min": 0.0, "max": None}  # PyTorch's None: no upper bound
    gelu = next(v for v in kfuse.program(examples / "gpt2_mlp_gelu_tanh.kf")["values"] if v.get("op") == "gelu")
    assert gelu["attrs"] == {"approximate": "tanh"}
    btf = kfuse.program(examples / "tinyllama_o_proj_residual_rmsnorm_btf_bf16.kf")
    assert btf["dims"] == ["B", "T"]
    assert by_name(btf)["attn"]["shape"] == ["B", "T", 2048] and by_name(btf)["attn"]["dtype"] == "bf16"
    assert by_name(btf)["norm_weight"]["dtype"] == "f32"


def test_a_kf_error_is_the_diagnostic():
    with pytest.raises(kfuse.Error, match=r"bad.kf:3:10: error: unknown op 'sum2'"):
        kfuse.program(text="pipeline p {\n  input x: f32[4, 4]\n  return sum2(x, dim=1)\n}\n", file_name="bad.kf")


def f64(values):
    return struct.pack(f"<{len(values)}d", *values)


def test_the_interpreter_on_the_cpu_runs_batchnorm_and_updates_its_state():
    text = """pipeline bn {
  dim N
  input x: f32[N, 2]
  state mean: f32[2]
  state var: f32[2]
  return batchnorm(x, mean, var, eps=1e-5, momentum=0.5)
}
"""
    tensors = {"x": ([3, 2], f64([1, 10, 2, 20, 3, 30])), "mean": ([2], f64([0, 0])), "var": ([2], f64([1, 1]))}
    r = kfuse.interpret(text=text, file_name="bn.kf", mode="train", dims={"N": 3}, tensors=tensors)
    (shape, data), = r["outputs"]
    y = struct.unpack("<6d", data)
    assert shape == [3, 2] and y[0] == pytest.approx(-(1.5 ** 0.5), rel=1e-5) and y[2] == pytest.approx(0)
    assert struct.unpack("<2d", r["state"]["mean"][1]) == pytest.approx((1.0, 10.0))
    assert struct.unpack("<2d", r["state"]["var"][1]) == pytest.approx((1.0, 50.5))  # unbiased
    with pytest.raises(kfuse.Error, match=r"tensors\['x'\] of shape \[3, 2\] needs 6 values of float64 \(48 bytes\)"):
        kfuse.interpret(text=text, mode="eval", dims={"N": 3}, tensors={**tensors, "x": ([3, 2], b"")})


def test_dropout_keep_is_reproducible_and_keeps_about_1_minus_p():
    keep = kfuse.dropout_keep(7, 3, 0, 20000, 0.25)
    assert keep == kfuse.dropout_keep(7, 3, 0, 20000, 0.25) and set(keep) == {0, 1}
    assert abs(sum(keep) / len(keep) - 0.75) < 0.02
    assert keep != kfuse.dropout_keep(7, 4, 0, 20000, 0.25)  # the next call's offset
    assert keep != kfuse.dropout_keep(7, 3, 1, 20000, 0.25)  # another dropout of the pipeline
    with pytest.raises(kfuse.Error, match=r"p must be in \[0, 1\)"):
        kfuse.dropout_keep(0, 0, 0, 4, 1.0)


def test_compile_many_compiles_each_file_and_mode_and_returns_errors(tmp_path, examples):
    bad = tmp_path / "bad.kf"
    bad.write_text("pipeline bad {\n  input x: f32[4, 4]\n  return nope(x)\n}\n")
    done = kfuse.compile_many([examples / "snn_selu.kf", bad], modes=("eval",), workers=2)
    assert done[(examples / "snn_selu.kf", "eval")].plan.startswith("plan snn_selu (mode eval)")
    assert isinstance(done[(bad, "eval")], kfuse.Error) and "unknown op 'nope'" in str(done[(bad, "eval")])


def test_batchnorm_over_a_view_counts_its_b_times_t_rows():
    text = """pipeline bn {
  dim B, T
  input x: f32[B, T, 2]
  state mean: f32[2]
  state var: f32[2]
  return batchnorm(reshape(x, shape=[B*T, 2]), mean, var, eps=1e-5, momentum=0.5)
}
"""
    tensors = {"x": ([3, 1, 2], f64([1, 10, 2, 20, 3, 30])), "mean": ([2], f64([0, 0])), "var": ([2], f64([1, 1]))}
    r = kfuse.interpret(text=text, file_name="bn.kf", mode="train", dims={"B": 3, "T": 1}, tensors=tensors)
    assert r["outputs"][0][0] == [3, 2]
    assert struct.unpack("<2d", r["state"]["var"][1]) == pytest.approx((1.0, 50.5))  # 3 rows, unbiased
    # The lowered form carries the count as the .kf writes it.
    lowered = kfuse.program(text="""pipeline p {
  dim B, T
  input x: f32[B, T, 2]
  state mean: f32[2]
  state var: f32[2]
  rows = reshape(x, shape=[B*T, 2])
  bn_update(mean, var, col_mean(rows), col_var(rows), momentum=0.5, count=B*T)
  return x
}
""", file_name="p.kf")
    update = next(v for v in lowered["values"] if v.get("op") == "bn_update")
    assert update["attrs"] == {"momentum": 0.5, "count": "B*T"}


def test_grad_gives_the_backward_and_the_forward_that_saves_for_it_as_kf(examples):
    layernorm = examples / "bert_head_gelu_layernorm.kf"
    reverse = kfuse.grad(layernorm, mode="train")
    assert reverse["grad_inputs"] == ["grad_out0"]
    assert reverse["saved"] == ["saved_h"]
    assert reverse["gradients"] == ["x", "dense_weight", "dense_bias", "ln_weight", "ln_bias"]
    backward = kfuse.program(text=reverse["backward"])  # both parse back
    assert backward["name"] == "bert_head_gelu_layernorm_backward"
    assert len(backward["outputs"]) == len(reverse["gradients"])
    forward = kfuse.program(text=reverse["forward"])
    assert len(forward["outputs"]) == 1 + len(reverse["saved"])
    declared = [(v["kind"], v["name"], v["shape"]) for v in kfuse.program(layernorm)["values"] if v["kind"] != "op"]
    assert [(v["kind"], v["name"], v["shape"]) for v in forward["values"] if v["kind"] != "op"] == declared
    assert kfuse.grad(text=layernorm.read_text(), mode="eval")["gradients"] == reverse["gradients"]
    pooled = kfuse.grad(examples / "maxout_relu_max_pool1d.kf", mode="train")
    assert "max_pool1d_backward(grad_out0, h, kernel_size=4, stride=4)" in pooled["backward"]
    with pytest.raises(kfuse.Error, match="max_pool1d_backward"):  # a second derivative
        kfuse.grad(text=pooled["backward"], mode="train")
    with pytest.raises(kfuse.Error, match="mode must be 'train' or 'eval', got 'test'"):
        kfuse.grad(layernorm, mode="test")
    with pytest.raises(kfuse.Error, match="kfuse.grad: mode must be a str, got int"):
        kfuse.grad(layernorm, mode=1)
    # Frozen: those gradients left out, and the forward saves nothing only they need.
    frozen = kfuse.grad(layernorm, mode="train", frozen=["x", "dense_weight"])
    assert frozen["gradients"] == ["dense_bias", "ln_weight", "ln_bias"]
    assert frozen["backward"].count("matmul") < reverse["backward"].count("matmul")
    with pytest.raises(kfuse.Error, match="grad: frozen 'y' is no input or param of pipeline"):
        kfuse.grad(layernorm, mode="train", frozen=["y"])
    with pytest.raises(kfuse.Error, match="kfuse.grad: frozen must be a sequence of input and param names, got 'x'"):
        kfuse.grad(layernorm, mode="train", frozen="x")
