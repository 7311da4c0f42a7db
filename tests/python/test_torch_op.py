"""kfuse pipelines as torch.library custom ops, on the CPU (no GPU): the schemas, the fake
implementation (symbolic batch dims, shape and dtype checks, agreement with the compiled
pipeline's output shapes), opcheck, torch.compile(fullgraph=True, dynamic=True) and
torch.export around a model with a Fused head, and the precision a call follows. The op's CUDA
kernel cannot run here: the tests that execute a graph give the op a CPU kernel that computes
it with kfuse's fp64 reference interpreter. Skipped without torch."""
import pytest

import kfuse

torch = pytest.importorskip("torch")

import kfuse.torch  # noqa: E402
from kfuse.torch_op import pipeline_op  # noqa: E402
from torch._subclasses.fake_tensor import FakeTensorMode  # noqa: E402
from torch.fx.experimental.symbolic_shapes import ShapeEnv  # noqa: E402

from conftest import REPO  # noqa: E402

FEATURES = 16
HEAD = f"""pipeline head {{
  dim N
  input  x: f32[N, {FEATURES}]
  param  weight: f32[{FEATURES}, {FEATURES}]
  param  bias: f32[{FEATURES}]
  param  bn_weight: f32[{FEATURES}]
  param  bn_bias: f32[{FEATURES}]
  state  running_mean: f32[{FEATURES}]
  state  running_var: f32[{FEATURES}]
  h = linear(x, weight, bias)
  return relu(batchnorm(h, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1))
}}
"""


@pytest.fixture
def head_kf(tmp_path):
    path = tmp_path / "head.kf"
    path.write_text(HEAD)
    return path


def interpreted(op, precisions_seen):
    """A CPU kernel for `op` that runs kfuse's reference interpreter (in float64, rounded to
    the declared types) and writes the updated state back in place, as the CUDA kernel does;
    it records the precision argument of each call."""
    def kernel(*arguments):
        *tensors, precision = arguments
        precisions_seen.append(precision)
        named = dict(zip([v["name"] for v in op.inputs + op.params], tensors))
        dims = {name: int(size) for name, size in op._dims(tensors).items()}
        host = {name: (list(t.shape), t.detach().double().contiguous().numpy().tobytes()) for name, t in named.items()}
        result = kfuse.interpret(text=op._text, file_name=op.kf_file, mode=op.mode, dims=dims, tensors=host)

        def tensor(pair, dtype):
            shape, data = pair
            return torch.frombuffer(bytearray(data), dtype=torch.float64).view(shape).to(dtype)

        for name, pair in result["state"].items():
            named[name].copy_(tensor(pair, named[name].dtype))
        outs = [tensor(pair, kfuse.torch_op._DTYPES[v["dtype"]]) for pair, v in zip(result["outputs"], op.outputs)]
        return outs[0] if len(outs) == 1 else tuple(outs)
    return kernel


class Head(torch.nn.Module):
    """The .kf's chain in PyTorch: linear -> BatchNorm1d -> relu."""

    MAPPING = {"weight": "linear.weight", "bias": "linear.bias", "bn_weight": "bn.weight", "bn_bias": "bn.bias",
               "running_mean": "bn.running_mean", "running_var": "bn.running_var"}

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(FEATURES, FEATURES)
        self.bn = torch.nn.BatchNorm1d(FEATURES)
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.relu(self.bn(self.linear(x)))


class Model(torch.nn.Module):
    """Two nn.Linear layers and a head: Head itself, or Fused around it."""

    def __init__(self, kf=None):
        super().__init__()
        self.first = torch.nn.Linear(FEATURES, FEATURES)
        self.second = torch.nn.Linear(FEATURES, FEATURES)
        self.head = Head() if kf is None else kfuse.torch.Fused(Head(), kf, mapping=Head.MAPPING)

    def forward(self, x):
        return self.head(torch.relu(self.second(torch.relu(self.first(x)))))


def pytorch_twin(m):
    """The same model with the PyTorch head, on copies of m's tensors."""
    twin = Model()
    twin.load_state_dict({k.replace("head.module.", "head."): v.clone() for k, v in m.state_dict().items()})
    return twin.train(m.training)


@pytest.fixture
def model(head_kf):
    """The model, its head's ops running on the CPU through the interpreter; a list of the
    precision arguments the head's calls passed."""
    torch.manual_seed(0)
    m = Model(head_kf)
    seen = []
    libraries = []
    for op in m.head._ops.values():
        library = torch.library.Library("kfuse", "IMPL")  # noqa: TOR901
        library.impl(op.name, interpreted(op, seen), "CPU")
        libraries.append(library)
    yield m, seen
    for library in libraries:
        library._destroy()


def test_each_mode_is_an_op_named_by_the_kf_whose_train_mode_mutates_the_state(head_kf):
    train, eval_ = pipeline_op(head_kf, "train"), pipeline_op(head_kf, "eval")
    assert train is pipeline_op(head_kf, "train")  # registered once
    assert train.name.startswith("head_train_") and eval_.name.startswith("head_eval_")
    assert getattr(torch.ops.kfuse, train.name).default is train.op
    schema = str(train.op._schema)
    assert "Tensor x, Tensor weight, Tensor bias, Tensor bn_weight, Tensor bn_bias, Tensor(s4!) running_mean, " \
           "Tensor(s5!) running_var, str precision) -> Tensor" in schema
    assert "!" not in str(eval_.op._schema)  # eval mode reads the running statistics only
    # Another text naming the same pipeline is another op.
    other = head_kf.with_name("other.kf")
    other.write_text(HEAD.replace("eps=1e-5", "eps=1e-3"))
    assert pipeline_op(other, "train").name != train.name


@pytest.mark.parametrize("kf", sorted((REPO / "examples").glob("*.kf")), ids=lambda p: p.stem)
def test_every_example_is_an_op_whose_arguments_are_its_names(kf):
    program = kfuse.program(kf)
    names = [v["name"] for v in program["values"] if v["kind"] in ("input", "param", "state")]
    for mode in ("train", "eval"):
        op = pipeline_op(kf, mode)
        assert [a.name for a in op.op._schema.arguments] == names + ["precision"]
        assert len(op.op._schema.returns) == len(program["outputs"])


def test_pipeline_op_refuses_bad_arguments(head_kf, tmp_path):
    with pytest.raises(kfuse.Error, match=r"pipeline_op\(.*head.kf\): mode must be 'train' or 'eval', got 'test'"):
        pipeline_op(head_kf, "test")
    with pytest.raises(kfuse.Error, match="cannot read the .kf file"):
        pipeline_op(tmp_path / "missing.kf", "eval")
    with pytest.raises(kfuse.Error, match="kf_file must be a path"):
        pipeline_op(3, "eval")
    broken = tmp_path / "broken.kf"
    broken.write_text(HEAD.replace("relu(", "relu_("))
    with pytest.raises(kfuse.Error, match="broken.kf:"):
        pipeline_op(broken, "eval")


def fake_arguments(op, mode, n):
    tensors = [torch.empty(n, FEATURES)] + [torch.empty(FEATURES, FEATURES) if v["name"] == "weight"
                                            else torch.empty(FEATURES) for v in op.params]
    return [mode.from_tensor(t) for t in tensors]


def test_the_fake_implementation_keeps_the_batch_dim_symbolic(head_kf):
    op = pipeline_op(head_kf, "train")
    mode = FakeTensorMode(shape_env=ShapeEnv())
    with mode:
        y = op(*fake_arguments(op, mode, 7), precision="matmul")
    assert y.shape == (7, FEATURES) and y.dtype == torch.float32
    # Traced with a dynamic batch, the output's batch size is the input's symbol.
    ep = torch.export.export(_OpCall(op), (torch.empty(7, FEATURES),), dynamic_shapes=({0: torch.export.Dim("N")},))
    x = [n for n in ep.graph.nodes if n.op == "placeholder"][-1].meta["val"]
    out = [n for n in ep.graph.nodes if n.op == "output"][0].args[0][0].meta["val"]
    assert isinstance(out.shape[0], torch.SymInt) and out.shape[0] == x.shape[0]
    assert out.shape[1] == FEATURES


class _OpCall(torch.nn.Module):
    """The op on an input and the params as buffers."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        for v in op.params:
            self.register_buffer(v["name"], torch.rand(FEATURES, FEATURES) if v["name"] == "weight"
                                 else torch.rand(FEATURES))

    def forward(self, x):
        return self.op(x, *(getattr(self, v["name"]) for v in self.op.params), precision="matmul")


def test_the_fake_implementation_refuses_wrong_shapes_and_dtypes_naming_the_tensor(head_kf):
    op = pipeline_op(head_kf, "eval")
    mode = FakeTensorMode()
    with mode:
        args = fake_arguments(op, mode, 4)
        with pytest.raises(kfuse.Error, match=r"tensor 'x' is f32\[4, 15\], declared f32\[N, 16\]"):
            op(mode.from_tensor(torch.empty(4, 15)), *args[1:], precision="matmul")
        with pytest.raises(kfuse.Error, match=r"tensor 'bias' is bf16\[16\], declared f32\[16\]"):
            op(args[0], args[1], mode.from_tensor(torch.empty(FEATURES, dtype=torch.bfloat16)), *args[3:],
               precision="matmul")
        with pytest.raises(kfuse.Error, match="precision must be 'matmul', 'autocast' or one of fp32, 3xtf32, tf32, bf16, got 'fp64'"):
            op(*args, precision="fp64")


@pytest.mark.parametrize("name", ["bert_mlm_transform_tokens_view", "gemm_bn_scale_softmax_bf16",
                                  "llama13b_o_proj_residual_rmsnorm"])
def test_fake_output_shapes_are_the_compiled_pipelines(name):
    """The fake implementation's shapes and dtypes against what the compiled pipeline allocates
    for the same dims (examples with [B, T, F] views, bf16, several inputs)."""
    kf = REPO / "examples" / f"{name}.kf"
    op = pipeline_op(kf, "eval")
    pipeline = op.pipeline("fp32", torch.device("cpu"))  # compiling needs no GPU
    dims = {"N": 3, "B": 2, "T": 5}
    mode = FakeTensorMode()
    with mode:
        tensors = [torch.empty([kfuse.torch_op._extent(e, dims) for e in v["shape"]],
                               dtype=kfuse.torch_op._DTYPES[v["dtype"]]) for v in op.inputs + op.params]
        outs = op(*tensors, precision="fp32")
    outs = outs if isinstance(outs, tuple) else (outs,)
    bound = pipeline._core.dims({v["name"]: list(t.shape) for v, t in zip(op.inputs, tensors)})
    assert [list(o.shape) for o in outs] == [pipeline._core.output_shape(i, bound) for i in range(len(outs))]
    assert [kfuse.torch_op._DTYPE_NAMES[o.dtype] for o in outs] == \
           [pipeline._core.output_dtype(i) for i in range(len(outs))]


def test_opcheck_passes_in_both_modes(model):
    m, _ = model
    for op in m.head._ops.values():
        tensors = [torch.randn(5, FEATURES)] + [m.head.module.get_parameter(Head.MAPPING[v["name"]]).detach().clone()
                                                if v["kind"] == "param" else
                                                m.head.module.get_buffer(Head.MAPPING[v["name"]]).clone()
                                                for v in op.params]
        torch.library.opcheck(op.op, (*tensors, "matmul"))


def count_graphs():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return torch._dynamo.backends.debugging.aot_eager(gm, example_inputs)
    return graphs, backend


@pytest.mark.parametrize("mode", ["train", "eval"])
def test_fullgraph_dynamic_compile_keeps_the_op_in_one_graph(model, mode):
    m, seen = model
    m.train(mode == "train")
    eager = pytorch_twin(m)
    graphs, backend = count_graphs()
    torch._dynamo.reset()
    compiled = torch.compile(m, backend=backend, fullgraph=True, dynamic=True)
    with torch.no_grad():
        for n in (5, 9, 9):
            x = torch.randn(n, FEATURES)
            torch.testing.assert_close(compiled(x), eager(x), rtol=1e-5, atol=1e-5)
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                torch.testing.assert_close(getattr(m.head.module.bn, name), getattr(eager.head.bn, name))
    assert len(graphs) == 1  # one graph, no break, no recompile for the second batch size
    targets = [str(n.target) for n in graphs[0].graph.nodes if n.op == "call_function"]
    assert any(m.head._ops[mode].name in t for t in targets), targets
    if mode == "train":
        assert int(m.head.module.bn.num_batches_tracked) == 3


def test_export_traces_the_op_and_the_exported_program_runs(model):
    m, _ = model
    m.eval()
    x = torch.randn(6, FEATURES)
    with torch.no_grad():  # the forward op alone, as inference exports it
        ep = torch.export.export(m, (x,), dynamic_shapes=({0: torch.export.Dim("N")},))
    targets = [str(n.target) for n in ep.graph.nodes if n.op == "call_function"]
    assert any(m.head._ops["eval"].name in t for t in targets), targets
    with torch.no_grad():
        for n in (6, 11):
            x = torch.randn(n, FEATURES)
            torch.testing.assert_close(ep.module()(x), pytorch_twin(m)(x), rtol=1e-5, atol=1e-5)


def test_export_in_train_mode_updates_the_running_statistics(model):
    m, _ = model
    m.train()
    eager = pytorch_twin(m)
    x = torch.randn(6, FEATURES)
    with torch.no_grad():
        ep = torch.export.export(m, (x,))
        run = ep.module()
        torch.testing.assert_close(run(x), eager(x), rtol=1e-5, atol=1e-5)
    state = dict(run.named_buffers())
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(state[f"head.module.bn.{name}"], getattr(eager.head.bn, name))


def test_precision_follows_the_matmul_precision_and_autocast_and_an_explicit_one_wins(model):
    m, seen = model
    m.eval()
    x = torch.randn(4, FEATURES)
    before = torch.get_float32_matmul_precision()
    try:
        for setting, precision in (("highest", "fp32"), ("high", "tf32"), ("medium", "bf16")):
            torch.set_float32_matmul_precision(setting)
            assert m.head.precision_choice(x) == (precision, f"torch.get_float32_matmul_precision() is '{setting}'")
            assert m.head.pipeline(x).precision == precision
    finally:
        torch.set_float32_matmul_precision(before)
    with torch.no_grad():
        m(x)
        assert seen[-1] == "matmul"  # read when the op runs
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert m.head.precision_choice(x) == ("bf16", "torch.autocast(dtype=torch.bfloat16)")
            y = m(x)  # the Linear layers give bf16; the head takes its declared f32
            assert seen[-1] == "autocast" and y.dtype == torch.float32
        with torch.autocast("cpu", dtype=torch.float16), pytest.raises(
                kfuse.Error, match=r"torch.autocast\('cpu', dtype=torch.float16\) is on, and kfuse has no precision"):
            m.head(x)
        m.head.precision = "3xtf32"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert m.head.precision_choice(x) == ("3xtf32", "precision= given")
            m(x)
            assert seen[-1] == "3xtf32"


def test_autocast_is_followed_under_compile(model):
    m, seen = model
    m.eval()
    torch._dynamo.reset()
    compiled = torch.compile(m, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, FEATURES)
    with torch.no_grad():
        compiled(x)
        assert seen[-1] == "matmul"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            compiled(x)  # autocast is guarded: a new graph, calling the op at bf16
        assert seen[-1] == "autocast"


def test_the_op_without_a_gpu_is_refused_naming_the_device(head_kf):
    op = pipeline_op(head_kf, "eval")
    tensors = [torch.randn(3, FEATURES)] + [torch.randn(FEATURES, FEATURES) if v["name"] == "weight"
                                            else torch.rand(FEATURES) for v in op.params]
    with pytest.raises(kfuse.Error, match="is on cpu; kfuse runs on CUDA devices"):
        op(*tensors, precision="fp32")


def test_forward_takes_its_inputs_by_position_or_name(model):
    m, _ = model
    head = m.head.eval()
    x = torch.randn(3, FEATURES)
    with torch.no_grad():
        torch.testing.assert_close(head(x=x), head(x))
        for args, named, message in (((), {}, "forward needs the pipeline's inputs"),
                                     ((x, x), {}, r"takes 1 input\(s\) \(x\), got 2 positional"),
                                     ((x,), {"x": x}, "input 'x' given twice"),
                                     ((), {"y": x}, r"input 'y' is not an input of the pipeline \(x\)")):
            with pytest.raises(kfuse.Error, match=message):
                head(*args, **named)
