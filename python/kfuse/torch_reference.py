"""kfuse.torch.Reference: a .kf pipeline computed with PyTorch's own ops, as an nn.Module.

    ref = kfuse.torch.Reference("chain.kf")             # params and state named as in the .kf
    fused = kfuse.torch.Fused(copy.deepcopy(ref), "chain.kf")
    with torch.no_grad():
        y_torch, y_kfuse = ref(x), fused(x)             # the same chain, PyTorch vs kfuse

It is built from kfuse.program (the compiler's parsed graph; no second .kf parser): every
param and state is a parameter or buffer under its .kf name, so Fused maps them by name, and
forward computes each op with its PyTorch spelling from kfuse's op table (kfuse.ops(): a Python
expression of the op's operands and attributes, such as "F.leaky_relu(x, negative_slope)"), so
every op the compiler knows has its translation: batchnorm is F.batch_norm (running statistics
updated in train mode with the .kf's momentum and eps), dropout F.dropout, tensors of rank 1 to
4 and bf16/f16 declarations as PyTorch holds them. Every value's dtype and shape are checked
against the program's, so a translation that departs from kfuse's type rules fails loudly.
With float64 inputs (after .double()) every value is float64: the reference the GPU results are
judged against.

Dropout: in train mode F.dropout draws PyTorch's own masks, which no other generator repeats.
Set `kfuse_rng = (seed, offset)` and train-mode dropouts keep exactly what a kfuse call at that
rng state keeps (kfuse.dropout_keep), so outputs can be compared element for element.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn

import kfuse

# kfuse element type -> torch dtype.
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "i64": torch.int64}


def _norm_input(x, params):
    """A half-precision input whose parameters are f32 (mixed precision's layout) is normalized
    in f32 and rounded once to its own type, as kfuse's kernels do and PyTorch's CUDA mixed
    batch_norm / layer_norm kernels do too (F.rms_norm alone would return f32 there)."""
    if x.dtype in (torch.bfloat16, torch.float16) and any(p is not None and p.dtype == torch.float32 for p in params):
        return x.float()
    return x


def _dropout_as_kfuse(x, p, stream, rng):
    """F.dropout's train mode with the mask a kfuse call at rng state `rng` draws."""
    seed, offset = rng
    keep = kfuse.dropout_keep(seed, offset, stream, x.numel(), p)
    mask = torch.frombuffer(bytearray(keep), dtype=torch.uint8).to(device=x.device, dtype=torch.bool)
    return torch.where(mask.view(x.shape), x * (1.0 / (1.0 - p)), x * 0.0)


# The names an op's PyTorch spelling may use besides its operands and attributes.
_SPELLING_NAMES = {"__builtins__": {}, "torch": torch, "F": F, "int": int}


class _Op:
    """One op of kfuse's table (kfuse.ops()) and its PyTorch spelling, compiled once into a
    function of the operands, the attributes, `training` and `device` (keyword arguments): an
    ordinary function, which torch.compile traces into its graph (eval at each call would end
    the graph at every op and leave the chain eager)."""

    def __init__(self, info):
        self.name = info["name"]
        self.cls = info["class"]
        self.attr_kinds = {a["name"]: a["kind"] for a in info["attrs"]}
        self.optional = [o[:-1] for o in info["operands"] if o.endswith("?")]  # None where absent
        self.spelling = info["torch"]
        names = [o.rstrip("?") for o in info["operands"]] + list(self.attr_kinds) + ["training", "device"]
        source = f"lambda *, {', '.join(f'{n}=None' for n in names)}: {self.spelling}"
        self.fn = eval(compile(source, f"<kfuse op {self.name}: {self.spelling}>", "eval"), _SPELLING_NAMES)

    def __call__(self, v, operands, ctx):
        """The op on `operands` (one tensor per arg), with v's attributes."""
        names = dict.fromkeys(self.optional)
        names.update(zip(v["operands"], operands))
        for name, value in v["attrs"].items():
            names[name] = self._attribute(self.attr_kinds[name], value, ctx)
        names.update(training=ctx.training, device=ctx.device)
        if self.cls == "random pointwise" and ctx.training and ctx.rng is not None:
            return _dropout_as_kfuse(names["x"], names["p"], names["stream"], ctx.rng)
        if self.cls not in ("batch normalization", "feature normalization"):
            return self.fn(**names)
        x = names["x"]
        names["x"] = _norm_input(x, [t for o, t in names.items() if o != "x" and isinstance(t, torch.Tensor)])
        return self.fn(**names).to(x.dtype)

    @staticmethod
    def _attribute(kind, value, ctx):
        """An attribute as PyTorch takes it: extents as ints under the dims bound so far, element
        types as torch dtypes (float64 throughout an exact run)."""
        if kind == "shape":
            return [_extent_value(e, ctx.dims) for e in value]
        if kind == "extent":
            return _extent_value(value, ctx.dims)
        if kind == "dtype":
            return torch.float64 if ctx.exact else DTYPES[value]
        return value


# op name -> the op with PyTorch's semantics: every op of kfuse's table, spelled by the table.
OPS = {info["name"]: _Op(info) for info in kfuse.ops()}


def _extent_value(e, dims):
    """An extent of the program under the dims bound so far: an int, a dim name, or a product
    as the .kf writes it ("B*T", "4*T"); None where a name is not bound yet."""
    if isinstance(e, int):
        return e
    n = 1
    for part in e.split("*"):
        if part.isdigit():
            n *= int(part)
        elif part in dims:
            n *= dims[part]
        else:
            return None
    return n


class _Context:
    def __init__(self, training, rng, dims, exact, device):
        self.training = training
        self.rng = rng
        self.dims = dims  # the dims bound so far (a reshape's extents name them)
        self.exact = exact  # every value float64
        self.device = device  # where constants are made: the inputs' device


class Reference(nn.Module):
    """The .kf pipeline `kf_file` (or text=, named file_name=) with PyTorch's ops. Its params and
    state are created in their declared dtypes on `device` and initialized by
    reset_parameters(); `dims` gives the extent of every dim a param or state shape names."""

    def __init__(self, kf_file=None, *, text=None, file_name="<text>", device=None, dims=None):
        super().__init__()
        self.program = kfuse.program(kf_file, text=text, file_name=file_name)
        self.kfuse_rng = None  # (seed, offset): train-mode dropouts keep what kfuse keeps there
        self._where = f"kfuse.torch.Reference({kf_file if kf_file is not None else file_name})"
        values = self.program["values"]
        self.input_names = [v["name"] for v in values if v["kind"] == "input"]
        dims = kfuse._dims(self._where, dims or {})
        for v in values:
            if v["kind"] in ("param", "state"):
                shape = [self._extent(e, dims, v["name"]) for e in v["shape"]]
                t = torch.empty(shape, dtype=DTYPES[v["dtype"]], device=device)
                if v["kind"] == "param":
                    self.register_parameter(v["name"], nn.Parameter(t))
                else:
                    self.register_buffer(v["name"], t)
        self.reset_parameters()

    def _extent(self, e, dims, name):
        n = _extent_value(e, dims)
        if n is None:
            raise kfuse.Error(f"{self._where}: '{name}' has the extent {e}; pass dims={{'{e}': ...}}")
        return n

    def state_roles(self):
        """state name -> "running_mean" or "running_var", by its place in a batchnorm."""
        values = self.program["values"]
        roles = {}
        for v in values:
            if v["kind"] == "op" and v["op"] == "batchnorm":
                roles[values[v["args"][-2]]["name"]] = "running_mean"
                roles[values[v["args"][-1]]["name"]] = "running_var"
        return roles

    def random_inputs(self, dims, generator=None, device=None):
        """Standard normal inputs in their declared dtypes, in declaration order; `dims` gives
        every dim an input's shape names (N=64, or B=3, T=5). An i64 input (class indices) is
        uniform over the classes of the logits read with it."""
        dims = kfuse._dims(f"{self._where}: random_inputs", dims)
        inputs = []
        for index, v in enumerate(self.program["values"]):
            if v["kind"] == "input":
                shape = [self._extent(e, dims, v["name"]) for e in v["shape"]]
                if v["dtype"] == "i64":
                    classes = self._classes(index, dims)
                    inputs.append(torch.randint(0, classes, shape, generator=generator, device=device))
                    continue
                x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
                inputs.append(x.to(DTYPES[v["dtype"]]))
        return inputs

    def _classes(self, index, dims):
        """The classes of the logits an op reads with class indices `index` (its operand 1)."""
        values = self.program["values"]
        for v in values:
            if v["kind"] == "op" and len(v["args"]) > 1 and v["args"][1] == index:
                logits = values[v["args"][0]]
                return self._extent(logits["shape"][-1], dims, logits["name"])
        raise kfuse.Error(f"{self._where}: no op reads the class indices '{values[index]['name']}'")

    @torch.no_grad()
    def reset_parameters(self, generator=None):
        """`generator`: a torch.Generator on the module's device, or None for the default one.
        Matrices as nn.Linear initializes them (uniform within 1/sqrt(fan_in)); vectors and
        scalars uniform in [0.5, 1.5] (norm weights, scales, temperatures: away from 0);
        running means uniform in [-0.5, 0.5] and running variances in [0.5, 1.5], so eval mode
        normalizes with non-trivial statistics."""
        roles = self.state_roles()
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                bound = 1.0 / math.sqrt(p.shape[-1])
                p.uniform_(-bound, bound, generator=generator)
            else:
                p.uniform_(0.5, 1.5, generator=generator)
        for name, b in self.named_buffers():
            if roles.get(name) == "running_mean":
                b.uniform_(-0.5, 0.5, generator=generator)
            else:
                b.uniform_(0.5, 1.5, generator=generator)

    def forward(self, *inputs, **named):
        values = self.program["values"]
        given = dict(zip(self.input_names, inputs))
        given.update(named)
        missing = [n for n in self.input_names if n not in given]
        if missing or len(given) != len(self.input_names):
            raise kfuse.Error(f"{self._where}: takes the inputs {', '.join(self.input_names)}, got "
                              f"{len(inputs)} positional and {', '.join(named) or 'no'} named")
        # Class indices (i64) are integers in either run; the floats say whether it is exact.
        exact = all(t.dtype == torch.float64 for t in given.values() if t.is_floating_point())
        dims = {}
        env = []
        device = next(iter(given.values())).device if given else None
        ctx = _Context(self.training, self.kfuse_rng, dims, exact, device)
        for v in values:
            if v["kind"] == "input":
                t = given[v["name"]]
                self._check(v, t, dims, exact, what=f"input '{v['name']}'")
            elif v["kind"] in ("param", "state"):
                t = getattr(self, v["name"])
            else:
                t = OPS[v["op"]](v, [env[a] for a in v["args"]], ctx)
                if v["class"] != "effect":  # an effect updates state and has no value
                    self._check(v, t, dims, exact, what=f"line {v['line']}: {v['op']}")
            env.append(t)
        outputs = [env[o] for o in self.program["outputs"]]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _check(self, v, t, dims, exact, what):
        """`t` has v's declared dtype (float64 throughout an exact run) and shape, binding dims."""
        dtype = torch.float64 if exact and v["dtype"] != "i64" else DTYPES[v["dtype"]]
        ok = t.dtype == dtype and t.dim() == len(v["shape"])
        if ok:
            for e, n in zip(v["shape"], t.shape):
                if isinstance(e, str) and "*" not in e:
                    ok = ok and dims.setdefault(e, n) == n
                else:  # a constant, or a product of dims bound before (a view's rows)
                    ok = ok and _extent_value(e, dims) == n
        if not ok:
            declared = f"{'f64' if exact else v['dtype']}[{', '.join(str(e) for e in v['shape'])}]"
            raise kfuse.Error(f"{self._where}: {what} is {t.dtype} {list(t.shape)}, declared {declared} "
                              f"(dims {dims})")
