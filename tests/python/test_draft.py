"""kfuse.torch.draft on the CPU, no GPU: a module equivalent to every example drafts to the
example's own chain (the same ops, attributes, names, dims and types) in train and eval mode,
and the draft computes what the module does, through kfuse.torch.Reference of the draft and
through kfuse.torch.Fused of the draft, whose op runs on kfuse's fp64 reference interpreter
here; hand-written modules (nn.Linear, nn.BatchNorm1d, nn.Sequential, in-place ReLU, ...)
draft with their state_dict names and need no mapping; dims are symbolic where dynamic_shapes
says so; an op kfuse cannot spell is named with its source line. Skipped without torch."""
import copy
import functools
import inspect

import pytest

import kfuse

torch = pytest.importorskip("torch")

import kfuse.torch  # noqa: E402
import kfuse.draft  # noqa: E402
from torch import nn  # noqa: E402
from torch.export import Dim  # noqa: E402
from torch.nn import functional as F  # noqa: E402

from conftest import REPO, rel  # noqa: E402
from test_torch_op import interpreted  # noqa: E402

EXAMPLES = sorted((REPO / "examples").glob("*.kf"))
DIMS = {"N": 4, "B": 2, "T": 3}
F32_TOLERANCE = 1e-6  # an f32 rounding of float64 results
HALF_TOLERANCE = 2e-2


def example_module(kf):
    """A module equivalent to the example: its kfuse.torch.Reference (parameters and buffers
    under the .kf's names), with a forward that takes the .kf's inputs by their names."""
    module = kfuse.torch.Reference(kf)
    module.reset_parameters(torch.Generator().manual_seed(0))
    names = ", ".join(module.input_names)
    scope = {}
    exec(f"def forward(self, {names}):\n    return kfuse.torch.Reference.forward(self, {names})\n",
         {"kfuse": kfuse}, scope)
    module.__class__ = type(kf.stem, (kfuse.torch.Reference,), {"forward": scope["forward"]})
    return module


def dynamic_shapes(program):
    """torch.export's dynamic_shapes for the program's inputs: every dim of theirs a Dim."""
    dims = {name: Dim(name) for name in program["dims"]}
    return tuple({axis: dims[e] for axis, e in enumerate(v["shape"]) if isinstance(e, str)}
                 for v in program["values"] if v["kind"] == "input")


@functools.lru_cache(maxsize=None)
def drafted(kf):
    """(module, inputs, the draft in train mode, the draft in eval mode) of an example."""
    module = example_module(kf)
    inputs = module.random_inputs(DIMS, torch.Generator().manual_seed(1))
    shapes = dynamic_shapes(module.program)
    texts = [kfuse.torch.draft(module.train(mode), tuple(inputs), dynamic_shapes=shapes, name=kf.stem)
             for mode in (True, False)]
    return module.train(), inputs, *texts


def half(program):
    return any(v["dtype"] != "f32" for v in program["values"])


def canonical(program, skip_casts):
    """The program's outputs as expressions over its declarations, independent of how the values
    are named: op, operands, attributes and result type. A reshape is its result's shape (a -1
    is written out); with skip_casts, casts (and so result dtypes) are left out."""
    values = program["values"]

    def expression(i):
        v = values[i]
        if v["kind"] != "op":
            return f"{v['kind']} {v['name']}: {v['dtype']}{v['shape']}"
        if skip_casts and v["op"] == "cast":
            return expression(v["args"][0])
        attrs = {} if v["op"] == "reshape" else v["attrs"]
        result = v["shape"] if skip_casts else (v["dtype"], v["shape"])
        return f"{v['op']}({', '.join(expression(a) for a in v['args'])}; {attrs}) -> {result}"
    return [expression(o) for o in program["outputs"]], program["dims"]


@pytest.mark.parametrize("kf", EXAMPLES, ids=lambda p: p.stem)
def test_a_module_equivalent_to_each_example_drafts_to_the_examples_chain(kf):
    module, inputs, text, eval_text = drafted(kf)
    assert eval_text == text  # the .kf is mode-independent
    program, example = kfuse.program(text=text), kfuse.program(kf)
    assert program["name"] == example["name"]
    # Half-precision examples: Reference normalizes a bf16/f16 input with f32 parameters in f32
    # and rounds once, which the draft spells with casts around the norm.
    assert canonical(program, half(example)) == canonical(example, half(example))
    declared = {v["name"]: (v["kind"], v["dtype"], v["shape"]) for v in program["values"] if v["kind"] != "op"}
    assert declared == {v["name"]: (v["kind"], v["dtype"], v["shape"]) for v in example["values"] if v["kind"] != "op"}
    assert [v["name"] for v in program["values"] if v["kind"] == "input"] == module.input_names


def interpret_ops_on_cpu(fused):
    """Fused's ops run on the CPU through kfuse's fp64 interpreter (test_torch_op's kernel)."""
    libraries = []
    for op in fused._ops.values():
        library = torch.library.Library("kfuse", "IMPL")  # noqa: TOR901
        library.impl(op.name, interpreted(op, []), "CPU")
        libraries.append(library)
    return libraries


def assert_runs_as_the_module(module, text, inputs, tolerance, rng=None, modes=(True, False)):
    """Fused(module, text=draft) (kfuse's interpreter) and Reference(text=draft) with the module's
    tensors give the module's outputs and running statistics in float64, in each mode of `modes`
    (training: True), one call after another."""
    fused = kfuse.torch.Fused(copy.deepcopy(module), text=text)
    libraries = interpret_ops_on_cpu(fused)
    reference = kfuse.torch.Reference(text=text)
    reference.load_state_dict({kfuse.draft.kf_name(k): v for k, v in module.state_dict().items()
                               if kfuse.draft.kf_name(k) in reference.state_dict()})
    expected, reference = copy.deepcopy(module).double(), reference.double()
    expected.kfuse_rng = reference.kfuse_rng = rng  # dropout: the interpreter's masks at (0, 0)
    exact = [t.double() if t.is_floating_point() else t for t in inputs]  # a loss's int64 target stays
    try:
        for mode in modes:
            for m in (fused, expected, reference):
                m.train(mode)
            with torch.no_grad():
                torch.manual_seed(2)
                want = expected(*exact)
                torch.manual_seed(2)
                got = {"Fused": fused(*inputs), "Reference": reference(*exact)}
            want = want if isinstance(want, tuple) else (want,)
            for who, y in got.items():
                y = y if isinstance(y, tuple) else (y,)
                assert len(y) == len(want), who
                for i, (a, b) in enumerate(zip(y, want)):
                    assert rel(a, b) <= tolerance, f"{who} mode={mode} output {i}: rel err {rel(a, b):.2e}"
            buffers = dict(expected.named_buffers())
            for owner, who in ((fused.module, "Fused"), (reference, "Reference")):
                for key, b in buffers.items():
                    name = key if owner is fused.module else kfuse.draft.kf_name(key)
                    if name in dict(owner.named_buffers()) and b.is_floating_point():
                        a = dict(owner.named_buffers())[name]
                        assert rel(a, b) <= tolerance, f"{who} mode={mode} {key}: rel err {rel(a, b):.2e}"
    finally:
        for library in libraries:
            library._destroy()
    return fused


@pytest.mark.parametrize("kf", EXAMPLES, ids=lambda p: p.stem)
def test_the_draft_of_each_examples_module_computes_what_the_module_does(kf):
    module, inputs, text, _ = drafted(kf)
    tolerance = HALF_TOLERANCE if half(module.program) else F32_TOLERANCE
    assert_runs_as_the_module(module, text, inputs, tolerance, rng=(0, 0))


FEATURES = 16


class Head(nn.Module):
    """The founding chain as PyTorch users write it: linear -> BatchNorm1d -> * scale -> softmax."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(FEATURES, 8)
        self.bn = nn.BatchNorm1d(8)
        self.scale = nn.Parameter(torch.full((1,), 1.5))
        with torch.no_grad():
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        return torch.softmax(self.scale * self.bn(self.linear(x)), dim=1)


def test_params_and_state_are_named_by_state_dict_keys_and_fused_needs_no_mapping():
    torch.manual_seed(0)
    module, x = Head(), torch.randn(6, FEATURES)
    text = kfuse.torch.draft(module, (x,), dynamic_shapes=({0: Dim("N")},))
    assert "pipeline head {" in text and "  dim N\n  input  x: f32[N, 16]\n" in text
    for line in ("param  linear_weight: f32[8, 16]", "param  bn_weight: f32[8]", "param  scale: f32[1]",
                 "state  bn_running_mean: f32[8]", "state  bn_running_var: f32[8]",
                 "batchnorm(linear, bn_weight, bn_bias, bn_running_mean, bn_running_var, eps=1e-05, momentum=0.1)",
                 "mul(scale, batch_norm)", "softmax(mul, dim=1)"):
        assert line in text, line
    assert "num_batches_tracked" not in text  # Fused counts it, as PyTorch does
    source_line = inspect.getsourcelines(Head.forward)[1] + 1
    assert f"  # test_draft.py:{source_line}\n" in text  # each statement says where it came from
    assert int(module.bn.num_batches_tracked) == 0  # exporting left the module's tensors alone
    fused = assert_runs_as_the_module(module, text, [x], F32_TOLERANCE)
    assert set(fused._owners) == {"linear_weight", "linear_bias", "bn_weight", "bn_bias", "scale",
                                  "bn_running_mean", "bn_running_var"}
    assert int(fused.module.bn.num_batches_tracked) == 1  # the train-mode call


def test_a_sequential_models_digit_keys_get_a_leading_underscore_that_fused_finds():
    module = nn.Sequential(nn.Linear(FEATURES, FEATURES), nn.ReLU(inplace=True), nn.Linear(FEATURES, 4))
    x = torch.randn(5, FEATURES)
    text = kfuse.torch.draft(module, x, name="mlp")
    assert "param  _0_weight: f32[16, 16]" in text and "param  _2_bias: f32[4]" in text
    assert "relu_ = relu(linear)" in text  # nn.ReLU(inplace=True): nothing else reads what it overwrites
    assert kfuse.draft.kf_name("0.weight") == "_0_weight"
    assert kfuse.draft.kf_name("bn.running_mean") == "bn_running_mean"
    fused = assert_runs_as_the_module(module, text, [x], F32_TOLERANCE)
    assert fused._owners["_0_weight"] == (fused.module[0], "weight")


class Zoo(nn.Module):
    """Most aten ops a draft spells, as modules and functions write them, on [N, 16] rows."""

    def __init__(self):
        super().__init__()
        self.block = nn.Sequential(nn.Linear(FEATURES, FEATURES, bias=False), nn.ReLU6(), nn.SiLU(inplace=True))
        self.group = nn.GroupNorm(4, FEATURES)
        self.rms = nn.RMSNorm(FEATURES)
        self.ln = nn.LayerNorm(FEATURES, bias=False)
        self.instance = nn.InstanceNorm1d(FEATURES)
        self.pool, self.avg = nn.MaxPool1d(2), nn.AvgPool1d(4, stride=2)
        self.project = nn.Parameter(torch.randn(FEATURES, FEATURES) / 4)
        self.drop = nn.Dropout(0.25)

    def forward(self, x):
        h = self.block(x)
        h = self.group(h) + self.rms(h) + self.ln(h).view(-1, FEATURES)
        h = self.drop(F.gelu(h) * torch.sigmoid(h) + torch.tanh(h) - F.hardsigmoid(h) / (2 + F.hardswish(h)))
        h = F.mish(h) + F.elu(h, 0.5) + F.selu(h) + F.softplus(h, beta=2) + F.logsigmoid(h) + F.softsign(h)
        a = h.abs() + 1
        h = h + torch.sqrt(a) + torch.rsqrt(a) + torch.log(a) + torch.exp(-a) + torch.reciprocal(a) + h.square()
        h = torch.maximum(h, -a) - torch.minimum(h, a) + (1 - h) + a ** 0.5 + 2 ** (-a) + a ** h.tanh()
        h = torch.mm(F.leaky_relu(torch.clamp(h, max=4.0), 0.1), self.project) + h @ self.project
        stats = h.sum(1, keepdim=True) + h.mean(-1, keepdim=True) + torch.amax(h, 1, keepdim=True) \
            - torch.amin(h, 1, keepdim=True) + torch.logsumexp(h, 1, keepdim=True) + h.min(1, keepdim=True).values \
            + torch.var(h, 1, unbiased=False, keepdim=True) + torch.std(h, -1, keepdim=True)
        h = h / stats.abs().clamp(min=1)
        rows = self.instance(h) + torch.flatten(h.unsqueeze(0), 0, 1).detach().clone()
        return self.pool(rows), self.avg(rows), F.log_softmax(rows, -1), torch.relu(F.hardtanh(rows, -2.0, 2.0)) \
            + F.relu6(rows)


def test_most_spellings_round_trip_through_reference_and_fused():
    torch.manual_seed(0)
    module, x = Zoo(), torch.randn(6, FEATURES)
    with torch.no_grad():
        for p in (module.group.weight, module.rms.weight, module.ln.weight):
            p.uniform_(0.5, 1.5)
    text = kfuse.torch.draft(module, x)  # static: InstanceNorm1d guards N != 16 on [N, 16]
    ops = {v["op"] for v in kfuse.program(text=text)["values"] if v["kind"] == "op"}
    spelled = {"linear", "matmul", "hardtanh", "silu", "groupnorm", "rmsnorm", "layernorm", "instancenorm", "gelu",
               "sigmoid", "tanh", "hardsigmoid", "hardswish", "dropout", "mish", "elu", "selu", "softplus",
               "logsigmoid", "abs", "sqrt", "rsqrt", "log", "exp", "neg", "reciprocal", "square", "maximum",
               "minimum", "pow", "leaky_relu", "clamp", "sum", "mean", "amax", "amin", "logsumexp", "min", "var",
               "std", "max_pool1d", "avg_pool1d", "log_softmax", "relu", "reshape", "add", "sub", "mul", "div"}
    assert spelled <= ops, spelled - ops
    assert "relu6 = hardtanh(add_28, min_val=0, max_val=6)" in text  # F.relu6
    assert "max_pool1d(add_" in text and "kernel_size=2, stride=2)" in text
    assert "avg_pool1d(add_" in text and "kernel_size=4, stride=2)" in text
    assert "var(" in text and "correction=0" in text and "layernorm(" in text and ", eps=1e-05)" in text
    assert_runs_as_the_module(module, text, [x], F32_TOLERANCE, modes=(False,))  # train: dropout's masks differ


def test_dims_are_symbolic_where_dynamic_shapes_says_so_and_numbers_elsewhere():
    module, x = Head(), torch.randn(6, FEATURES)
    assert "  input  x: f32[6, 16]\n" in kfuse.torch.draft(module, x) and " dim " not in kfuse.torch.draft(module, x)
    named = kfuse.torch.draft(module, (x,), dynamic_shapes={"x": {0: Dim("batch")}})
    assert "  dim batch\n  input  x: f32[batch, 16]\n" in named
    auto = kfuse.torch.draft(module, (x,), dynamic_shapes=({0: Dim.AUTO},))
    assert "  dim x_0\n  input  x: f32[x_0, 16]\n" in auto
    with pytest.raises(kfuse.Error, match="the dim name 'x' is taken by a keyword, an input or a parameter"):
        kfuse.torch.draft(module, (x,), dynamic_shapes=({0: Dim("x")},))

    class Tokens(nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = nn.Linear(FEATURES, 8)

        def forward(self, x, residual):
            rows = x.reshape(-1, FEATURES)
            return self.proj(rows).view(x.shape[0], x.shape[1], -1) + residual

    B, T = Dim("B"), Dim("T")
    text = kfuse.torch.draft(Tokens(), (torch.randn(2, 3, FEATURES), torch.randn(2, 3, 8)),
                             dynamic_shapes=({0: B, 1: T}, {0: B, 1: T}))
    assert "  dim B, T\n  input  x: f32[B, T, 16]\n  input  residual: f32[B, T, 8]\n" in text
    assert "reshape(x, shape=[B*T, 16])" in text and "shape=[B, T, 8])" in text


def unsupported_module_line():
    class Cumulative(nn.Module):
        def forward(self, x):
            h = torch.relu(x)
            unused = torch.flip(h, [1])  # noqa: F841 (not returned: not drafted)
            return torch.cumsum(h, 1) + torch.flip(h, [1]), torch.max(h, 1).values
    return Cumulative(), inspect.getsourcelines(Cumulative.forward)[1] + 3


def test_the_first_op_kfuse_cannot_spell_is_named_with_its_source_line():
    module, line = unsupported_module_line()
    with pytest.raises(kfuse.Error) as error:
        kfuse.torch.draft(module, torch.randn(4, FEATURES))
    message = str(error.value)
    assert message.startswith(f"kfuse.torch.draft(Cumulative): kfuse cannot spell aten.cumsum.default at {__file__}:"
                              f"{line} (return torch.cumsum(h, 1) + torch.flip(h, [1]), torch.max(h, 1).values): "
                              "kfuse has no such op"), message
    assert message.endswith(f"(and 1 more: kfuse cannot spell aten.flip.default at {__file__}:{line} (return "
                            "torch.cumsum(h, 1) + torch.flip(h, [1]), torch.max(h, 1).values))"), message


class Misused(nn.Module):
    def __init__(self, case):
        super().__init__()
        self.case = case
        self.bn = nn.BatchNorm1d(FEATURES, track_running_stats=case != "no running stats",
                                 momentum=None if case == "cumulative" else 0.1)
        self.temperature = nn.Parameter(torch.tensor(2.0))
        self.register_buffer("seen", torch.zeros(FEATURES))

    def forward(self, x):
        if self.case == "indices":
            return torch.max(x, 1).indices.float()
        if self.case == "writes a buffer":
            self.seen.add_(x.mean(0))
        if self.case == "overwrites a viewed value":
            h = x * 2
            rows = h.view(-1, FEATURES)
            h.relu_()
            return rows
        if self.case == "rank 0":
            return x / self.temperature
        if self.case == "pooled rows not squeezed":
            return F.max_pool1d(x.unsqueeze(1), 2)
        if self.case == "tensor constant":
            return x * torch.tensor([2.0])
        if self.case == "rank 3":  # BatchNorm1d over the channels of [N, C, L]
            return self.bn(x)
        return self.bn(x)


@pytest.mark.parametrize("case, message", [
    ("indices", r"aten.max.dim at .*: its indices \(argmax/argmin\) have no kfuse op"),
    ("writes a buffer", r"aten.add_.Tensor at .*: it writes the buffer 'seen' in place; a .kf updates only "
                        "batchnorm's running statistics"),
    ("overwrites a viewed value", r"aten.relu_.default at .*: it overwrites 'mul', which 'view' views"),
    ("rank 0", r"draft\(Misused\): parameter 'temperature' is torch.float32 \[\]; kfuse's tensors are f32, bf16 "
               "or f16 of rank 1 to 4"),
    ("pooled rows not squeezed", r"aten.max_pool1d.default at .*: kfuse's max_pool1d takes rows \[N, F\], and this "
                                 r"rank-3 result is not squeezed back \(axis 1\)"),
    ("tensor constant", r"draft\(Misused\): constant tensor 'c_lifted_tensor_0' of the export is no input, "
                        r"parameter or buffer of the module: make it a buffer \(register_buffer\)"),
    ("no running stats", r"aten.batch_norm.default at .*: its running_mean is absent: kfuse's batchnorm keeps "
                         r"running statistics \(track_running_stats=True\)"),
    ("cumulative", r"aten.batch_norm.default at .*: momentum=None \(a cumulative average\) is not"),
    ("rank 3", r"the drafted .kf does not check:\n<draft of Misused>:\d+:\d+: error: batchnorm of f32\[2, 16, 3\] "
               r"\(rank 3\) is not supported"),
])
def test_what_kfuse_cannot_run_is_refused_naming_it(case, message):
    module = Misused(case).train(case != "cumulative")
    with pytest.raises(kfuse.Error, match=message):
        kfuse.torch.draft(module, torch.randn(2, FEATURES, 3) if case == "rank 3" else torch.randn(4, FEATURES))
    assert not module.seen.any()  # export ran forward on fake tensors


def test_bad_arguments_are_refused_clearly():
    module, x = Head(), torch.randn(4, FEATURES)
    with pytest.raises(kfuse.Error, match="module must be a torch.nn.Module, got function"):
        kfuse.torch.draft(F.relu, x)
    with pytest.raises(kfuse.Error, match=r"draft\(Head\): example_inputs must be a tensor or a tuple of tensors"):
        kfuse.torch.draft(module, [x, 3])
    with pytest.raises(kfuse.Error, match=r"name must be a .kf identifier \(not a keyword\), got 'return'"):
        kfuse.torch.draft(module, x, name="return")
    with pytest.raises(kfuse.Error, match=r"draft\(Identity\): input 'input' is torch.int64 \[4, 16\]; kfuse's "):
        kfuse.torch.draft(nn.Identity(), torch.ones(4, FEATURES, dtype=torch.int64))

    class DataDependent(nn.Module):
        def forward(self, x):
            return x if x.sum() > 0 else -x
    with pytest.raises(kfuse.Error, match=r"draft\(DataDependent\): torch.export.export failed: "):
        kfuse.torch.draft(DataDependent(), x)
    with pytest.raises(kfuse.Error, match="takes a .kf file or text=, not both or neither"):
        kfuse.torch.Fused(module)


def test_every_spelling_names_an_op_of_kfuses_table_with_its_operands_and_attributes():
    ops = {info["name"]: info for info in kfuse.ops()}
    for target, spelling in kfuse.draft._SPELLINGS.items():
        if isinstance(spelling, kfuse.draft._Spelling):
            info = ops[spelling.op]
            assert set(spelling.operands) <= {o.rstrip("?") for o in info["operands"]}, target
            assert set(spelling.attrs) <= {a["name"] for a in info["attrs"]}, target
            schema = {a.name if a.name != "self" else "input" for a in target._schema.arguments}
            assert set(spelling.operands.values()) | set(spelling.attrs.values()) | set(spelling.fixed) <= schema, \
                target


class Classifier(nn.Module):
    """A linear head and its loss, as a language model's last step: int64 targets."""

    def __init__(self, class_weights=None):
        super().__init__()
        self.head = nn.Linear(FEATURES, 8)
        self.class_weights = class_weights

    def forward(self, x, target):
        return F.cross_entropy(self.head(x), target, weight=self.class_weights, reduction="sum",
                               ignore_index=3, label_smoothing=0.2)


def test_a_loss_over_int64_targets_drafts_and_class_weights_are_refused():
    module = Classifier()
    x, target = torch.randn(6, FEATURES), torch.tensor([0, 3, 7, 1, 3, 5])
    text = kfuse.torch.draft(module, (x, target), dynamic_shapes=({0: Dim("N")}, {0: Dim("N")}))
    assert "  input  target: i64[N]\n" in text
    assert "cross_entropy(" in text and 'reduction="sum"' in text and "ignore_index=3" in text
    assert_runs_as_the_module(module, text, (x, target), F32_TOLERANCE)
    with pytest.raises(kfuse.Error, match=r"aten.cross_entropy_loss.default at .*: weight=: kfuse's "
                                          "cross_entropy weighs every class alike"):
        kfuse.torch.draft(Classifier(torch.ones(8)), (x, target))
