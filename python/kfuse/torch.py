"""kfuse.torch.Fused: an existing nn.Module's forward pass through a kfuse pipeline.

    fused = kfuse.torch.Fused(module, "chain.kf")      # module: the PyTorch original
    with torch.no_grad():
        y = fused(x)                                    # train or eval, as module.training says

The .kf file's params and state are the module's parameters and buffers, by name: a state_dict
key with '.' replaced by '_' ("bn.running_mean" -> bn_running_mean), or `mapping`
{kf name: state_dict key}. They are read in place, so optimizer steps and load_state_dict are
seen; train mode updates BatchNorm running statistics in place (and num_batches_tracked, as
PyTorch does). One pipeline is compiled per (mode, precision, dtype, device) and kept, so
switching train/eval does not recompile (and NVRTC's output is cached on disk across processes).
Forward only: with autograd recording and a parameter or input that requires grad, it raises.

kfuse.torch.Reference("chain.kf") is the .kf's chain as an nn.Module of PyTorch ops
(python/kfuse/torch_reference.py): the module to wrap, or to compare Fused with.
"""

import torch
from torch import nn

import kfuse
from kfuse.torch_reference import Reference


__all__ = ["Fused", "Reference"]


class Fused(nn.Module):
    def __init__(self, module, kf_file, *, precision="fp32", mapping=None, arch=""):
        super().__init__()
        self.module = module
        self.kf_file = str(kf_file)
        self.precision = precision
        self.arch = arch
        self._mapping = kfuse._mapping(f"kfuse.torch.Fused({self.kf_file})", "mapping", mapping or {},
                                       "kf names to state_dict keys")
        self._pipelines = {}  # (mode, precision, dtype, device) -> kfuse.Pipeline (one per device)
        self._bound = {}  # same key -> {kf name: (data_ptr, shape) bound last}
        self._owners = None  # kf name -> (owning submodule, attribute), resolved once
        self._stores = None  # kf name -> (the submodule's _parameters or _buffers, attribute)

    def extra_repr(self):
        return f"kf_file='{self.kf_file}', precision='{self.precision}'"

    def forward(self, *inputs, **named):
        tensors = list(inputs) + list(named.values())
        if not tensors:
            raise kfuse.Error(f"kfuse.torch.Fused({self.kf_file}): forward needs the pipeline's inputs")
        self._refuse_autograd(tensors)
        # Autograd is not recording here: an input that requires grad is read as its data.
        inputs = [t.detach() if t.requires_grad else t for t in inputs]
        named = {k: t.detach() if t.requires_grad else t for k, t in named.items()}
        pipeline = self.pipeline(tensors[0])
        self._bind(pipeline, self._bound[self._key(tensors[0])])
        # The pipeline runs on its tensors' device and that device's current stream by itself.
        out = pipeline(*inputs, **named)
        if self.module.training:
            for bn in self._batchnorms():
                bn.num_batches_tracked.add_(1)
        return out

    def pipeline(self, x):
        """The kfuse.Pipeline a forward on `x` runs in the module's current mode (compiled on
        first use, then kept): its .plan, .cuda_source and .report."""
        key = self._key(x)
        if key not in self._pipelines:
            self._pipelines[key] = kfuse.Pipeline(self.kf_file, mode=key[0], precision=self.precision, arch=self.arch)
            self._bound[key] = {}
        return self._pipelines[key]

    def _key(self, x):
        return ("train" if self.module.training else "eval", self.precision, x.dtype, x.device)

    def _refuse_autograd(self, tensors):
        if not torch.is_grad_enabled():
            return
        needing = [n for n, p in self.module.named_parameters() if p.requires_grad]
        needing += [f"input {i}" for i, t in enumerate(tensors) if t.requires_grad]
        if needing:
            shown = ", ".join(needing[:4]) + (", ..." if len(needing) > 4 else "")
            raise kfuse.Error(
                f"kfuse.torch.Fused({self.kf_file}) computes the forward pass only (no backward), but autograd "
                f"is recording and {shown} require grad: call it under torch.no_grad() or "
                "torch.inference_mode(), or freeze the parameters with requires_grad_(False)")

    def _resolve(self, pipeline):
        """kf param/state name -> (submodule, attribute) of the module's parameter or buffer."""
        keys = [k for k, _ in self.module.named_parameters()] + [k for k, _ in self.module.named_buffers()]
        by_underscore = {k.replace(".", "_"): k for k in keys}
        owners = {}
        for name in pipeline.params:
            key = self._mapping.get(name, by_underscore.get(name))
            if key is None or key not in keys:
                raise kfuse.Error(
                    f"kfuse.torch.Fused({self.kf_file}): {pipeline.name}'s '{name}' is "
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

    def _batchnorms(self):
        return [owner for owner, attribute in self._owners.values()
                if attribute == "running_mean" and getattr(owner, "num_batches_tracked", None) is not None]

    def _bind(self, pipeline, bound):
        if self._owners is None:
            self._owners = self._resolve(pipeline)
            # Where each tensor lives: reading the module's parameter or buffer dict directly
            # costs a dict lookup per call where getattr on a Module costs a microsecond.
            self._stores = {name: (owner._parameters if attribute in owner._parameters else owner._buffers, attribute)
                            for name, (owner, attribute) in self._owners.items()}
        for name, (store, attribute) in self._stores.items():
            t = store[attribute]
            # Precision bf16 rounds weights once per bind: a tensor changed in place (an optimizer
            # step, load_state_dict; torch counts them in _version) is bound again.
            seen = (t.data_ptr(), tuple(t.shape), t._version if self.precision == "bf16" else 0)
            if bound.get(name) != seen:
                pipeline.bind(**{name: t.detach()})  # shares the storage: updates land in the module
                bound[name] = seen
