"""A .kf pipeline differentiable through PyTorch's autograd: two torch.ops.kfuse ops made of
its reverse mode (kfuse.grad, docs/DSL.md "Gradients").

    ops = kfuse.torch_autograd.training_ops(kfuse.torch_op.pipeline_op("chain.kf", "train"))
    outs, states = ops(x, weight, ..., running_mean, ..., precision="matmul")

- `<name>_saving`: the forward that also returns what the backward reads (the "saved" values
  of kfuse.grad), the updated state (train mode; it is functional, as register_autograd
  requires: the caller writes the state back) and, where its train-mode dropouts draw, the
  (seed, offset) they drew at;
- `<name>_backward`: the backward pipeline, run in the forward's mode and precision at the
  forward's (seed, offset), so that its dropouts draw the forward's masks.

A pair is made for the inputs and params that require grad: those that do not are frozen
(kfuse.grad's frozen), so their gradients are not computed and nothing is saved for them (a
linear whose input needs no gradient runs no dX GEMM). A pair freezing some is named
`<name>_f<digest of the frozen names>_saving` / `_backward`.

The first has the second as its autograd formula (torch.library.register_autograd): the
gradients of the inputs and params that require grad, None for state and for the rest, so
autograd accumulates them into .grad and torch.compile(fullgraph=True) traces both ops. An eager
call on CUDA tensors runs the same implementation and formula through a torch.autograd.Function,
without the dispatcher's layers around a Python op (host time on every step), and updates the
state in place where the backward does not read it (a new copy every step would be a new tensor
for the pipeline to bind and check).
"""

import hashlib

import torch

import kfuse
from kfuse.torch_op import _LIBRARY, _OPS, PipelineOp, _extent

__all__ = ["TrainingOps", "training_ops"]

_TRAINING = {}  # (forward op's name, frozen names) -> TrainingOps, or the kfuse.Error it raised


def training_ops(forward, frozen=frozenset()):
    """The TrainingOps of PipelineOp `forward`'s .kf and mode with the inputs and params named
    in `frozen` getting no gradient, registered on first use; a .kf that reverse mode cannot
    differentiate raises kfuse.Error naming the op without a rule."""
    key = (forward.name, frozenset(frozen))
    made = _TRAINING.get(key)
    if made is None:
        try:
            made = TrainingOps(forward, key[1])
        except kfuse.Error as e:
            made = e
        _TRAINING[key] = made
    if isinstance(made, kfuse.Error):
        raise kfuse.Error(f"kfuse.torch: {forward.kf_file} has no backward in {forward.mode} mode: {made}")
    return made


class TrainingOps:
    """The saving forward and the backward of one .kf in one mode, as torch.ops.kfuse ops, the
    first differentiable through the second."""

    def __init__(self, forward, frozen=frozenset()):
        self.forward, self.frozen = forward, frozenset(frozen)
        where = f"{forward.kf_file}, {forward.mode} mode"
        reverse = kfuse.grad(text=forward._text, file_name=forward.kf_file, mode=forward.mode,
                             frozen=sorted(self.frozen))
        name = forward.name
        if self.frozen:
            name += "_f" + hashlib.sha256("\0".join(sorted(self.frozen)).encode()).hexdigest()[:10]
        program = kfuse.program(text=reverse["forward"], file_name=where)
        # Only a train-mode dropout draws; the pair of ops then carries where it drew.
        draws = forward.mode == "train" and any(v.get("class") == "random pointwise" for v in program["values"])
        # Over a process group (SyncBatchNorm) both exchange their batch statistics through it:
        # the forward's, and the means of each batchnorm's input gradient; the parameter
        # gradients stay the rank's own, which DDP averages.
        group = forward.process_group
        # Messages about either graph name the printed graph they cite, as the C++ API does.
        named = f"{forward.kf_file} ({forward.mode} mode, "
        self.saving = PipelineOp(named + "forward that saves)", reverse["forward"], forward.mode, forward.arch,
                                 f"{name}_saving", group, functional=True, rng="out" if draws else None,
                                 latest=forward._latest)
        self.backward = PipelineOp(named + "backward)", reverse["backward"], forward.mode, forward.arch,
                                   f"{name}_backward", group, rng="in" if draws else None)
        for role, op in (("saving", self.saving), ("backward", self.backward)):
            _OPS[(name, role)] = op
        self.grad_inputs, self.saved, self.gradients = reverse["grad_inputs"], reverse["saved"], reverse["gradients"]
        self._names = [v["name"] for v in forward.inputs + forward.params]
        self._declared = {v["name"]: v for v in self.backward.inputs + self.backward.params}
        # The forward's declarations the backward reads, saved with the forward's further outputs.
        self._read = [name for name in self._names if name in self._declared]
        # (position among the forward's arguments, name) of the backward's params that it reads
        # as the forward's call gave them (not state, which it reads as a copy): bound ahead of
        # the backward (prepare_params).
        position = {v["name"]: len(forward.inputs) + i for i, v in enumerate(forward.params)}
        backward_params = {v["name"] for v in self.backward.params}
        self._ahead = [(position[v["name"]], v["name"]) for v in forward.params
                       if v["kind"] == "param" and v["name"] in backward_params]
        # Whether the backward declares a value in another rank than the forward gives it (a
        # [B*T, F] output declared [B, T, F]): only then does a call keep its dims to reshape it.
        given = {v["name"]: v["shape"] for v in forward.inputs + forward.params}
        given.update((name, v["shape"]) for name, v in zip(self.grad_inputs, forward.outputs))
        given.update((name, v["shape"]) for name, v in zip(self.saved, self.saving.outputs[len(forward.outputs):]))
        self._reshapes = any(len(given.get(name, ())) != len(v["shape"]) for name, v in self._declared.items())
        # An eager call updates the caller's state in place (no copies to make, bind and check
        # every step) unless the backward reads a state as the forward found it.
        self._in_place = not any(v["name"] in self._read for v in self.saving.updated)
        self._updated = [position[v["name"]] for v in self.saving.updated]
        torch.library.register_autograd(self.saving.qualname, self._backward, setup_context=self._setup_context,
                                        lib=_LIBRARY)

    def __deepcopy__(self, memo):
        return self  # registered once per .kf and mode

    def __call__(self, *tensors, precision):
        """The forward's outputs and the updated state (train mode) of a call recorded by
        autograd: the saved values and the rng stay in the graph, for the backward."""
        direct = _direct(tensors)
        if direct:  # the same formulas, without the dispatcher's layers around a Python op
            results = _Recorded.apply(self, precision, *tensors)
            # The backward's transposed weights are made now, while autograd's host work runs.
            if self._ahead:
                self.backward.prepare_params(precision, {name: tensors[i] for i, name in self._ahead})
        else:
            results = self.saving.op(*tensors, precision)
        results = results if isinstance(results, tuple) else (results,)
        outputs = len(self.forward.outputs)
        if direct and self._in_place:  # the state given is the state updated
            return results[:outputs], [tensors[i] for i in self._updated]
        return results[:outputs], results[outputs + len(self.saved): outputs + len(self.saved) + len(self.saving.updated)]

    def _setup_context(self, ctx, inputs, output):
        *tensors, precision = inputs
        output = output if isinstance(output, tuple) else (output,)
        outputs = len(self.forward.outputs)
        ctx.mark_non_differentiable(*output[outputs:])
        # The saved values and states have no gradient: autograd would otherwise make a tensor
        # of zeros for each of them on every backward. An output the loss does not read gets
        # its zeros in _backward.
        ctx.set_materialize_grads(False)
        ctx.outputs = [(o.shape, o.dtype, o.device) for o in output[:outputs]]
        by_name = dict(zip(self._names, tensors))
        # The backward reads a state as the forward did, at entry; Fused writes the updated
        # state into it after this call.
        for v in self.saving.updated:
            if v["name"] in self._read:
                by_name[v["name"]] = by_name[v["name"]].detach().clone()
        ctx.save_for_backward(*(by_name[name] for name in self._read), *output[outputs:outputs + len(self.saved)],
                              *(output[-1:] if self.saving.rng == "out" else ()))
        ctx.precision = precision
        ctx.dims = self.forward._dims(tensors) if self._reshapes else None

    def _backward(self, ctx, *grads):
        return (*self._gradients(ctx, grads, ctx.needs_input_grad[:len(self._names)]), None)

    def _gradients(self, ctx, grads, needed):
        """The gradients of the forward's inputs and params, None where `needed` says none."""
        saved = list(ctx.saved_tensors)
        rng = [saved.pop()] if self.saving.rng == "out" else []
        by_name = dict(zip(self._read + self.saved, saved))
        by_name.update((name, torch.zeros(meta[0], dtype=meta[1], device=meta[2]) if g is None else g)
                       for name, g, meta in zip(self.grad_inputs, grads, ctx.outputs))
        arguments = [self._as_declared(name, by_name[name], ctx.dims)
                     for name in (v["name"] for v in self.backward.inputs + self.backward.params)]
        if torch.is_grad_enabled() and not _traced(arguments):
            # Autograd would give the backward op's results no gradient, silently.
            raise kfuse.Error(f"kfuse.torch: the backward of {self.forward.kf_file} ({self.forward.mode} mode) is "
                              "being recorded (create_graph=True, a second derivative): kfuse computes first "
                              "derivatives only")
        results = (self.backward._run if _direct(arguments) else self.backward.op)(*arguments, *rng, ctx.precision)
        results = results if isinstance(results, tuple) else (results,)
        wanted = dict(zip(self._names, needed))
        computed = {name: g for name, g in zip(self.gradients, results) if wanted[name]}
        return [computed.get(name) for name in self._names]

    def _as_declared(self, name, t, dims):
        """`t` in the backward's declared shape: a value of [B*T, F] is declared [B, T, F]."""
        shape = self._declared[name]["shape"]
        if t.dim() == len(shape):
            return t
        return t.reshape([_extent(e, dims) for e in shape])


_PLAIN = (torch.Tensor, torch.nn.Parameter)  # not a tracer's subclass


def _traced(tensors):
    """Whether a call on `tensors` is being traced (torch.compile, torch.export, make_fx,
    torch.func): then only the registered ops may run."""
    return torch.compiler.is_compiling() or any(type(t) not in _PLAIN for t in tensors)


def _direct(tensors):
    """Whether a call on `tensors` may run the ops' implementation directly: an eager call on
    CUDA tensors (other devices take the implementations registered for them)."""
    return not _traced(tensors) and all(t.is_cuda for t in tensors)


class _Recorded(torch.autograd.Function):
    """An eager call of the saving forward as the registered op and its autograd formula run
    it: the same _run, setup_context and backward."""

    @staticmethod
    def forward(ops, precision, *tensors):
        return ops.saving._run(*tensors, precision, in_place=ops._in_place)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ops, precision, *tensors = inputs
        ctx.ops = ops
        ops._setup_context(ctx, (*tensors, precision), output)

    @staticmethod
    def backward(ctx, *grads):
        return (None, None, *ctx.ops._gradients(ctx, grads, ctx.needs_input_grad[2:]))
