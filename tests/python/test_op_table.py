"""kfuse's op table as Python sees it (kfuse.ops()), without torch: every op carries its PyTorch
spelling, a Python expression of exactly its operands and attributes, which kfuse.torch.Reference
evaluates; so a new op of the compiler's table is one the Reference computes, with no second
table to keep in step."""
import ast

import pytest

import kfuse

OPS = kfuse.ops()
# The names kfuse.torch.Reference gives a spelling besides the op's operands and attributes.
CONTEXT = {"torch", "F", "training", "device", "int"}
# Attributes of kfuse's own that PyTorch has no argument for: which Philox stream a dropout draws
# (kfuse.torch.Reference draws kfuse's masks with it when kfuse_rng is set), and whether a column
# statistic is the rank's own where statistics are exchanged across ranks (one process computes
# it over its rows either way).
KFUSE_ONLY = {("dropout", "stream"), ("col_mean", "local"), ("col_var", "local"), ("col_sum", "local")}


def free_names(spelling):
    """The names the spelling reads from its context: every name but a lambda's parameters."""
    tree = ast.parse(spelling, mode="eval")
    bound = {a.arg for n in ast.walk(tree) if isinstance(n, ast.Lambda) for a in n.args.args}
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} - bound


def test_the_table_lists_every_op_once_with_its_class():
    names = [op["name"] for op in OPS]
    assert len(names) == len(set(names))
    assert {"linear", "batchnorm", "logsigmoid", "softmax", "dropout", "reshape", "col_mean", "bn_update",
            "cast", "constant"} <= set(names)
    by_name = {op["name"]: op for op in OPS}
    assert by_name["logsigmoid"]["class"] == "pointwise unary" and not by_name["logsigmoid"]["internal"]
    assert by_name["batchnorm"]["operands"] == ["x", "weight?", "bias?", "running_mean", "running_var"]
    assert by_name["var"]["attrs"] == [{"name": "dim", "kind": "int"}, {"name": "keepdim", "kind": "bool"},
                                       {"name": "correction", "kind": "number"}]


@pytest.mark.parametrize("op", OPS, ids=lambda op: op["name"])
def test_every_op_has_a_pytorch_spelling_of_its_operands_and_attributes(op):
    spelling = op["torch"]
    assert spelling, f"{op['name']} has no PyTorch spelling"
    names = free_names(spelling)  # a SyntaxError fails here
    operands = {o.rstrip("?") for o in op["operands"]}
    attrs = {a["name"] for a in op["attrs"]}
    assert names <= operands | attrs | CONTEXT, f"{spelling} names {names - operands - attrs - CONTEXT}"
    assert operands <= names, f"{spelling} leaves out the operands {operands - names}"
    unused = {a for a in attrs - names if (op["name"], a) not in KFUSE_ONLY}
    assert not unused, f"{spelling} leaves out the attributes {unused}"


def test_a_program_carries_each_ops_spelling_and_the_operand_each_arg_binds(examples):
    spelling = {op["name"]: op["torch"] for op in OPS}
    p = kfuse.program(examples / "gemm_bn_scale_softmax.kf")
    ops = [v for v in p["values"] if v["kind"] == "op"]
    assert all(v["torch"] == spelling[v["op"]] for v in ops)
    bn = next(v for v in ops if v["op"] == "batchnorm")
    assert bn["operands"] == ["x", "weight", "bias", "running_mean", "running_var"]
    # Optional operands are given first to last: three operands are x and the running statistics.
    text = ("pipeline p {\n  dim N\n  input x: f32[N, 4]\n  state m: f32[4]\n  state v: f32[4]\n"
            "  param w: f32[4]\n  return add(batchnorm(x, m, v), layernorm(x, w))\n}\n")
    ops = {v["op"]: v for v in kfuse.program(text=text)["values"] if v["kind"] == "op"}
    assert ops["batchnorm"]["operands"] == ["x", "running_mean", "running_var"]
    assert ops["layernorm"]["operands"] == ["x", "weight"]
    assert ops["add"]["operands"] == ["a", "b"]
