"""kfuse.torch.Reference on the CPU, no GPU: every example's PyTorch translation in float64
against kfuse's own fp64 reference interpreter (kfuse.interpret) on the same data, train and
eval (outputs and updated running statistics; train-mode dropout through kfuse's masks), and in
the .kf's declared dtypes. Skipped without torch."""
import copy

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
            out = exact(*(t.double() for t in inputs.values()))
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


def test_an_op_without_a_translation_and_a_wrong_input_are_errors(monkeypatch):
    text = "pipeline p {\n  dim N\n  input x: f32[N, 4]\n  return mish(x)\n}\n"
    monkeypatch.delitem(kfuse.torch_reference.OPS, "mish")
    with pytest.raises(kfuse.Error, match=r"line 4: op 'mish' has no PyTorch implementation"):
        kfuse.torch.Reference(text=text, file_name="p.kf")
    monkeypatch.undo()
    ref = kfuse.torch.Reference(text=text, file_name="p.kf")
    with pytest.raises(kfuse.Error, match=r"input 'x' is torch.float32 \[3, 5\], declared f32\[N, 4\]"):
        ref(torch.ones(3, 5))
    with pytest.raises(kfuse.Error, match="takes the inputs x"):
        ref()
