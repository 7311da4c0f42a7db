"""kfuse.torch.draft: a first .kf of an nn.Module's forward pass, through torch.export.

    text = kfuse.torch.draft(module, (x,), dynamic_shapes=({0: torch.export.Dim("N")},))
    print(text)                                     # review and edit it; keep it as chain.kf
    fused = kfuse.torch.Fused(module, text=text)    # no mapping: the names are the module's

The module is exported with torch.export.export(strict=False): non-strict export runs forward
as ordinary Python on fake tensors, so any Python a forward holds traces (no TorchDynamo
bytecode analysis), the module's tensors are left as they are, and each node keeps the user's
stack trace. Each aten op of the graph that kfuse has becomes one .kf statement, named as the
exported graph names its node and followed by the user's source line as a comment; the table
below is the aten -> kfuse direction of the op table's PyTorch spellings (kfuse.ops()).

- Inputs are forward's tensor arguments; params and state are the module's parameters and
  buffers, named by their state_dict keys (kf_name: '.' -> '_'), as Fused finds them. The
  running statistics of a batchnorm are `state`.
- An extent dynamic_shapes makes dynamic is a `dim`, named as its torch.export.Dim (an unnamed
  one, Dim.AUTO or Dim.DYNAMIC, as `<input>_<axis>`); every other extent is a number.
- The .kf is mode-independent: aten.batch_norm and aten.dropout mean the same op in train and
  eval mode (their `training` flag is the mode a pipeline runs in), so both drafts are equal.
- The first op (in graph order) that kfuse cannot spell raises kfuse.Error naming the aten op
  and the user's source line; the finished text is checked by kfuse's parser before it is
  returned.
"""

import inspect
import math
import operator
import os
import re

import sympy
import torch
from torch.fx.operator_schemas import normalize_function

import kfuse

__all__ = ["draft", "kf_name"]

_KEYWORDS = {"pipeline", "dim", "input", "param", "state", "return"}
_DTYPES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
_OPS = {info["name"]: info for info in kfuse.ops()}
_TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n([^\n]*)')
aten = torch.ops.aten


def kf_name(key):
    """The .kf name of a state_dict key, as kfuse.torch.Fused finds it: '.' -> '_', and a '_'
    before a key that starts with a digit (nn.Sequential's "0.weight" -> "_0_weight")."""
    name = key.replace(".", "_")
    return "_" + name if name[:1].isdigit() else name


class _Unspellable(Exception):
    """An op, or an argument of one, that no .kf spells; `node` is where, when not the node
    being translated."""

    def __init__(self, why, node=None):
        super().__init__(why)
        self.why, self.node = why, node


class _Value:
    """What a graph node became: `text` spells it as an operand (a name, a number or a call);
    `deps` are the values its statement reads; `statement` is its .kf line, if it has one.
    `number` is set for a one-element constant (dtype None: a Python scalar); `pending` holds a
    call that only a later node can complete (aten.max.dim's values, an op on an unsqueezed
    row); `failure` is (node, why) where kfuse cannot spell it."""

    def __init__(self, text, dtype=None, deps=(), statement=None, number=None):
        self.text, self.dtype, self.deps, self.statement, self.number = text, dtype, list(deps), statement, number
        self.pending = None
        self.failure = None
        self.order = 0  # the node's place in the graph: statements keep the graph's order


class _Pending:
    """A call that is a value only through its consumer: `call` on the values `deps`, which
    the consumer completes (getitem 0 of max.dim) or whose `axis` it must squeeze; the
    statement is named after the op's node."""

    def __init__(self, node, call, deps, why, axis=None):
        self.name, self.call, self.deps, self.why, self.axis = node.name, call, deps, why, axis


def _literal(x):
    """A Python number as the DSL writes it."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x):
        raise _Unspellable(f"the value {x!r} is no finite number, which is all a .kf can write")
    return repr(float(x)) if isinstance(x, float) else str(x)


def _attribute(kind, value):
    """An attribute value as the DSL writes one of `kind` (kfuse.ops()'s kinds); None where
    an optional one is left out."""
    if value is None and kind == "optional number":
        return None
    if kind in ("number", "optional number"):
        return _literal(value)
    if kind == "int" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if kind == "bool" and isinstance(value, bool):
        return "true" if value else "false"
    if kind == "choice" and isinstance(value, str):
        return f'"{value}"'
    if kind == "shape":
        return "[" + ", ".join(value) + "]"
    if kind == "dtype" and value in _DTYPES:
        return _DTYPES[value]
    raise _Unspellable(f"the value {value!r} is no {kind} attribute")


class _Spelling:
    """An aten op that is one kfuse op: `operands` maps the kfuse op's operand names (in any
    order: the op table orders them) to aten argument names, `attrs` its attribute names to
    aten argument names, and `fixed` gives the aten arguments the kfuse op has no attribute
    for with the one value it means."""

    def __init__(self, op, operands, attrs=None, fixed=None):
        self.op, self.operands, self.attrs, self.fixed = op, operands, attrs or {}, fixed or {}

    def __call__(self, drafter, node, args):
        for name, value in self.fixed.items():
            if args[name] != value:
                raise _Unspellable(f"{name}={args[name]!r}: kfuse's {self.op} is the op at {name}={value!r}")
        operands = {o: args[a] for o, a in self.operands.items()}
        return drafter.statement(node, self.op, operands, {k: args[a] for k, a in self.attrs.items()})


def _unary(op, *attrs):
    """A pointwise op of one operand whose attributes are the aten op's arguments by name."""
    return _Spelling(op, {"x": "input"}, {a: a for a in attrs})


def _binary(op, a="input", b="other", **fixed):
    return _Spelling(op, {"a": a, "b": b}, None, fixed)


def _copy_or_cast(drafter, node, args):
    """clone, detach, lift_fresh_copy and .to(dtype): the input itself where the node's dtype
    is the input's, else a cast."""
    value = drafter.operand(args["input"])
    if drafter.node_dtype(node) == value.dtype:
        return value
    return drafter.statement(node, "cast", {"x": args["input"]}, {"dtype": drafter.node_meta(node).dtype})


def _relu6(drafter, node, args):
    return drafter.statement(node, "hardtanh", {"x": args["input"]}, {"min_val": 0, "max_val": 6})


def _last_axis(drafter, node, args, shape_arg):
    """A normalization's normalized_shape, which kfuse takes as the last axis only."""
    shape, last = list(args[shape_arg]), drafter.node_meta(args["input"]).shape[-1]
    if len(shape) != 1 or shape[0] != last:
        raise _Unspellable(f"{shape_arg}={shape}: kfuse normalizes over the last axis alone ([{last}])")


def _layer_norm(drafter, node, args):
    _last_axis(drafter, node, args, "normalized_shape")
    return drafter.statement(node, "layernorm", {"x": args["input"], "weight": args["weight"], "bias": args["bias"]},
                             {"eps": args["eps"]})


def _rms_norm(drafter, node, args):
    _last_axis(drafter, node, args, "normalized_shape")
    # eps=None is finfo(float32).eps for f32, bf16 and f16 inputs (PyTorch computes them in
    # float): the DSL's default, so it is left out.
    attrs = {} if args["eps"] is None else {"eps": args["eps"]}
    return drafter.statement(node, "rmsnorm", {"x": args["input"], "weight": args["weight"]}, attrs)


def _batch_norm(drafter, node, args):
    for stat in ("running_mean", "running_var"):
        if not drafter.is_buffer(args[stat]):
            raise _Unspellable(f"its {stat} is {'absent' if args[stat] is None else 'no buffer of the module'}: "
                               "kfuse's batchnorm keeps running statistics (track_running_stats=True)")
        drafter.make_state(args[stat])
    owner = drafter.owner(node)
    if isinstance(owner, torch.nn.modules.batchnorm._BatchNorm) and owner.momentum is None:
        raise _Unspellable("momentum=None (a cumulative average) is not the .kf batchnorm's fixed momentum")
    operands = {k: args[k] for k in ("weight", "bias", "running_mean", "running_var")}
    return drafter.statement(node, "batchnorm", {"x": args["input"], **operands},
                             {"eps": args["eps"], "momentum": args["momentum"]})


def _one_dim(args):
    dims = args["dim"]
    if dims is None or len(dims) != 1:
        raise _Unspellable(f"dim={dims}: kfuse reduces one axis at a time")
    return dims[0]


def _reduction(op):
    def spell(drafter, node, args):
        if args.get("dtype") is not None:
            raise _Unspellable(f"dtype={args['dtype']}: kfuse's {op} keeps its input's type")
        return drafter.statement(node, op, {"x": args["input"]}, {"dim": _one_dim(args), "keepdim": args["keepdim"]})
    return spell


def _variance(op):
    def spell(drafter, node, args):
        if "unbiased" in args:
            correction = 1 if args["unbiased"] else 0
        else:
            correction = 1 if args["correction"] is None else args["correction"]
        attrs = {"dim": _one_dim(args), "keepdim": args["keepdim"], "correction": correction}
        return drafter.statement(node, op, {"x": args["input"]}, attrs)
    return spell


def _values_only(op):
    """aten.max.dim / min.dim: (values, indices); getitem 0 is kfuse's max / min."""
    def spell(drafter, node, args):
        call, deps = drafter.call(op, {"x": args["input"]}, {"dim": args["dim"], "keepdim": args["keepdim"]})
        return drafter.pending(node, _Pending(node, call, deps, "its indices (argmax/argmin) have no kfuse op"))
    return spell


def _getitem(drafter, node, args):
    source, index = node.args
    if drafter.values[source].failure is not None:  # reported as the source's own failure
        return _Value(f"<{node.name}>", deps=[drafter.values[source]])
    pending = drafter.values[source].pending
    if pending is None or pending.axis is not None or index != 0:
        raise _Unspellable(pending.why if pending is not None else "kfuse has no op with several results",
                           node=source)
    return drafter.emit(node, pending.call, pending.deps, name=pending.name)


def _row_op(op, check, attrs):
    """max_pool1d, avg_pool1d, instance_norm: each row over the last axis. On a rank-2 input it
    is kfuse's op; on a row unsqueezed to rank 3 (F.max_pool1d(x.unsqueeze(1)).squeeze(1), or
    nn.InstanceNorm1d on [N, F]) it is kfuse's op once the squeeze follows."""
    def spell(drafter, node, args):
        check(args)
        kf_attrs = attrs(args)
        unsqueezed = drafter.unsqueezed.get(args["input"])
        if unsqueezed is not None:
            row, axis = unsqueezed
            call, deps = drafter.call(op, {"x": row}, kf_attrs)
            why = f"kfuse's {op} takes rows [N, F], and this rank-3 result is not squeezed back (axis {axis})"
            return drafter.pending(node, _Pending(node, call, deps, why, axis))
        shape = list(drafter.node_meta(args["input"]).shape)
        if len(shape) != 2:
            raise _Unspellable(f"kfuse's {op} takes the rows of an [N, F] tensor (or of one unsqueezed at a leading "
                               f"axis and squeezed back), not of a {len(shape)}-D {shape}")
        return drafter.statement(node, op, {"x": args["input"]}, kf_attrs)
    return spell


def _require(**required):
    def check(args):
        for name, value in required.items():
            if args[name] != value:
                raise _Unspellable(f"{name}={args[name]!r}: kfuse's op is the one at {name}={value!r}")
    return check


def _window(args):
    (kernel,) = args["kernel_size"]
    stride = args["stride"]
    return {"kernel_size": kernel, "stride": None if not stride else stride[0]}


def _instance_norm_check(args):
    given = [k for k in ("weight", "bias", "running_mean", "running_var") if args[k] is not None]
    if given or not args["use_input_stats"]:
        raise _Unspellable("kfuse's instancenorm has no affine and no running statistics (affine=False, "
                           "track_running_stats=False)")


def _squeeze(drafter, node, args):
    value = drafter.values[args["input"]]
    rank = len(drafter.node_meta(args["input"]).shape)
    if value.pending is not None and value.pending.axis is not None:
        if args["dim"] % rank != value.pending.axis:
            raise _Unspellable(value.pending.why, node=args["input"])
        return drafter.emit(node, value.pending.call, value.pending.deps, name=value.pending.name)
    return drafter.statement(node, "squeeze", {"x": args["input"]}, {"dim": args["dim"]})


def _unsqueeze(drafter, node, args):
    x = args["input"]
    if isinstance(x, torch.fx.Node) and len(drafter.node_meta(x).shape) == 2 and args["dim"] % 3 in (0, 1):
        drafter.unsqueezed[node] = (x, args["dim"] % 3)
    return drafter.statement(node, "unsqueeze", {"x": x}, {"dim": args["dim"]})


def _reshape(drafter, node, args):
    source = args["input"]
    scalar = isinstance(source, torch.fx.Node) and drafter.node_meta(source).dim() == 0
    if scalar and drafter.node_meta(node).numel() == 1:
        return drafter.operand(source)  # a reduced loss: kfuse's is [1] already, PyTorch's a scalar
    return drafter.statement(node, "reshape", {"x": args["input"]}, {"shape": drafter.extents(node)})


_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}  # at::Reduction


def _cross_entropy(drafter, node, args):
    if args["weight"] is not None:
        raise _Unspellable("weight=: kfuse's cross_entropy weighs every class alike")
    return drafter.statement(node, "cross_entropy", {"logits": args["input"], "target": args["target"]},
                             {"ignore_index": args["ignore_index"], "reduction": _REDUCTIONS[args["reduction"]],
                              "label_smoothing": args["label_smoothing"]})


def _full(drafter, node, args):
    """A one-element constant (torch.full((1,), v)): a number operand, as the .kf writes one."""
    if list(args["size"]) != [1]:
        raise _Unspellable(f"size={list(args['size'])}: kfuse's constants have one element")
    value, dtype = args["fill_value"], drafter.node_dtype(node)
    return _Value(f"constant(value={_literal(value)}, dtype={dtype})", dtype, number=value)


# aten op -> its kfuse spelling: a _Spelling, or a function (drafter, node, arguments by name).
_SPELLINGS = {
    aten.linear.default: _Spelling("linear", {"x": "input", "weight": "weight", "bias": "bias"}),
    aten.matmul.default: _binary("matmul"),
    aten.mm.default: _binary("matmul", b="mat2"),
    aten.batch_norm.default: _batch_norm,
    aten.add.Tensor: _binary("add", alpha=1),
    aten.sub.Tensor: _binary("sub", alpha=1),
    aten.rsub.Scalar: _binary("sub", a="other", b="input", alpha=1),
    aten.mul.Tensor: _binary("mul"),
    aten.div.Tensor: _binary("div"),
    aten.maximum.default: _binary("maximum"),
    aten.minimum.default: _binary("minimum"),
    aten.pow.Tensor_Tensor: _binary("pow", b="exponent"),
    aten.pow.Tensor_Scalar: _binary("pow", b="exponent"),
    aten.pow.Scalar: _binary("pow", b="exponent"),
    aten.relu.default: _unary("relu"),
    aten.leaky_relu.default: _unary("leaky_relu", "negative_slope"),
    aten.gelu.default: _unary("gelu", "approximate"),
    aten.silu.default: _unary("silu"),
    aten.sigmoid.default: _unary("sigmoid"),
    aten.tanh.default: _unary("tanh"),
    aten.hardtanh.default: _unary("hardtanh", "min_val", "max_val"),
    aten.relu6.default: _relu6,
    aten.clamp.default: _unary("clamp", "min", "max"),
    aten.hardsigmoid.default: _unary("hardsigmoid"),
    aten.hardswish.default: _unary("hardswish"),
    aten.mish.default: _unary("mish"),
    aten.softplus.default: _unary("softplus", "beta", "threshold"),
    aten.elu.default: _Spelling("elu", {"x": "input"}, {"alpha": "alpha"}, {"scale": 1, "input_scale": 1}),
    aten.selu.default: _unary("selu"),
    aten.log_sigmoid.default: _unary("logsigmoid"),
    aten.exp.default: _unary("exp"),
    aten.log.default: _unary("log"),
    aten.abs.default: _unary("abs"),
    aten.neg.default: _unary("neg"),
    aten.sqrt.default: _unary("sqrt"),
    aten.rsqrt.default: _unary("rsqrt"),
    aten.square.default: _unary("square"),
    aten.reciprocal.default: _unary("reciprocal"),
    aten.softmax.int: _Spelling("softmax", {"x": "input"}, {"dim": "dim"}, {"dtype": None}),
    aten.log_softmax.int: _Spelling("log_softmax", {"x": "input"}, {"dim": "dim"}, {"dtype": None}),
    aten.layer_norm.default: _layer_norm,
    aten.rms_norm.default: _rms_norm,
    aten.group_norm.default: _Spelling("groupnorm", {"x": "input", "weight": "weight", "bias": "bias"},
                                       {"groups": "num_groups", "eps": "eps"}),
    aten.instance_norm.default: _row_op("instancenorm", _instance_norm_check, lambda args: {"eps": args["eps"]}),
    aten.sum.dim_IntList: _reduction("sum"),
    aten.mean.dim: _reduction("mean"),
    aten.amax.default: _reduction("amax"),
    aten.amin.default: _reduction("amin"),
    aten.logsumexp.default: _reduction("logsumexp"),
    aten.var.correction: _variance("var"),
    aten.var.dim: _variance("var"),
    aten.std.correction: _variance("std"),
    aten.std.dim: _variance("std"),
    aten.max.dim: _values_only("max"),
    aten.min.dim: _values_only("min"),
    aten.max_pool1d.default: _row_op("max_pool1d", _require(padding=[0], dilation=[1], ceil_mode=False), _window),
    aten.avg_pool1d.default: _row_op("avg_pool1d", _require(padding=[0], ceil_mode=False), _window),
    aten.dropout.default: _Spelling("dropout", {"x": "input"}, {"p": "p"}),
    aten.reshape.default: _reshape,
    aten.view.default: _reshape,
    aten.flatten.using_ints: _reshape,
    aten.unsqueeze.default: _unsqueeze,
    aten.squeeze.dim: _squeeze,
    aten.to.dtype: _copy_or_cast,
    aten.clone.default: _copy_or_cast,
    aten.detach.default: _copy_or_cast,
    aten.lift_fresh_copy.default: _copy_or_cast,  # a tensor forward makes: refused as the constant it copies
    aten.full.default: _full,
    aten.cross_entropy_loss.default: _cross_entropy,
}


def _arguments(node):
    """The aten op's arguments by its schema's names (`self` is "input"), defaults filled."""
    pair = normalize_function(node.target, node.args, node.kwargs, normalize_to_only_use_kwargs=True)
    if pair is None:
        raise _Unspellable("its arguments match no schema of the op")
    return pair.kwargs


def _source(node):
    """(file, line, code) of the user's line that made the node: the innermost frame of its
    stack trace outside torch (a file before eval'd code), or None."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    user = [f for f in frames if not f[0].startswith(_TORCH_DIR)]
    files = [f for f in user if not f[0].startswith("<")]
    if not (files or user):
        return None
    file, line, code = (files or user)[-1]
    return file, int(line), code.strip()


def _functional(target):
    """The out-of-place overload of an in-place aten op (relu_ -> relu), or None."""
    packet = getattr(aten, target.overloadpacket.__name__.rstrip("_"), None)
    return getattr(packet, target._overloadname, None) if packet is not None else None


class _Drafter:
    """One exported program spelled as .kf statements, node by node in graph order."""

    def __init__(self, ep, module, where, dim_names):
        self.module, self.where = module, where
        self.graph = ep.graph_module.graph
        self.values = {}  # node -> _Value
        self.unsqueezed = {}  # node of unsqueeze(x, axis) of a rank-2 x -> (x, axis)
        self.in_place_failures = []  # (node, why): wrong whatever is live
        self.kinds = {}  # placeholder node -> "input", "param" or "state"
        self.taken = set(_KEYWORDS)
        specs = {s.arg.name: s for s in ep.graph_signature.input_specs}
        self.placeholders = [n for n in self.graph.nodes if n.op == "placeholder"]
        self.specs = {n: specs[n.name] for n in self.placeholders}
        self.dims = {}  # sympy symbol -> dim name, in declaration order
        self._declare_placeholders(dim_names)

    # -- names, types and extents --------------------------------------------------------------

    def fresh(self, base):
        name = re.sub(r"\W", "_", base, flags=re.ASCII)[:200]
        name = name if re.match(r"[A-Za-z_]", name) else "_" + name
        candidate, n = name, 0
        while candidate in self.taken:
            n += 1
            candidate = f"{name}_{n}"
        self.taken.add(candidate)
        return candidate

    def node_meta(self, node):
        return node.meta["val"]

    def node_dtype(self, node):
        meta = node.meta.get("val")
        if not isinstance(meta, torch.Tensor):
            raise _Unspellable(f"its value is {type(meta).__name__}, not a tensor")
        if meta.dtype not in _DTYPES:
            raise _Unspellable(f"its value is {meta.dtype} {list(meta.shape)}; kfuse's tensors are f32, bf16 or f16")
        return _DTYPES[meta.dtype]

    def extent(self, size):
        if isinstance(size, int):
            return str(size)
        expr, numbers, symbols = size.node.expr, [], []
        for factor in sympy.Mul.make_args(expr):
            base, exponent = factor.as_base_exp()
            if factor.is_Integer:
                numbers.append(str(int(factor)))
            elif base in self.dims and exponent.is_Integer and exponent > 0:
                symbols += [base] * int(exponent)
            else:
                raise _Unspellable(f"the extent {expr} is no product of the inputs' dims and numbers")
        order = list(self.dims)
        return "*".join(numbers + [self.dims[s] for s in sorted(symbols, key=order.index)])

    def extents(self, node):
        return [self.extent(size) for size in self.node_meta(node).shape]

    def is_buffer(self, arg):
        return isinstance(arg, torch.fx.Node) and self.kinds.get(arg) in ("param", "state") \
            and self.specs[arg].kind == torch.export.graph_signature.InputKind.BUFFER

    def make_state(self, node):
        self.kinds[node] = "state"

    def owner(self, node):
        """The innermost submodule whose forward made the node, or None."""
        stack = node.meta.get("nn_module_stack") or {}
        if not stack:
            return None
        path = list(stack.values())[-1][0]
        try:
            return self.module.get_submodule(path)
        except AttributeError:
            return None

    # -- declarations --------------------------------------------------------------------------

    def _declare_placeholders(self, dim_names):
        InputKind = torch.export.graph_signature.InputKind
        for node in self.placeholders:  # params keep their state_dict names: reserved first
            spec = self.specs[node]
            if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER):
                self.kinds[node] = "param"
                self.values[node] = self._placeholder(node, kf_name(spec.target),
                                                      f"{spec.kind.name.lower()} '{spec.target}'")
                self.taken.add(self.values[node].text)
        inputs = [n for n in self.placeholders if self.specs[n].kind == InputKind.USER_INPUT]
        for node in inputs:
            self.kinds[node] = "input"
            self.values[node] = self._placeholder(node, self.fresh(node.name), f"input '{node.name}'", index=True)
        for node, names in zip(inputs, dim_names):
            for axis, size in enumerate(self.node_meta(node).shape):
                symbol = size.node.expr if isinstance(size, torch.SymInt) else None
                if isinstance(symbol, sympy.Symbol) and symbol not in self.dims:
                    self.dims[symbol] = self._dim_name(names.get(axis), f"{self.values[node].text}_{axis}")
        for node in self.placeholders:
            if node not in self.values:  # constants and tokens torch.export lifted
                self.values[node] = self._placeholder(node, self.fresh(node.name), f"'{node.name}'")
                kind = self.specs[node].kind.name.lower().replace("_", " ")
                self.values[node].failure = (node, f"{kind} '{node.name}' of the export is no input, parameter or "
                                                   "buffer of the module: make it a buffer (register_buffer)")

    def _dim_name(self, given, default):
        if given is None:
            return self.fresh(default)
        if not re.fullmatch(r"[A-Za-z_]\w*", given, flags=re.ASCII) or given in self.taken:
            raise kfuse.Error(f"{self.where}: the dim name '{given}' is " + (
                "taken by a keyword, an input or a parameter" if given in self.taken else "no .kf identifier"))
        self.taken.add(given)
        return given

    def _placeholder(self, node, name, what, index=False):
        """An input (index: it may be int64 class indices, as a loss's target) or a parameter."""
        value = _Value(name)
        meta = node.meta.get("val")
        tensor = isinstance(meta, torch.Tensor)
        indices = index and tensor and meta.dtype == torch.int64 and meta.dim() == 1
        if not indices and (not tensor or meta.dtype not in _DTYPES or not 1 <= meta.dim() <= 4):
            shown = f"{meta.dtype} {list(meta.shape)}" if isinstance(meta, torch.Tensor) else type(meta).__name__
            value.failure = (node, f"{what} is {shown}; kfuse's tensors are f32, bf16 or f16 of rank 1 to 4"
                             + (", or int64 class indices of rank 1" if index else ""))
        elif not re.fullmatch(r"[A-Za-z_]\w*", name, flags=re.ASCII) or name in _KEYWORDS:
            value.failure = (node, f"{what} would be named '{name}', which is no .kf name")
        else:
            value.dtype = "i64" if indices else _DTYPES[meta.dtype]
        return value

    def declarations(self, live):
        lines = []
        for kind in ("input", "param", "state"):
            for node in self.placeholders:
                value = self.values[node]
                if self.kinds.get(node) == kind and (kind == "input" or value in live):
                    shape = ", ".join(self.extent(s) for s in self.node_meta(node).shape)
                    lines.append(f"  {kind:<6} {value.text}: {value.dtype}[{shape}]")
        return lines

    # -- statements ----------------------------------------------------------------------------

    def operand(self, arg):
        if isinstance(arg, torch.fx.Node):
            value = self.values[arg]
            if value.pending is not None:
                raise _Unspellable(value.pending.why, node=arg)
            return value
        return _Value(_literal(arg), None, number=arg)

    def call(self, op, operands, attrs):
        """(`op(operands..., attrs...)` as the DSL writes it, the operand values it reads)."""
        info = _OPS[op]
        values, absent = [], None
        for operand in info["operands"]:
            name = operand.rstrip("?")
            if operands.get(name) is None:
                absent = absent or name
                continue
            if absent is not None:
                raise _Unspellable(f"kfuse's {op}({', '.join(info['operands'])}) takes no {name} without {absent}")
            values.append(self.operand(operands[name]))
        texts = [v.text for v in values]
        if info["class"] == "pointwise binary":  # a one-element constant of the other's type: a number
            texts = [_literal(v.number) if v.number is not None and w.number is None and v.dtype in (None, w.dtype)
                     else v.text for v, w in zip(values, reversed(values))]
        kinds = {a["name"]: a["kind"] for a in info["attrs"]}
        for name, value in attrs.items():
            text = _attribute(kinds[name], value)
            if text is not None:
                texts.append(f"{name}={text}")
        return f"{op}({', '.join(texts)})", values

    def emit(self, node, call, deps, name=None):
        dtype = self.node_dtype(node)
        name = self.fresh(name or node.name)
        where = _source(node)
        comment = f"  # {os.path.basename(where[0])}:{where[1]}" if where else ""
        return _Value(name, dtype, deps, statement=f"  {name} = {call}{comment}")

    def statement(self, node, op, operands, attrs):
        return self.emit(node, *self.call(op, operands, attrs))

    def pending(self, node, pending):
        value = _Value(node.name, None, pending.deps)
        value.pending = pending
        return value

    def translate(self):
        for order, node in enumerate(self.graph.nodes):
            if node.op != "call_function":
                continue
            try:
                value = self._spell(node)
            except _Unspellable as e:
                value = _Value(f"<{node.name}>")
                value.failure = (e.node or node, e.why)
            value.order = order
            self.values[node] = value

    def _spell(self, node):
        target = node.target
        if target is operator.getitem:
            return _getitem(self, node, None)
        if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
            self._check_in_place(node)
            target = _functional(target)
        spelling = _SPELLINGS.get(target)
        if spelling is None:
            raise _Unspellable("kfuse has no such op (kfuse.ops() lists kfuse's ops)")
        return spelling(self, node, _arguments(node))

    def _check_in_place(self, node):
        """An in-place op is its out-of-place one (the export's later nodes read its result, as
        after nn.ReLU(inplace=True)) unless it writes a module's or caller's tensor, or a value
        that a view shares or another node reads after it; BatchNorm's num_batches_tracked
        counter is kfuse.torch.Fused's to count."""
        arguments, order = _arguments(node), {n: i for i, n in enumerate(self.graph.nodes)}
        for argument in node.target._schema.arguments:
            if argument.alias_info is None or not argument.alias_info.is_write:
                continue
            written = arguments["input" if argument.name == "self" else argument.name]
            if written in self.kinds:
                spec = self.specs[written]
                if spec.target is not None and spec.target.rpartition(".")[2] == "num_batches_tracked":
                    raise _Unspellable("BatchNorm's num_batches_tracked is counted by kfuse.torch.Fused")
                shown = f"{spec.kind.name.lower()} '{spec.target}'" if spec.target else f"input '{written.name}'"
                self.in_place_failures.append((node, f"it writes the {shown} in place; a .kf updates only "
                                                     "batchnorm's running statistics"))
                continue
            for user in written.users:
                aliases = isinstance(user.target, torch._ops.OpOverload) and any(
                    r.alias_info is not None for r in user.target._schema.returns)
                if user is not node and (aliases or order[user] > order[node]):
                    self.in_place_failures.append((node, f"it overwrites '{written.name}', which '{user.name}' "
                                                         f"{'views' if aliases else 'reads after it'}"))

    def outputs(self):
        """The returned values; every failure a returned value reads, with the in-place ones,
        in graph order."""
        returned = []
        for arg in self.graph.output_node().args[0]:
            try:
                if not isinstance(arg, torch.fx.Node):
                    raise _Unspellable(f"forward returns {arg!r}, which is no tensor", node=self.graph.output_node())
                value = self.operand(arg)
            except _Unspellable as e:
                value = _Value(f"<{arg!r}>")
                value.failure = (e.node, e.why)
            returned.append(value)
        return returned

    def live(self, returned):
        live, stack = set(), list(returned)
        while stack:
            value = stack.pop()
            if value not in live:
                live.add(value)
                stack.extend(value.deps)
        return live

    def failures(self, live):
        order = {node: i for i, node in enumerate(self.graph.nodes)}
        found = [v.failure for v in live if v.failure is not None] + self.in_place_failures
        return sorted(set(found), key=lambda failure: order[failure[0]])

    def failure_message(self, failures):
        def where(node, why):
            if node.op != "call_function":  # a declaration: the reason names it
                return why
            source = _source(node)
            at = f" at {source[0]}:{source[1]} ({source[2]})" if source else ""
            return f"kfuse cannot spell {node.target}{at}" + (f": {why}" if why else "")
        node, why = failures[0]
        more = "; ".join(where(n, "") for n, _ in failures[1:4]) + ("; ..." if len(failures) > 4 else "")
        return f"{self.where}: {where(node, why)}" + (f" (and {len(failures) - 1} more: {more})"
                                                      if len(failures) > 1 else "")

    def text(self, name, header):
        returned = self.outputs()
        live = self.live(returned)
        failures = self.failures(live)
        if failures:
            raise kfuse.Error(self.failure_message(failures))
        statements = sorted((v for v in live if v.statement is not None), key=lambda v: v.order)
        lines = [header, f"pipeline {name} {{"]
        if self.dims:
            lines.append(f"  dim {', '.join(self.dims.values())}")
        try:
            lines += self.declarations(live)
        except _Unspellable as e:  # an input's extent that is no dim (a derived Dim's 2*N)
            raise kfuse.Error(f"{self.where}: {e.why}") from None
        lines += [v.statement for v in statements]
        lines.append(f"  return {', '.join(v.text for v in returned)}")
        return "\n".join(lines + ["}", ""])


def _dynamic_specs(module, count, dynamic_shapes):
    """Each example input's entry of dynamic_shapes ({axis: Dim}, one Dim or None per axis, or
    None), matched to forward's parameters as torch.export matches them: by position (a tuple)
    or by name (a dict), *args taking a sequence of its own."""
    if dynamic_shapes is None:
        return [None] * count
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD,
             inspect.Parameter.VAR_POSITIONAL)
    params = [p for p in inspect.signature(module.forward).parameters.values() if p.kind in kinds]
    top = [dynamic_shapes.get(p.name) for p in params] if isinstance(dynamic_shapes, dict) else list(dynamic_shapes)
    specs = []
    for param, spec in zip(params, top):
        if param.kind == inspect.Parameter.VAR_POSITIONAL:
            specs.extend(spec or [])
        else:
            specs.append(spec)
    return (specs + [None] * count)[:count]


def _dim_names(spec):
    """{axis: name} of the named torch.export.Dims in one input's dynamic_shapes entry."""
    if not isinstance(spec, (dict, list, tuple)):
        return {}
    items = spec.items() if isinstance(spec, dict) else enumerate(spec)
    return {axis: d.__name__ for axis, d in items
            if isinstance(d, torch.export.Dim) and d.__name__.isidentifier()}


def _pipeline_name(where, module, name):
    if name is None:
        name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", type(module).__name__).lower()
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_]\w{0,255}", name, flags=re.ASCII) \
            or name in _KEYWORDS:
        raise kfuse.Error(f"{where}: name must be a .kf identifier (not a keyword), got {name!r}")
    return name


def draft(module, example_inputs, *, dynamic_shapes=None, name=None):
    """A first .kf of `module`'s forward pass on `example_inputs` (a tensor or a tuple of them,
    forward's positional arguments), exported with torch.export.export(strict=False) and the
    `dynamic_shapes` given (as torch.export takes them): each extent a torch.export.Dim makes
    dynamic is a `dim` of the Dim's name. Returns the .kf text, checked by kfuse's parser, named
    `name` (default: the module's class in snake_case); kfuse.torch.Fused(module, text=...)
    runs it without a mapping. An op kfuse cannot spell raises kfuse.Error naming the first
    one, its aten name and the user's source line."""
    where = f"kfuse.torch.draft({type(module).__name__})"
    if not isinstance(module, torch.nn.Module):
        raise kfuse.Error(f"kfuse.torch.draft: module must be a torch.nn.Module, got {type(module).__name__}")
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else example_inputs
    if not isinstance(inputs, (tuple, list)) or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise kfuse.Error(f"{where}: example_inputs must be a tensor or a tuple of tensors (forward's positional "
                          f"arguments), got {type(example_inputs).__name__}")
    name = _pipeline_name(where, module, name)
    try:
        ep = torch.export.export(module, tuple(inputs), dynamic_shapes=dynamic_shapes, strict=False)
    except Exception as e:  # torch's own message says what failed: passed on, with the module named
        raise kfuse.Error(f"{where}: torch.export.export failed: {type(e).__name__}: {e}") from e
    specs = _dynamic_specs(module, len(inputs), dynamic_shapes)
    drafter = _Drafter(ep, module, where, [_dim_names(s) for s in specs])
    drafter.translate()
    try:
        source = f" ({os.path.basename(inspect.getsourcefile(type(module)))})"
    except (TypeError, OSError):  # a class typed at the interpreter's prompt has no file
        source = ""
    header = (f"# Drafted by kfuse.torch.draft from {type(module).__name__}{source}: params and state are its "
              "state_dict keys with '.' -> '_'.")
    text = drafter.text(name, header)
    try:
        kfuse.program(text=text, file_name=f"<draft of {type(module).__name__}>")
    except kfuse.Error as e:
        raise kfuse.Error(f"{where}: the drafted .kf does not check:\n{e}") from None
    return text
