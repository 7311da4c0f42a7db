"""kfuse.torch.Reference on the CPU, no GPU: every example's PyTorch translation in float64
against kfuse's own fp64 reference interpreter (kfuse.interpret) on the same data, train and
eval (outputs and updated running statistics; train-mode dropout through kfuse's masks), and in
the .kf's declared dtypes. Skipped without torch."""
import copy
import re

import pytest

import kfuse

torch = pytest.importorskip("torch")

import kfuse.torch  # noqa: E402

from conftest import REPO, rel  # noqa: E402

EXAMPLES = sorted((REPO / "examples").glob("*.kf"))
# Small dims: the weights are the examples' own (up to 8192 x 8192).
DIMS = {"N": 4, "B": 2, "T": 3}
# The interpreter rounds every value to its declared type; a float64 PyTorch run does not.
HALF_TOLERANCE = 2e-2
F32_TOLERANCE = 1e-10


def host(t):
    t = t.detach().double().contiguous()
    return list(t.shape), t.numpy().tobytes()


def from_host(pair):
    shape, data = pair
    return torch.frombuffer(bytearray(data), dtype=torch.float64).view(shape)


@pytest.mark.parametrize("kf", EXAMPLES, ids=lambda p: p.stem)
def test_the_pytorch_translation_computes_what_the_interpreter_does(kf):
    generator = torch.Generator().manual_seed(0)
    ref = kfuse.torch.Reference(kf)
    ref.reset_parameters(generator)
    # In their declared dtypes, so the interpreter reads the same values.
    inputs = dict(zip(ref.input_names, ref.random_inputs(DIMS, generator)))
    tensors = {name: host(t) for name, t in {**inputs, **ref.state_dict()}.items()}
    dims = {d: DIMS[d] for d in ref.program["dims"]}
    half = any(v["dtype"] != "f32" for v in ref.program["values"])
    tolerance = HALF_TOLERANCE if half else F32_TOLERANCE
    rng = (11, 5)
    for mode in ("train", "eval"):
        expected = kfuse.interpret(kf, mode=mode, dims=dims, tensors=tensors, rng=rng)
        exact = copy.deepcopy(ref).double().train(mode == "train")
        exact.kfuse_rng = rng
        with torch.no_grad():
            out = exact(*(t.double() if t.is_floating_point() else t for t in inputs.values()))
        outs = out if isinstance(out, tuple) else (out,)
        assert len(outs) == len(expected["outputs"])
        for i, (y, want) in enumerate(zip(outs, expected["outputs"])):
            err = rel(y, from_host(want))
            assert err <= tolerance, f"{mode} output {i}: rel err {err:.2e}"
        for name, want in expected["state"].items():
            err = rel(getattr(exact, name), from_host(want))
            assert err <= tolerance, f"{mode} {name}: rel err {err:.2e}"
        if mode == "eval":
            assert not expected["state"]

        # In the declared dtypes, every value's dtype and shape match the program's (checked
        # inside forward); the state is left as it was for the next mode.
        declared = copy.deepcopy(ref).train(mode == "train")
        with torch.no_grad():
            y = declared(*inputs.values())
        for y, v in zip(y if isinstance(y, tuple) else (y,), ref.program["outputs"]):
            assert y.dtype == kfuse.torch_reference.DTYPES[ref.program["values"][v]["dtype"]]


def test_params_and_state_carry_the_kf_names_for_fused(examples):
    ref = kfuse.torch.Reference(examples / "gemm_bn_scale_softmax_bf16.kf")
    assert list(ref.state_dict()) == ["weight", "bias", "bn_weight", "bn_bias", "scale", "running_mean",
                                      "running_var"]
    assert ref.weight.dtype == torch.bfloat16 and ref.bn_weight.dtype == torch.float32
    assert ref.state_roles() == {"running_mean": "running_mean", "running_var": "running_var"}
    assert isinstance(ref.running_mean, torch.Tensor) and "running_mean" not in dict(ref.named_parameters())


def test_a_wrong_input_or_argument_is_an_error():
    text = "pipeline p {\n  dim N\n  input x: f32[N, 4]\n  return mish(x)\n}\n"
    ref = kfuse.torch.Reference(text=text, file_name="p.kf")
    with pytest.raises(kfuse.Error, match=r"input 'x' is torch.float32 \[3, 5\], declared f32\[N, 4\]"):
        ref(torch.ones(3, 5))
    with pytest.raises(kfuse.Error, match="takes the inputs x"):
        ref()
    with pytest.raises(kfuse.Error, match=r"random_inputs: dims\['N'\] must be an int, got str"):
        ref.random_inputs({"N": "3"})
    with pytest.raises(kfuse.Error, match=r"dims\['N'\] must be in \[1, 2147483647\], got 0"):
        kfuse.torch.Reference(text="pipeline q {\n  dim N\n  input x: f32[4, N]\n  param w: f32[N]\n"
                              "  return mul(x, w)\n}\n", file_name="q.kf", dims={"N": 0})
    with pytest.raises(kfuse.Error, match=r"kfuse.torch.Fused\(p.kf\): mapping must be a mapping of kf names to "
                                          r"state_dict keys, got list"):
        kfuse.torch.Fused(ref, "p.kf", mapping=[("x", "y")])


# One use of every op of kfuse's table (user and internal), over x, y: f32[N, 8] with entries in
# [0.5, 1.5] (log, sqrt and pow stay real), w: f32[8], wm: f32[8, 8] and the states rm, rv: f32[8].
CASES = {
    "linear": "linear(x, wm, w)", "matmul": "matmul(x, wm)", "batchnorm": "batchnorm(x, w, w, rm, rv)",
    **{op: f"{op}(x, y)" for op in ("add", "sub", "mul", "div", "maximum", "minimum", "pow")},
    **{op: f"{op}(x)" for op in ("relu", "leaky_relu", "gelu", "silu", "sigmoid", "tanh", "hardtanh",
                                  "hardsigmoid", "hardswish", "mish", "softplus", "softsign", "elu", "selu", "logsigmoid",
                                  "exp", "log", "abs", "neg", "sqrt", "rsqrt", "square", "reciprocal",
                                  "instancenorm")},
    "clamp": "clamp(x, min=0.7)", "softmax": "softmax(x, dim=1)", "log_softmax": "log_softmax(x, dim=0)",
    "layernorm": "layernorm(x, w, w)", "rmsnorm": "rmsnorm(x, w)", "groupnorm": "groupnorm(x, w, w, groups=2)",
    **{op: f"{op}(x, dim=1)" for op in ("sum", "mean", "max", "min", "amax", "amin", "logsumexp", "var")},
    "std": "std(x, dim=0, correction=0, keepdim=true)",
    "max_pool1d": "max_pool1d(x, kernel_size=2)", "avg_pool1d": "avg_pool1d(x, kernel_size=3, stride=2)",
    "dropout": "dropout(x, p=0.25)", "reshape": "reshape(x, shape=[N, 1, 8])", "unsqueeze": "unsqueeze(x, dim=0)",
    "squeeze": "squeeze(unsqueeze(x, dim=0), dim=0)", "col_mean": "col_mean(x)", "col_var": "col_var(x)",
    "col_affine": "col_affine(x, w, w, w)", "cast": "cast(x, dtype=bf16)", "round_tf32": "round_tf32(x)",
    "constant": "mul(x, 2.5)",
    "gt": "gt(x, y)", "ge": "ge(x, y)", "erf": "erf(x)", "transpose": "transpose(x)",
    "matmul_tn": "matmul_tn(x, y)", "col_sum": "col_sum(x)",
    "max_pool1d_backward": "max_pool1d_backward(max_pool1d(y, kernel_size=2), x, kernel_size=2, stride=2)",
    "avg_pool1d_backward": "avg_pool1d_backward(avg_pool1d(y, kernel_size=2), kernel_size=2, stride=2, "
                           "features=8)",
    "groupnorm_backward": "groupnorm_backward(y, x, w, groups=2)",
    "cross_entropy": "cross_entropy(x, t, ignore_index=3, label_smoothing=0.1)",
    "cross_entropy_rows": "cross_entropy_rows(x, t, label_smoothing=0.2)",
    "cross_entropy_backward": "cross_entropy_backward(x, t, w3, reduction=\"sum\")",
    "bn_update": "bn_update(rm, rv, col_mean(x), col_var(x), momentum=0.5, count=N)\n  return relu(x)",
}
DECLARATIONS = {"x": "input x: f32[N, 8]", "y": "input y: f32[N, 8]", "w": "param w: f32[8]",
                "wm": "param wm: f32[8, 8]", "rm": "state rm: f32[8]", "rv": "state rv: f32[8]",
                "t": "input t: i64[N]", "w3": "param w3: f32[1]"}


def case_text(op):
    body = CASES[op] if "return" in CASES[op] else f"return {CASES[op]}"
    used = [d for name, d in DECLARATIONS.items() if re.search(rf"\b{name}\b", body)]
    return "pipeline t {\n  dim N\n  " + "\n  ".join(used) + f"\n  {body}\n}}\n"


def test_every_op_of_the_table_has_a_case():
    assert set(CASES) == {op["name"] for op in kfuse.ops()}


@pytest.mark.parametrize("op", sorted(CASES))
def test_every_op_of_the_table_computes_what_the_interpreter_does(op):
    generator = torch.Generator().manual_seed(1)
    ref = kfuse.torch.Reference(text=case_text(op), file_name=f"{op}.kf")
    ref.reset_parameters(generator)
    # Class indices (i64) in [0, 8); cross_entropy's case ignores the rows of class 3.
    inputs = {name: torch.tensor([3, 0, 7]) if name == "t" else torch.rand(3, 8, generator=generator) + 0.5
              for name in ref.input_names}
    tensors = {name: host(t) for name, t in {**inputs, **ref.state_dict()}.items()}
    rng = (3, 1)
    # The interpreter rounds a cast to its type; the float64 reference holds every value exactly.
    tolerance = HALF_TOLERANCE if op == "cast" else F32_TOLERANCE
    for mode in ("train", "eval"):
        expected = kfuse.interpret(text=case_text(op), mode=mode, dims={"N": 3}, tensors=tensors, rng=rng)
        exact = copy.deepcopy(ref).double().train(mode == "train")
        exact.kfuse_rng = rng
        with torch.no_grad():
            y = exact(*(t.double() if t.is_floating_point() else t for t in inputs.values()))
        assert rel(y, from_host(expected["outputs"][0])) <= tolerance, mode
        for name, want in expected["state"].items():
            assert rel(getattr(exact, name), from_host(want)) <= tolerance, f"{mode} {name}"


@pytest.mark.parametrize("name", ["yolo_dense_mish", "gemm_bn_scale_softmax", "transformer_mlp_block",
                                  "llama13b_o_proj_residual_rmsnorm"])
def test_torch_compile_traces_the_whole_chain_into_one_graph(name):
    """torch.compile's contender in the benchmarks is this module compiled: every op must be in
    Dynamo's graph (a graph break per op would leave the chain eager)."""
    from torch import _dynamo

    ref = kfuse.torch.Reference(REPO / "examples" / f"{name}.kf")
    ref.reset_parameters(torch.Generator().manual_seed(0))
    x = ref.random_inputs(DIMS, torch.Generator().manual_seed(1))
    for mode in (True, False):
        ref.train(mode)
        with torch.no_grad():
            explained = _dynamo.explain(ref)(*x)
        assert explained.graph_break_count == 0, explained.break_reasons
        assert explained.graph_count == 1
