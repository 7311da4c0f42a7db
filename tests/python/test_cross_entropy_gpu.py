"""kfuse.torch.Fused(linear -> cross_entropy) with a torch.int64 target, forward and backward,
against PyTorch in float64 at fp32, tf32 and bf16. Skipped without torch or a CUDA device."""
import pytest

import kfuse

from test_cross_entropy import TEXT

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs PyTorch with a CUDA device")

import kfuse.torch  # noqa: E402

# DESIGN.md's bounds on ||x - fp64|| / ||fp64|| by precision.
BOUNDS = {"fp32": 1e-5, "tf32": 5e-3, "bf16": 2e-2}


class Head(torch.nn.Module):
    def __init__(self, generator):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(10, 16, generator=generator, device="cuda") / 4)
        self.b = torch.nn.Parameter(torch.randn(10, generator=generator, device="cuda") / 4)

    def forward(self, x, target):
        logits = torch.nn.functional.linear(x, self.w, self.b)
        return torch.nn.functional.cross_entropy(logits, target, label_smoothing=0.1).reshape(1)


@pytest.mark.parametrize("precision", ["fp32", "tf32", "bf16"])
def test_fused_linear_cross_entropy_matches_pytorch(precision):
    generator = torch.Generator(device="cuda").manual_seed(0)
    head = Head(generator)
    exact = Head(generator).double()
    exact.load_state_dict(head.state_dict())
    fused = kfuse.torch.Fused(Head(generator), text=TEXT, file_name="lce.kf", precision=precision)
    fused.module.load_state_dict(head.state_dict())
    x = torch.randn(37, 16, generator=generator, device="cuda")
    target = torch.randint(0, 10, (37,), generator=generator, device="cuda")
    target[::5] = -100  # ignored rows
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
