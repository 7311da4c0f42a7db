"""kfuse.torch.Fused(linear -> cross_entropy) with a torch.int64 target, forward and backward,
against PyTorch in float64 at fp32, tf32 and bf16, with 10 classes (the loss in the GEMM's row
epilogue) and 1000 (a row pass of its own). Skipped without torch or a CUDA device."""
import pytest

import kfuse

from test_cross_entropy import TEXT

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with a CUDA device")

import kfuse.torch  # noqa: E402

# DESIGN.md's bounds on ||x - fp64|| / ||fp64|| by precision.
BOUNDS = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 2e-2}


class Head(torch.nn.Module):
    def __init__(self, generator, classes):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(classes, 16, generator=generator, device="cuda") / 4)
        self.b = torch.nn.Parameter(torch.randn(classes, generator=generator, device="cuda") / 4)

    def forward(self, x, target):
        logits = torch.nn.functional.linear(x, self.w, self.b)
        return torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1).reshape(1)


def text(classes):
    return TEXT.replace("[10,", f"[{classes},").replace("[10]", f"[{classes}]")


# At bf16 with 10 classes the backward's dX = dlogits W multiplies over the classes, no multiple
# of 8: dlogits is written with rows padded for that GEMM's TMA loads.
@pytest.mark.parametrize("precision,classes",
                         [("fp32", 10), ("tf32", 10), ("bf16", 10), ("fp32", 1000), ("bf16", 1000)])
def test_fused_linear_cross_entropy_matches_pytorch(precision, classes):
    generator = torch.Generator(device="cuda").manual_seed(0)
    head = Head(generator, classes)
    exact = Head(generator, classes).double()
    exact.load_state_dict(head.state_dict())
    fused = kfuse.torch.Fused(Head(generator, classes), text=text(classes), file_name="lce.kf", precision=precision)
    fused.module.load_state_dict(head.state_dict())
    x = torch.randn(37, 16, generator=generator, device="cuda")
    target = torch.randint(0, classes, (37,), generator=generator, device="cuda")
    target[::5] = -100  # ignored rows, the first among them
    xs = {"fused": x.clone().requires_grad_(True), "exact": x.double().requires_grad_(True)}
    y = fused(xs["fused"], target)
    y_exact = exact(xs["exact"], target)
    y.sum().backward()
    y_exact.sum().backward()
    bound = BOUNDS[precision]
    assert (y.double() - y_exact).abs().item() <= bound * y_exact.abs().item()
    grads = [(xs["fused"].grad, xs["exact"].grad), (fused.module.w.grad, exact.w.grad),
             (fused.module.b.grad, exact.b.grad)]
    for got, want in grads:
        assert got is not None
        assert (got.double() - want).norm().item() <= bound * want.norm().item()


def test_bf16_head_over_10_classes_trains_with_bf16_tensors():
    """bf16 logits, weights and gradients: the cross-entropy gradient's rows, which dX's GEMM,
    dW's transpose and db's column sum all read, are stored padded to 16 bytes."""
    generator = torch.Generator(device="cuda").manual_seed(0)
    text = TEXT.replace("f32", "bf16")
    head = Head(generator, 10).bfloat16()
    exact = Head(generator, 10).double()
    exact.load_state_dict(head.state_dict())
    fused = kfuse.torch.Fused(Head(generator, 10).bfloat16(), text=text, file_name="lce.kf")
    fused.module.load_state_dict(head.state_dict())
    x = torch.randn(29, 16, generator=generator, device="cuda")
    target = torch.randint(0, 10, (29,), generator=generator, device="cuda")
    xs = {"fused": x.bfloat16().requires_grad_(True), "exact": x.bfloat16().double().requires_grad_(True)}
    y = fused(xs["fused"], target)
    y_exact = exact(xs["exact"], target)
    y.float().sum().backward()
    y_exact.sum().backward()
    bound = BOUNDS["bf16"]
    assert (y.double() - y_exact).abs().item() <= bound * y_exact.abs().item()
    for got, want in [(xs["fused"].grad, xs["exact"].grad), (fused.module.w.grad, exact.w.grad),
                      (fused.module.b.grad, exact.b.grad)]:
        assert got is not None and got.dtype == torch.bfloat16
        assert (got.double() - want).norm().item() <= bound * want.norm().item()
