"""kfuse.torch.Reference: a .kf pipeline computed with PyTorch's own ops, as an nn.Module.

    ref = kfuse.torch.Reference("chain.kf")             # params and state named as in the .kf
    fused = kfuse.torch.Fused(copy.deepcopy(ref), "chain.kf")
    with torch.no_grad():
        y_torch, y_kfuse = ref(x), fused(x)             # the same chain, PyTorch vs kfuse

It is built from kfuse.program (the compiler's parsed graph; no second .kf parser): every
param and state is a parameter or buffer under its .kf name, so Fused maps them by name, and
forward applies one PyTorch implementation per op of the table (OPS) with the .kf's attributes:
batchnorm is F.batch_norm (running statistics updated in train mode with the .kf's momentum and
eps), dropout F.dropout, tensors of rank 1 to 4 and bf16/f16 declarations as PyTorch holds them.
An op without a PyTorch implementation here is an error naming it. Every value's dtype and
shape are checked against the program's, so a translation that departs from kfuse's type rules
fails loudly. With float64 inputs (after .double()) every value is float64: the reference the
GPU results are judged against.

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
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def _norm_input(x, params):
    """A half-precision input whose parameters are f32 (mixed precision's layout) is normalized
    in f32 and rounded once to its own type, as kfuse's kernels do and PyTorch's CUDA mixed
    batch_norm / layer_norm kernels do too (F.rms_norm alone would return f32 there)."""
    if x.dtype in (torch.bfloat16, torch.float16) and any(p is not None and p.dtype == torch.float32 for p in params):
        return x.float()
    return x


def _normalized(fn):
    def run(args, attrs, ctx):
        x, params = args[0], args[1:]
        return fn(_norm_input(x, params), params, attrs, ctx).to(x.dtype)

    return run


def _batchnorm(x, params, a, ctx):
    # (x, running_mean, running_var) or (x, weight, bias, running_mean, running_var)
    weight, bias = (params[0], params[1]) if len(params) == 4 else (None, None)
    running_mean, running_var = params[-2], params[-1]
    return F.batch_norm(x, running_mean, running_var, weight, bias, ctx.training, a["momentum"], a["eps"])


def _layernorm(x, params, a, ctx):
    weight = params[0] if len(params) > 0 else None
    bias = params[1] if len(params) > 1 else None
    return F.layer_norm(x, [x.shape[-1]], weight, bias, a["eps"])


def _rmsnorm(x, params, a, ctx):
    return F.rms_norm(x, [x.shape[-1]], params[0] if params else None, a["eps"])


def _groupnorm(x, params, a, ctx):
    weight = params[0] if len(params) > 0 else None
    bias = params[1] if len(params) > 1 else None
    return F.group_norm(x, a["groups"], weight, bias, a["eps"])


def _instancenorm(x, params, a, ctx):
    return F.instance_norm(x.unsqueeze(1), eps=a["eps"]).squeeze(1)


def _pool(fn):
    def run(args, a, ctx):
        stride = None if a["stride"] is None else int(a["stride"])  # an integer, checked by kfuse
        return fn(args[0].unsqueeze(1), a["kernel_size"], stride).squeeze(1)

    return run


def _dropout(args, a, ctx):
    x = args[0]
    if not ctx.training or ctx.rng is None:
        return F.dropout(x, a["p"], ctx.training)
    seed, offset = ctx.rng
    keep = kfuse.dropout_keep(seed, offset, a["stream"], x.numel(), a["p"])
    mask = torch.frombuffer(bytearray(keep), dtype=torch.uint8).to(device=x.device, dtype=torch.bool)
    return torch.where(mask.view(x.shape), x * (1.0 / (1.0 - a["p"])), x * 0.0)


def _unary(fn):
    return lambda args, a, ctx: fn(args[0], a)


def _binary(fn):
    return lambda args, a, ctx: fn(args[0], args[1])


def _reduce(fn):
    return lambda args, a, ctx: fn(args[0], a)


# op name (kfuse's op table) -> fn(operands, attributes, context) with PyTorch's semantics.
OPS = {
    "linear": lambda args, a, ctx: F.linear(*args),
    "matmul": lambda args, a, ctx: torch.matmul(*args),
    "batchnorm": _normalized(_batchnorm),
    "add": _binary(torch.add),
    "sub": _binary(torch.sub),
    "mul": _binary(torch.mul),
    "div": _binary(torch.div),
    "maximum": _binary(torch.maximum),
    "minimum": _binary(torch.minimum),
    "pow": _binary(torch.pow),
    "relu": _unary(lambda x, a: torch.relu(x)),
    "leaky_relu": _unary(lambda x, a: F.leaky_relu(x, a["negative_slope"])),
    "gelu": _unary(lambda x, a: F.gelu(x, approximate=a["approximate"])),
    "silu": _unary(lambda x, a: F.silu(x)),
    "sigmoid": _unary(lambda x, a: torch.sigmoid(x)),
    "tanh": _unary(lambda x, a: torch.tanh(x)),
    "hardtanh": _unary(lambda x, a: F.hardtanh(x, a["min_val"], a["max_val"])),
    "clamp": _unary(lambda x, a: torch.clamp(x, a["min"], a["max"])),
    "hardsigmoid": _unary(lambda x, a: F.hardsigmoid(x)),
    "hardswish": _unary(lambda x, a: F.hardswish(x)),
    "mish": _unary(lambda x, a: F.mish(x)),
    "softplus": _unary(lambda x, a: F.softplus(x, a["beta"], a["threshold"])),
    "elu": _unary(lambda x, a: F.elu(x, a["alpha"])),
    "selu": _unary(lambda x, a: F.selu(x)),
    "exp": _unary(lambda x, a: torch.exp(x)),
    "log": _unary(lambda x, a: torch.log(x)),
    "abs": _unary(lambda x, a: torch.abs(x)),
    "neg": _unary(lambda x, a: torch.neg(x)),
    "sqrt": _unary(lambda x, a: torch.sqrt(x)),
    "rsqrt": _unary(lambda x, a: torch.rsqrt(x)),
    "square": _unary(lambda x, a: torch.square(x)),
    "reciprocal": _unary(lambda x, a: torch.reciprocal(x)),
    "softmax": _unary(lambda x, a: torch.softmax(x, a["dim"])),
    "log_softmax": _unary(lambda x, a: torch.log_softmax(x, a["dim"])),
    "layernorm": _normalized(_layernorm),
    "rmsnorm": _normalized(_rmsnorm),
    "groupnorm": _normalized(_groupnorm),
    "instancenorm": _normalized(_instancenorm),
    "sum": _reduce(lambda x, a: torch.sum(x, a["dim"], keepdim=a["keepdim"])),
    "mean": _reduce(lambda x, a: torch.mean(x, a["dim"], keepdim=a["keepdim"])),
    "max": _reduce(lambda x, a: torch.max(x, a["dim"], keepdim=a["keepdim"]).values),
    "min": _reduce(lambda x, a: torch.min(x, a["dim"], keepdim=a["keepdim"]).values),
    "amax": _reduce(lambda x, a: torch.amax(x, a["dim"], keepdim=a["keepdim"])),
    "amin": _reduce(lambda x, a: torch.amin(x, a["dim"], keepdim=a["keepdim"])),
    "logsumexp": _reduce(lambda x, a: torch.logsumexp(x, a["dim"], keepdim=a["keepdim"])),
    "var": _reduce(lambda x, a: torch.var(x, a["dim"], correction=a["correction"], keepdim=a["keepdim"])),
    "std": _reduce(lambda x, a: torch.std(x, a["dim"], correction=a["correction"], keepdim=a["keepdim"])),
    "max_pool1d": _pool(F.max_pool1d),
    "avg_pool1d": _pool(F.avg_pool1d),
    "dropout": _dropout,
    "reshape": lambda args, a, ctx: args[0].reshape([_extent_value(e, ctx.dims) for e in a["shape"]]),
    "unsqueeze": lambda args, a, ctx: args[0].unsqueeze(a["dim"]),
    "squeeze": lambda args, a, ctx: args[0].squeeze(a["dim"]),
}


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
    def __init__(self, training, rng, dims):
        self.training = training
        self.rng = rng
        self.dims = dims  # the dims bound so far (a reshape's extents name them)


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
        for v in values:
            if v["kind"] == "op" and v["op"] not in OPS and v["op"] != "constant":
                raise kfuse.Error(f"{self._where}: line {v['line']}: op '{v['op']}' has no PyTorch "
                                  "implementation in kfuse.torch_reference.OPS")
        self.input_names = [v["name"] for v in values if v["kind"] == "input"]
        dims = dict(dims or {})
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
        every dim an input's shape names (N=64, or B=3, T=5)."""
        inputs = []
        for v in self.program["values"]:
            if v["kind"] == "input":
                shape = [self._extent(e, dims, v["name"]) for e in v["shape"]]
                x = torch.randn(shape, generator=generator, device=device, dtype=torch.float32)
                inputs.append(x.to(DTYPES[v["dtype"]]))
        return inputs

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
        exact = all(t.dtype == torch.float64 for t in given.values())
        dims = {}
        env = []
        ctx = _Context(self.training, self.kfuse_rng, dims)
        for v in values:
            if v["kind"] == "input":
                t = given[v["name"]]
                self._check(v, t, dims, exact, what=f"input '{v['name']}'")
            elif v["kind"] in ("param", "state"):
                t = getattr(self, v["name"])
            elif v["op"] == "constant":
                dtype = torch.float64 if exact else DTYPES[v["attrs"]["dtype"]]
                device = next(iter(given.values())).device
                t = torch.full((1,), v["attrs"]["value"], dtype=dtype, device=device)
            else:
                t = OPS[v["op"]]([env[a] for a in v["args"]], v["attrs"], ctx)
                self._check(v, t, dims, exact, what=f"line {v['line']}: {v['op']}")
            env.append(t)
        outputs = [env[o] for o in self.program["outputs"]]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def _check(self, v, t, dims, exact, what):
        """`t` has v's declared dtype (float64 throughout an exact run) and shape, binding dims."""
        dtype = torch.float64 if exact else DTYPES[v["dtype"]]
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
