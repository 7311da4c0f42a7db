"""Misuse of the Python API, without a GPU or torch: every wrong argument is a kfuse.Error that
names the argument, never a TypeError, an IndexError, a MemoryError or a crash of the core."""
import struct

import pytest

import kfuse

TEXT = "pipeline p {\n  dim N\n  input x: f32[N, 2]\n  return relu(x)\n}\n"
X = ([3, 2], struct.pack("<6d", *range(6)))


def interpret(**changes):
    args = dict(text=TEXT, file_name="p.kf", mode="eval", dims={"N": 3}, tensors={"x": X})
    args.update(changes)
    return kfuse.interpret(**args)


def test_the_interpreter_runs_the_well_formed_call():
    (shape, data), = interpret()["outputs"]
    assert shape == [3, 2] and struct.unpack("<6d", data) == (0, 1, 2, 3, 4, 5)


@pytest.mark.parametrize("tensor, message", [
    (([3, 2], "abc"), r"tensors\['x'\] holds str where its float64 values go, not bytes"),
    (([3, 2], None), r"tensors\['x'\] holds NoneType where its float64 values go"),
    ((None, X[1]), r"tensors\['x'\] has the shape NoneType, not a tuple or list of ints"),
    (([3, "2"], X[1]), r"tensors\['x'\] has the extent '2' in its shape, not an int in \[1, 2147483647\]"),
    (([3, -2], X[1]), r"tensors\['x'\] has the extent -2 in its shape"),
    (([2**31] * 4, X[1]), r"tensors\['x'\] has the extent 2147483648 in its shape"),
    (([2**31 - 1] * 4, X[1]), r"tensors\['x'\] has a shape of more than 2\^63 elements"),
    ([[3, 2], X[1]], r"tensors\['x'\] must be a tuple \(shape, bytes of float64\), got list"),
    (X[1], r"tensors\['x'\] must be a tuple \(shape, bytes of float64\), got bytes"),
    (([3, 2],), r"tensors\['x'\] must be a tuple \(shape, bytes of float64\), got a tuple of 1"),
    (([3, 2], X[1][:-1]), r"tensors\['x'\] of shape \[3, 2\] needs 6 values of float64 \(48 bytes\), got 47"),
])
def test_a_malformed_tensor_is_named(tensor, message):
    with pytest.raises(kfuse.Error, match=message):
        interpret(tensors={"x": tensor})


def test_a_tensor_or_dim_the_pipeline_does_not_declare_is_reported():
    with pytest.raises(kfuse.Error, match=r"tensors\['y'\] is no input, param or state of pipeline 'p' "
                                          r"\(those are: x\)"):
        interpret(tensors={"x": X, "y": X})
    with pytest.raises(kfuse.Error, match=r"dims\['M'\] is no dim of pipeline 'p' \(its dims: N\)"):
        interpret(dims={"N": 3, "M": 4})


@pytest.mark.parametrize("changes, message", [
    (dict(dims=[("N", 3)]), r"kfuse.interpret: dims must be a mapping of dim names to extents, got list"),
    (dict(dims={"N": "3"}), r"kfuse.interpret: dims\['N'\] must be an int, got str"),
    (dict(dims={"N": 3.0}), r"kfuse.interpret: dims\['N'\] must be an int, got float"),
    (dict(dims={"N": 0}), r"kfuse.interpret: dims\['N'\] must be in \[1, 2147483647\], got 0"),
    (dict(dims={"N": 2**63}), r"kfuse.interpret: dims\['N'\] must be in \[1, 2147483647\]"),
    (dict(dims={3: 3}), r"kfuse.interpret: a name in dims must be a str, got int"),
    (dict(tensors=None), r"kfuse.interpret: tensors must be a mapping of tensor names to \(shape, bytes\), "
                         r"got NoneType"),
    (dict(rng=(1,)), r"kfuse.interpret: rng must be a tuple \(seed, offset\), got a tuple of 1"),
    (dict(rng=5), r"kfuse.interpret: rng must be a tuple \(seed, offset\), got int"),
    (dict(rng=(-1, 0)), r"kfuse.interpret: rng's seed must be in \[0, 18446744073709551615\], got -1"),
    (dict(rng=(0, 2**64)), r"kfuse.interpret: rng's offset must be in \[0, 18446744073709551615\]"),
    (dict(rng=(0, True)), r"kfuse.interpret: rng's offset must be an int, got a bool"),
    (dict(mode=None), r"kfuse.interpret: mode must be a str, got NoneType"),
    (dict(mode="training"), r"mode must be 'train' or 'eval', got 'training'"),
    (dict(text=b"pipeline"), r"kfuse.interpret: text must be a str, got bytes"),
])
def test_interpret_names_the_wrong_argument(changes, message):
    with pytest.raises(kfuse.Error, match=message):
        interpret(**changes)


def test_nul_in_a_name_is_refused_instead_of_cutting_the_message_short():
    with pytest.raises(kfuse.Error, match=r"kfuse.program: file_name must not contain a NUL character, "
                                          r"got 'a\\x00b'"):
        kfuse.program(text="pipeline p {\n  return nope(x)\n}\n", file_name="a\x00b")
    with pytest.raises(kfuse.Error, match=r"kfuse.program: file must not contain a NUL character"):
        kfuse.program("a\x00b")
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline: file_name must not contain a NUL character"):
        kfuse.Pipeline(text=TEXT, file_name="p\x00.kf")
    with pytest.raises(kfuse.Error, match=r"kfuse.interpret: a name in dims must not contain a NUL character"):
        interpret(dims={"N\x00": 3})
    with pytest.raises(kfuse.Error, match=r"kfuse.interpret: a name in tensors must not contain a NUL"):
        interpret(tensors={"x\x00": X})


def test_files_are_read_by_the_front_end_reader_with_its_cap(tmp_path):
    # /dev/zero never ends: refused at 16 MiB, as the command line refuses it, not read for GBs.
    with pytest.raises(kfuse.Error, match=r"cannot read '/dev/zero': larger than 16 MiB"):
        kfuse.program("/dev/zero")
    with pytest.raises(kfuse.Error, match=r"cannot read '/dev/zero': larger than 16 MiB"):
        kfuse.interpret("/dev/zero", mode="eval", dims={}, tensors={})
    with pytest.raises(kfuse.Error, match=r"cannot read '.*no_such.kf': No such file or directory"):
        kfuse.program(tmp_path / "no_such.kf")
    with pytest.raises(kfuse.Error, match=r"cannot read '.*': Is a directory"):
        kfuse.program(tmp_path)
    # Bytes that are not UTF-8 are escaped in the diagnostic that quotes them.
    binary = tmp_path / "binary.kf"
    binary.write_bytes(b"\x7fELF\x02\x01\x01\x00\xff\xfe\n")
    with pytest.raises(kfuse.Error, match=r"(?s)binary.kf:1:1: error: unexpected byte 0x7F\n.*ELF.*\\xff\\xfe"):
        kfuse.program(binary)
    with pytest.raises(kfuse.Error, match=r"kfuse.program: file must be a path \(str or os.PathLike\), got int"):
        kfuse.program(3)
    with pytest.raises(kfuse.Error, match=r"kfuse.program takes a .kf file or text=, not both or neither"):
        kfuse.program()


def test_dropout_keep_bounds_its_mask_and_names_its_arguments():
    with pytest.raises(kfuse.Error, match=r"dropout_keep: count must be in \[0, 2147483647\] \(the elements "
                                          r"of one tensor\), got 1099511627776"):
        kfuse.dropout_keep(0, 0, 0, 2**40, 0.5)
    with pytest.raises(kfuse.Error, match=r"dropout_keep: stream must be in \[0, 65535\], got 65536"):
        kfuse.dropout_keep(0, 0, 65536, 4, 0.5)
    with pytest.raises(kfuse.Error, match=r"kfuse.dropout_keep: count must be an int, got str"):
        kfuse.dropout_keep(0, 0, 0, "4", 0.5)
    with pytest.raises(kfuse.Error, match=r"kfuse.dropout_keep: seed must be in \[0, 18446744073709551615\], "
                                          r"got -1"):
        kfuse.dropout_keep(-1, 0, 0, 4, 0.5)
    with pytest.raises(kfuse.Error, match=r"kfuse.dropout_keep: p must be a number, got NoneType"):
        kfuse.dropout_keep(0, 0, 0, 4, None)
    with pytest.raises(kfuse.Error, match=r"p must be in \[0, 1\), got nan"):
        kfuse.dropout_keep(0, 0, 0, 4, float("nan"))
    assert len(kfuse.dropout_keep(0, 0, 65535, 4, 0.5)) == 4


@pytest.fixture(scope="module")
def pipeline():
    return kfuse.Pipeline(text="pipeline small {\n  dim N\n  input x: f32[N, 6]\n  param weight: f32[5, 6]\n"
                          "  return linear(x, weight)\n}\n", file_name="small.kf", mode="eval", arch="sm_90a")


def test_pipeline_arguments_are_named(pipeline, examples):
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline: file must be a path \(str or os.PathLike\), got int"):
        kfuse.Pipeline(3)
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline: mode must be a str, got NoneType"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", mode=None)
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline: precision must be a str, got int"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", precision=32)
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline: arch must be a str, got NoneType"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", arch=None)
    with pytest.raises(kfuse.Error, match=r"cannot read '/dev/zero': larger than 16 MiB"):
        kfuse.Pipeline("/dev/zero")
    with pytest.raises(kfuse.Error, match=r"kfuse.Pipeline takes a .kf file or text=, not both or neither"):
        kfuse.Pipeline(examples / "gemm_scale_bn.kf", text=TEXT)
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': workspace_size: dims\['N'\] must be an int, got str"):
        pipeline.workspace_size(N="4")
    with pytest.raises(kfuse.Error, match=r"workspace_size: dims\['N'\] must be in \[1, 2147483647\], got "
                                          r"1152921504606846976"):
        pipeline.workspace_size(N=2**60)
    with pytest.raises(kfuse.Error, match=r"workspace_size: dims\['N'\] must be in \[1, 2147483647\]"):
        pipeline.workspace_size(N=2**63 - 1)
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': set_rng: seed must be in \[0, 18446744073709551615\]"):
        pipeline.set_rng(-1)
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': set_rng: offset must be an int, got float"):
        pipeline.set_rng(0, 1.5)
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': a tensor name must not contain a NUL character"):
        pipeline.bind(**{"weight\x00": None})
    with pytest.raises(kfuse.Error, match=r"kfuse.compile_many: workers must be in \[1, 1024\], got 0"):
        kfuse.compile_many([], workers=0)


def test_pipeline_run_with_a_wrong_out_is_named(pipeline):
    np = pytest.importorskip("numpy")
    with pytest.raises(kfuse.Error, match=r"pipeline 'small': out must be a DLPack tensor or a list or tuple of "
                                          r"them, got builtins.int"):
        pipeline(np.zeros((3, 6), dtype=np.float32), out=5)


def test_the_docstrings_name_the_precisions_pipeline_takes(examples):
    assert "refused" not in kfuse.Pipeline.__doc__
    for precision in ("fp32", "3xtf32", "tf32", "bf16"):
        assert f'"{precision}"' in kfuse.Pipeline.__doc__
    p = kfuse.Pipeline(examples / "gemm_scale_bn.kf", mode="eval", precision="bf16", arch="sm_90a")
    assert p.precision == "bf16"
