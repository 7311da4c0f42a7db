"""kfuse.torch.Fused: an existing nn.Module's forward pass through a kfuse pipeline.

    fused = kfuse.torch.Fused(module, "chain.kf")      # module: the PyTorch original
    with torch.no_grad():
        y = fused(x)                                    # train or eval, as module.training says

The .kf is a file or text= (kfuse.torch.draft(module, inputs) writes a first one: draft.py).
Its params and state are the module's parameters and buffers, by name: a state_dict key with
'.' replaced by '_' ("bn.running_mean" -> bn_running_mean; "0.weight" -> _0_weight: kf_name),
or `mapping` {kf name: state_dict key}. They are read in place, so optimizer steps and
load_state_dict are seen; train mode updates BatchNorm running statistics in place (and num_batches_tracked, as
PyTorch does). One pipeline is compiled per (mode, precision, device) and kept, so
switching train/eval does not recompile (and NVRTC's output is cached on disk across processes).
Differentiable: while autograd records and an input or parameter requires grad, a call runs
the forward that saves what the backward reads, and the backward pipeline gives the gradients
(kfuse.torch_autograd); otherwise it runs the forward alone, saving nothing.
Without precision=, the precision follows torch.autocast (bf16) and
torch.get_float32_matmul_precision(); `used_precision` says which a call used and why. A forward
is one torch.ops.kfuse op (python/kfuse/torch_op.py), so torch.compile(fullgraph=True),
CUDA graphs and torch.export keep it in their graph.
With process_group= (a torch.distributed group), or a module holding nn.SyncBatchNorm while
torch.distributed is initialized (its process_group, else the default group), train-mode
batchnorm statistics are those of every rank's batch, as SyncBatchNorm computes them: each call
all-gathers per-feature (count, mean, M2) across the group between the kernels that compute and
use them; a call that autograd records takes the means of each batchnorm's input gradient over
the group too, as nn.SyncBatchNorm's backward does (its parameter gradients are the rank's own,
which DistributedDataParallel averages).

kfuse.torch.Reference("chain.kf") is the .kf's chain as an nn.Module of PyTorch ops
(python/kfuse/torch_reference.py): the module to wrap, or to compare Fused with.
"""

import torch
from torch import nn

import kfuse
from kfuse.draft import draft, kf_name
from kfuse.torch_autograd import training_ops
from kfuse.torch_op import _DTYPES, pipeline_op
from kfuse.torch_reference import Reference


__all__ = ["Fused", "Reference", "draft"]


def _sync_group(module):
    """The group a module's nn.SyncBatchNorm layers synchronize over where torch.distributed is
    initialized (as SyncBatchNorm decides), else None."""
    import torch.distributed as dist
    syncs = [m for m in module.modules() if isinstance(m, nn.SyncBatchNorm)]
    if not syncs or not dist.is_available() or not dist.is_initialized():
        return None
    groups = {id(m.process_group): m.process_group for m in syncs}
    if len(groups) > 1:
        raise kfuse.Error(f"kfuse.torch.Fused: the {type(module).__name__}'s SyncBatchNorm layers synchronize "
                          "over different process groups; pass process_group=")
    group = next(iter(groups.values()))
    return dist.group.WORLD if group is None else group


class Fused(nn.Module):
    def __init__(self, module, kf_file=None, *, text=None, file_name="<text>", precision=None, mapping=None,
                 arch="", process_group=None):
        super().__init__()
        self.module = module
        self.kf_file = str(kf_file) if text is None else file_name
        self.precision = precision
        self.arch = arch
        self._mapping = kfuse._mapping(f"kfuse.torch.Fused({self.kf_file})", "mapping", mapping or {},
                                       "kf names to state_dict keys")
        # One torch.ops.kfuse op per mode, registered now: a call under torch.compile then
        # only looks it up, and the names resolve to the module's tensors before any call.
        self.process_group = _sync_group(module) if process_group is None else process_group
        self._ops = {mode: pipeline_op(kf_file, mode, text=text, file_name=file_name, arch=arch,
                                       process_group=self.process_group)
                     for mode in ("train", "eval")}
        self._owners = self._resolve(self._ops["train"].params)  # kf name -> (submodule, attribute)
        # (position among the inputs and params, name) of those that get gradients: the float
        # inputs and params, not states nor i64 class indices. The same in both modes.
        declared = self._ops["train"].inputs + self._ops["train"].params
        self._freezable = [(i, v["name"]) for i, v in enumerate(declared)
                           if v["kind"] in ("input", "param") and v["dtype"] != "i64"]
        # The differentiable pairs per mode, registered now too where the .kf has a backward
        # (else a call that autograd records raises why it has none), so that torch.compile
        # finds them: one computing every gradient, and one freezing the inputs (a model's
        # first layer: its input needs no gradient) and the parameters that require none now.
        self._training = {}
        requires_grad = [False] * len(self._ops["train"].inputs) + [
            getattr(o, a).requires_grad for o, a in self._owners.values()]
        first_layer = frozenset(name for i, name in self._freezable if not requires_grad[i])
        for mode, op in self._ops.items():
            for frozen in (frozenset(), first_layer):
                try:
                    self._training[(mode, frozen)] = training_ops(op, frozen)
                except kfuse.Error:
                    pass  # training_ops keeps the error and raises it again for a recorded call
        self._batchnorm_counters = [
            owner for owner, attribute in self._owners.values()
            if attribute == "running_mean" and getattr(owner, "num_batches_tracked", None) is not None]

    def extra_repr(self):
        return f"kf_file='{self.kf_file}', precision={self.precision!r}"

    @property
    def op(self):
        """The torch.ops.kfuse op a forward runs in the module's current mode."""
        return self._ops["train" if self.module.training else "eval"].op

    def forward(self, *inputs, **named):
        if not inputs and not named:
            raise kfuse.Error(f"kfuse.torch.Fused({self.kf_file}): forward needs the pipeline's inputs")
        mode = "train" if self.module.training else "eval"
        op = self._ops[mode]
        inputs = self._inputs(op, inputs, named)
        precision = self._precision(inputs[0])
        tensors = [getattr(owner, attribute) for owner, attribute in self._owners.values()]
        if self._records(inputs, tensors):
            out = self._differentiable(mode, inputs, tensors, precision)
        else:
            # Nothing to differentiate: an input is read as its data, and nothing is saved.
            inputs = [t.detach() if t.requires_grad else t for t in inputs]
            # The pipeline runs on its tensors' device and that device's current stream by itself.
            out = op(*inputs, *tensors, precision=precision)
        if self.module.training:
            for bn in self._batchnorm_counters:
                bn.num_batches_tracked.add_(1)
        return out

    def precision_choice(self, x):
        """(kfuse precision, why) a forward on `x` runs at now: precision= where given, else
        bf16 under torch.autocast(dtype=torch.bfloat16) on x's device, else what
        torch.get_float32_matmul_precision() names ("highest" fp32, "high" tf32, "medium" bf16)."""
        return self._ops["train"].resolve_precision(self._precision(x))

    @property
    def used_precision(self):
        """(precision, why) of the latest call of this .kf's op in the module's current mode."""
        return self._ops["train" if self.module.training else "eval"].used_precision

    def pipeline(self, x):
        """The kfuse.Pipeline a forward on `x` runs in the module's current mode and precision
        (compiled on first use, then kept): its .plan, .cuda_source and .report."""
        op = self._ops["train" if self.module.training else "eval"]
        return op.pipeline(self.precision_choice(x)[0], x.device)

    def _precision(self, x):
        """The op's precision argument. Autocast is decided here, where torch.compile sees it
        (and guards on it); the matmul precision is read when the op runs."""
        if self.precision is not None:
            return self.precision
        device = x.device.type
        if torch.is_autocast_enabled(device):
            dtype = torch.get_autocast_dtype(device)
            if dtype != torch.bfloat16:
                raise kfuse.Error(
                    f"kfuse.torch.Fused({self.kf_file}): torch.autocast({device!r}, dtype={dtype}) is on, and "
                    "kfuse has no precision for it (fp32, 3xtf32, tf32 and bf16): autocast with "
                    "dtype=torch.bfloat16, or pass precision=")
            return "autocast"
        return "matmul"

    def _inputs(self, op, inputs, named):
        """The inputs in declaration order; under autocast, each in its declared dtype (as
        autocast gives an op that runs in a precision of its own)."""
        if named or len(inputs) != len(op.inputs):
            inputs = self._positional(op, inputs, named)
        if torch.is_autocast_enabled(inputs[0].device.type):
            return [t.to(_DTYPES[v["dtype"]]) if t.is_floating_point() else t for v, t in zip(op.inputs, inputs)]
        return inputs

    def _positional(self, op, inputs, named):
        names = [v["name"] for v in op.inputs]
        where = f"kfuse.torch.Fused({self.kf_file})"
        if len(inputs) > len(names):
            raise kfuse.Error(f"{where} takes {len(names)} input(s) ({', '.join(names)}), got {len(inputs)} positional")
        given = dict(zip(names, inputs))
        for name, t in named.items():
            if name in given or name not in names:
                raise kfuse.Error(f"{where}: input '{name}' " + (
                    "given twice" if name in given else f"is not an input of the pipeline ({', '.join(names)})"))
            given[name] = t
        missing = [name for name in names if name not in given]
        if missing:
            raise kfuse.Error(f"{where}: input '{missing[0]}' is missing (its inputs: {', '.join(names)})")
        return [given[name] for name in names]

    @staticmethod
    def _records(inputs, tensors):
        """Whether autograd records this call: it does, and an input or a parameter of the .kf
        requires grad."""
        return torch.is_grad_enabled() and any(t.requires_grad for t in (*inputs, *tensors))

    def _differentiable(self, mode, inputs, tensors, precision):
        """The call through the saving forward, whose backward gives the gradients of the
        inputs and parameters that require grad; train mode's updated running statistics are
        written back here, once."""
        frozen = self._frozen(inputs, tensors)
        ops = self._training.get((mode, frozen))
        if ops is None and torch.compiler.is_compiling():
            # No op is registered while Dynamo traces: the pair that computes every gradient
            # (autograd keeps those that are asked for).
            ops = self._training.get((mode, frozenset()))
        if ops is None:
            ops = self._training[(mode, frozen)] = training_ops(self._ops[mode], frozen)  # raises why it has none
        outs, states = ops(*inputs, *tensors, precision=precision)
        with torch.no_grad():
            by_name = dict(zip((v["name"] for v in ops.forward.params), tensors))
            for v, updated in zip(ops.saving.updated, states):
                if updated is not by_name[v["name"]]:  # updated in place where the call ran eagerly
                    by_name[v["name"]].copy_(updated)
        return outs[0] if len(outs) == 1 else outs

    def _frozen(self, inputs, tensors):
        """The float inputs and params of the .kf whose tensors do not require grad: their
        gradients are not computed (kfuse.grad's frozen)."""
        given = [*inputs, *tensors]
        return frozenset(name for i, name in self._freezable if not given[i].requires_grad)

    def _resolve(self, params):
        """kf param/state name -> (submodule, attribute) of the module's parameter or buffer."""
        keys = [k for k, _ in self.module.named_parameters()] + [k for k, _ in self.module.named_buffers()]
        by_underscore = {kf_name(k): k for k in keys}
        owners = {}
        for v in params:
            name = v["name"]
            key = self._mapping.get(name, by_underscore.get(name))
            if key is None or key not in keys:
                raise kfuse.Error(
                    f"kfuse.torch.Fused({self.kf_file}): '{name}' is "
                    + (f"mapped to '{key}', which is" if name in self._mapping else "")
                    + f" no parameter or buffer of the {type(self.module).__name__} (its state_dict keys: "
                    f"{', '.join(keys)}); pass mapping={{'{name}': '<state_dict key>'}}")
            path, _, attribute = key.rpartition(".")
            owners[name] = (self.module.get_submodule(path), attribute)
        for owner, attribute in owners.values():
            if attribute == "running_mean" and getattr(owner, "momentum", 0.1) is None:
                raise kfuse.Error(f"kfuse.torch.Fused({self.kf_file}): {type(owner).__name__} with momentum=None "
                                  "(a cumulative average) is not the .kf batchnorm's fixed momentum")
        return owners
