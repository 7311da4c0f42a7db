"""cross_entropy with int64 class-index targets from Python, without a GPU or torch: the fp64
interpreter's loss (targets passed as float64 values, as every interpreter tensor is), its error
for a target outside the classes, the program's i64 declaration, reverse mode's gradients, which
leave the target out, and the error for an i64 tensor read by another op."""
import math
import struct

import pytest

import kfuse

TEXT = """pipeline lce {
  dim N
  input x: f32[N, 16]
  input target: i64[N]
  param w: f32[10, 16]
  param b: f32[10]
  return cross_entropy(linear(x, w, b), target, label_smoothing=0.1)
}
"""
LOGITS = """pipeline ce {
  dim N
  input x: f32[N, 3]
  input t: i64[N]
  return cross_entropy(x, t, reduction="none")
}
"""


def doubles(values):
    return struct.pack(f"<{len(values)}d", *values)


def test_the_interpreter_computes_pytorchs_loss_and_ignores_rows():
    x = [1, 2, 3, -1, 0, 4]
    out = kfuse.interpret(text=LOGITS, file_name="ce.kf", mode="eval", dims={"N": 2},
                          tensors={"x": ([2, 3], doubles(x)), "t": ([2], doubles([2, -100]))})
    (shape, data), = out["outputs"]
    lse = math.log(sum(math.exp(v) for v in x[:3]))
    assert shape == [2] and struct.unpack("<2d", data) == pytest.approx((lse - 3, 0), rel=1e-14)


def test_a_target_outside_the_classes_is_named_with_its_row():
    with pytest.raises(kfuse.Error, match=r"target\[1\] = 3 is not a class index in \[0, 3\) nor the "
                                          r"ignore_index -100"):
        kfuse.interpret(text=LOGITS, file_name="ce.kf", mode="eval", dims={"N": 2},
                        tensors={"x": ([2, 3], doubles([0] * 6)), "t": ([2], doubles([0, 3]))})


def test_the_target_is_declared_i64_and_gets_no_gradient():
    values = kfuse.program(text=TEXT, file_name="lce.kf")["values"]
    assert {v["name"]: v["dtype"] for v in values if v["kind"] == "input"} == {"x": "f32", "target": "i64"}
    assert kfuse.grad(text=TEXT, file_name="lce.kf", mode="train")["gradients"] == ["x", "w", "b"]


def test_an_i64_tensor_elsewhere_is_an_error_at_its_place():
    with pytest.raises(kfuse.Error, match=r"ce.kf:5:17: error: add cannot take the i64 tensor i64\[N\] as its "
                                          r"argument 2 \('b'\)"):
        kfuse.program(text=LOGITS.replace('cross_entropy(x, t, reduction="none")', "add(x, t)"),
                      file_name="ce.kf")
