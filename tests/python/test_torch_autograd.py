"""kfuse.torch.Fused trained through PyTorch's autograd, on the CPU (no GPU): the gradients of
inputs and every parameter against PyTorch's autograd of the same chain (kfuse.torch.Reference
in float64) for a batchnorm chain in train and eval mode, a layernorm/gelu chain, a dropout
chain and a chain of [B, T, F] views, SGD steps with torch.optim, .grad accumulation,
frozen parameters, gradcheck, opcheck of the ops and torch.compile(fullgraph=True) of a
training step. The ops' CUDA kernels cannot run here: each op gets a CPU kernel that runs its
pipeline on kfuse's fp64 reference interpreter. Skipped without torch."""
import copy

import pytest

import kfuse

torch = pytest.importorskip("torch")

import kfuse.torch  # noqa: E402
from kfuse.torch_autograd import training_ops  # noqa: E402
from kfuse.torch_op import _DTYPES  # noqa: E402

from conftest import REPO, rel  # noqa: E402

N = 6
# The interpreter computes in float64 and rounds each output (saved values included) to f32.
TOLERANCE = 1e-5
BATCHNORM = REPO / "examples" / "gemm_bn_scale_softmax_512x1024.kf"
LAYERNORM = REPO / "examples" / "bert_head_gelu_layernorm.kf"
DROPOUT = REPO / "examples" / "bert_output_dropout_layernorm.kf"
# [B, T, F] activations read as B*T rows: a saved value of [B*T, F] is the backward's [B, T, F].
VIEWS = REPO / "examples" / "bert_mlm_transform_tokens_view.kf"
MAX_POOL = REPO / "examples" / "maxout_relu_max_pool1d.kf"
AVG_POOL = REPO / "examples" / "bert_ffn_gelu_avg_pool1d.kf"
GROUPNORM = REPO / "examples" / "sd_unet_groupnorm_silu.kf"


class Interpreter:
    """CPU kernels for ops (kfuse.torch_op.PipelineOp) that run their pipelines on kfuse's
    reference interpreter, with the op's own semantics around it (PipelineOp.run_with). A
    pipeline's rng advances one offset per call that draws none given, as a kfuse.Pipeline's
    does; `calls` records (op name, precision, rng drawn at) per call."""

    def __init__(self):
        self.calls = []
        self.rng = {}  # op name -> the offset its next call draws at
        self._libraries = []

    def register(self, *ops):
        for op in ops:
            library = torch.library.Library("kfuse", "IMPL")  # noqa: TOR901
            library.impl(op.name, lambda *arguments, op=op: op.run_with(self._executor(op), *arguments), "CPU")
            self._libraries.append(library)

    def release(self):
        for library in self._libraries:
            library._destroy()

    def _executor(self, op):
        def execute(precision, inputs, params, rng):
            if rng is None:
                rng = (0, self.rng.get(op.name, 0))
                self.rng[op.name] = rng[1] + 1
            self.calls.append((op.name, precision, rng))
            named = dict(zip([v["name"] for v in op.inputs + op.params], inputs + params))
            dims = {name: int(size) for name, size in op._dims(inputs + params).items()}
            host = {name: (list(t.shape), t.detach().double().contiguous().numpy().tobytes())
                    for name, t in named.items()}
            result = kfuse.interpret(text=op._text, file_name=op.kf_file, mode=op.mode, dims=dims, tensors=host,
                                     rng=rng)
            for name, pair in result["state"].items():
                named[name].copy_(_tensor(pair, named[name].dtype))
            outs = [_tensor(pair, _DTYPES[v["dtype"]]) for pair, v in zip(result["outputs"], op.outputs)]
            return (outs[0] if len(outs) == 1 else tuple(outs)), rng
        return execute


def _tensor(pair, dtype):
    shape, data = pair
    return torch.frombuffer(bytearray(data), dtype=torch.float64).view(shape).to(dtype)


@pytest.fixture
def interpreter():
    i = Interpreter()
    yield i
    i.release()


def fused_pair(kf, interpreter, mode="train"):
    """(Fused over a Reference of `kf`, the same Reference in float64), the Fused's ops on the
    interpreter."""
    ref = kfuse.torch.Reference(kf)
    ref.reset_parameters(torch.Generator().manual_seed(0))
    fused = kfuse.torch.Fused(copy.deepcopy(ref), kf).train(mode == "train")
    interpreter.register(*fused._ops.values())
    for ops in fused._training.values():
        interpreter.register(ops.saving, ops.backward)
    return fused, copy.deepcopy(ref).double().train(mode == "train")


def all_gradients(fused, mode="train"):
    """The pair of training ops of `fused` in `mode` that computes every gradient."""
    return fused._training[(mode, frozenset())]


def inputs_of(ref, seed=1):
    dims = {"N": N, "B": 2, "T": 3}
    return [t.requires_grad_(True) for t in ref.random_inputs(dims, torch.Generator().manual_seed(seed))]


def close(a, b, floor=1e-12):
    """||a - b|| within TOLERANCE of ||b|| + floor."""
    return (a.double() - b.double()).norm().item() <= TOLERANCE * b.double().norm().item() + floor


def assert_grads_match(fused, exact, inputs, exact_inputs, what):
    """Every gradient within TOLERANCE of PyTorch's, relative to itself or, for a gradient that
    cancels to zero, to the step's largest: a linear bias before a train-mode batchnorm has a
    gradient of zero, computed from the forward's f32 statistics as their rounding."""
    exact_params = dict(exact.named_parameters())
    exact_grads = [e.grad for e in exact_inputs] + [p.grad for p in exact_params.values() if p.grad is not None]
    floor = TOLERANCE * max(g.double().norm().item() for g in exact_grads)
    for i, (t, e) in enumerate(zip(inputs, exact_inputs)):
        assert t.grad is not None and t.grad.dtype == t.dtype, f"{what}: input {i}"
        assert close(t.grad, e.grad, floor), f"{what}: input {i} rel err {rel(t.grad, e.grad):.2e}"
    for name, p in fused.module.named_parameters():
        want = exact_params[name].grad
        if not p.requires_grad:
            assert p.grad is None, f"{what}: frozen {name} got a gradient"
            continue
        assert p.grad is not None and p.grad.dtype == p.dtype, f"{what}: {name}"
        assert close(p.grad, want, floor), f"{what}: {name} rel err {rel(p.grad, want):.2e}"


def step(fused, exact, inputs, seed=2):
    """One forward and backward of both, a random weighting of the outputs as the loss."""
    out = fused(*inputs)
    exact_inputs = [t.detach().double().requires_grad_(True) for t in inputs]
    exact_out = exact(*exact_inputs)
    weights = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    assert rel(out, exact_out) <= TOLERANCE
    (out.double() * weights).sum().backward()
    (exact_out * weights).sum().backward()
    return exact_inputs


@pytest.mark.parametrize("kf, mode", [(BATCHNORM, "train"), (BATCHNORM, "eval"), (LAYERNORM, "train"),
                                      (DROPOUT, "train"), (DROPOUT, "eval"), (VIEWS, "train"),
                                      (MAX_POOL, "train"), (AVG_POOL, "train"), (GROUPNORM, "train")],
                         ids=lambda p: getattr(p, "stem", p))
def test_gradients_of_inputs_and_every_param_are_pytorchs(kf, mode, interpreter):
    fused, exact = fused_pair(kf, interpreter, mode)
    inputs = inputs_of(exact)
    if mode == "train":  # the masks the saving forward draws (its first call: offset 0)
        exact.kfuse_rng = (0, 0)
    exact_inputs = step(fused, exact, inputs)
    assert_grads_match(fused, exact, inputs, exact_inputs, f"{kf.stem} {mode}")
    for name, t in exact.named_buffers():  # the running statistics, updated once
        assert rel(fused.module.get_buffer(name), t) <= TOLERANCE, name
    names = [call[0] for call in interpreter.calls]
    assert names == [all_gradients(fused, mode).saving.name, all_gradients(fused, mode).backward.name]
    if kf is DROPOUT and mode == "train":  # the backward draws where the forward did
        assert interpreter.calls[0][2] == interpreter.calls[1][2] == (0, 0)


def test_without_autograd_recording_the_forward_op_runs_and_saves_nothing(interpreter):
    fused, _ = fused_pair(BATCHNORM, interpreter)
    x = inputs_of(fused.module)[0]
    with torch.no_grad():
        fused(x)
    for p in fused.module.parameters():
        p.requires_grad_(False)
    y = fused(x.detach())
    assert not y.requires_grad
    assert [call[0] for call in interpreter.calls] == [fused._ops["train"].name] * 2


def test_three_sgd_steps_update_params_in_place_and_the_running_statistics(interpreter):
    fused, exact = fused_pair(BATCHNORM, interpreter)
    before = fused.module.weight.detach().clone()
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9) for m in (fused, exact)]
    params = [p for _, p in fused.module.named_parameters()]
    for i in range(3):
        x = inputs_of(exact, seed=10 + i)[0]
        for optimizer in optimizers:
            optimizer.zero_grad()
        step(fused, exact, [x])
        for optimizer in optimizers:
            optimizer.step()
    assert [p for _, p in fused.module.named_parameters()] == params  # the same tensors, updated
    state = dict(exact.state_dict())
    for name, t in fused.module.state_dict().items():
        assert rel(t, state[name]) <= 1e-4, f"{name} rel err {rel(t, state[name]):.2e}"
    assert rel(fused.module.weight, before) > 1e-3  # the steps moved it


def test_grad_accumulates_over_two_backward_calls(interpreter):
    fused, exact = fused_pair(LAYERNORM, interpreter)
    inputs = inputs_of(exact)
    exact_inputs = step(fused, exact, inputs)
    once = {name: p.grad.clone() for name, p in fused.module.named_parameters()}
    step(fused, exact, inputs)
    for name, p in fused.module.named_parameters():
        assert close(p.grad, 2 * once[name]), name
    for t, e in zip(inputs, exact_inputs):
        assert rel(t.grad, 2 * e.grad) <= TOLERANCE


def test_a_recorded_backward_is_refused_not_left_without_a_second_derivative(interpreter):
    fused, exact = fused_pair(LAYERNORM, interpreter)
    x = inputs_of(exact)[0]
    out = fused(x)
    with pytest.raises(kfuse.Error, match="create_graph=True, a second derivative"):
        torch.autograd.grad(out.sum(), x, create_graph=True)
    # Without recording, the same backward runs.
    (g,) = torch.autograd.grad(fused(x).sum(), x)
    assert g.shape == x.shape


def test_a_frozen_param_gets_no_gradient_and_none_is_computed(interpreter):
    fused, exact = fused_pair(BATCHNORM, interpreter)
    for m in (fused.module, exact):
        m.bn_weight.requires_grad_(False)
    # The pair that freezes both: registered on first use, with the interpreter's kernels here.
    frozen = training_ops(fused._ops["train"], frozenset({"bn_weight", "x"}))
    interpreter.register(frozen.saving, frozen.backward)
    inputs = [x.detach() for x in inputs_of(exact)]  # an input that does not require grad either
    exact_inputs = step(fused, exact, inputs)
    assert inputs[0].grad is None and exact_inputs[0].grad is not None
    assert_grads_match(fused, exact, [], [], "bn_weight frozen")
    assert [call[0] for call in interpreter.calls] == [frozen.saving.name, frozen.backward.name]
    # Its backward computes neither gradient: no dX GEMM (a matmul by the weight) is left.
    assert frozen.gradients == [g for g in all_gradients(fused).gradients if g not in ("bn_weight", "x")]
    assert all_gradients(fused).backward._text.count("matmul(") == frozen.backward._text.count("matmul(") + 1


def test_precision_of_the_backward_is_the_forwards_and_bf16_params_get_f32_gradients(interpreter):
    fused, exact = fused_pair(LAYERNORM, interpreter)
    fused.precision = "bf16"
    step(fused, exact, inputs_of(exact))
    assert [call[1] for call in interpreter.calls] == ["bf16", "bf16"]
    assert fused.used_precision == ("bf16", "precision= given")  # the saving forward's call
    assert all(p.grad.dtype == torch.float32 for p in fused.module.parameters())


def test_gradcheck_of_the_saving_op_through_its_backward(interpreter):
    text = """pipeline small {
  dim N
  input  x: f32[N, 3]
  param  weight: f32[4, 3]
  param  ln_weight: f32[4]
  param  ln_bias: f32[4]
  return layernorm(gelu(linear(x, weight)), ln_weight, ln_bias, eps=1e-5)
}
"""
    forward = kfuse.torch_op.pipeline_op(None, "train", text=text, file_name="small.kf")
    ops = training_ops(forward)
    interpreter.register(ops.saving, ops.backward)
    generator = torch.Generator().manual_seed(0)
    leaves = [torch.randn(shape, generator=generator, dtype=torch.float64, requires_grad=True)
              for shape in ((2, 3), (4, 3), (4,), (4,))]

    def f(*tensors):
        outs, _ = ops(*(t.float() for t in tensors), precision="fp32")
        return outs[0].double()

    # The forward is f32 (rounded from float64 once): finite differences of 1e-3 resolve
    # about 1e-4 of its gradients.
    assert torch.autograd.gradcheck(f, leaves, eps=1e-3, atol=1e-3, rtol=1e-3)


def test_opcheck_passes_for_the_saving_and_backward_ops(interpreter):
    fused, exact = fused_pair(BATCHNORM, interpreter)
    ops = all_gradients(fused)
    x = inputs_of(exact)[0].detach()
    tensors = [x] + [fused.module.get_parameter(v["name"]).detach().clone().requires_grad_(True)
                     if v["kind"] == "param" else fused.module.get_buffer(v["name"]).clone()
                     for v in ops.forward.params]
    torch.library.opcheck(ops.saving.op, (*tensors, "fp32"))
    results = ops.saving.op(*tensors, "fp32")
    by_name = dict(zip([v["name"] for v in ops.forward.inputs + ops.forward.params], tensors))
    by_name.update(zip(ops.saved, results[1:]))
    by_name["grad_out0"] = torch.randn_like(results[0])
    arguments = [by_name[v["name"]].detach() for v in ops.backward.inputs + ops.backward.params]
    torch.library.opcheck(ops.backward.op, (*arguments, "fp32"))


class Model(torch.nn.Module):
    """A linear layer before a Fused head."""

    def __init__(self, head):
        super().__init__()
        self.first = torch.nn.Linear(512, 512)
        self.head = head

    def forward(self, x):
        return self.head(torch.relu(self.first(x)))


def compiled_keeping_graphs(module):
    """(torch.compile(module, fullgraph=True) through AOTAutograd, {"forward": [...],
    "backward": [...]}: the FX graphs it compiled)."""
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    graphs = {"forward": [], "backward": []}

    def keep(kind):
        def compiler(gm, example_inputs):
            graphs[kind].append(gm)
            return make_boxed_func(gm.forward)
        return compiler

    torch._dynamo.reset()
    backend = aot_autograd(fw_compiler=keep("forward"), bw_compiler=keep("backward"))
    return torch.compile(module, fullgraph=True, backend=backend), graphs


def assert_graphs_call(graphs, ops):
    """The first forward graph calls ops.saving and the first backward graph ops.backward."""
    for kind, op in (("forward", ops.saving), ("backward", ops.backward)):
        targets = [str(n.target) for n in graphs[kind][0].graph.nodes if n.op == "call_function"]
        assert any(op.name in t for t in targets), (kind, targets)


def test_compiled_training_step_keeps_both_ops_in_one_graph(interpreter):
    fused, exact = fused_pair(BATCHNORM, interpreter)
    torch.manual_seed(0)
    model = Model(fused)
    twin = Model(copy.deepcopy(exact).float())
    twin.first.load_state_dict(model.first.state_dict())
    compiled, graphs = compiled_keeping_graphs(model)
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (model, twin)]
    for i in range(2):
        x = torch.randn(N, 512, generator=torch.Generator().manual_seed(i))
        for m, optimizer in zip((compiled, twin), optimizers):
            optimizer.zero_grad()
            m(x).square().sum().backward()
            optimizer.step()
    # The twin's head computes in f32 with PyTorch's ops.
    for (name, p), q in zip(model.named_parameters(), twin.parameters()):
        assert rel(p, q) <= 1e-4, name
    for name, t in fused.module.named_buffers():
        assert rel(t, twin.head.get_buffer(name)) <= 1e-4, name
    assert len(graphs["forward"]) == 1 and len(graphs["backward"]) == 1
    assert_graphs_call(graphs, all_gradients(fused))


def test_a_chain_without_a_gradient_rule_refuses_a_recorded_call_naming_the_op(tmp_path, interpreter):
    # max_pool1d_backward (an op of backward graphs) has no rule: its gradient is a second derivative.
    kf = tmp_path / "second_derivative.kf"
    kf.write_text("pipeline second_derivative {\n  dim N\n  input x: f32[N, 8]\n  param w: f32[4, 8]\n"
                  "  return max_pool1d_backward(linear(x, w), x, kernel_size=2, stride=2)\n}\n")
    ref = kfuse.torch.Reference(kf)
    fused = kfuse.torch.Fused(copy.deepcopy(ref), kf)
    x = ref.random_inputs({"N": N}, torch.Generator().manual_seed(0))[0]
    with pytest.raises(kfuse.Error, match=r"second_derivative.kf has no backward in train mode: .*max_pool1d_backward"):
        fused(x)


def test_a_recorded_call_with_a_process_group_has_the_modules_gradients(tmp_path, interpreter):
    # One rank: the whole batch's statistics are the rank's own, so the gradients are the
    # module's. Both ops of the pair carry the group, whose all-gather a GPU run calls
    # (tests/python/test_torch_sync_bn.py checks two ranks against nn.SyncBatchNorm + DDP).
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ref = kfuse.torch.Reference(BATCHNORM)
        ref.reset_parameters(torch.Generator().manual_seed(0))
        fused = kfuse.torch.Fused(copy.deepcopy(ref), BATCHNORM, process_group=dist.group.WORLD)
        ops = all_gradients(fused)
        assert ops.saving.process_group is dist.group.WORLD and ops.backward.process_group is dist.group.WORLD
        interpreter.register(fused._ops["train"], ops.saving, ops.backward)
        exact = copy.deepcopy(ref).double()
        inputs = inputs_of(exact)
        exact_inputs = step(fused, exact, inputs)
        assert_grads_match(fused, exact, inputs, exact_inputs, "process group of one rank")
        assert [call[0] for call in interpreter.calls] == [ops.saving.name, ops.backward.name]
    finally:
        dist.destroy_process_group()


def test_a_backward_that_reads_a_state_reads_it_as_the_forward_did(tmp_path, interpreter):
    # The backward reads running_mean, which the forward updates (Fused writes it back after
    # the call); like the forward's read, the backward's sees the value at entry.
    kf = tmp_path / "state_read.kf"
    kf.write_text("""pipeline state_read {
  dim N
  input  x: f32[N, 4]
  param  bn_weight: f32[4]
  param  bn_bias: f32[4]
  state  running_mean: f32[4]
  state  running_var: f32[4]
  y = batchnorm(x, bn_weight, bn_bias, running_mean, running_var, eps=1e-5, momentum=0.1)
  return mul(y, running_mean)
}
""")
    assert "running_mean" in [v["name"] for v in kfuse.program(text=kfuse.grad(kf, mode="train")["backward"])["values"]]
    fused, _ = fused_pair(kf, interpreter)
    m = fused.module
    entry = {name: t.detach().double().clone() for name, t in m.state_dict().items()}
    x = torch.randn(N, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
    y = fused(x)
    # PyTorch, reading running_mean at entry (kfuse.torch.Reference's batch_norm updates it
    # before the mul reads it).
    leaves = [t.detach().double().requires_grad_(True) for t in (x, m.bn_weight, m.bn_bias)]
    running = [entry["running_mean"].clone(), entry["running_var"].clone()]
    normalized = torch.nn.functional.batch_norm(leaves[0], *running, leaves[1], leaves[2], training=True,
                                                momentum=0.1, eps=1e-5)
    want = normalized * entry["running_mean"]
    assert rel(y, want) <= TOLERANCE
    weights = torch.randn(N, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    (y.double() * weights).sum().backward()
    (want * weights).sum().backward()
    for got, leaf in zip((x, m.bn_weight, m.bn_bias), leaves):
        assert close(got.grad, leaf.grad), f"rel err {rel(got.grad, leaf.grad):.2e}"
    assert rel(m.running_mean, running[0]) <= TOLERANCE and rel(m.running_var, running[1]) <= TOLERANCE


TWO_OUTPUTS = """pipeline two_outputs {
  dim N
  input  x: f32[N, 5]
  param  weight: f32[4, 5]
  h = linear(x, weight)
  return tanh(h), h
}
"""


def test_an_output_the_loss_does_not_read_gets_a_zero_gradient(interpreter, tmp_path):
    kf = tmp_path / "two_outputs.kf"
    kf.write_text(TWO_OUTPUTS)
    fused, exact = fused_pair(kf, interpreter)
    inputs = inputs_of(exact)
    exact_inputs = [t.detach().double().requires_grad_(True) for t in inputs]
    weights = torch.randn(N, 4, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (fused(*inputs)[0].double() * weights).sum().backward()  # the second output unread
    (exact(*exact_inputs)[0] * weights).sum().backward()
    assert_grads_match(fused, exact, inputs, exact_inputs, "first output only")


def test_a_compiled_first_layer_runs_the_pair_that_freezes_its_input(interpreter):
    fused, exact = fused_pair(BATCHNORM, interpreter)
    compiled, graphs = compiled_keeping_graphs(fused)
    x = inputs_of(exact)[0].detach()  # data: no gradient wanted
    weights = torch.randn(N, 1024, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    (compiled(x).double() * weights).sum().backward()
    (exact(x.double()) * weights).sum().backward()
    assert_grads_match(fused, exact, [], [], "compiled, x frozen")
    # Registered when Fused was made: the compiled graphs call it, not the all-gradients pair.
    assert_graphs_call(graphs, fused._training[("train", frozenset({"x"}))])
