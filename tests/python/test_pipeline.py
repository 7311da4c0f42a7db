"""kfuse.Pipeline without a GPU: compile, plan, source, report, errors, and the DLPack checks
(numpy arrays on the CPU stand in for tensors; CI has no torch)."""
import numpy as np
import pytest

import kfuse

SMALL = """pipeline small {
  dim N
  input  x: f32[N, 6]
  param  weight: f32[5, 6]
  param  scale: f32[1]
  h = linear(x, weight)
  return softmax(mul(h, scale), dim=1)
}
"""


@pytest.fixture
def small():
    return kfuse.Pipeline(text=SMALL, file_name="small.kf", mode="eval")


def test_compile_plan_source_and_report_need_no_gpu(examples):
    p = kfuse.Pipeline(examples / "gemm_bn_scale_softmax.kf", mode="train", precision="tf32", arch="sm_90a")
    assert p.name == "gemm_bn_scale_softmax"
    assert p.inputs == ["x"]
    assert p.params == ["weight", "bias", "bn_weight", "bn_bias", "running_mean", "running_var", "scale"]
    assert p.output_count == 1
    # The weight's rounding to tf32 (once per bind), the GEMM, the statistics, the softmax.
    assert p.plan.startswith("plan gemm_bn_scale_softmax (mode train): 4 kernels")
    assert "kf::gemm_sm90<" in p.cuda_source  # tf32 runs on the Hopper mainloop (sm_90a)
    r = p.report
    assert r["arch"] == "sm_90a" and not r["cache_hit"]
    assert [k["name"] for k in r["kernels"]] == ["k0_elementwise", "k1_gemm", "k2_column", "k3_row"]
    assert all(k["registers"] > 0 and k["spill_stores"] == 0 for k in r["kernels"])
    again = kfuse.Pipeline(examples / "gemm_bn_scale_softmax.kf", mode="train", precision="tf32", arch="sm_90a")
    assert again.report["cache_hit"] and again.report["cache_key"] == r["cache_key"]
    assert not any(k["variant"] for k in r["kernels"])


def test_report_lists_a_gemm_variant_after_its_kernel(examples):
    # The fp32 SIMT GEMM carries a 128 x 128 variant of its 128 x 32 tile for larger batches.
    p = kfuse.Pipeline(examples / "gemm_scale_bn.kf", mode="eval", precision="fp32", arch="sm_90a")
    assert [(k["name"], k["variant"]) for k in p.report["kernels"]] == [("k0_gemm", False), ("k0_gemm_wide", True)]
    assert all(k["unused"] == "" for k in p.report["kernels"])


def test_report_says_why_runs_never_take_a_variant_ptxas_spilled(examples):
    # A train-mode dropout beside the tf32 128 x 256 tile's accumulators: ptxas 13.0 spills it.
    p = kfuse.Pipeline(examples / "bert_output_dropout_layernorm.kf", mode="train", precision="tf32",
                       arch="sm_90a")
    wider = [k for k in p.report["kernels"] if k["name"] == "k1_gemm_wider"]  # k0 rounds the weight
    assert len(wider) == 1 and wider[0]["variant"] and wider[0]["spill_stores"] > 0
    assert wider[0]["unused"].endswith("k1_gemm or its other variants run instead")


def test_eval_mode_folds_batchnorm_into_fewer_kernels(examples):
    p = kfuse.Pipeline(str(examples / "gemm_scale_bn.kf"), mode="eval", arch="sm_90a")
    assert p.plan.startswith("plan gemm_scale_bn (mode eval): 1 kernel")
    assert repr(p) == "kfuse.Pipeline('gemm_scale_bn', mode='eval', precision='fp32')"


def test_dsl_errors_carry_the_diagnostics_text():
    with pytest.raises(kfuse.Error) as e:
        kfuse.Pipeline(text="pipeline p {\n  dim N\n  input x: f32[N, 4]\n  return relu(y)\n}\n", file_name="bad.kf")
    assert str(e.value) == "bad.kf:4:15: error: unknown name 'y'\n  return relu(y)\n              ^\n"


def test_bad_options_and_files_are_kfuse_errors(examples):
    with pytest.raises(kfuse.Error, match="mode must be 'train' or 'eval', got 'training'"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", mode="training")
    with pytest.raises(kfuse.Error, match="precision must be 'fp32', '3xtf32', 'tf32' or 'bf16', got 'fp16'"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", precision="fp16")
    # Declared bf16 tensors are read in place (f32 ones at bf16 are rounded into padded copies).
    with pytest.raises(kfuse.Error, match="needs the inner dim a constant multiple of 8"):
        kfuse.Pipeline(text="pipeline m {\n  dim N\n  input x: bf16[N, 6]\n  param w: bf16[4, 6]\n"
                       "  return linear(x, w)\n}\n", file_name="m.kf", precision="bf16", arch="sm_90a")
    with pytest.raises(kfuse.Error, match="no_such.kf"):
        kfuse.Pipeline(examples / "no_such.kf")
    with pytest.raises(kfuse.Error, match="a .kf file or text="):
        kfuse.Pipeline()


def test_cpu_arrays_are_refused_naming_tensor_shape_dtype_and_device(small):
    with pytest.raises(kfuse.Error) as e:
        small(np.ones((3, 6), np.float32))
    assert str(e.value) == ("pipeline 'small': tensor 'x' f32[3, 6] is on cpu; kfuse runs on CUDA devices "
                            "(move it there, e.g. .cuda())")
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': tensor 'weight' f32\[5, 6\] is on cpu"):
        small.bind(weight=np.ones((5, 6), np.float32))


def test_dtypes_other_than_f32_are_refused(small):
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f64\[3, 6\]: kfuse takes f32 tensors"):
        small(np.ones((3, 6)))
    with pytest.raises(kfuse.Error, match=r"tensor 'weight' i32\[5, 6\]: kfuse takes f32 tensors"):
        small.bind(weight=np.ones((5, 6), np.int32))


def test_non_contiguous_rows_are_refused(small):
    transposed = np.ones((6, 3), np.float32).T
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f32\[3, 6\] has strides \(1, 3\): the elements of a row"):
        small(transposed)
    broadcast = np.lib.stride_tricks.as_strided(np.ones(6, np.float32), shape=(3, 6), strides=(0, 4))
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f32\[3, 6\] has strides \(0, 1\): every row is the same"):
        small(broadcast)
    every_other = np.ones(10, np.float32)[::2]
    with pytest.raises(kfuse.Error, match=r"tensor 'scale' f32\[5\] has strides \(2\)"):
        small.bind(scale=every_other)


def test_objects_without_dlpack_and_bad_arguments_are_refused(small):
    with pytest.raises(kfuse.Error, match="tensor 'scale': a builtins.list is not a DLPack tensor"):
        small.bind(scale=[1.0])
    with pytest.raises(kfuse.Error, match=r"takes 1 input\(s\) \(x\), got 2 positional"):
        small(np.ones((3, 6), np.float32), np.ones((3, 6), np.float32))
    with pytest.raises(kfuse.Error, match="input 'x' given twice"):
        small(np.ones((3, 6), np.float32), x=np.ones((3, 6), np.float32))
    with pytest.raises(kfuse.Error, match="needs its inputs: x"):
        small()


def test_dims_and_output_shapes_follow_the_declarations(small):
    assert small._core.dims({"x": [7, 6]}) == {"N": 7}
    assert small._core.output_shape(0, {"N": 7}) == [7, 5]
    with pytest.raises(kfuse.Error, match=r"tensor 'x' must be f32\[N, 6\], got shape \[7, 5\]"):
        small._core.dims({"x": [7, 5]})


BTF = """pipeline btf {
  dim B, T
  input  x: f32[B, T, 6]
  param  weight: f32[5, 6]
  return linear(x, weight)
}
"""


def test_rank3_tensors_bind_their_dims_and_must_be_contiguous():
    btf = kfuse.Pipeline(text=BTF, file_name="btf.kf", mode="eval")
    assert btf._core.dims({"x": [2, 3, 6]}) == {"B": 2, "T": 3}
    assert btf._core.output_shape(0, {"B": 2, "T": 3}) == [2, 3, 5]
    swapped = np.ones((3, 2, 6), np.float32).transpose(1, 0, 2)
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f32\[2, 3, 6\] has strides \(6, 12, 1\): a tensor of rank 3 must be contiguous"):
        btf(swapped)


HALF = """pipeline half {
  dim N
  input  x: bf16[N, 16]
  param  weight: bf16[8, 16]
  param  ln_weight: f32[8]
  return layernorm(linear(x, weight), ln_weight), relu(x)
}
"""


def test_bf16_and_f16_pipelines_compile_and_declare_their_output_dtypes():
    p = kfuse.Pipeline(text=HALF, file_name="half.kf", mode="eval", arch="sm_90a")
    assert [p._core.output_dtype(i) for i in range(p.output_count)] == ["bf16", "bf16"]
    # 8 output features: the layernorm runs in the GEMM's epilogue, over the staged 128 x 128 tile.
    assert "kf::Sm90Gemm<kf::sm90::Operand::Bf16, 128, 128, 1, true>" in p.cuda_source
    f16 = kfuse.Pipeline(text=HALF.replace("bf16", "f16"), file_name="half16.kf", mode="eval", arch="sm_90a")
    assert f16._core.output_dtype(1) == "f16"
    assert "kf::Sm90Gemm<kf::sm90::Operand::F16, 128, 128, 1, true>" in f16.cuda_source
    # A numpy float16 array is an f16 tensor (DLPack kDLFloat, 16 bits): refused only for its device.
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f16\[3, 16\] is on cpu"):
        f16(np.ones((3, 16), np.float16))


def test_half_gemms_the_hopper_mainloop_cannot_run_are_refused_at_their_location():
    with pytest.raises(kfuse.Error, match=r"odd.kf:6:\d+: error: linear of bf16 operands runs on the Hopper GEMM, "
                                          r"which needs the inner dim a constant multiple of 8"):
        kfuse.Pipeline(text=HALF.replace("16]", "12]"), file_name="odd.kf", arch="sm_90a")


def test_workspace_size_grows_with_the_rows_and_a_host_workspace_is_refused(examples):
    p = kfuse.Pipeline(examples / "gemm_bn_scale_softmax.kf", mode="train", arch="sm_90a")
    small, large = p.workspace_size(N=8), p.workspace_size(N=4096)
    assert 0 < small < large and small % 256 == 0
    with pytest.raises(kfuse.Error, match="dim N is not bound"):
        p.workspace_size()
    with pytest.raises(kfuse.Error, match=r"workspace.*cpu"):
        p.set_workspace(np.zeros(large // 4, np.float32))
    p.set_workspace(None)  # back to the pipeline's own: always allowed


def test_workspace_size_takes_dims_in_the_range_every_entry_point_checks(examples):
    p = kfuse.Pipeline(examples / "gemm_bn_scale_softmax.kf", mode="train", arch="sm_90a")
    for n in (0, 2**31, 2**60, 2**63 - 1):  # 2**60 wrapped around, 2**63 - 1 never returned
        with pytest.raises(kfuse.Error, match=rf"dims\['N'\] must be in \[1, 2147483647\], got {n}"):
            p.workspace_size(N=n)
    assert p.workspace_size(N=2**31 - 1) > p.workspace_size(N=4096)


def test_dropout_rng_state_is_set_and_read_without_a_gpu(examples):
    p = kfuse.Pipeline(examples / "gpt2_mlp_dropout.kf", mode="train", arch="sm_90a")
    assert "kf::dropout(" in p.cuda_source
    assert p.rng_state == (0, 0)
    p.set_rng(2**64 - 1, 5)
    assert p.rng_state == (2**64 - 1, 5)
    p.set_rng(3)
    assert p.rng_state == (3, 0)
