"""A .kf pipeline as a PyTorch custom op: torch.ops.kfuse.<pipeline>_<mode>_<digest>.

    op = kfuse.torch_op.pipeline_op("chain.kf", "train")
    y = op(x, weight, bias, ..., running_mean, running_var, precision="matmul")

Its arguments are the .kf's inputs, then its params and state in declaration order (each named
as in the .kf), then `precision`; it returns the .kf's outputs. In train mode the state tensors
are declared mutated (the running statistics the call updates in place), so torch.compile
(fullgraph, dynamic shapes, CUDA graphs) and torch.export keep the call in the graph. Its fake
implementation gives the outputs' shapes from the .kf's declarations, with the dims bound to
the arguments' (symbolic) sizes, and their declared dtypes.

`precision` is "fp32", "3xtf32", "tf32", "bf16", "autocast" (bf16, asked for by
torch.autocast), or "matmul": the one torch.get_float32_matmul_precision() names when the op
runs ("highest" -> fp32, "high" -> tf32, "medium" -> bf16). The op compiles one kfuse.Pipeline per (precision, device) on first
use and keeps it, and records the precision of its latest call and why (`used_precision`).
"""

import atexit
import hashlib

import torch

import kfuse


__all__ = ["PRECISIONS", "pipeline_op", "precision_from_torch"]

PRECISIONS = ("fp32", "3xtf32", "tf32", "bf16")
_MATMUL_PRECISIONS = {"highest": "fp32", "high": "tf32", "medium": "bf16"}
# i64: class indices, an input only (cross_entropy's target).
_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "i64": torch.int64}
_DTYPE_NAMES = {t: name for name, t in _DTYPES.items()}

_LIBRARY = torch.library.Library("kfuse", "FRAGMENT")  # noqa: TOR901 (one namespace, ops added per .kf)
_OPS = {}  # (digest, mode) -> PipelineOp; (its name, role) -> a training op (torch_autograd.py)


@atexit.register
def _release_pipelines():
    """torch keeps the ops (and so these objects) until the interpreter ends; their compiled
    pipelines are released first, while the extension module that made them is still whole."""
    for op in _OPS.values():
        op._pipelines.clear()
        op._bound.clear()


def precision_from_torch():
    """(kfuse precision, why) from torch.get_float32_matmul_precision()."""
    setting = torch.get_float32_matmul_precision()
    return _MATMUL_PRECISIONS[setting], f"torch.get_float32_matmul_precision() is '{setting}'"


def pipeline_op(kf_file, mode, *, text=None, file_name="<text>", arch="", process_group=None):
    """The PipelineOp of `kf_file` (a path), or of the .kf `text` (named `file_name`), in
    `mode`, registered on first use. The op's name carries a digest of the .kf text and `arch`,
    so two files that name the same pipeline get two ops, and an exported program names the op
    a later process registers again. `process_group` (a torch.distributed group): train-mode
    batchnorm statistics over the batches of every rank of the group, as
    torch.nn.SyncBatchNorm computes them; the digest then covers the group's size and name."""
    where = "kfuse.torch_op.pipeline_op"
    if (kf_file is None) == (text is None):
        raise kfuse.Error(f"{where} takes a .kf file or text=, not both or neither")
    if text is None:
        kf_file = kfuse._path(where, "kf_file", kf_file)
    else:
        kf_file = kfuse._text(where, "file_name", file_name)
        data = kfuse._text(where, "text", text).encode("utf-8", errors="surrogateescape")
    arch = kfuse._text(where, "arch", arch)
    where = f"{where}({kf_file})"
    if mode not in ("train", "eval"):
        raise kfuse.Error(f"{where}: mode must be 'train' or 'eval', got {mode!r}")
    group = _group_key(where, process_group)
    if text is None:
        try:
            with open(kf_file, "rb") as f:
                data = f.read()
        except OSError as e:
            raise kfuse.Error(f"{where}: cannot read the .kf file: {e.strerror}") from None
    key = data + b"\0" + arch.encode() + (b"\0" + group.encode() if group else b"")
    digest = hashlib.sha256(key).hexdigest()[:10]
    op = _OPS.get((digest, mode))
    if op is None:
        text = data.decode("utf-8", errors="surrogateescape")
        name = f"{kfuse.program(text=text, file_name=kf_file)['name']}_{mode}_{digest}"
        op = _OPS[(digest, mode)] = PipelineOp(kf_file, text, mode, arch, name, process_group)
    return op


def _group_key(where, process_group):
    """'' without a group, else the group's name (its ranks exchange statistics)."""
    if process_group is None:
        return ""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        raise kfuse.Error(f"{where}: process_group given, but torch.distributed is not initialized")
    if not isinstance(process_group, dist.ProcessGroup):
        raise kfuse.Error(f"{where}: process_group must be a torch.distributed.ProcessGroup, got "
                          f"{type(process_group).__module__}.{type(process_group).__name__}")
    return f"{dist.get_world_size(process_group)}:{process_group.group_name}"


class _CudaDoubles:
    """`count` float64 values at a device address, as torch.as_tensor takes them
    (__cuda_array_interface__ version 2: no stream to synchronize with)."""

    def __init__(self, address, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<f8", "data": (address, False),
                                         "version": 2}


def _all_gather_over(process_group, device):
    """A kfuse.Pipeline all-gather (set_all_gather) over torch.distributed's `process_group`,
    for a pipeline on `device`: the collective is ordered with the pipeline's stream."""
    import torch.distributed as dist
    ranks = dist.get_world_size(process_group)

    def all_gather(send, recv, count, stream):
        send_t = torch.as_tensor(_CudaDoubles(send, count), device=device)
        recv_t = torch.as_tensor(_CudaDoubles(recv, count * ranks), device=device)
        # The pipeline runs on torch's current stream (Fused calls it so): the collective is
        # ordered with it as every torch.distributed call is. An ExternalStream of the legacy
        # default stream's handle 0 would not be that stream to torch.
        if torch.cuda.current_stream(device).cuda_stream == stream:
            dist.all_gather_into_tensor(recv_t, send_t, group=process_group)
            return
        with torch.cuda.stream(torch.cuda.ExternalStream(stream, device=device)):
            dist.all_gather_into_tensor(recv_t, send_t, group=process_group)

    return all_gather


def _extent(expr, dims):
    """A declared extent (an int, a dim name or a product "B*T") under `dims` (ints or SymInts)."""
    if isinstance(expr, int):
        return expr
    size = 1
    for factor in expr.split("*"):
        size = size * (int(factor) if factor.isdigit() else dims[factor])
    return size


class PipelineOp:
    """One .kf pipeline in one mode as torch.ops.kfuse.<name>: its schema, its fake
    implementation and its CUDA implementation over the compiled kfuse.Pipelines.

    `text` is the pipeline the op runs: the user's .kf, or one that reverse mode made of it
    (kfuse.torch_autograd). `functional`: train-mode state is not updated in place but returned,
    updated, after the outputs (torch.library.register_autograd takes functional ops only).
    `rng`: "out" returns the (seed, offset) the call's dropouts drew at last, as an int64[2]
    tensor on the CPU; "in" takes one as its argument `rng` before `precision` and draws there
    (a backward draws its forward's masks). `latest`: the used_precision record of the op whose
    calls this op's calls count as."""

    def __init__(self, kf_file, text, mode, arch, name, process_group=None, *, functional=False, rng=None,
                 latest=None):
        self.kf_file, self._text, self.mode, self.arch = kf_file, text, mode, arch
        self.process_group = process_group
        self.functional, self.rng = functional, rng
        program = kfuse.program(text=text, file_name=kf_file)
        values = {v["id"]: v for v in program["values"]}
        self.inputs = [v for v in program["values"] if v["kind"] == "input"]
        self.params = [v for v in program["values"] if v["kind"] in ("param", "state")]
        self.outputs = [values[i] for i in program["outputs"]]
        # The state a train-mode call updates: in place, or returned by a functional op.
        self.updated = [v for v in self.params if v["kind"] == "state" and mode == "train"]
        self.name = name
        self.qualname = f"kfuse::{self.name}"
        # [(precision, why)] of the latest call; `latest`: another op's, which this one's calls
        # update too (a saving forward's calls are calls of the .kf's forward).
        self._latest = [None] if latest is None else latest
        self._pipelines = {}  # (precision, device) -> kfuse.Pipeline
        self._bound = {}  # same key -> {kf name: what was bound last}
        self._where = f"torch.ops.kfuse.{self.name} ({kf_file}, {mode})"
        _LIBRARY.define(f"{self.name}({self._schema_arguments()}) -> {self._schema_returns()}")
        torch.library.impl(self.qualname, "CompositeExplicitAutograd", lib=_LIBRARY)(self._run)
        torch.library.register_fake(self.qualname, lib=_LIBRARY)(self._fake)
        self.op = getattr(torch.ops.kfuse, self.name).default

    def __deepcopy__(self, memo):
        return self  # one registered op per .kf and mode: a copied Fused shares it

    @property
    def used_precision(self):
        """(precision, why) of the latest call, None before one."""
        return self._latest[0]

    def _schema_arguments(self):
        arguments = [f"Tensor {v['name']}" for v in self.inputs]
        # Train mode updates the state in place: declared, so functionalization and export see it.
        for i, v in enumerate(self.params):
            mutated = v in self.updated and not self.functional
            arguments.append(f"Tensor(s{i}!) {v['name']}" if mutated else f"Tensor {v['name']}")
        if self.rng == "in":
            arguments.append("Tensor rng")
        arguments.append("str precision")
        return ", ".join(arguments)

    def _schema_returns(self):
        count = len(self.outputs) + (len(self.updated) if self.functional else 0) + (self.rng == "out")
        return "Tensor" if count == 1 else "(" + ", ".join("Tensor" for _ in range(count)) + ")"

    def __call__(self, *tensors, precision):
        return self.op(*tensors, precision)

    def _dims(self, tensors):
        """{dim name: size} from the arguments' sizes (ints or SymInts), each checked against
        its declaration: a concrete mismatch raises kfuse.Error, a symbolic one becomes a
        runtime assertion."""
        dims = {}
        for v, t in zip(self.inputs + self.params, tensors):
            shown = f"{self._where}: tensor '{v['name']}' is {_DTYPE_NAMES.get(t.dtype, t.dtype)}{list(t.shape)}"
            declared = f"declared {v['dtype']}[{', '.join(str(e) for e in v['shape'])}]"
            if t.dtype != _DTYPES[v["dtype"]] or t.dim() != len(v["shape"]):
                raise kfuse.Error(f"{shown}, {declared}")
            for expr, size in zip(v["shape"], t.shape):
                if isinstance(expr, str) and expr not in dims and "*" not in expr:
                    dims[expr] = size
                    continue
                factors = [] if isinstance(expr, int) else expr.split("*")
                if not all(f.isdigit() or f in dims for f in factors):
                    continue  # a product of dims the later arguments bind: the run checks it
                want = _extent(expr, dims)
                if isinstance(size, int) and isinstance(want, int) and size != want:
                    raise kfuse.Error(f"{shown}, {declared}")
                torch._check(size == want, lambda: f"{shown}, {declared}")
        return dims

    def _split(self, arguments):
        """(inputs, params and state, rng argument or None, precision) of a call's arguments."""
        *tensors, precision = arguments
        rng = tensors.pop() if self.rng == "in" else None
        return tensors[: len(self.inputs)], tensors[len(self.inputs):], rng, precision

    def _fake(self, *arguments):
        inputs, params, rng, precision = self._split(arguments)
        self._check_precision(precision)
        if rng is not None:
            self._check_rng(rng)
        dims = self._dims(inputs + params)
        first = inputs[0]
        outs = [first.new_empty([_extent(e, dims) for e in v["shape"]], dtype=_DTYPES[v["dtype"]])
                for v in self.outputs]
        if self.functional:
            outs += [t.new_empty(t.shape) for v, t in zip(self.params, params) if v in self.updated]
        if self.rng == "out":
            outs.append(torch.empty(2, dtype=torch.int64, device="cpu"))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _check_precision(self, precision):
        if precision not in ("matmul", "autocast") and precision not in PRECISIONS:
            raise kfuse.Error(f"{self._where}: precision must be 'matmul', 'autocast' or one of "
                              f"{', '.join(PRECISIONS)}, got {precision!r}")

    def _check_rng(self, rng):
        if rng.dtype != torch.int64 or tuple(rng.shape) != (2,) or rng.device.type != "cpu":
            raise kfuse.Error(f"{self._where}: rng must be the int64[2] (seed, offset) tensor on the CPU that "
                              f"the forward returned, got {_DTYPE_NAMES.get(rng.dtype, rng.dtype)}"
                              f"{list(rng.shape)} on {rng.device}")

    def resolve_precision(self, precision):
        """(kfuse precision, why) a call with `precision` runs at now."""
        self._check_precision(precision)
        if precision == "matmul":
            return precision_from_torch()
        if precision == "autocast":
            return "bf16", "torch.autocast(dtype=torch.bfloat16)"
        return precision, "precision= given"

    def pipeline(self, precision, device):
        """The kfuse.Pipeline at `precision` (one of PRECISIONS) for `device`, compiled on first
        use and kept."""
        key = (precision, device)
        if key not in self._pipelines:
            ranks = 0
            if self.process_group is not None:
                import torch.distributed as dist
                ranks = dist.get_world_size(self.process_group)
            pipeline = kfuse.Pipeline(text=self._text, file_name=self.kf_file, mode=self.mode,
                                      precision=precision, arch=self.arch, batch_stats_ranks=ranks)
            if pipeline.all_gathers_per_run:
                pipeline.set_all_gather(_all_gather_over(self.process_group, device))
            self._pipelines[key] = pipeline
            self._bound[key] = {}
        return self._pipelines[key]

    def _run(self, *arguments, in_place=False):
        return self.run_with(self._run_pipeline, *arguments, in_place=in_place)

    def run_with(self, execute, *arguments, in_place=False):
        """The op's semantics for `arguments`, its pipeline run by
        execute(precision, inputs, params, rng) -> (outputs, (seed, offset) drawn at): it updates
        the state among `params` in place and draws at `rng` where that is not None (the tests
        give it kfuse's reference interpreter). `in_place`: a functional op's call that updates
        the caller's state in place and returns none (an eager call, where nothing traces the
        op: a new state copy each call would be a new tensor to bind and check every call)."""
        inputs, params, rng, precision = self._split(arguments)
        precision, why = self.resolve_precision(precision)
        if rng is not None:
            self._check_rng(rng)
            rng = tuple(int(n) % 2**64 for n in rng.tolist())  # int64 holds a uint64's bits
        functional = self.functional and not in_place
        if functional:  # the caller's state stays as it is; the copies are updated
            params = [t.detach().clone() if v in self.updated else t for v, t in zip(self.params, params)]
        outs, drawn = execute(precision, inputs, params, rng)
        self._latest[0] = (precision, why)
        outs = list(outs) if isinstance(outs, tuple) else [outs]
        if functional:
            outs += [t for v, t in zip(self.params, params) if v in self.updated]
        if self.rng == "out":
            outs.append(torch.tensor([n - 2**64 if n >= 2**63 else n for n in drawn], dtype=torch.int64))
        return outs[0] if len(outs) == 1 else tuple(outs)

    def _bind(self, key, named):
        """Binds the {name: tensor} params changed since they were bound to the pipeline at
        `key`; returns it."""
        pipeline = self.pipeline(*key)
        bound = self._bound[key]
        for name, t in named:
            # Bound once and read in place. Kernels of params only run once per bind (precision
            # bf16's and tf32's rounded weights, a weight transposed for the Hopper GEMM): a
            # tensor changed in place (an optimizer step; torch counts them in _version) is bound
            # again.
            seen = (t.data_ptr(), tuple(t.shape), t._version)
            if bound.get(name) != seen:
                pipeline.bind(**{name: t.detach()})  # shares the storage: updates land in t
                bound[name] = seen
        return pipeline

    def prepare_params(self, precision, named):
        """Binds the {name: tensor} params (some of this op's) of a coming call at `precision`
        and starts the kernels that read them now, on the current stream, where the op has run
        at that precision on their device; the call then finds them done."""
        device = next(iter(named.values())).device
        key = (self.resolve_precision(precision)[0], device)
        if key in self._pipelines:
            self._bind(key, named.items()).prepare_params()

    def _run_pipeline(self, precision, inputs, params, rng):
        key = (precision, inputs[0].device)
        pipeline = self._bind(key, ((v["name"], t) for v, t in zip(self.params, params)))
        if rng is not None:
            pipeline.set_rng(*rng)
        drawn = pipeline.rng_state
        return pipeline(*(t.detach() for t in inputs)), drawn
