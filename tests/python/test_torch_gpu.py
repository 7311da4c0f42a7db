"""kfuse.torch.Fused against the original PyTorch module on the GPU: every example, train and
eval, several steps (outputs and BatchNorm running statistics), and capture and replay in a
CUDA graph. Skipped without torch or a CUDA device."""
import copy
import importlib.util

import pytest

import kfuse

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with a CUDA device")

import kfuse.torch  # noqa: E402  (imports torch)

from conftest import REPO, rel  # noqa: E402

# The PyTorch modules of the founding chains and the .kf -> state_dict names, as the PyTorch
# comparison benchmark defines them.
_spec = importlib.util.spec_from_file_location("compare_torch", REPO / "bench" / "compare_torch.py")
compare_torch = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(compare_torch)

from test_draft import dynamic_shapes  # noqa: E402
from test_pipeline import SMALL  # noqa: E402

N = 64
STEPS = 3
# DESIGN.md's bounds on ||x - fp64|| / ||fp64||, which kfuse and torch each meet: fp32, and bf16
# for the cases whose activations are bf16 (PyTorch mixed precision: batchnorm stays f32).
BOUND = 1e-5
BF16_BOUND = 2e-2


def make_pair(case):
    kf, features, _, chain, activation = compare_torch.CASES[case]
    torch.manual_seed(0)
    original = compare_torch.make_module(chain, features).cuda()
    with torch.no_grad():  # non-trivial BatchNorm affine and scale
        for p in original.parameters():
            if p.dim() == 1:
                p.uniform_(0.5, 1.5)
    original = compare_torch.cast_module(original, activation)
    fused = kfuse.torch.Fused(copy.deepcopy(original), REPO / kf, mapping=compare_torch.PARAM_MAP)
    return original, fused, features


def assert_same(original, fused, y_ref, y, what, tolerance=4 * BOUND):
    """Outputs and running statistics of the two within `tolerance` of each other."""
    assert y.shape == y_ref.shape and y.dtype == y_ref.dtype, what
    assert rel(y, y_ref) <= tolerance, f"{what}: output rel err {rel(y, y_ref):.2e}"
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        a, b = getattr(fused.module.bn, name), getattr(original.bn, name)
        if name == "num_batches_tracked":
            assert a.item() == b.item(), f"{what}: {name} {a.item()} vs {b.item()}"
        else:
            assert rel(a, b) <= tolerance, f"{what}: {name} rel err {rel(a, b):.2e}"


# Every example against its PyTorch translation (kfuse.torch.Reference), at small dims.
EXAMPLES = sorted((REPO / "examples").glob("*.kf"))
DIMS = {"N": 64, "B": 3, "T": 5}


def outputs(y):
    return y if isinstance(y, tuple) else (y,)


class ExamplePair:
    """An example's Reference (PyTorch in the .kf's dtypes), the same in float64, and Fused
    wrapping a copy; each step checks kfuse's outputs and running statistics against float64
    within the precision's bound or 1.5x PyTorch's own error there, whichever is larger."""

    def __init__(self, kf, mode):
        self.kf = kf
        self.generator = torch.Generator(device="cuda").manual_seed(0)
        self.torch = kfuse.torch.Reference(kf, device="cuda").train(mode == "train")
        self.torch.reset_parameters(torch.Generator(device="cuda").manual_seed(0))
        self.exact = copy.deepcopy(self.torch).double()
        self.fused = kfuse.torch.Fused(copy.deepcopy(self.torch), kf).train(mode == "train")
        half = any(v["dtype"] != "f32" for v in self.torch.program["values"])
        self.bound = BF16_BOUND if half else BOUND
        self.draws = mode == "train" and any(v.get("op") == "dropout" for v in self.torch.program["values"])

    def use_rng_of_next_call(self, inputs):
        """Train-mode dropout: the references keep what the next kfuse call keeps."""
        if self.draws:
            rng = self.fused.pipeline(inputs[0]).rng_state
            self.torch.kfuse_rng = self.exact.kfuse_rng = rng

    def check(self, got, inputs, what):
        y_torch = outputs(self.torch(*inputs))
        y_exact = outputs(self.exact(*(t.double() if t.is_floating_point() else t for t in inputs)))
        torch.cuda.synchronize()
        pairs = [(f"output {i}", g, t, e) for i, (g, t, e) in enumerate(zip(outputs(got), y_torch, y_exact))]
        for name, _ in self.torch.named_buffers():
            pairs.append((name, getattr(self.fused.module, name), getattr(self.torch, name), getattr(self.exact, name)))
        for name, g, t, e in pairs:
            assert g.shape == e.shape and g.dtype == t.dtype, f"{what} {name}: {g.dtype} {list(g.shape)}"
            err, torch_err = rel(g, e), rel(t, e)
            assert err <= max(self.bound, 1.5 * torch_err), \
                f"{what} {name}: kfuse rel err {err:.2e}, PyTorch's {torch_err:.2e}, bound {self.bound:.0e}"


@pytest.fixture(scope="module")
def compiled_examples():
    """Every example's pipelines compiled up front, in parallel: the tests then load them from the
    disk cache instead of compiling 70 pipelines one by one. A failed compile fails its test."""
    return kfuse.compile_many(EXAMPLES)


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("kf", EXAMPLES, ids=lambda p: p.stem)
def test_every_example_matches_pytorch_over_steps_and_in_a_cuda_graph(kf, mode, compiled_examples):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    pair = ExamplePair(kf, mode)
    with torch.no_grad():
        for step in range(STEPS):
            inputs = pair.torch.random_inputs(DIMS, pair.generator, "cuda")
            pair.use_rng_of_next_call(inputs)
            pair.check(pair.fused(*inputs), inputs, f"{kf.stem} {mode} step {step}")

        # Captured once, replayed with new input data and parameters updated in place (as an
        # optimizer step does); a train-mode replay updates the running statistics again and
        # draws the captured call's dropout masks.
        static = pair.torch.random_inputs(DIMS, pair.generator, "cuda")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up off the capture: load, size the workspaces
            pair.use_rng_of_next_call(static)
            pair.check(pair.fused(*static), static, f"{kf.stem} {mode} warm-up")
        torch.cuda.current_stream().wait_stream(side)
        pair.use_rng_of_next_call(static)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            static_y = pair.fused(*static)
        for replay in range(STEPS):
            for t, new in zip(static, pair.torch.random_inputs(DIMS, pair.generator, "cuda")):
                t.copy_(new)
            for name, p in pair.torch.named_parameters():
                if p.dim() == 1:
                    p.mul_(1.01)
                    getattr(pair.exact, name).copy_(p)
                    getattr(pair.fused.module, name).copy_(p)
            graph.replay()
            pair.check(static_y, static, f"{kf.stem} {mode} graph replay {replay}")



class DraftedPair(ExamplePair):
    """An ExamplePair whose Fused runs kfuse.torch.draft's .kf of the example's PyTorch module
    (its Reference, exported on the GPU with the example's dims dynamic), not the example."""

    def __init__(self, kf, mode):
        super().__init__(kf, mode)
        inputs = self.torch.random_inputs(DIMS, torch.Generator(device="cuda").manual_seed(1), "cuda")
        shapes = (dynamic_shapes(self.torch.program),)  # Reference.forward(*inputs)
        self.text = kfuse.torch.draft(self.torch, tuple(inputs), dynamic_shapes=shapes, name=kf.stem)
        self.fused = kfuse.torch.Fused(copy.deepcopy(self.torch), text=self.text).train(mode == "train")


@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("kf", EXAMPLES, ids=lambda p: p.stem)
def test_the_draft_of_every_examples_module_runs_through_fused_as_the_module(kf, mode):
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    pair = DraftedPair(kf, mode)
    with torch.no_grad():
        for step in range(STEPS):
            inputs = pair.torch.random_inputs(DIMS, pair.generator, "cuda")
            pair.use_rng_of_next_call(inputs)
            pair.check(pair.fused(*inputs), inputs, f"draft of {kf.stem} {mode} step {step}")


@pytest.mark.parametrize("case", list(compare_torch.CASES))
def test_fused_matches_the_module_in_train_then_eval_over_several_steps(case):
    torch.backends.cuda.matmul.allow_tf32 = False
    original, fused, features = make_pair(case)
    activation = compare_torch.CASES[case][4]
    # Two bf16 results each within the bound of fp64 are usually much closer to each other.
    tolerance = BF16_BOUND if activation == "bf16" else 4 * BOUND
    with torch.no_grad():
        for mode in ("train", "eval"):
            original.train(mode == "train")
            fused.train(mode == "train")
            assert fused.module.training == (mode == "train")
            for step in range(STEPS):
                x = torch.randn(N, features, device="cuda", dtype=compare_torch.torch_dtype(activation))
                what = f"{case} {mode} step {step}"
                assert_same(original, fused, original(x), fused(x), what, tolerance)
    eval_pipeline = fused.pipeline(x)
    fused.train()
    assert fused.pipeline(x) is not eval_pipeline  # one per mode, each compiled once and kept
    assert fused.pipeline(x) is fused.pipeline(x)
    fused.eval()
    assert fused.pipeline(x).plan.startswith(f"plan {fused.pipeline(x).name} (mode eval)")


def test_inference_mode_out_and_current_stream():
    original, fused, features = make_pair("gemm_scale_bn")
    original.eval()
    fused.eval()
    side = torch.cuda.Stream()
    with torch.inference_mode(), torch.cuda.stream(side):
        x = torch.randn(N, features, device="cuda")
        out = torch.empty(N, features, device="cuda")
        y = fused(x)
        assert fused.pipeline(x)(x, out=out) is out
        ref = original(x)
    side.synchronize()
    assert rel(y, ref) <= 4 * BOUND and rel(out, ref) <= 4 * BOUND


def test_a_call_records_autograd_only_where_something_requires_grad():
    original, fused, features = make_pair("gemm_scale_bn")
    x = torch.randn(N, features, device="cuda")
    y = fused(x)  # the parameters require grad: through the saving forward op, x frozen
    ops = fused._training[("train", frozenset({"x"}))]
    assert y.requires_grad and y.grad_fn.ops is ops  # the eager call's autograd.Function keeps its pair
    y.backward(torch.ones_like(y))  # no gradient of x computed, none expected
    assert x.grad is None and all(p.grad is not None for p in fused.module.parameters())
    for p in fused.module.parameters():
        p.requires_grad_(False)
    assert not fused(x).requires_grad  # frozen parameters: the forward alone
    assert fused(x.clone().requires_grad_(True)).requires_grad
    with torch.no_grad():  # nothing records: the input's data is read
        torch.testing.assert_close(fused(x.clone().requires_grad_(True)), fused(x))
    pipeline = fused.pipeline(x)
    with pytest.raises(kfuse.Error, match="tensor 'x' requires grad, and a kfuse.Pipeline does not record autograd"):
        pipeline(x.clone().requires_grad_(True))


def test_names_map_by_state_dict_key_and_unknown_names_are_refused(tmp_path):
    class Chain(torch.nn.Module):  # state_dict keys with '.' -> '_' are the .kf names
        def __init__(self, features):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.randn(features, features) / features**0.5)
            self.bias = torch.nn.Parameter(torch.zeros(features))
            self.scale = torch.nn.Parameter(torch.ones(features))
            self.bn = torch.nn.BatchNorm1d(features)

        def forward(self, x):
            return self.bn(torch.nn.functional.linear(x, self.weight, self.bias) * self.scale)

    # The example with the running statistics named as Chain's state_dict has them.
    kf = tmp_path / "chain.kf"
    text = (REPO / "examples" / "gemm_scale_bn_4096.kf").read_text()
    kf.write_text(text.replace("running_mean", "bn_running_mean").replace("running_var", "bn_running_var"))
    module = Chain(4096).cuda().eval()
    fused = kfuse.torch.Fused(copy.deepcopy(module), kf)
    x = torch.randn(N, 4096, device="cuda")
    with torch.no_grad():
        assert rel(fused(x), module(x)) <= 4 * BOUND
    with pytest.raises(kfuse.Error, match="'scale' is mapped to 'gain', which is no parameter"):
        kfuse.torch.Fused(module, kf, mapping={"scale": "gain"})


def test_bf16_precision_matches_float64_and_follows_in_place_weight_updates():
    # Precision bf16 rounds the weight once per bind: an in-place update (as an optimizer step
    # makes, moving the tensor's _version) must be bound again before the next call.
    original, fused, features = make_pair("gemm_scale_bn")
    fused.precision = "bf16"
    original.eval()
    fused.eval()
    reference = copy.deepcopy(original).double()
    torch.manual_seed(1)
    x = torch.randn(N, features, device="cuda")
    with torch.no_grad():
        for step in range(3):
            y = fused(x)
            y64 = reference(x.double())
            assert y.dtype == torch.float32
            assert rel(y, y64) <= BF16_BOUND, f"step {step}: rel err {rel(y, y64):.2e}"
            assert rel(y, y64) > BOUND, f"step {step}: no bf16 rounding seen"
            for w in (fused.module.linear.weight, reference.linear.weight):
                w.mul_(-0.5)


def test_prepare_params_rounds_a_weight_bound_again_before_the_call():
    # The scale multiplies the logits so the bf16 rounding of the weight shows in the softmax.
    p = kfuse.Pipeline(text=SMALL, file_name="small.kf", mode="eval", precision="bf16")
    w, scale = torch.randn(5, 6, device="cuda"), torch.full((1,), 4.0, device="cuda")
    x = torch.randn(3, 6, device="cuda")
    p.bind(weight=w, scale=scale)
    assert not p.prepare_params()  # before a first call, which checks the tensors first
    first = p(x)
    w.mul_(-0.5)
    assert not p.prepare_params()  # nothing bound since: the call rounded the weight once
    torch.testing.assert_close(p(x), first, rtol=0, atol=0)
    p.bind(weight=w)
    assert p.prepare_params()
    assert not p.prepare_params()
    fresh = kfuse.Pipeline(text=SMALL, file_name="small.kf", mode="eval", precision="bf16")
    fresh.bind(weight=w, scale=scale)
    torch.testing.assert_close(p(x), fresh(x), rtol=0, atol=0)
    assert not torch.equal(p(x), first)


def test_padded_rows_and_other_devices_tensors_are_refused_clearly():
    p = kfuse.Pipeline(text=SMALL, file_name="small.kf", mode="eval")
    p.bind(weight=torch.ones(5, 6, device="cuda"), scale=torch.ones(1, device="cuda"))
    padded = torch.ones(3, 8, device="cuda")[:, :6]
    with pytest.raises(kfuse.Error, match=r"tensor 'x' f32\[3, 6\] has row stride 8; kfuse takes contiguous"):
        p(padded)
    with pytest.raises(kfuse.Error, match=r"tensor 'x' is bf16\[3, 6\], declared f32\[N, 6\]"):
        p(torch.ones(3, 6, device="cuda", dtype=torch.bfloat16))
    with pytest.raises(kfuse.Error, match=r"output 0 \[3, 5\] at 0x[0-9a-f]+ overlaps input 'x'"):
        x = torch.ones(3, 6, device="cuda")
        p(x, out=x.view(-1)[:15].view(3, 5))
    y = p(torch.ones(3, 6, device="cuda"))
    torch.testing.assert_close(y, torch.full((3, 5), 0.2, device="cuda"))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_tensors_get_outputs_in_their_dtype_and_match_float64(dtype):
    from test_pipeline import HALF

    text = HALF if dtype == "bfloat16" else HALF.replace("bf16", "f16")
    p = kfuse.Pipeline(text=text, file_name="half.kf", mode="eval")
    t = getattr(torch, dtype)
    torch.manual_seed(0)
    x = torch.randn(37, 16, device="cuda").to(t)
    w = (torch.randn(8, 16, device="cuda") / 4).to(t)
    g = torch.rand(8, device="cuda") + 0.5
    p.bind(weight=w, ln_weight=g)
    y, r = p(x)
    assert y.dtype == t and r.dtype == t and y.shape == (37, 8)
    ref = torch.nn.functional.layer_norm(x.double() @ w.double().T, (8,), weight=g.double())
    assert rel(y, ref) <= BF16_BOUND  # f16 likewise
    assert rel(r, torch.relu(x.double())) <= 2e-2


def test_a_callers_workspace_gives_the_same_results_and_too_small_is_refused(examples):
    p = kfuse.Pipeline(examples / "gemm_bn_scale_softmax.kf", mode="train")
    torch.manual_seed(0)
    features = 8192
    params = {
        "weight": torch.randn(features, features, device="cuda") / 64,
        "bias": torch.randn(features, device="cuda"),
        "bn_weight": torch.rand(features, device="cuda") + 0.5,
        "bn_bias": torch.randn(features, device="cuda"),
        "scale": torch.rand(1, device="cuda") + 0.5,
    }
    x = torch.randn(33, features, device="cuda")

    def run(workspace):
        state = {"running_mean": torch.zeros(features, device="cuda"),
                 "running_var": torch.ones(features, device="cuda")}
        p.bind(**params, **state)
        p.set_workspace(workspace)
        y = p(x)
        torch.cuda.synchronize()
        return y, state

    y_own, state_own = run(None)
    workspace = torch.full((p.workspace_size(N=33) // 4,), float("nan"), device="cuda")
    y, state = run(workspace)
    assert torch.equal(y, y_own)  # same kernels, same order: bitwise the same
    for name in state:
        assert torch.equal(state[name], state_own[name]), name
    p.set_workspace(workspace[: workspace.numel() // 2])
    with pytest.raises(kfuse.Error, match="workspace"):
        p(x)


# torch.compile and torch.export around a model of two nn.Linear layers and a Fused head: the
# head is one torch.ops.kfuse op in the graph (tests/python/test_torch_op.py checks the tracing
# on the CPU; these run the kernels).
from test_torch_op import HEAD, Model  # noqa: E402


@pytest.fixture
def head_model(tmp_path):
    """(model, eager): the same model twice, each with its own tensors, on the GPU."""
    kf = tmp_path / "head.kf"
    kf.write_text(HEAD)
    torch.manual_seed(0)
    model = Model(kf).cuda()
    eager = Model(kf).cuda()
    eager.load_state_dict(model.state_dict())
    return model, eager


def assert_same_head_state(model, eager, what):
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        a, b = getattr(model.head.module.bn, name), getattr(eager.head.module.bn, name)
        assert rel(a, b) <= 4 * BOUND, f"{what}: {name} rel err {rel(a, b):.2e}"


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_fullgraph_compile_has_no_graph_break_and_matches_eager(head_model, mode):
    torch.backends.cuda.matmul.allow_tf32 = False
    model, eager = head_model
    model.train(mode == "train")
    eager.train(mode == "train")
    torch._dynamo.reset()
    with torch.no_grad():
        x = torch.randn(N, 16, device="cuda")
        explained = torch._dynamo.explain(model)(x)
        assert explained.graph_break_count == 0 and explained.graph_count == 1, explained.break_reasons
        eager(x)  # the explain call ran the model once: the running statistics moved
        compiled = torch.compile(model, fullgraph=True, dynamic=True)
        for step, n in enumerate((N, N + 7, N)):
            x = torch.randn(n, 16, device="cuda")
            y, y_ref = compiled(x), eager(x)
            assert rel(y, y_ref) <= 4 * BOUND, f"{mode} step {step}: rel err {rel(y, y_ref):.2e}"
            assert_same_head_state(model, eager, f"{mode} step {step}")


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_reduce_overhead_replays_the_cuda_graph(head_model, mode):
    torch.backends.cuda.matmul.allow_tf32 = False
    model, eager = head_model
    model.train(mode == "train")
    eager.train(mode == "train")
    torch._dynamo.reset()
    from torch._dynamo.utils import counters
    counters.clear()
    compiled = torch.compile(model, mode="reduce-overhead", fullgraph=True)
    with torch.no_grad():
        for step in range(5):  # warm-up, record, then replays
            x = torch.randn(N, 16, device="cuda")
            y = compiled(x).clone()
            y_ref = eager(x)
            assert rel(y, y_ref) <= 4 * BOUND, f"{mode} step {step}: rel err {rel(y, y_ref):.2e}"
            assert_same_head_state(model, eager, f"{mode} step {step}")
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])


def test_export_succeeds_and_the_exported_program_runs(head_model):
    torch.backends.cuda.matmul.allow_tf32 = False
    model, eager = head_model
    model.eval()
    eager.eval()
    with torch.no_grad():
        ep = torch.export.export(model, (torch.randn(N, 16, device="cuda"),),
                                 dynamic_shapes=({0: torch.export.Dim("N")},))
        assert any("kfuse" in str(node.target) for node in ep.graph.nodes)
        for n in (N, 2 * N + 1):
            x = torch.randn(n, 16, device="cuda")
            assert rel(ep.module()(x), eager(x)) <= 4 * BOUND


def test_precision_used_follows_pytorch_and_says_why(head_model):
    model, _ = head_model
    model.eval()
    x = torch.randn(N, 16, device="cuda")
    before = torch.get_float32_matmul_precision()
    try:
        with torch.no_grad():
            for setting, precision in (("highest", "fp32"), ("high", "tf32"), ("medium", "bf16")):
                torch.set_float32_matmul_precision(setting)
                model(x)
                assert model.head.used_precision == (precision, f"torch.get_float32_matmul_precision() is '{setting}'")
            torch.set_float32_matmul_precision("highest")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = model(x)
            assert model.head.used_precision == ("bf16", "torch.autocast(dtype=torch.bfloat16)")
            assert y.dtype == torch.float32
            model.head.precision = "3xtf32"
            model(x)
            assert model.head.used_precision == ("3xtf32", "precision= given")
    finally:
        torch.set_float32_matmul_precision(before)
