"""kfuse: fused GPU kernels for chains of tensor operators, described in a small .kf file.

    p = kfuse.Pipeline("examples/gemm_bn_scale_softmax.kf", mode="train", precision="tf32")
    print(p.plan); print(p.cuda_source); print(p.report)
    p.bind(weight=w, bias=b, ...)     # params and state: any DLPack tensor (torch, cupy, jax)
    y = p(x)                          # outputs allocated in x's library, in their declared dtype; or p(x, out=y)

Tensors travel through DLPack (``__dlpack__``); kfuse never imports a tensor library. A call
runs on the caller's current stream: for torch tensors ``torch.cuda.current_stream()``, for
cupy arrays cupy's current stream, otherwise the legacy default stream; ``stream=`` (an int
handle or an object with ``.cuda_stream``/``.ptr``) overrides it. It runs on the inputs'
device. Compiling and planning need no GPU. docs/PYTHON.md has the details and
``kfuse.torch.Fused`` (an ``nn.Module`` wrapper).
"""

import collections.abc
import concurrent.futures
import numbers
import operator
import os
import sys

from . import _kfuse
from ._kfuse import Error
from ._kfuse import Pipeline as _CorePipeline

__all__ = ["Error", "Pipeline", "compile_many", "dropout_keep", "grad", "interpret", "ops", "program"]

_UINT64_MAX = 2**64 - 1


# Every argument a user gives is checked here, before the core sees it, so that a misuse is a
# kfuse.Error naming the argument rather than a TypeError, an IndexError or a crash.
def _text(where, arg, value):
    """`value`, a str without NUL characters (one would end every message that quotes it)."""
    if not isinstance(value, str):
        raise Error(f"{where}: {arg} must be a str, got {type(value).__name__}")
    if "\0" in value:
        raise Error(f"{where}: {arg} must not contain a NUL character, got {value!r}")
    return value


def _path(where, arg, value):
    """A file name: a str or an os.PathLike, as str."""
    if not isinstance(value, (str, os.PathLike)):
        raise Error(f"{where}: {arg} must be a path (str or os.PathLike), got {type(value).__name__}")
    path = os.fspath(value)
    return _text(where, arg, path if isinstance(path, str) else os.fsdecode(path))


def _integer(where, arg, value, lo, hi):
    """`value` as an int in [lo, hi]: an int or an integer type (numpy's); not a bool."""
    if isinstance(value, bool):
        raise Error(f"{where}: {arg} must be an int, got a bool")
    try:
        n = operator.index(value)
    except TypeError:
        raise Error(f"{where}: {arg} must be an int, got {type(value).__name__}") from None
    if not lo <= n <= hi:
        raise Error(f"{where}: {arg} must be in [{lo}, {hi}], got {n}")
    return n


def _number(where, arg, value):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise Error(f"{where}: {arg} must be a number, got {type(value).__name__}")
    return float(value)


def _mapping(where, arg, value, what):
    """A Mapping whose keys are names (str without NUL), as a dict."""
    if not isinstance(value, collections.abc.Mapping):
        raise Error(f"{where}: {arg} must be a mapping of {what}, got {type(value).__name__}")
    for name in value:
        _text(where, f"a name in {arg}", name)
    return dict(value)


def _dims(where, dims):
    """{dim name: extent}, every extent in the range the compiler takes ([1, 2**31 - 1])."""
    dims = _mapping(where, "dims", dims, "dim names to extents")
    return {name: _integer(where, f"dims[{name!r}]", n, 1, _kfuse.MAX_EXTENT) for name, n in dims.items()}


def _rng(where, rng):
    """(seed, offset), two ints in [0, 2**64)."""
    if not isinstance(rng, (tuple, list)) or len(rng) != 2:
        shown = f"a {type(rng).__name__} of {len(rng)}" if isinstance(rng, (tuple, list)) else type(rng).__name__
        raise Error(f"{where}: rng must be a tuple (seed, offset), got {shown}")
    return (_integer(where, "rng's seed", rng[0], 0, _UINT64_MAX),
            _integer(where, "rng's offset", rng[1], 0, _UINT64_MAX))

_CUDA_DEVICES = (2, 13)  # DLPack's kDLCUDA and kDLCUDAManaged


_LIBRARIES = {}  # tensor type -> the top-level module that defines it ("torch", "cupy", ...)


def _library(t):
    kind = type(t)
    library = _LIBRARIES.get(kind)
    if library is None:
        library = _LIBRARIES[kind] = kind.__module__.split(".")[0]
    return library


def _on_cuda(t):
    if _library(t) == "torch":
        return t.is_cuda  # __dlpack_device__ gives the same answer in 2 µs of Python
    return hasattr(t, "__dlpack_device__") and t.__dlpack_device__()[0] in _CUDA_DEVICES


def _torch_current_stream(t):
    """torch.cuda.current_stream(t.device).cuda_stream without building a Stream object, which
    costs 6 µs a call; the public spelling where torch lacks the raw query."""
    torch = sys.modules["torch"]
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw(t.device.index) if raw is not None else torch.cuda.current_stream(t.device).cuda_stream


def _run_stream(t, stream):
    """(the stream handle kfuse launches on, the `stream` argument for __dlpack__)."""
    if stream is not None:
        handle = getattr(stream, "cuda_stream", getattr(stream, "ptr", stream))
        if isinstance(handle, bool) or not isinstance(handle, int) or not 0 <= handle <= _UINT64_MAX:
            raise Error(f"stream must be an int handle in [0, 2**64) or have .cuda_stream or .ptr, got "
                        f"{handle if isinstance(handle, int) else type(stream).__name__}")
        # DLPack: 1 names the legacy default stream; the producer orders its work before ours.
        return handle, handle if handle != 0 else 1
    library = _library(t)
    if library == "torch" and t.is_cuda:
        return _torch_current_stream(t), -1  # the tensor's own current stream: nothing to synchronise
    if library == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr, -1
    return 0, 1


def _capsule(where, name, t, dl_stream):
    if dl_stream == -1 and _library(t) == "torch":
        # What __dlpack__(stream=-1) returns (no synchronisation), without its 5 µs of checks in
        # Python; the one of them that applies to kfuse's tensors is kept.
        if t.requires_grad:
            raise Error(f"{where}: tensor '{name}' requires grad, and a kfuse.Pipeline does not record "
                        "autograd (kfuse.torch.Fused does): .detach() it")
        return sys.modules["torch"].utils.dlpack.to_dlpack(t)
    if not hasattr(t, "__dlpack__") or not hasattr(t, "__dlpack_device__"):
        raise Error(f"{where}: tensor '{name}': a {type(t).__module__}.{type(t).__name__} is not a DLPack tensor "
                    "(no __dlpack__); pass a torch, cupy or jax array")
    if _on_cuda(t):
        return t.__dlpack__(stream=dl_stream)
    return t.__dlpack__()  # refused by the core, which names the device


# kfuse's element types by library: torch's dtype names, numpy's (cupy has no bfloat16).
_TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}
_CUPY_DTYPES = {"f32": "float32", "f16": "float16"}


def _empty_like(where, t, shape, dtype):
    """A new tensor of `shape` and kfuse element type `dtype` ("f32", "f16", "bf16") from `t`'s
    library, on its device: torch (new_empty) or cupy."""
    if _library(t) == "torch":
        return t.new_empty(shape, dtype=getattr(sys.modules["torch"], _TORCH_DTYPES[dtype]))
    if _library(t) == "cupy":
        if dtype not in _CUPY_DTYPES:
            raise Error(f"{where}: cupy has no {dtype} arrays to allocate the output in: pass out=")
        return sys.modules["cupy"].empty(shape, dtype=_CUPY_DTYPES[dtype])
    raise Error(f"{where}: kfuse allocates outputs for torch and cupy tensors only, not "
                f"{type(t).__module__}.{type(t).__name__}: pass out=")


class Pipeline:
    """A .kf pipeline compiled for `mode` ("train" or "eval") and `precision`: "fp32",
    "3xtf32", "tf32" or "bf16" (GEMM operands rounded to bf16 as torch.autocast does, f32
    results; docs/PYTHON.md). `arch` ("sm_90a") defaults to the current GPU's, or sm_90a
    without one. Give a file, or the .kf text as text= (named file_name=).
    `batch_stats_ranks` R > 0: train-mode batchnorm statistics over the batches of R ranks
    (SyncBatchNorm), exchanged by the all-gather set with set_all_gather()."""

    def __init__(self, file=None, mode="train", precision="fp32", *, text=None, file_name="<text>", arch="",
                 batch_stats_ranks=0):
        where = "kfuse.Pipeline"
        path, text, file_name = _source(where, file, text, file_name)
        mode, precision, arch = (_text(where, "mode", mode), _text(where, "precision", precision),
                                 _text(where, "arch", arch))
        ranks = _integer(where, "batch_stats_ranks", batch_stats_ranks, 0, 2**31 - 1)
        if path is not None:
            self._core = _CorePipeline.from_file(path, mode, precision, arch, ranks)
        else:
            self._core = _CorePipeline.from_string(text, file_name, mode, precision, arch, ranks)
        self.mode = mode
        self.precision = precision
        self._bound = {}  # name -> (tensor, capsule): kept alive while kfuse holds the pointer
        self._where = f"pipeline '{self._core.name}'"
        self._inputs = self._core.inputs
        self._shapes = {}  # input shapes -> output shapes
        self._workspace = None  # set_workspace's tensor, kept alive while kfuse uses its memory

    name = property(lambda self: self._core.name)
    plan = property(lambda self: self._core.plan, doc="the kernels and the ops each holds, as `kfuse plan`")
    cuda_source = property(lambda self: self._core.cuda_source, doc="the generated CUDA translation unit")
    report = property(lambda self: self._core.report, doc="NVRTC: time, cache hit, arch, per-kernel resources")
    inputs = property(lambda self: self._core.inputs, doc="input names, in declaration order")
    params = property(lambda self: self._core.params, doc="param and state names, in declaration order")
    output_count = property(lambda self: self._core.output_count)

    def bind(self, **tensors):
        """Binds params and state by name. State (BatchNorm running statistics) is updated in
        place by every train-mode call. The tensors must stay alive; kfuse keeps a reference."""
        for name, t in tensors.items():
            _text(self._where, "a tensor name", name)
            dl_stream = _run_stream(t, None)[1] if _on_cuda(t) else None
            capsule = _capsule(self._where, name, t, dl_stream)
            self._core.bind(name, capsule)
            self._bound[name] = (t, capsule)

    def prepare_params(self, stream=None):
        """Runs now, on `stream` (default: the current stream of the bound tensors' device), the
        kernels that read params (precision bf16's rounded weights, a weight transposed for the
        Hopper GEMM) for those bound since the last call, which would otherwise run at the next
        one. Returns whether they ran: not before a first call, nor after binding a tensor other
        than the one bound (pointer, shape, dtype or stride), which the next call checks first."""
        if not self._bound:
            return False
        t = next(iter(self._bound.values()))[0]
        if not _on_cuda(t):
            return False
        return self._core.prepare_params(_run_stream(t, stream)[0], t.__dlpack_device__()[1])

    def __call__(self, *args, out=None, stream=None, **named):
        """Runs the pipeline on its inputs (positional in declaration order, or by name) and
        returns its output (a tuple where it has several): `out` (one tensor or a sequence)
        when given, otherwise new tensors from the first input's library."""
        if len(args) > len(self._inputs):
            raise Error(f"{self._where} takes {len(self._inputs)} input(s) ({', '.join(self._inputs)}), "
                        f"got {len(args)} positional")
        if named or len(args) != len(self._inputs):
            args = self._positional(args, named)
        first = args[0]
        handle, dl_stream = _run_stream(first, stream) if _on_cuda(first) else (0, None)
        capsules = [_capsule(self._where, name, t, dl_stream) for name, t in zip(self._inputs, args)]
        if out is None:
            outs = [_empty_like(self._where, first, shape, dtype) for shape, dtype in self._outputs_for(args, capsules)]
        elif hasattr(out, "__dlpack__"):
            outs = [out]
        elif isinstance(out, (list, tuple)):
            outs = list(out)
        else:
            raise Error(f"{self._where}: out must be a DLPack tensor or a list or tuple of them, got "
                        f"{type(out).__module__}.{type(out).__name__}")
        out_capsules = [_capsule(self._where, f"output {i}", o, dl_stream) for i, o in enumerate(outs)]
        self._core.run(capsules, out_capsules, handle)
        return outs[0] if len(outs) == 1 else tuple(outs)

    def workspace_size(self, **dims):
        """Bytes of device memory a run at these dims (every dim by name, e.g. N=1024) keeps its
        intermediates in (0: it keeps none): the size set_workspace needs."""
        return self._core.workspace_size(_dims(f"{self._where}: workspace_size", dims))

    @property
    def all_gathers_per_run(self):
        """The all-gathers each call makes: one per train-mode batchnorm of a pipeline compiled
        with batch_stats_ranks > 0, else 0."""
        return self._core.all_gathers_per_run

    def set_all_gather(self, fn):
        """The all-gather of the batch statistics (batch_stats_ranks > 0): calls make
        fn(send, recv, count, stream) between their kernels, which must gather `count` float64
        values at device address `send` from every rank into `recv` (ranks x count, in rank
        order), ordered with CUDA stream `stream` (addresses and stream handle as ints), in the
        same order on every rank; kfuse.torch.Fused(process_group=) sets one over
        torch.distributed. What fn raises is raised by the call. None: none."""
        if fn is not None and not callable(fn):
            raise Error(f"{self._where}: set_all_gather takes a callable or None, got {type(fn).__name__}")
        self._core.set_all_gather(fn)

    def set_rng(self, seed, offset=0):
        """Where train-mode dropouts draw (docs/DSL.md, "dropout"): each call of a pipeline that
        draws uses (seed, offset), then advances the offset by one. Both are integers in
        [0, 2**64)."""
        where = f"{self._where}: set_rng"
        self._core.set_rng(_integer(where, "seed", seed, 0, _UINT64_MAX),
                           _integer(where, "offset", offset, 0, _UINT64_MAX))

    @property
    def rng_state(self):
        """(seed, offset) the next train-mode call's dropouts draw with."""
        return self._core.rng_state()

    def set_workspace(self, tensor):
        """Later calls keep their intermediates in `tensor` instead of memory the pipeline
        allocates: a contiguous f32/bf16/f16 tensor on the pipeline's device, 256-byte aligned, of
        at least workspace_size() bytes, that no tensor of a call overlaps and no other call uses
        at the same time (a call needing more raises). None goes back to the pipeline's own.
        kfuse keeps a reference to the tensor."""
        if tensor is None:
            self._core.set_workspace(None)
        else:
            dl_stream = _run_stream(tensor, None)[1] if _on_cuda(tensor) else None
            self._core.set_workspace(_capsule(self._where, "workspace", tensor, dl_stream))
        self._workspace = tensor

    def _positional(self, args, named):
        inputs = dict(zip(self._inputs, args))
        for name, t in named.items():
            if name in inputs:
                raise Error(f"{self._where}: input '{name}' given twice")
            if name not in self._inputs:
                raise Error(f"{self._where}: '{name}' is not an input of the pipeline ({', '.join(self._inputs)})")
            inputs[name] = t
        if not inputs:
            raise Error(f"{self._where} needs its inputs: {', '.join(self._inputs)}")
        for name in self._inputs:
            if name not in inputs:
                raise Error(f"{self._where}: input '{name}' is missing (its inputs: {', '.join(self._inputs)})")
        return tuple(inputs[name] for name in self._inputs)

    def _outputs_for(self, args, capsules):
        """The outputs' shapes and element types for these inputs' shapes, computed once per
        shape."""
        key = tuple(tuple(getattr(t, "shape", ())) for t in args)
        shapes = self._shapes.get(key)
        if shapes is None:
            dims = self._core.dims({name: self._core.tensor_shape(name, c) for name, c in zip(self._inputs, capsules)})
            shapes = [(self._core.output_shape(i, dims), self._core.output_dtype(i))
                      for i in range(self.output_count)]
            self._shapes[key] = shapes
        return shapes

    def __repr__(self):
        return f"kfuse.Pipeline('{self.name}', mode='{self.mode}', precision='{self.precision}')"


def _source(where, file, text, file_name):
    """(path, text, file_name) of a .kf file or of text=: the core reads a file itself, with
    the front end's reader, so Python and the command line refuse the same files alike."""
    if (file is None) == (text is None):
        raise Error(f"{where} takes a .kf file or text=, not both or neither")
    if text is None:
        return _path(where, "file", file), "", ""
    return None, _text(where, "text", text), _text(where, "file_name", file_name)


def program(file=None, *, text=None, file_name="<text>"):
    """A .kf pipeline as parsed and verified, before any of kfuse's rewrites: a dict with
    "name", "dims", "values" and "outputs" (docs/PYTHON.md, "The program of a .kf"). Needs no
    GPU; a .kf error raises kfuse.Error with its diagnostic."""
    return _kfuse.program(*_source("kfuse.program", file, text, file_name))


def grad(file=None, *, text=None, file_name="<text>", mode, frozen=()):
    """The reverse mode of a .kf pipeline in `mode` ("train" or "eval"), as `kfuse grad` prints
    it (docs/DSL.md, "Gradients"): a dict with "backward" (the backward pipeline's .kf text),
    "forward" (the .kf text of the forward that also returns what the backward reads),
    "grad_inputs" (the backward's gradient inputs, one per forward output), "saved" (the
    backward's inputs bound to the forward's further outputs, in their order) and "gradients"
    (for each backward output, the name of the input or param it is the gradient of).
    `frozen` names inputs and params whose gradients are not wanted: the backward computes
    nothing only they need, and the forward saves nothing for them. Needs no GPU; an op without
    a gradient rule, or a frozen name that is no float input or param, raises kfuse.Error."""
    where = "kfuse.grad"
    names = list(frozen) if isinstance(frozen, collections.abc.Iterable) and not isinstance(frozen, str) else None
    if names is None or not all(isinstance(name, str) for name in names):
        raise Error(f"{where}: frozen must be a sequence of input and param names, got {frozen!r}")
    return _kfuse.grad(*_source(where, file, text, file_name), _text(where, "mode", mode), names)


def ops():
    """kfuse's op table, one dict per op: "name", "class", "operands" (as documented, "bias?"
    where optional), "attrs" ([{"name", "kind"}]), "internal" and "torch", PyTorch's spelling
    of the op: a Python expression of the operands and attributes by name (docs/PYTHON.md)."""
    return _kfuse.ops()


def dropout_keep(seed, offset, stream, count, p):
    """The keep mask of dropout stream `stream` in a train-mode call at rng state (seed, offset):
    `count` bytes, 1 where element i (row-major) is kept, as the kernels and the reference
    interpreter draw it (docs/DSL.md, "dropout"). `count` is at most 2**31 - 1, the elements of
    one tensor."""
    where = "kfuse.dropout_keep"
    return _kfuse.dropout_keep(_integer(where, "seed", seed, 0, _UINT64_MAX),
                               _integer(where, "offset", offset, 0, _UINT64_MAX),
                               _integer(where, "stream", stream, 0, _UINT64_MAX),
                               _integer(where, "count", count, 0, _UINT64_MAX), _number(where, "p", p))


def interpret(file=None, *, text=None, file_name="<text>", mode, dims, tensors, rng=(0, 0)):
    """One call of the pipeline on kfuse's fp64 reference interpreter, on the CPU (no GPU):
    `tensors` maps every input, param and state name to (shape, bytes of float64, row-major),
    `dims` every dim name to its extent, `rng` is the (seed, offset) train-mode dropouts draw at.
    A name in `tensors` or `dims` that the pipeline does not declare is an error.
    Returns {"outputs": [(shape, bytes)], "state": {name: (shape, bytes)}} (the updated state),
    rounded to their declared types as kernels store them."""
    where = "kfuse.interpret"
    path, text, file_name = _source(where, file, text, file_name)
    tensors = _mapping(where, "tensors", tensors, "tensor names to (shape, bytes)")
    seed, offset = _rng(where, rng)
    return _kfuse.interpret(path, text, file_name, _text(where, "mode", mode), _dims(where, dims), tensors,
                            seed, offset)


def compile_many(files, modes=("train", "eval"), precision="fp32", workers=8):
    """Compiles every (file, mode) pipeline on `workers` threads (NVRTC runs without the GIL), so
    that later compiles of them, in this process or another, are disk cache hits. Returns
    {(file, mode): Pipeline, or the kfuse.Error it raised}."""
    workers = _integer("kfuse.compile_many", "workers", workers, 1, 1024)
    def compile_one(key):
        try:
            return Pipeline(key[0], mode=key[1], precision=precision)
        except Error as e:
            return e

    keys = [(f, m) for f in files for m in modes]
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(keys, pool.map(compile_one, keys)))
